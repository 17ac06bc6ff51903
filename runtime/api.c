/* api.c — stepc.h: opening an artifact, errors, data binding, stepping, measurements. The
 * backends (api_cpu.c, api_cuda.c) run it; api_ckpt.c saves and loads. Opening reads the
 * artifact's step image (runtime/image.h): no recipe, no compiler. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/api_internal.h"
#include "runtime/rt.h"

stepc_status api_fail(stepc_t *s, stepc_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->err, sizeof s->err, fmt, ap);
  va_end(ap);
  return st;
}

int stepc_api_version(void) { return STEPC_API_VERSION; }

const char *stepc_status_name(stepc_status st) {
  switch (st) {
  case STEPC_OK: return "ok";
  case STEPC_ERR_ARGUMENT: return "bad argument";
  case STEPC_ERR_RECIPE: return "recipe error";
  case STEPC_ERR_UNSUPPORTED: return "unsupported";
  case STEPC_ERR_NO_DEVICE: return "no CUDA device";
  case STEPC_ERR_IO: return "I/O error";
  case STEPC_ERR_MISMATCH: return "mismatch";
  case STEPC_ERR_RUNTIME: return "runtime error";
  case STEPC_ERR_NOMEM: return "out of memory";
  }
  return "unknown status";
}

stepc_options stepc_options_default(void) {
  return (stepc_options){.device = STEPC_DEVICE_AUTO,
                         .cpu_threads = 0,
                         .graph_mode = -1,
                         .world_size = 1,
                         .master_port = 29500,
                         .master_addr = "127.0.0.1"};
}

const char *stepc_last_error(const stepc_t *s) { return s ? s->err : "out of memory (no handle)"; }
const char *stepc_notice(const stepc_t *s) { return s ? s->notice : ""; }

/* ---- data ---- */

/* `micro` is the global micro-batch index (api_dp_micro: mb * world + rank): the recipe's data is
 * drawn at it, a bound batch holds this rank's micro-batches only (mb = micro / world). */
static int api_fill(CpuData *d, int64_t step, int64_t micro, int64_t b, int64_t t, int32_t *tok,
                    int32_t *tg) {
  ApiData *a = (ApiData *)d;
  if (!a->bound) {
    int rc = a->recipe.fill(&a->recipe, step, micro, b, t, tok, tg);
    if (rc) snprintf(d->err, sizeof d->err, "%s", a->recipe.err); /* the executors read base's */
    return rc;
  }
  size_t n = (size_t)(b * t), off = (size_t)(micro / (a->world > 1 ? a->world : 1)) * n;
  if (off + n > a->count)
    return snprintf(d->err, sizeof d->err, "the bound batch holds no micro-batch %lld", (long long)micro), -1;
  memcpy(tok, a->tok + off, n * sizeof *tok);
  memcpy(tg, a->tg + off, n * sizeof *tg);
  return 0;
}

int api_kept(stepc_t *s, int64_t step, int32_t *tok, int32_t *tg, int64_t *kept) {
  const Tensor *t = &s->g->t[s->g->tokens];
  int64_t b = t->shape[0], T = t->shape[1], n = b * T;
  CpuData *d = &s->data.base;
  *kept = 0;
  for (int mb = 0; mb < s->g->num_microbatches; mb++) {
    int64_t gm = api_dp_micro(s, mb), k = 0; /* this rank's share of the global batch */
    if (cpu_data_kept(d, step, &gm, 1, b, T, tok + mb * n, tg + mb * n, &k) != 0)
      return api_fail(s, STEPC_ERR_RUNTIME, "the data source failed at step %lld%s%s", (long long)step,
                      d->err[0] ? ": " : "", d->err),
             -1;
    *kept += k;
  }
  return 0;
}

