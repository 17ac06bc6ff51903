/* trainer.c — the GPU tests' in-process trainer (trainer.h). */
#include "trainer.h"
#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ew_fuse.h"
#include "lower.h"
#include "compiler/nvrtc.h"
#include "ops/ops.h"
#include "plan.h"

#define RT_BLAS_WORKSPACE (32u << 20) /* cuBLASLt's recommendation for Hopper */

struct RtTrainer {
  RtDevice d;
  RtGenKernels gen;   /* the plan's generated kernels (d.gen) */
  PlanProgram prog;   /* the program the scoped graphs cut */
  ImgScope *scope;
  int nscope;
  Plan p;             /* the planned step: graph (offsets applied), replays, schedule, scopes, memory plan */
  RtExec *x;
  CpuData *data;
  uint64_t seed;
  int64_t step;
  RtMode mode;
  int warmup;
  RtGraph graph;
  RtScoped *scoped;    /* scoped mode */
  bool captured;
  RtTimer timer;
  int32_t *tok, *tg; /* (num_microbatches, B*T) */
  uint64_t *seeds;
  float *losses;
};

uint64_t rt_step_seed(uint64_t seed, int64_t step, int64_t micro) {
  return ops_mix64(ops_mix64(ops_mix64(seed) ^ (uint64_t)step) ^ ((uint64_t)micro << 20));
}

RtDevice *rt_trainer_device(RtTrainer *tr) { return &tr->d; }
RtExec *rt_trainer_exec(RtTrainer *tr) { return tr->x; }
const Graph *rt_trainer_graph(const RtTrainer *tr) { return tr->p.g; }
RtMode rt_trainer_mode(const RtTrainer *tr) { return tr->mode; }
int rt_trainer_graph_nodes(const RtTrainer *tr) {
  if (!tr->captured) return 0;
  if (tr->scoped) {
    RtScopedStats st;
    rt_scoped_stats(tr->scoped, &st);
    return (int)st.nodes;
  }
  return (int)tr->graph.nodes;
}
int rt_trainer_graph_count(const RtTrainer *tr) {
  if (!tr->captured) return 0;
  if (!tr->scoped) return 1;
  RtScopedStats st;
  rt_scoped_stats(tr->scoped, &st);
  return st.graphs;
}
RtScoped *rt_trainer_scoped(RtTrainer *tr) { return tr->scoped; }

int rt_trainer_scoped_stats(const RtTrainer *tr, RtScopedStats *st) {
  if (!tr->scoped) return -1;
  rt_scoped_stats(tr->scoped, st);
  return 0;
}
int64_t rt_trainer_planned_peak(const RtTrainer *tr) { return tr->p.mp.peak; }
int rt_trainer_replay_ops(const RtTrainer *tr) { return tr->p.rr.nreplay_total; }

void rt_trainer_free(RtTrainer *tr) {
  if (!tr) return;
  if (tr->d.lib) {
    rt_graph_destroy(&tr->d, &tr->graph);
    rt_scoped_free(tr->scoped);
    rt_timer_free(&tr->d, &tr->timer);
    rt_exec_free(tr->x);
    rt_close(&tr->d);
  }
  plan_free(&tr->p);
  plan_program_free(&tr->prog);
  free(tr->scope);
  free(tr->tok), free(tr->tg), free(tr->seeds), free(tr->losses);
  free(tr);
}

/* NVRTC -> cubin for this device's arch, then cuModuleLoadData. */
static int load_kernels(RtDevice *d, const EwKernels *ew, const char *cache_dir) {
  char err[256];
  /* the executor's generated kernels (d->gen, set by rt_exec_new) after the hand-written ones */
  char *src = ew_kernels_cu(ew, err, sizeof err);
  if (!src) return rt_fail(d, "assembling kernels.cu: %s", err);
  char arch[32];
  snprintf(arch, sizeof arch, "sm_%d%d", d->cc_major, d->cc_minor);
  CubinOptions opt = {.arch = arch, .cache_dir = cache_dir};
  Cubin c;
  char *msg = NULL;
  CubinStatus st = cubin_compile(src, &opt, &c, &msg);
  free(src);
  if (st != CUBIN_OK && st != CUBIN_ERR_IO) {
    rt_fail(d, "compiling kernels.cu for %s: %s", arch, msg ? msg : "NVRTC failed");
    free(msg);
    return RT_ERROR;
  }
  free(msg); /* CUBIN_ERR_IO: the cache was not written; the cubin is fine */
  int rc = rt_module_load(d, c.data);
  cubin_free(&c);
  return rc;
}

