/* artifact.c — `stepc build` (artifact.h). */
#define _GNU_SOURCE /* posix_spawn_file_actions_addchdir_np */
#include "codegen/artifact.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/artifact_sum.h"
#include "cli/cpu_train.h"
#include "cli/layout.h"
#include "codegen/cubin/cubin.h"
#include "codegen/launch/program.h"
#include "codegen/program_text.h"
#include "passes/ew_fuse.h"
#include "plan/fingerprint.h"
#include "plan/plan.h"
#include "report/report.h"
#include "runtime/image.h"

extern char **environ;

/* The C compiler and flags of this build (CMakeLists.txt sets them; CC overrides the compiler). The
 * runtime's archives and headers are found at run time instead (layout.h). */
#ifndef STEPC_CC
#define STEPC_CC "cc"
#define STEPC_ARTIFACT_FLAGS ""
#endif

static const char *env_or(const char *name, const char *def) {
  const char *v = getenv(name);
  return v && v[0] ? v : def;
}

static void lua_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20 || c == 0x7f)
      fprintf(f, "\\%03d", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

int artifact_write_recipe(const Spec *raw, FILE *f) {
  fprintf(
      f,
      "-- recipe.lua: written by `stepc build` from %s with its overrides applied; every field that has a\n"
      "-- value is spelled out, so this file alone reproduces the step (stepc check/plan/build/run load "
      "it).\n"
      "return {\n",
      raw->recipe_path[0] ? raw->recipe_path : "a recipe");
  for (int sec = 0; sec < SPEC_NSECTIONS; sec++) {
    fprintf(f, "  %s = {\n", spec_section_names[sec]);
    for (int id = 0; id < SPEC_NFIELDS; id++) {
      const SpecField *fd = &spec_fields[id];
      if ((int)fd->section != sec || !raw->present[id]) continue;
      const void *p = spec_field_cptr(raw, id);
      fprintf(f, "    %s = ", fd->name);
      switch (fd->type) {
      case SPEC_T_INT: fprintf(f, "%lld", (long long)*(const int64_t *)p); break;
      case SPEC_T_NUM: fprintf(f, "%.17g", *(const double *)p); break;
      case SPEC_T_BOOL: fprintf(f, "%s", *(const bool *)p ? "true" : "false"); break;
      case SPEC_T_STR: {
        char abs[PATH_MAX];
        const char *v = p;
        /* the artifact is loaded from elsewhere: a relative data path would move with the cwd */
        if (id == SPEC_F_data_path && v[0] != '/' && realpath(v, abs)) v = abs;
        lua_string(f, v);
        break;
      }
      case SPEC_T_LIST: {
        const SpecList *l = p;
        fprintf(f, "{");
        for (int i = 0; i < l->n; i++)
          fprintf(f, "%s", i ? ", " : " "), lua_string(f, l->items[i]);
        fprintf(f, "%s}", l->n ? " " : "");
        break;
      }
      case SPEC_T_FREQ: {
        const SpecFreq *q = p;
        if (q->every > 0)
          fprintf(f, "%lld", (long long)q->every);
        else {
          fprintf(f, "{");
          for (int i = 0; i < q->n; i++)
            fprintf(f, "%s%d", i ? ", " : "", q->pattern[i]);
          fprintf(f, "}");
        }
        break;
      }
      }
      fprintf(f, ",\n");
    }
    fprintf(f, "  },\n");
  }
  fprintf(f, "}\n");
  return ferror(f) ? -1 : 0;
}

static int fail(char *err, size_t nerr, const char *fmt, const char *a, const char *b) {
  snprintf(err, nerr, fmt, a, b);
  return ARTIFACT_ERROR;
}

static FILE *open_out(const char *dir, const char *name, char *path, size_t n) {
  snprintf(path, n, "%s/%s", dir, name);
  return fopen(path, "w");
}

static int copy_file(const char *from, const char *to, mode_t mode) {
  FILE *a = fopen(from, "rb"), *b = a ? fopen(to, "wb") : NULL;
  int rc = a && b ? 0 : -1;
  char buf[1 << 16];
  size_t k;
  while (!rc && (k = fread(buf, 1, sizeof buf, a)) > 0)
    if (fwrite(buf, 1, k, b) != k) rc = -1;
  if (a) fclose(a);
  if (b && fclose(b) != 0) rc = -1;
  if (!rc) chmod(to, mode);
  return rc;
}

/* Runs argv (no shell) in cwd (NULL: here) with stdout and stderr appended to log; 0 when it exits 0. */
static int run_logged(char *const *argv, const char *log, const char *cwd) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  /* inside the artifact, so that the compiler records file names, not this machine's paths */
  if (cwd) posix_spawn_file_actions_addchdir_np(&fa, cwd);
  FILE *lf = fopen(log, "a");
  if (lf) {
    fprintf(lf, "$");
    for (int i = 0; argv[i]; i++)
      fprintf(lf, " %s", argv[i]);
    fprintf(lf, "\n");
    fclose(lf);
  }
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ), status = 0;
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* A failed compile's message with what the compiler said: the lines of build.log that name an
 * error (else its last lines), since the log goes with the unfinished artifact (stepc build and
 * the cache remove a build that failed). */