stepc_status api_loss_den(stepc_t *s, int64_t kept, const char *eval, double *den) {
  double all = (double)kept; /* exact: a step holds under 2^31 tokens a rank (image_check.c) */
  char what[48];
  if (eval)
    snprintf(what, sizeof what, "%s", eval);
  else
    snprintf(what, sizeof what, "step %lld", (long long)s->step + 1);
  if (s->comm && rt_comm_allreduce_sum(s->comm, &all, 1, RT_COMM_F64) != 0)
    return api_fail(s, STEPC_ERR_RUNTIME, "%s: data parallel: %s", what, rt_comm_error(s->comm));
  if (all <= 0) {
    if (!eval) s->refused = STEPC_ERR_ARGUMENT;
    return api_fail(s, STEPC_ERR_ARGUMENT,
                    "%s: every target of the global batch is masked (outside [0, %lld), e.g. -100): "
                    "its loss, the mean over no token, is undefined; %s is refused and nothing changed",
                    what, (long long)s->im.f.vocab_size, eval ? "the evaluation" : "the step");
  }
  *den = all / ((double)s->g->num_microbatches * (double)(s->world > 1 ? s->world : 1));
  return STEPC_OK;
}

stepc_status api_batch_check(stepc_t *s, const char *fn, const void *tokens, const void *targets,
                             size_t count) {
  if (!tokens || !targets)
    return api_fail(s, STEPC_ERR_ARGUMENT, "%s: tokens and targets must not be NULL", fn);
  const Tensor *t = &s->g->t[s->g->tokens];
  size_t want = (size_t)s->g->num_microbatches * (size_t)tensor_numel(t);
  if (count != want)
    return api_fail(s, STEPC_ERR_ARGUMENT,
                    "%s: %zu tokens given, the step takes %zu (%d micro-batches x %lld x %lld)", fn, count,
                    want, s->g->num_microbatches, (long long)t->shape[0], (long long)t->shape[1]);
  return STEPC_OK;
}

stepc_status api_tokens_check(stepc_t *s, const char *fn, const int32_t *tokens, size_t count) {
  int64_t v = s->im.f.vocab_size;
  for (size_t i = 0; i < count; i++)
    if (tokens[i] < 0 || tokens[i] >= v)
      return api_fail(s, STEPC_ERR_ARGUMENT, "%s: token %zu is %d, outside the vocabulary [0, %lld)", fn, i,
                      tokens[i], (long long)v);
  return STEPC_OK;
}

stepc_status stepc_bind_batch(stepc_t *s, const int32_t *tokens, const int32_t *targets, size_t count) {
  if (!s) return STEPC_ERR_ARGUMENT;
  stepc_status st = api_batch_check(s, "stepc_bind_batch", tokens, targets, count);
  if (st == STEPC_OK) st = api_tokens_check(s, "stepc_bind_batch", tokens, count);
  if (st != STEPC_OK) return st;
  if (s->data.count != count) {
    int32_t *a = realloc(s->data.tok, count * sizeof *a),
            *b = a ? realloc(s->data.tg, count * sizeof *b) : NULL;
    if (a) s->data.tok = a;
    if (!a || !b) return api_fail(s, STEPC_ERR_NOMEM, "out of memory");
    s->data.tg = b;
    s->data.count = count;
  }
  memcpy(s->data.tok, tokens, count * sizeof *tokens);
  memcpy(s->data.tg, targets, count * sizeof *targets);
  s->data.bound = true;
  s->data.dbound = false;
  return STEPC_OK;
}

stepc_status stepc_bind_batch_device(stepc_t *s, const void *tokens, const void *targets, size_t count) {
  if (!s) return STEPC_ERR_ARGUMENT;
  if (strcmp(s->be->name, "cuda") != 0)
    return api_fail(s, STEPC_ERR_UNSUPPORTED,
                    "stepc_bind_batch_device: the %s device takes host buffers (stepc_bind_batch)",
                    s->be->name);
  stepc_status st = api_batch_check(s, "stepc_bind_batch_device", tokens, targets, count);
  if (st != STEPC_OK) return st;
  s->data.dtok = (unsigned long long)(uintptr_t)tokens;
  s->data.dtg = (unsigned long long)(uintptr_t)targets;
  s->data.dbound = true;
  s->data.bound = false;
  return STEPC_OK;
}