/* `stepc run` does not run `stepc check`'s graph checks, so the scoped mode runs them itself:
 * a checkpoint region that crosses a scope, or an RNG-drawing replay inside one (STEPC-40..42),
 * is refused with the first error's message. */
static int check_scopes(RtTrainer *tr, const Spec *s, char *err, size_t nerr) {
  DiagList d;
  diag_init(&d);
  int n = scope_check(tr->p.g, s, &tr->p.sc, &tr->p.rr, &tr->p.sr, &d);
  if (n > 0)
    for (int i = 0; i < d.n; i++)
      if (d.items[i].severity == DIAG_ERROR) {
        snprintf(err, nerr, "[%s] %s", d.items[i].rule, d.items[i].message);
        break;
      }
  diag_free(&d);
  return n > 0 ? -1 : 0;
}

RtTrainer *rt_trainer_new(const Spec *s, CpuData *data, const char *cache_dir, int mode_override, RtTrainStatus *status,
                          char *err, size_t nerr) {
  *status = RT_TRAIN_ERROR;
  RtTrainer *tr = calloc(1, sizeof *tr);
  if (!tr) {
    snprintf(err, nerr, "out of memory");
    return NULL;
  }
  const char *impl = s->model.cuda_graph_impl;
  if (mode_override >= 0) tr->mode = (RtMode)mode_override;
  else if (strcmp(impl, "full_iteration") == 0) tr->mode = RT_MODE_FULL_ITERATION;
  else if (strcmp(impl, "local") == 0 || strcmp(impl, "transformer_engine") == 0) tr->mode = RT_MODE_SCOPED;
  else tr->mode = RT_MODE_EAGER;
  tr->warmup = (int)s->model.cuda_graph_warmup_steps;
  tr->data = data;
  tr->seed = (uint64_t)s->train.seed;
  /* The planned step, as `stepc plan` reports it and `stepc build` writes it (plan.h); the
   * executor runs the graph's order, which is the schedule's. */
  int lrc = plan_build(s, 0, &tr->p, NULL, err, nerr);
  if (lrc != 0) {
    *status = lrc == LOWER_UNSUPPORTED ? RT_TRAIN_UNSUPPORTED : RT_TRAIN_ERROR;
    rt_trainer_free(tr);
    return NULL;
  }
  if (tr->mode == RT_MODE_SCOPED && check_scopes(tr, s, err, nerr)) {
    rt_trainer_free(tr);
    return NULL;
  }
  int rc = rt_open(&tr->d);
  if (rc != RT_OK) {
    *status = rc == RT_NO_DEVICE ? RT_TRAIN_NO_DEVICE : RT_TRAIN_ERROR;
    snprintf(err, nerr, "%s", tr->d.err);
    rt_trainer_free(tr);
    return NULL;
  }
  ew_kernels_rt(&tr->p.ew, &tr->gen);
  tr->d.gen = &tr->gen;
  int unsupported = 0;
  /* the executor first: its analysis decides the generated kernels the module must hold */
  if (!(tr->x = rt_exec_new(&tr->d, tr->p.g, &unsupported)) || load_kernels(&tr->d, &tr->p.ew, cache_dir) ||
      rt_blas_open(&tr->d, RT_BLAS_WORKSPACE) || rt_timer_new(&tr->d, &tr->timer) ||
      rt_exec_init_params(tr->x, tr->seed)) {
    *status = unsupported ? RT_TRAIN_UNSUPPORTED : RT_TRAIN_ERROR;
    snprintf(err, nerr, "%s", tr->d.err);
    rt_trainer_free(tr);
    return NULL;
  }
  if (tr->mode == RT_MODE_SCOPED &&
      (plan_program_build(tr->p.g, &tr->p.sc, NULL, &tr->prog) || !(tr->scope = calloc((size_t)tr->p.sr.n + 1, sizeof *tr->scope)) ||
       (tr->nscope = plan_scope_points(&tr->p.sc, &tr->p.sr, tr->scope)) < 0 ||
       !(tr->scoped = rt_scoped_new(&tr->d, tr->x, tr->p.g, tr->prog.point_op, tr->prog.p.micro_points, tr->scope, tr->nscope, err,
                                    nerr)))) {
    *status = RT_TRAIN_UNSUPPORTED;
    rt_trainer_free(tr);
    return NULL;
  }
  int nmb = tr->p.g->num_microbatches, n = (int)tensor_numel(&tr->p.g->t[tr->p.g->tokens]);
  tr->tok = malloc((size_t)nmb * (size_t)n * sizeof *tr->tok);
  tr->tg = malloc((size_t)nmb * (size_t)n * sizeof *tr->tg);
  tr->seeds = malloc((size_t)nmb * sizeof *tr->seeds);
  tr->losses = malloc((size_t)nmb * sizeof *tr->losses);
  if (!tr->tok || !tr->tg || !tr->seeds || !tr->losses) {
    snprintf(err, nerr, "out of memory");
    rt_trainer_free(tr);
    return NULL;
  }
  *status = RT_TRAIN_OK;
  return tr;
}

