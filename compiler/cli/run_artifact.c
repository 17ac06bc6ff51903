/* run_artifact.c — `stepc run`: trains an artifact through its own libstep.so (dlopen), which
 * plays the artifact's launch program exactly as a trainer linking libstep.so gets it. A
 * libstep.so that does not load is an error: nothing else runs in its place. */
#include "cli/run_artifact.h"

#include <stdlib.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/artifact_sum.h"
#include "passes/fuse.h"
#include "report/report.h"
#include "runtime/cpu/data.h"
#include "runtime/image.h"
#include "runtime/safe_file.h"

#include "validate/diag.h"

typedef struct {
  void *lib;
  stepc_options (*options_default)(void);
  stepc_status (*open)(const char *, const stepc_options *, stepc_t **);
  void (*close)(stepc_t *);
  const char *(*last_error)(const stepc_t *);
  const char *(*status_name)(stepc_status);
  stepc_status (*get_info)(const stepc_t *, stepc_info *);
  stepc_status (*step)(stepc_t *, stepc_step_stats *);
  stepc_status (*get_measure)(stepc_t *, stepc_measure *);
  stepc_status (*profile_step)(stepc_t *, stepc_step_stats *, double *, int64_t);
  stepc_status (*options_from_env)(stepc_options *); /* NULL in a libstep.so older than API 3 */
  stepc_status (*profile_timeline)(stepc_t *, stepc_span *, int64_t, int64_t *); /* NULL before API 4 */
  stepc_status (*eval)(stepc_t *, const int32_t *, const int32_t *, size_t, double *, float *); /* API 7 */
  const char *(*notice)(const stepc_t *); /* NULL before API 7 */
  int (*api_version)(void);               /* NULL before API 8 */
} Api;

#define SYM(field, name) (*(void **)&api->field = dlsym(api->lib, name))

static int load_api(Api *api, const char *dir, char *why, size_t nwhy) {
  char path[1100];
  snprintf(path, sizeof path, "%s/libstep.so", dir);
  if (artifact_sum_check(dir, why, nwhy) != 0) return -1; /* a damaged library is a SIGBUS inside dlopen */
  /* dlopen would read a FIFO or a device there forever: only a regular file is handed to it */
  FILE *f = rt_open_regular(path, RT_FOLLOW, 0, NULL, why, nwhy);
  if (!f) return -1;
  fclose(f);
  api->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!api->lib) {
    const char *e = dlerror();
    snprintf(why, nwhy, "%s", e ? e : path);
    return -1;
  }
  if (!SYM(options_default, "stepc_options_default") || !SYM(open, "stepc_open") ||
      !SYM(close, "stepc_close") || !SYM(last_error, "stepc_last_error") ||
      !SYM(status_name, "stepc_status_name") || !SYM(get_info, "stepc_get_info") ||
      !SYM(step, "stepc_step") || !SYM(get_measure, "stepc_get_measure") ||
      !SYM(profile_step, "stepc_profile_step")) {
    snprintf(why, nwhy, "%s does not export the stepc.h API", path);
    dlclose(api->lib);
    api->lib = NULL;
    return -1;
  }
  SYM(options_from_env, "stepc_options_from_env");
  SYM(profile_timeline, "stepc_profile_timeline");
  SYM(eval, "stepc_eval");
  SYM(notice, "stepc_notice");
  SYM(api_version, "stepc_api_version");
  return 0;
}