/* ---- opening ---- */

static bool cuda_wanted(const stepc_options *o) { return o->device != STEPC_DEVICE_CPU; }

static stepc_status open_backend(stepc_t *s) {
  const ImgFacts *f = &s->im.f;
  char derr[512] = "", path[1600];
  const char *dp = NULL;
  if (f->data_text) {
    /* data.path is the user's file as the recipe named it: relative to the working directory */
    snprintf(path, sizeof path, "%s", f->data_path);
    dp = path;
  }
  if (cpu_data_open(&s->data.recipe, f->seed, f->vocab_size, f->seq_length, dp, derr, sizeof derr) != 0)
    return api_fail(s, STEPC_ERR_IO, "data: %s", derr);
  s->data_open = true;
  s->data.base = s->data.recipe;
  s->data.base.fill = api_fill;
  s->data.base.free = NULL;
  stepc_status st = STEPC_ERR_NO_DEVICE;
  if (cuda_wanted(&s->opt)) {
    st = api_cuda_open(s);
    if (st == STEPC_ERR_NO_DEVICE && s->opt.device == STEPC_DEVICE_AUTO)
      s->err[0] = 0; /* fall back */
    else if (st != STEPC_OK)
      return st;
  }
  if (st != STEPC_OK && s->opt.gemm_tuning)
    return api_fail(s, STEPC_ERR_ARGUMENT,
                    "gemm_tuning %d times cuBLASLt's algorithms on a GPU; this step runs on the cpu device%s "
                    "(set it to 0)",
                    s->opt.gemm_tuning, s->opt.device == STEPC_DEVICE_AUTO ? " (no GPU here)" : "");
  if (st != STEPC_OK && (st = api_cpu_open(s)) != STEPC_OK) return st;
  /* last: a rank joins the job only once its own step is ready to run */
  st = strcmp(s->be->name, "cuda") == 0 ? api_cuda_dp_join(s) : api_dp_join(s, NULL, NULL);
  return st == STEPC_OK ? api_fp8_param_casts(s) : st;
}

stepc_status api_fp8_param_casts(stepc_t *s) {
  bool any = false;
  for (int q = s->im.micro_points; q < s->im.npoints; q++) {
    const Op *op = &s->g->op[s->im.point_op[q]];
    if ((op->kind != OP_FP8_QUANT && op->kind != OP_FP8_QUANT_GROUPED) ||
        s->g->t[op->out[0]].role != ROLE_PARAM_FP8)
      continue;
    any = true;
    if (!api_dp_absent(s, op->in[0]) && s->be->point(s, q) != 0) return STEPC_ERR_RUNTIME;
  }
  /* ZeRO-1: a master another rank holds is cast there; its fp8 weight comes from that rank */
  if (!any || !s->owner || !s->comm) return STEPC_OK;
  int rc = strcmp(s->be->name, "cpu") == 0 ? api_cpu_zero_gather(s) : api_cuda_zero_gather(s);
  return rc != 0 ? STEPC_ERR_RUNTIME : STEPC_OK;
}

static stepc_t *handle_new(const stepc_options *opt, const char *dir) {
  stepc_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->opt = opt ? *opt : stepc_options_default();
  snprintf(s->dir, sizeof s->dir, "%s", dir ? dir : "");
  return s;
}