int rt_trainer_stage(RtTrainer *tr, int64_t step, char *err, size_t nerr) {
  const Graph *g = tr->p.g;
  const Tensor *t = &g->t[g->tokens];
  int64_t b = t->shape[0], T = t->shape[1];
  for (int mb = 0; mb < g->num_microbatches; mb++) {
    if (tr->data->fill(tr->data, step, mb, b, T, tr->tok + mb * b * T, tr->tg + mb * b * T) != 0) {
      snprintf(err, nerr, "the data source failed at step %lld", (long long)step);
      return -1;
    }
    tr->seeds[mb] = rt_step_seed(tr->seed, step, mb);
  }
  if (rt_exec_stage(tr->x, tr->tok, tr->tg, tr->seeds)) {
    snprintf(err, nerr, "%s", tr->d.err);
    return -1;
  }
  return 0;
}

static int fail(RtTrainer *tr, char *err, size_t nerr) {
  snprintf(err, nerr, "step %lld: %s", (long long)tr->step, tr->d.err);
  return -1;
}

int rt_trainer_step(RtTrainer *tr, RtStepStats *st, char *err, size_t nerr) {
  RtDevice *d = &tr->d;
  tr->step++;
  if (rt_trainer_stage(tr, tr->step, err, nerr)) return -1;
  bool replay = tr->mode != RT_MODE_EAGER && tr->step > tr->warmup;
  if (replay && tr->scoped && !tr->captured) {
    if (rt_scoped_capture(tr->scoped)) return fail(tr, err, nerr);
    tr->captured = true;
  }
  if (replay && !tr->captured) {
    /* Capture once; the step counter, LR and seeds live in device memory, so every replay is
     * the next step. */
    if (rt_capture_begin(d)) return fail(tr, err, nerr);
    int rc = rt_exec_enqueue_step(tr->x);
    RtGraph gr;
    int rc2 = rt_capture_end(d, &gr);
    if (rc || rc2) return fail(tr, err, nerr);
    tr->graph = gr;
    tr->captured = true;
  }
  if (rt_timer_start(d, &tr->timer)) return fail(tr, err, nerr);
  int rc = !replay ? rt_exec_enqueue_step(tr->x) : tr->scoped ? rt_scoped_enqueue_step(tr->scoped) : rt_graph_launch(d, &tr->graph);
  if (rc) return fail(tr, err, nerr);
  if (rt_timer_stop(d, &tr->timer, &st->ms)) return fail(tr, err, nerr);
  if (rt_exec_read_losses(tr->x, tr->losses)) return fail(tr, err, nerr);
  double lr = 0, gn = 0, loss = 0;
  if (rt_exec_read(tr->x, tr->p.g->lr, &lr) || rt_exec_read(tr->x, tr->p.g->grad_norm, &gn)) return fail(tr, err, nerr);
  for (int mb = 0; mb < tr->p.g->num_microbatches; mb++) loss += tr->losses[mb];
  st->step = tr->step;
  st->loss = loss / (double)tr->p.g->num_microbatches;
  st->lr = lr;
  st->grad_norm = gn;
  st->replayed = replay;
  if (!isfinite(st->loss)) {
    snprintf(err, nerr, "the loss is not finite at step %lld", (long long)tr->step);
    return -1;
  }
  return 0;
}