static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "3m05s" / "41s" */
static const char *eta(double s) {
  static char buf[32];
  if (s >= 3600)
    snprintf(buf, sizeof buf, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
  else if (s >= 60)
    snprintf(buf, sizeof buf, "%dm%02ds", (int)(s / 60), (int)s % 60);
  else
    snprintf(buf, sizeof buf, "%ds", (int)(s + 0.5));
  return buf;
}

/* The profiled step's timeline: the communication stream's summary (text, or a JSON field), and
 * the trace file (rank 0). */
static stepc_status timeline(const Api *api, stepc_t *s, const char *dir, const StepImage *im,
                             const stepc_info *in, const ApiRunOptions *o, FILE *out, char *err,
                             size_t nerr) {
  int64_t n = 0;
  if (!api->profile_timeline) return STEPC_OK; /* a libstep.so before API 4 */
  if (api->profile_timeline(s, NULL, 0, &n) != STEPC_OK)
    return snprintf(err, nerr, "%s", api->last_error(s)), STEPC_ERR_RUNTIME;
  stepc_span *sp = calloc((size_t)n + 1, sizeof *sp);
  if (!sp) return snprintf(err, nerr, "out of memory"), STEPC_ERR_NOMEM;
  stepc_status st = api->profile_timeline(s, sp, n, &n);
  TimelineSummary t;
  timeline_summary(sp, n, &t);
  if (o->json)
    fprintf(out,
            ", \"timeline\": {\"spans\": %lld, \"bucket_collectives\": %d, \"bucket_ms\": %.4f, "
            "\"overlap_ms\": %.4f, "
            "\"zero_other_ms\": %.4f, \"tp_collectives\": %d, \"tp_ms\": %.4f, \"tp_beside_ms\": %.4f, "
            "\"step_ms\": %.4f}",
            (long long)n, t.buckets, t.bucket_ms, t.overlap_ms, t.other_ms, t.tp, t.tp_ms, t.tp_beside_ms,
            t.step_ms);
  else
    timeline_summary_line(&t, out);
  if (st == STEPC_OK && o->timeline && in->rank == 0) {
    FILE *f = fopen(o->timeline, "w");
    char title[700];
    snprintf(title, sizeof title, "stepc run --profile: %s (%s, rank 0 of %d)", dir, in->device,
             in->world_size > 0 ? in->world_size : 1);
    if (!f || report_timeline_trace(im, sp, n, title, f) != 0)
      st = STEPC_ERR_IO, snprintf(err, nerr, "cannot write %s", o->timeline);
    if (f && fclose(f) != 0 && st == STEPC_OK)
      st = STEPC_ERR_IO, snprintf(err, nerr, "cannot write %s", o->timeline);
  }
  free(sp);
  return st;
}

/* --eval-data: the validation batch, this rank's micro-batches of windows of the file's bytes drawn
 * as data.path draws a step's (runtime/cpu/data.h) at step 0 with train.seed — a step no training
 * step draws, the same batch at every evaluation. *tok and *tg (count each) are the caller's to free. */
static stepc_status eval_batch(const Api *api, const char *path, const stepc_info *in, int32_t **tok,
                               int32_t **tg, size_t *count, char *err, size_t nerr) {
  if (!api->eval)
    return snprintf(err, nerr,
                    "--eval-data: this libstep.so predates stepc_eval (stepc.h API 7): rebuild the "
                    "artifact"),
           STEPC_ERR_MISMATCH;
  CpuData d;
  char derr[600];
  if (cpu_data_open(&d, in->seed, in->vocab_size, in->seq_length, path, derr, sizeof derr) != 0)
    return snprintf(err, nerr, "--eval-data %s: %s", path, derr), STEPC_ERR_IO;
  size_t per = (size_t)(in->micro_batch_size * in->seq_length);
  *count = per * (size_t)in->num_microbatches;
  *tok = malloc(*count * sizeof **tok), *tg = malloc(*count * sizeof **tg);
  stepc_status st = *tok && *tg ? STEPC_OK : STEPC_ERR_NOMEM;
  int world = in->world_size > 0 ? in->world_size : 1;
  for (int64_t mb = 0; mb < in->num_microbatches && st == STEPC_OK; mb++)
    if (d.fill(&d, 0, mb * world + in->rank, in->micro_batch_size, in->seq_length, *tok + mb * per,
               *tg + mb * per) != 0)
      st = STEPC_ERR_IO, snprintf(err, nerr, "--eval-data %s: %s", path, d.err);
  if (st == STEPC_ERR_NOMEM) snprintf(err, nerr, "out of memory");
  if (d.free) d.free(&d);
  return st;
}

/* One more step, profiled, its table (report_profile) and its timeline. */
static stepc_status profile(const Api *api, stepc_t *s, const char *dir, const stepc_info *in,
                            const ApiRunOptions *o, FILE *out, char *err, size_t nerr) {
  int json = o->json;
  StepImage im;
  char path[1200], ierr[1400] = "";
  snprintf(path, sizeof path, "%s/%s", dir, STEPC_IMAGE_FILE);
  if (image_read(path, &im, ierr, sizeof ierr) != 0) return snprintf(err, nerr, "%s", ierr), STEPC_ERR_IO;
  /* the cost model prices the fused groups: the compiler's fusions of the image's graph, decided
   * again (they read the op structure alone, so they are the ones the build lowered) */
  Fusions *fz = fusions_new(im.g);
  if (fz) fz->dp = im.f.dp_size;
  EwKernels ks = {0};
  if (!fz || fuse_build(im.g, fz, &ks, ierr, sizeof ierr) != 0) {
    snprintf(err, nerr, "%s: the step's fusions: %s", path, fz ? ierr : "out of memory");
    ew_kernels_free(&ks), fusions_free(fz), image_free(&im);
    return STEPC_ERR_IO;
  }
  ew_kernels_free(&ks);
  double *ms = calloc((size_t)in->points + 1, sizeof *ms);
  stepc_step_stats ss;
  stepc_status st = ms ? api->profile_step(s, &ss, ms, in->points) : STEPC_ERR_NOMEM;
  if (st != STEPC_OK)
    snprintf(err, nerr, "%s", ms ? api->last_error(s) : "out of memory");
  else {
    if (json) fprintf(out, ", \"profile\": ");
    report_profile(&im, fz, ms, ss.ms, json, out);
    st = timeline(api, s, dir, &im, in, o, out, err, nerr);
  }
  free(ms);
  fusions_free(fz);
  image_free(&im);
  return st;
}

stepc_status api_run_artifact(const char *dir, const ApiRunOptions *o, FILE *out, FILE *progress, char *err,
                              size_t nerr) {
  Api api;
  char why[600];
  (void)progress;
  if (load_api(&api, dir, why, sizeof why) != 0) {
    snprintf(err, nerr, "%s/libstep.so does not load: %s (rebuild the artifact with stepc build)", dir, why);
    return STEPC_ERR_IO;
  }
  stepc_options opt = api.options_default();
  opt.device = o->device;
  opt.cpu_threads = o->threads;
  opt.graph_mode = o->graph_mode;
  if (o->gemm_tuning) { /* a library older than API 8 would not read the field: refuse, not ignore */
    if (!api.api_version || api.api_version() < 8) {
      snprintf(err, nerr, "%s/libstep.so predates --gemm-tuning (stepc.h API 8): rebuild the artifact", dir);
      dlclose(api.lib);
      return STEPC_ERR_ARGUMENT;
    }
    opt.gemm_tuning = o->gemm_tuning;
  }
  /* under torchrun, mpirun, srun or --nproc this process is one rank of a data-parallel job */
  if (api.options_from_env && api.options_from_env(&opt) != STEPC_OK) {
    snprintf(
        err, nerr,
        "the launcher's environment is malformed: RANK / WORLD_SIZE (or OMPI_COMM_WORLD_*, SLURM_PROCID / "
        "SLURM_NTASKS) must be numbers with the rank below the world size, MASTER_PORT a TCP port");
    dlclose(api.lib);
    return STEPC_ERR_ARGUMENT;
  }
  if (!api.options_from_env && getenv("WORLD_SIZE")) {
    snprintf(err, nerr, "%s/libstep.so predates data parallel (stepc.h API 3): rebuild the artifact", dir);
    dlclose(api.lib);
    return STEPC_ERR_MISMATCH;
  }
  if (o->dp_join) opt.dp_join = 1;
  if (o->comm_timeout_s > 0) opt.comm_timeout_s = o->comm_timeout_s;
  stepc_t *s = NULL;
  stepc_status st = api.open(dir, &opt, &s);
  if (st != STEPC_OK) {
    snprintf(err, nerr, "%s", api.last_error(s));
    api.close(s);
    dlclose(api.lib);
    return st;
  }
  if (api.notice && api.notice(s)[0]) fprintf(stderr, "stepc run: %s\n", api.notice(s));
  stepc_info in = {0};
  api.get_info(s, &in);
  int steps = o->steps > 0 ? o->steps : (int)in.train_iters;
  if (o->json) {
    fprintf(out, "{\"schema\": \"stepc.run/1\", \"artifact\": ");
    json_write_string(out, dir);
    fprintf(out, ", \"device\": \"%s\", \"gpu\": ", in.device);
    json_write_string(out, in.gpu);
    fprintf(out, ", \"mode\": \"%s\", \"world_size\": %d, \"rank\": %d, \"comm\": \"%s\", \"steps\": [",
            in.graph_mode, in.world_size, in.rank, in.comm ? in.comm : "none");
  } else {
    fprintf(out, "%s: %s%s%s (%s)", dir, in.device, in.gpu[0] ? " " : "", in.gpu, in.graph_mode);
    if (in.world_size > 1 || (in.comm && strcmp(in.comm, "none") != 0))
      fprintf(out, ", rank %d of %d ranks (%s)", in.rank, in.world_size, in.comm ? in.comm : "none");
    fprintf(out, "\n");
  }
  /* tokens per step over every rank, for tokens/s; the time left from the wall time so far */
  double tokens = (double)in.num_microbatches * (double)in.micro_batch_size * (double)in.seq_length *
                  (in.world_size > 0 ? in.world_size : 1);
  int32_t *etok = NULL, *etg = NULL;
  size_t ecount = 0;
  if (o->eval_data && (st = eval_batch(&api, o->eval_data, &in, &etok, &etg, &ecount, err, nerr)) != STEPC_OK)
    steps = 0;
  double t0 = wall_s();
  stepc_step_stats ss = {0};
  for (int i = 0; i < steps; i++) {
    if ((st = api.step(s, &ss)) != STEPC_OK) {
      snprintf(err, nerr, "%s", api.last_error(s));
      break;
    }
    double left = (wall_s() - t0) / (i + 1) * (steps - i - 1), vl = 0;
    /* the validation loss every eval_every steps (else after the last), outside the step's time */
    int ev = o->eval_data && (o->eval_every > 0 ? (i + 1) % o->eval_every == 0 : i == steps - 1);
    char val[48] = "";
    if (ev && (st = api.eval(s, etok, etg, ecount, &vl, NULL)) != STEPC_OK) {
      snprintf(err, nerr, "%s", api.last_error(s));
      break;
    }
    if (ev) snprintf(val, sizeof val, o->json ? ", \"eval_loss\": %.17g" : "  val %.6f", vl);
    if (o->json)
      fprintf(out,
              "%s{\"step\": %lld, \"loss\": %.17g%s, \"lr\": %.17g, \"grad_norm\": %.17g, \"ms\": %.3f, "
              "\"graph\": %s}",
              i ? ", " : "", (long long)ss.step, ss.loss, val, ss.lr, ss.grad_norm, ss.ms,
              ss.replayed ? "true" : "false");
    else if (!o->quiet)
      fprintf(out, "step %5lld  loss %.6f%s  lr %.3e  grad_norm %.4f  %8.3f ms  %9.0f tok/s  %s left%s\n",
              (long long)ss.step, ss.loss, val, ss.lr, ss.grad_norm, ss.ms,
              ss.ms > 0 ? tokens / (ss.ms / 1e3) : 0.0, eta(left), ss.replayed ? "  (graph)" : "");
    else if (ev)
      fprintf(out, "step %lld: loss %.6f, validation loss %.6f\n", (long long)ss.step, ss.loss, vl);
    fflush(out);
  }
  free(etok), free(etg);
  if (!o->json && o->quiet && st == STEPC_OK && steps > 0)
    fprintf(out, "%d steps: last loss %.6f, grad_norm %.4f, %.3f ms/step (%.0f tok/s)\n", steps, ss.loss,
            ss.grad_norm, ss.ms, ss.ms > 0 ? tokens / (ss.ms / 1e3) : 0.0);
  if (o->json) fprintf(out, "]");
  if (st == STEPC_OK && o->profile) st = profile(&api, s, dir, &in, o, out, err, nerr);
  stepc_measure m = {0};
  api.get_measure(s, &m);
  char region[96] = "";
  if (m.optimizer_region_bytes)
    snprintf(region, sizeof region, " (of it the optimizer-state region %.3f MB, this rank's shard %.3f MB)",
             (double)m.optimizer_region_bytes / 1e6, (double)m.optimizer_state_bytes / 1e6);
  if (o->json)
    fprintf(out,
            ", \"measure\": {\"max_allocated_bytes\": %lld, \"arena_bytes\": %lld, \"predicted_peak_bytes\": "
            "%lld, "
            "\"replay_ops\": %lld, \"graph_nodes\": %lld, \"optimizer_state_bytes\": %lld, "
            "\"optimizer_region_bytes\": %lld}}\n",
            (long long)m.max_allocated_bytes, (long long)m.arena_bytes, (long long)m.predicted_peak_bytes,
            (long long)m.replay_ops, (long long)m.graph_nodes, (long long)m.optimizer_state_bytes,
            (long long)m.optimizer_region_bytes);
  else if (st == STEPC_OK)
    fprintf(out, "max allocated %.3f MB, arena %.3f MB%s, predicted peak %.3f MB%s\n",
            (double)m.max_allocated_bytes / 1e6, (double)m.arena_bytes / 1e6, region,
            (double)m.predicted_peak_bytes / 1e6, strcmp(in.device, "cuda") ? " (fp32 plan on the CPU)" : "");
  api.close(s);
  dlclose(api.lib);
  return st;
}