stepc_status stepc_open(const char *dir, const stepc_options *opt, stepc_t **out) {
  if (!out) return STEPC_ERR_ARGUMENT;
  stepc_t *s = *out = handle_new(opt, dir);
  if (!s) return STEPC_ERR_NOMEM;
  if (!dir) return api_fail(s, STEPC_ERR_ARGUMENT, "stepc_open: dir is NULL");
  if (strlen(dir) >= sizeof s->dir - 16)
    return api_fail(s, STEPC_ERR_ARGUMENT, "stepc_open: the path %s is too long", dir);
  if (s->opt.graph_mode < -1 || s->opt.graph_mode > 2)
    return api_fail(s, STEPC_ERR_ARGUMENT,
                    "stepc_open: graph_mode %d (-1 the recipe's, 0 eager, 1 full_iteration, 2 scoped)",
                    s->opt.graph_mode);
  if (s->opt.gemm_tuning < 0 || s->opt.gemm_tuning == 1 || s->opt.gemm_tuning > RT_GEMM_TUNE_MAX)
    return api_fail(
        s, STEPC_ERR_ARGUMENT,
        "stepc_open: gemm_tuning %d (0 cuBLASLt's first-ranked algorithm, 2 to %d: time that many)",
        s->opt.gemm_tuning, RT_GEMM_TUNE_MAX);
  char path[600], err[700];
  snprintf(path, sizeof path, "%s/%s", dir, STEPC_IMAGE_FILE);
  FILE *f = rt_open_regular(path, RT_FOLLOW, STEPC_IMAGE_MAX_BYTES, NULL, err, sizeof err);
  if (!f)
    return api_fail(s, STEPC_ERR_IO, "%s is not a stepc artifact: %s (stepc build SPEC -o DIR writes one)",
                    dir, err);
  fclose(f); /* image_read opens it again: a FIFO or a device put there is refused above, not read forever */
  if (image_read(path, &s->im, err, sizeof err) != 0) return api_fail(s, STEPC_ERR_IO, "%s", err);
  stepc_status st = api_dp_check(s);
  if (st != STEPC_OK) return st;
  s->data.world = s->dp;
  return open_backend(s);
}

void stepc_close(stepc_t *s) {
  if (!s) return;
  if (s->be) s->be->free(s);
  api_dp_free(s);
  if (s->data_open && s->data.recipe.free) s->data.recipe.free(&s->data.recipe);
  free(s->data.tok), free(s->data.tg), free(s->span);
  image_free(&s->im);
  free(s);
}

static const char *graph_mode_name(const stepc_t *s) {
  int m = s->opt.graph_mode < 0 ? s->im.f.graph_mode : s->opt.graph_mode;
  if (strcmp(s->be->name, "cpu") == 0) return "cpu";
  return m == IMG_MODE_FULL_ITERATION ? "full_iteration" : m == IMG_MODE_SCOPED ? "scoped" : "eager";
}

stepc_status stepc_get_info(const stepc_t *s, stepc_info *info) {
  if (!s || !info || !s->be) return STEPC_ERR_ARGUMENT;
  const Graph *g = s->g;
  const Tensor *t = &g->t[g->tokens];
  int64_t np = 0;
  for (int i = 0; i < g->nt; i++)
    if (g->t[i].role == ROLE_PARAM) np += tensor_numel(&g->t[i]);
  *info = (stepc_info){.device = s->be->name,
                       .gpu = s->gpu,
                       .graph_mode = graph_mode_name(s),
                       .micro_batch_size = t->shape[0],
                       .seq_length = t->shape[1],
                       .num_microbatches = g->num_microbatches,
                       .vocab_size = s->im.f.vocab_size,
                       .parameters = np,
                       .seed = s->im.f.seed,
                       .train_iters = s->im.f.train_iters,
                       .step = s->step,
                       .points = s->im.npoints,
                       .micro_points = s->im.micro_points,
                       .rank = s->rank,
                       .world_size = s->world,
                       .distributed_optimizer = s->im.f.dist_opt,
                       .comm = !s->comm                           ? "none"
                               : strcmp(s->be->name, "cuda") == 0 ? api_cuda_comm_name(s)
                                                                  : "host"};
  return STEPC_OK;
}

/* ---- stepping ---- */