static int fail_logged(char *err, size_t nerr, const char *what, const char *log) {
  char lines[64][240];
  int n = 0, nerrs = 0, ok[64] = {0};
  FILE *f = fopen(log, "r");
  while (f && fgets(lines[n % 64], sizeof lines[0], f)) {
    const char *l = lines[n % 64];
    ok[n % 64] =
        strstr(l, "error") || strstr(l, "Error") || strstr(l, "undefined reference") || strstr(l, "fatal");
    nerrs += ok[n % 64], n++;
  }
  if (f) fclose(f);
  size_t k = (size_t)snprintf(
      err, nerr, "%s failed; the C compiler said (build.log, removed with the unfinished artifact):", what);
  int first = n > 64 ? n - 64 : 0, shown = 0;
  for (int i = first; i < n && k < nerr && shown < 12; i++) {
    if (nerrs && !ok[i % 64]) continue;
    if (!nerrs && i < n - 8) continue;
    lines[i % 64][strcspn(lines[i % 64], "\n")] = 0;
    k += (size_t)snprintf(err + k, nerr - k, "\n  %s", lines[i % 64]);
    shown++;
  }
  if (!n && k < nerr) snprintf(err + k, nerr - k, " nothing (it could not be run)");
  return ARTIFACT_ERROR;
}

/* Splits the compiled-in flags (space separated, no quoting needed) into argv. */
static int add_flags(char **argv, int n, char *buf) {
  for (char *t = strtok(buf, " "); t; t = strtok(NULL, " "))
    argv[n++] = t;
  return n;
}

/* The public API libstep.so exports (runtime/stepc.h); everything else stays inside it. */
static const char VERSION_SCRIPT[] =
    "{\n  global:\n    stepc_options_default; stepc_options_from_env; stepc_open; stepc_close; "
    "stepc_last_error; stepc_notice; stepc_status_name;\n"
    "    stepc_get_info; stepc_init_params; stepc_save_params; stepc_load_params; stepc_save_checkpoint;\n"
    "    stepc_load_checkpoint; stepc_bind_batch; stepc_bind_batch_device; stepc_step; stepc_profile_step; "
    "stepc_profile_timeline;\n"
    "    stepc_get_measure; stepc_eval; stepc_api_version;\n"
    "  local: *;\n};\n";

/* libstep.so = the runtime (libstepc_rt + libstepc_ir), which plays step.img's launch program: no compiler,
 * no Lua, no NVRTC; the driver and cuBLASLt are dlopen'ed at run time. SONAME libstep.so and train's RUNPATH
 * $ORIGIN make the directory relocatable: nothing in it names a path of this machine. */