stepc_status stepc_init_params(stepc_t *s, uint64_t seed) {
  if (!s || !s->be) return STEPC_ERR_ARGUMENT;
  if (s->be->init_params(s, seed) != 0) return STEPC_ERR_RUNTIME;
  s->step = 0;
  return api_fp8_param_casts(s);
}

static stepc_status step_with(stepc_t *s, stepc_step_stats *st, double *ms) {
  if (!s || !s->be) return STEPC_ERR_ARGUMENT;
  stepc_step_stats tmp;
  if (!st) st = &tmp;
  memset(st, 0, sizeof *st);
  s->err[0] = 0;
  s->refused = STEPC_OK;
  int rc = ms ? s->be->step_profiled(s, s->step + 1, st, ms) : s->be->step(s, s->step + 1, st);
  s->data.bound = s->data.dbound = false; /* a binding holds for one step, whatever happened */
  if (rc != 0) {
    if (!s->err[0]) snprintf(s->err, sizeof s->err, "step %lld failed", (long long)s->step + 1);
    return s->refused != STEPC_OK ? s->refused : STEPC_ERR_RUNTIME;
  }
  s->step++;
  st->step = s->step;
  s->last = *st;
  if (!(st->loss == st->loss) || st->loss > 1e300 || st->loss < -1e300)
    return api_fail(s, STEPC_ERR_RUNTIME, "the loss is not finite at step %lld", (long long)s->step);
  return STEPC_OK;
}

stepc_status stepc_step(stepc_t *s, stepc_step_stats *st) { return step_with(s, st, NULL); }

stepc_status stepc_profile_step(stepc_t *s, stepc_step_stats *st, double *ms, int64_t n) {
  if (!s || !s->be) return STEPC_ERR_ARGUMENT;
  if (!ms || n < s->im.npoints)
    return api_fail(s, STEPC_ERR_ARGUMENT,
                    "stepc_profile_step: ms must hold %d points (stepc_info.points), not %lld", s->im.npoints,
                    (long long)n);
  for (int64_t q = 0; q < n; q++)
    ms[q] = 0;
  s->nspan = 0;
  s->profiling = true;
  stepc_status r = step_with(s, st, ms);
  s->profiling = false;
  return r;
}

int api_span_add(stepc_t *s, int kind, int stream, int id, int micro, double start_ms, double end_ms) {
  if (s->nspan == s->capspan) {
    int64_t cap = s->capspan ? 2 * s->capspan : 1024;
    stepc_span *p = realloc(s->span, (size_t)cap * sizeof *p);
    if (!p) return api_fail(s, STEPC_ERR_NOMEM, "out of memory (the profiled step's timeline)"), -1;
    s->span = p, s->capspan = cap;
  }
  s->span[s->nspan++] = (stepc_span){kind, stream, id, micro, start_ms, end_ms};
  return 0;
}

stepc_status stepc_profile_timeline(stepc_t *s, stepc_span *spans, int64_t cap, int64_t *n) {
  if (!s || !n || cap < 0 || (cap > 0 && !spans)) return STEPC_ERR_ARGUMENT;
  *n = s->nspan;
  for (int64_t i = 0; i < s->nspan && i < cap; i++)
    spans[i] = s->span[i];
  return STEPC_OK;
}

stepc_status stepc_get_measure(stepc_t *s, stepc_measure *m) {
  if (!s || !m || !s->be) return STEPC_ERR_ARGUMENT;
  memset(m, 0, sizeof *m);
  s->be->measure(s, m);
  m->last_step_ms = s->last.ms;
  const Graph *ng = s->im.g; /* nominal dtypes */
  for (int t = 0; t < ng->nt; t++)
    if ((ng->t[t].role == ROLE_MASTER || graph_fp8_master(ng, t) ||
         (ng->t[t].role == ROLE_OPTIM && ng->t[t].of >= 0)) &&
        !api_dp_not_mine(s, t))
      m->optimizer_state_bytes += ng->t[t].bytes;
  return STEPC_OK;
}