static int link_step(const ArtifactOptions *o, FILE *progress, char *err, size_t nerr) {
  char log[PATH_MAX + 32], train_c[PATH_MAX + 32], hdr[PATH_MAX + 32], vs[PATH_MAX + 32];
  StepcLayout lay;
  if (stepc_layout_self(&lay, err, nerr) != 0 || stepc_layout_check(&lay, err, nerr) != 0)
    return ARTIFACT_ERROR;
  const char *dir = o->dir, *cc = env_or("CC", STEPC_CC), *rt = lay.rt_archive, *irar = lay.ir_archive,
             *api_h = lay.api_header;
  snprintf(log, sizeof log, "%s/build.log", dir);
  snprintf(train_c, sizeof train_c, "%s/train.c", dir);
  snprintf(hdr, sizeof hdr, "%s/stepc.h", dir);
  snprintf(vs, sizeof vs, "%s/libstep.map", dir);
  if (copy_file(api_h, hdr, 0644) != 0) return fail(err, nerr, "cannot copy %s to %s", api_h, hdr);
  FILE *f = fopen(train_c, "w");
  if (!f || fputs(artifact_train_c, f) < 0 || fclose(f) != 0)
    return fail(err, nerr, "cannot write %s%s", train_c, "");
  f = fopen(vs, "w");
  if (!f || fputs(VERSION_SCRIPT, f) < 0 || fclose(f) != 0)
    return fail(err, nerr, "cannot write %s%s", vs, "");
  remove(log);
  char flags1[512], flags2[512];
  snprintf(flags1, sizeof flags1, "%s", STEPC_ARTIFACT_FLAGS);
  snprintf(flags2, sizeof flags2, "%s", STEPC_ARTIFACT_FLAGS);
  if (progress) fprintf(progress, "build: %s -shared runtime -> libstep.so\n", cc);
  char *a1[48];
  int n = 0;
  a1[n++] = (char *)cc, a1[n++] = "-shared", a1[n++] = "-fPIC", a1[n++] = "-O1", a1[n++] = "-std=gnu11";
  n = add_flags(a1, n, flags1);
  a1[n++] = "-o", a1[n++] = "libstep.so", a1[n++] = "-Wl,--whole-archive", a1[n++] = (char *)rt;
  a1[n++] = "-Wl,--no-whole-archive", a1[n++] = (char *)irar, a1[n++] = "-lm", a1[n++] = "-ldl",
  a1[n++] = "-lpthread";
  a1[n++] = "-Wl,-soname,libstep.so", a1[n++] = "-Wl,--version-script=libstep.map",
  a1[n++] = "-Wl,-Bsymbolic", a1[n] = NULL;
  if (run_logged(a1, log, dir) != 0) return fail_logged(err, nerr, "compiling libstep.so", log);
  if (artifact_sum_write(dir, err, nerr) != 0) return ARTIFACT_ERROR; /* checked before anything loads it */
  if (progress) fprintf(progress, "build: %s train.c -> train\n", cc);
  char *a2[32];
  n = 0;
  a2[n++] = (char *)cc, a2[n++] = "-O1", a2[n++] = "-std=c11";
  n = add_flags(a2, n, flags2);
  /* train loads libstep.so itself (dlopen) once it has checked it against libstep.sum */
  a2[n++] = "-I.", a2[n++] = "-o", a2[n++] = "train", a2[n++] = "train.c", a2[n++] = "-ldl";
  a2[n] = NULL;
  if (run_logged(a2, log, dir) != 0) return fail_logged(err, nerr, "compiling train", log);
  remove(vs);
  return ARTIFACT_OK;
}

int artifact_mkdirs(const char *dir) {
  char p[PATH_MAX];
  if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return errno = ENAMETOOLONG, -1;
  for (char *c = p + 1; *c; c++) {
    if (*c != '/') continue;
    *c = 0;
    if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
    *c = '/';
  }
  return mkdir(p, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

/* step.img (runtime/image.h): the CUDA plan sp (its graph, fusions, chains, scopes) beside the CPU
 * reference plan of the same step, the program, the generated kernels and the step's facts. */
static int write_image(const Spec *spec, const Plan *sp, const char *cubin_name, const char *dir, char *err,
                       size_t nerr) {
  static Plan cp; /* the CPU reference executor's plan: every float at 4 bytes */
  int st = plan_build(spec, 4, &cp, NULL, err, nerr);
  if (st != PLAN_OK) return st == PLAN_UNSUPPORTED ? ARTIFACT_UNSUPPORTED : ARTIFACT_ERROR;
  StepImage im = {0};
  PlanProgram prog;
  int rc = ARTIFACT_ERROR;
  if (step_fingerprint(cp.g) != step_fingerprint(sp->g) || cp.g->nt != sp->g->nt) {
    snprintf(err, nerr, "internal error: the CPU and CUDA plans of the step differ");
    goto done;
  }
  if (plan_program_build(cp.g, &cp.sc, &cp.mp, &prog) != 0) {
    snprintf(err, nerr, "out of memory");
    goto done;
  }
  im.g = sp->g;
  im.npoints = prog.p.npoints, im.micro_points = prog.p.micro_points;
  im.point_op = prog.point_op, im.poison_start = prog.poison_start, im.poison = prog.poison,
  im.npoison = prog.npoison;
  im.cpu_offset = malloc((size_t)cp.g->nt * sizeof *im.cpu_offset);
  im.cpu_bytes = malloc((size_t)cp.g->nt * sizeof *im.cpu_bytes);
  im.scope = calloc((size_t)sp->sr.n + 1, sizeof *im.scope);
  if (!im.cpu_offset || !im.cpu_bytes || !im.scope ||
      (im.nscope = plan_scope_points(&sp->sc, &sp->sr, im.scope)) < 0) {
    snprintf(err, nerr, "out of memory");
    goto free_prog;
  }
  for (int t = 0; t < cp.g->nt; t++)
    im.cpu_offset[t] = cp.g->t[t].offset, im.cpu_bytes[t] = cp.g->t[t].bytes;
  ew_kernels_rt(&sp->ew, &im.gen);
  ImgFacts *f = &im.f;
  f->fingerprint = step_fingerprint(sp->g);
  f->seed = (uint64_t)spec->train.seed;
  f->kernel_list = rt_kernel_list_hash(&im.gen);
  f->train_iters = spec->train.train_iters;
  f->vocab_size = spec->model.vocab_size;
  f->seq_length = spec->model.seq_length;
  const char *impl = spec->model.cuda_graph_impl;
  f->graph_mode = !strcmp(impl, "full_iteration")                                 ? IMG_MODE_FULL_ITERATION
                  : !strcmp(impl, "local") || !strcmp(impl, "transformer_engine") ? IMG_MODE_SCOPED
                                                                                  : IMG_MODE_EAGER;
  f->warmup_steps = (int32_t)spec->model.cuda_graph_warmup_steps;
  const char *dp = spec_data_path(spec);
  if (dp) {
    char abs[PATH_MAX];
    /* the data file is the user's: kept by its absolute path, so the artifact runs from any directory */
    f->data_text = 1;
    snprintf(f->data_path, sizeof f->data_path, "%s", dp[0] != '/' && realpath(dp, abs) ? abs : dp);
  }
  f->nreplay = sp->rr.nreplay_total;
  f->cuda_peak = plan_device_peak(sp);
  f->cpu_peak = cp.mp.peak;
  f->cpu_arena = cp.mp.arena;
  f->cpu_region = cp.mp.region;
  f->zero_stage_at = sp->mp.zstage_offset, f->zero_stage_bytes = sp->mp.zstage_bytes;
  f->sm_count = sp->sm_count;
  f->dp_size = (int32_t)(spec_data_parallel_size(spec) > 0 ? spec_data_parallel_size(spec) : 1);
  f->dist_opt = spec->optimizer.use_distributed_optimizer;
  f->tp_size = (int32_t)(spec->per_rank ? spec->model.tensor_model_parallel_size : 1);
  f->ep_size = (int32_t)(spec->per_rank ? spec->model.expert_model_parallel_size : 1);
  /* the DDP buckets as the schedule placed them (the CUDA plan's: the same graph as the CPU one) */
  im.bucket = calloc((size_t)sp->sc.nb + 1, sizeof *im.bucket);
  im.bucket_grad = calloc((size_t)sp->sc.ngrad + 1, sizeof *im.bucket_grad);
  im.owner = malloc(((size_t)sp->g->nt + 1) * sizeof *im.owner);
  im.storage = malloc(((size_t)sp->g->nt + 1) * sizeof *im.storage);
  if (!im.bucket || !im.bucket_grad || !im.owner || !im.storage) {
    snprintf(err, nerr, "out of memory");
    goto free_prog;
  }
  for (int k = 0; k < sp->sc.nb; k++) {
    const Bucket *b = &sp->sc.b[k];
    im.bucket[k] = (ImgBucket){.after_op = b->after_op,
                               .fire_op = b->fire_op,
                               .first = b->first,
                               .ngrads = b->ngrads,
                               .params = b->params};
  }
  for (int k = 0; k < sp->sc.ngrad; k++)
    im.bucket_grad[k] = sp->sc.grad[k];
  im.nbucket = sp->sc.nb, im.nbucket_grad = sp->sc.ngrad;
  /* what the runtime needs of the fusions besides the launch program: where a tensor's bytes are */
  for (int t = 0; t < sp->g->nt; t++)
    im.owner[t] = sp->sc.owner ? sp->sc.owner[t] : -1, im.storage[t] = fusions_storage(sp->fz, t);
  const char *base = strrchr(spec->recipe_path, '/');
  snprintf(f->recipe, sizeof f->recipe, "%s", base ? base + 1 : spec->recipe_path);
  if (!sp->lp_ok)
    snprintf(f->cuda_refusal, sizeof f->cuda_refusal, "the CUDA backend does not run this step: %s",
             sp->lp_why);
  im.has_program = sp->lp_ok;
  if (im.has_program) im.lp = sp->lp; /* borrowed: written, never freed here */
  snprintf(f->cubin, sizeof f->cubin, "%s", cubin_name);
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/%s", dir, STEPC_IMAGE_FILE);
  rc = image_write(path, &im, err, nerr) == 0 ? ARTIFACT_OK : ARTIFACT_ERROR;
free_prog:
  free(im.cpu_offset), free(im.cpu_bytes), free(im.scope), free(im.bucket), free(im.bucket_grad),
      free(im.owner), free(im.storage);
  plan_program_free(&prog);
done:
  plan_free(&cp);
  return rc;
}

int artifact_build(const Spec *raw, const Spec *spec, const ArtifactOptions *o, DiagList *d, FILE *progress,
                   char *err, size_t nerr) {
  const char *dir = o->dir, *arch = o->arch ? o->arch : "sm_90";
  char path[PATH_MAX + 64];
  if (artifact_refuse_unexecuted(spec, err, nerr) != ARTIFACT_OK) return ARTIFACT_UNSUPPORTED;
  /* the artifact runs one rank's step: under tensor parallelism its shard (Spec.per_rank) */
  static Spec rank_spec;
  const Spec *model_spec = spec; /* the recipe's: every rank modelled, as `stepc plan` lowers it */
  rank_spec = *spec;
  rank_spec.per_rank = true;
  spec = &rank_spec;
  if (artifact_mkdirs(dir) != 0) return fail(err, nerr, "cannot create %s: %s", dir, strerror(errno));
  /* recipe.lua */
  FILE *f = open_out(dir, "recipe.lua", path, sizeof path);
  if (!f || artifact_write_recipe(raw, f) != 0 || fclose(f) != 0)
    return fail(err, nerr, "cannot write %s%s", path, "");
  /* plan.json and step.img (with the launch program): one plan, the one `stepc plan` reports
   * (nominal dtypes), lowered for the target's SM count */
  static Plan sp; /* large; one build at a time */
  int sms = o->sm_count > 0 ? o->sm_count : LAUNCH_DEFAULT_SMS;
  int st = plan_build_for(spec, 0, sms, &sp, d, err, nerr);
  if (st != PLAN_OK) return st == PLAN_UNSUPPORTED ? ARTIFACT_UNSUPPORTED : ARTIFACT_ERROR;
  /* plan.json is `stepc plan --json` of the recipe. Under TP or EP the step's graph is one rank's
   * shard (Spec.per_rank), which the per-rank model (compiler/plan/memrank.c) would divide by TP
   * or EP a second time: the report is planned on the recipe's one-rank graph, as `stepc plan` does. */
  const SpecModel *mm = &model_spec->model;
  bool sharded = mm->tensor_model_parallel_size > 1 || mm->expert_model_parallel_size > 1;
  static Plan rp; /* large; one build at a time */
  if (sharded && (st = plan_build_for(model_spec, 0, sms, &rp, NULL, err, nerr)) != PLAN_OK) {
    plan_free(&rp), plan_free(&sp);
    return st == PLAN_UNSUPPORTED ? ARTIFACT_UNSUPPORTED : ARTIFACT_ERROR;
  }
  f = open_out(dir, "plan.json", path, sizeof path);
  if (f) report_plan_json(sharded ? &rp : &sp, d, f);
  if (sharded) plan_free(&rp);
  if (!f || fclose(f) != 0) {
    plan_free(&sp);
    return fail(err, nerr, "cannot write %s%s", path, "");
  }
  f = open_out(dir, "program.txt", path, sizeof path);
  if (!f || program_text_write(&sp, f) != 0 || fclose(f) != 0) {
    plan_free(&sp);
    return fail(err, nerr, "cannot write %s%s", path, "");
  }
  char cubin_name[64];
  snprintf(cubin_name, sizeof cubin_name, "kernels.%s.cubin", arch);
  int rc;
  if ((rc = write_image(spec, &sp, cubin_name, dir, err, nerr)) != ARTIFACT_OK) {
    plan_free(&sp);
    return rc;
  }
  LaunchStats ls;
  launch_program_stats(&sp.lp, &ls);
  if (progress && sp.lp_ok)
    fprintf(progress,
            "build: launch program — %d ops, %d kernel launches, %d GEMMs, %d attention calls, %d memsets, "
            "%d copies; "
            "launch scratch %lld B for %d SMs\n",
            sp.sc.nops, ls.launches, ls.gemms, ls.sdpas, ls.memsets, ls.copies,
            (long long)sp.lp.f.scratch_bytes, sms);
  else if (progress)
    fprintf(progress, "build: %d ops; no launch program (%s)\n", sp.sc.nops, sp.lp_why);
  /* under TP or EP plan.json's region is the one-rank graph's: the one each rank allocates is this */
  if (progress && sharded && sp.mp.region)
    fprintf(progress, "build: each rank's step: "), report_plan_region(&sp, progress);
  if (progress && sp.lp_ok && sp.lp.f.attn == LP_ATTN_AUTO) {
    int pts = 0, recs = 0;
    for (int q = 0; q < sp.sc.nops; q++)
      pts += sp.lp.point[q].alt.count > 0, recs += sp.lp.point[q].alt.count;
    fprintf(progress,
            "build: attention_backend=auto: the counts above include the flash alternatives of %d attention "
            "points (%d records), played instead of their cuDNN calls when cuDNN has no engine at open\n",
            pts, recs);
  }
  if (progress && mm->expert_model_parallel_size > 1 &&
      strcmp(mm->moe_token_dispatcher_type, "allgather") == 0) {
    /* the allgather dispatcher's EP-gathered tensors and its permuted buffers of the static bound */
    int64_t grows = 0, gbytes = 0, ngat = 0, rows = 0, bytes = 0, nbuf = 0;
    for (int i = 0; i < sp.g->nop; i++) {
      const Op *op = &sp.g->op[i];
      const Tensor *t = &sp.g->t[op->out[0]];
      if (op->kind == OP_TP_GATHER && op->a.i[1])
        grows = t->shape[0] * t->shape[1], gbytes += t->bytes, ngat++;
      if (op->kind == OP_MOE_PERMUTE && op->tags.phase == IR_PHASE_FORWARD &&
          sp.g->op[sp.g->t[op->in[2]].producer].a.i[4])
        rows = t->shape[0], bytes += t->bytes + sp.g->t[op->out[1]].bytes, nbuf++;
    }
    fprintf(progress,
            "build: expert parallelism EP %lld (allgather dispatcher): %lld all-gathers over the EP group "
            "(tokens, probabilities, expert indices; forward and backward) of %lld tokens, %.3f MB; %lld "
            "permuted token buffers of %lld rows (the static bound: EP x tokens x min(topk, E/EP)), %.3f MB; "
            "the rank's step peaks at %.3f MB (nominal dtypes)\n",
            (long long)mm->expert_model_parallel_size, (long long)ngat, (long long)grows,
            (double)gbytes / 1e6, (long long)nbuf, (long long)rows, (double)bytes / 1e6,
            (double)plan_device_peak(&sp) / 1e6);
  } else if (progress &&
             mm->expert_model_parallel_size > 1) { /* the static all-to-all receive buffers (ops/ep.c) */
    int64_t rows = 0, bytes = 0, nbuf = 0;
    for (int i = 0; i < sp.g->nop; i++)
      if (sp.g->op[i].kind == OP_EP_DISPATCH) {
        const Tensor *t = &sp.g->t[sp.g->op[i].out[0]];
        rows = t->shape[0] > rows ? t->shape[0] : rows, bytes += t->bytes, nbuf++;
      }
    fprintf(progress,
            "build: expert parallelism EP %lld: %lld all-to-all receive buffers (tokens and probabilities of "
            "each MoE layer's forward and backward) of %lld rows (the static bound: %s), %.3f MB in all; the "
            "rank's "
            "step peaks at %.3f MB (nominal dtypes)\n",
            (long long)mm->expert_model_parallel_size, (long long)nbuf, (long long)rows,
            model_spec->present[SPEC_F_model_moe_expert_capacity_factor] ? "E x capacity"
                                                                         : "EP x tokens x min(topk, E/EP)",
            (double)bytes / 1e6, (double)plan_device_peak(&sp) / 1e6);
  }
  if (progress && sp.lp_ok) {
    char libs[768];
    lp_runtime_libs(&sp.lp, sp.sc.dp, libs, sizeof libs);
    fprintf(progress, "build: run-time libraries (cuda): %s\n", libs);
  }
  char *src = ew_kernels_cu(&sp.ew, err, nerr);
  if (!src) {
    plan_free(&sp);
    return ARTIFACT_ERROR;
  }
  /* kernels.cu (hand-written + the step's generated kernels) and its cubin */
  f = open_out(dir, "kernels.cu", path, sizeof path);
  if (!f || fputs(src, f) < 0 || fclose(f) != 0) {
    free(src);
    plan_free(&sp);
    return fail(err, nerr, "cannot write %s%s", path, "");
  }
  if (progress) fprintf(progress, "build: NVRTC kernels.cu -> kernels.%s.cubin\n", arch);
  CubinOptions co = {.arch = arch, .cache_dir = o->cache_dir};
  Cubin cb;
  char *msg = NULL;
  CubinStatus cs = cubin_compile(src, &co, &cb, &msg);
  free(src);
  if (cs != CUBIN_OK && cs != CUBIN_ERR_IO) {
    snprintf(err, nerr, "NVRTC: %s", msg ? msg : "failed");
    free(msg);
    plan_free(&sp);
    return ARTIFACT_ERROR;
  }
  free(msg);
  /* every kernel the launch program launches must be in the cubin */
  RtGenKernels gk;
  ew_kernels_rt(&sp.ew, &gk);
  for (int k = 0; k < RT_K_COUNT + gk.n && !err[0]; k++) {
    const char *kn = k < RT_K_COUNT ? rt_kernel_name[k] : gk.k[k - RT_K_COUNT].name;
    if (ls.kernel_used[k] && !cubin_has_function(cb.data, cb.size, kn))
      snprintf(err, nerr, "the cubin has no kernel %s, which the launch program launches", kn);
  }
  plan_free(&sp);
  f = open_out(dir, cubin_name, path, sizeof path);
  rc = f && fwrite(cb.data, 1, cb.size, f) == cb.size ? 0 : -1;
  cubin_free(&cb);
  if (!f || fclose(f) != 0 || rc != 0) return fail(err, nerr, "cannot write %s%s", path, "");
  if (err[0]) return ARTIFACT_ERROR;
  if (o->no_link) return ARTIFACT_OK;
  return link_step(o, progress, err, nerr);
}

/* 1 when name is a file stepc build writes into an artifact (link_step's and artifact_build's). */
static int own_file(const char *name) {
  /* step.c: what builds before the launch program wrote (an older artifact is still replaceable) */
  static const char *const own[] = {"recipe.lua",  "plan.json",   "step.img", "program.txt", "step.c",
                                    "kernels.cu",  "stepc.h",     "train.c",  "train",       "libstep.so",
                                    "libstep.map", "libstep.sum", "build.log"};
  for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
    if (!strcmp(name, own[i])) return 1;
  size_t n = strlen(name);
  return n > strlen("kernels..cubin") && !strncmp(name, "kernels.", 8) && !strcmp(name + n - 6, ".cubin");
}

int artifact_dir_replaceable(const char *dir, char *err, size_t nerr) {
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? 0 : (snprintf(err, nerr, "cannot read %s: %s", dir, strerror(errno)), -1);
  int entries = 0, image = 0;
  char bad[300] = "";
  for (struct dirent *e; !bad[0] && (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char p[PATH_MAX + 300];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    entries++;
    if (!own_file(e->d_name))
      snprintf(bad, sizeof bad, "%s, which stepc build does not write", e->d_name);
    else if (lstat(p, &sb) != 0 || !S_ISREG(sb.st_mode))
      snprintf(bad, sizeof bad, "%s, which is not a regular file", e->d_name);
    image |= !strcmp(e->d_name, STEPC_IMAGE_FILE);
  }
  closedir(d);
  if (!bad[0] && entries > 0 && !image) snprintf(bad, sizeof bad, "no %s", STEPC_IMAGE_FILE);
  if (!bad[0]) return 0;
  snprintf(err, nerr,
           "%s holds %s: it is not a stepc artifact, refusing to replace it (choose a new or empty "
           "directory; move "
           "your files out of an artifact's directory before rebuilding it)",
           dir, bad);
  return -1;
}

int artifact_link(const ArtifactOptions *o, FILE *progress, char *err, size_t nerr) {
  return link_step(o, progress, err, nerr);
}
