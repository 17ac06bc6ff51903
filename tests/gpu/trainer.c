/* trainer.c — the GPU tests' in-process trainer (trainer.h). */
#include "trainer.h"
#include "plan/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/codegen/cubin/cubin.h"
#include "lower/lower.h"
#include "ops/ops.h"
#include "passes/ew_fuse.h"
#include "plan/plan.h"

struct RtTrainer {
  RtDevice d;
  RtGenKernels gen; /* the plan's generated kernels (d.gen) */
  PlanProgram prog; /* the program order: point -> op (the launch program's points) */
  ImgScope *scope;
  int nscope;
  Plan p;      /* the planned step: graph (offsets applied), replays, schedule, scopes, memory plan */
  RtPlayer *x; /* plays the plan's launch program */
  CpuData *data;
  uint64_t seed;
  int64_t step;
  RtMode mode;
  int warmup;
  RtGraph graph;
  RtScoped *scoped; /* scoped mode */
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
RtPlayer *rt_trainer_player(RtTrainer *tr) { return tr->x; }

int rt_trainer_op_runs(const RtTrainer *tr, int o) {
  for (int q = 0; q < tr->prog.p.npoints; q++)
    if (tr->prog.point_op[q] == o) return tr->p.lp.point[q].rec.count > 0;
  return 0;
}

int rt_trainer_enqueue_micro(RtTrainer *tr, int mb) {
  if (rt_player_micro_begin(tr->x, mb)) return RT_ERROR;
  for (int q = 0; q < tr->prog.p.micro_points; q++)
    if (rt_player_point(tr->x, q)) return RT_ERROR;
  return rt_player_micro_end(tr->x, mb);
}

/* The whole step: every micro-batch, then the tail's points. */
static int enqueue_step(RtTrainer *tr) {
  for (int mb = 0; mb < tr->p.g->num_microbatches; mb++)
    if (rt_trainer_enqueue_micro(tr, mb)) return RT_ERROR;
  for (int q = tr->prog.p.micro_points; q < tr->prog.p.npoints; q++)
    if (rt_player_point(tr->x, q)) return RT_ERROR;
  return RT_OK;
}

int rt_trainer_read_losses(RtTrainer *tr, float *losses) { return rt_player_read_losses(tr->x, losses); }

int rt_trainer_read(RtTrainer *tr, int tensor, double *out) {
  const Tensor *t = &tr->p.g->t[tensor];
  int64_t n = tensor_numel(t);
  void *h = malloc((size_t)t->bytes ? (size_t)t->bytes : 1);
  if (!h) return rt_fail(&tr->d, "out of memory");
  if (rt_copy_d2h(&tr->d, h, rt_player_tensor(tr->x, tensor), (size_t)t->bytes)) {
    free(h);
    return RT_ERROR;
  }
  for (int64_t i = 0; i < n; i++) {
    switch (t->dtype) {
    case DT_F32: out[i] = ((float *)h)[i]; break;
    case DT_BF16: {
      uint32_t u = (uint32_t)((uint16_t *)h)[i] << 16;
      float f;
      memcpy(&f, &u, 4);
      out[i] = f;
      break;
    }
    case DT_I32: out[i] = ((int32_t *)h)[i]; break;
    default: out[i] = ((uint8_t *)h)[i]; break;
    }
  }
  free(h);
  return RT_OK;
}
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
int64_t rt_trainer_planned_peak(const RtTrainer *tr) { return plan_device_peak(&tr->p); }
int rt_trainer_replay_ops(const RtTrainer *tr) { return tr->p.rr.nreplay_total; }

void rt_trainer_free(RtTrainer *tr) {
  if (!tr) return;
  if (tr->d.lib) {
    rt_graph_destroy(&tr->d, &tr->graph);
    rt_scoped_free(tr->scoped);
    rt_timer_free(&tr->d, &tr->timer);
    rt_player_free(tr->x);
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
  /* the step's generated kernels (d->gen) after the hand-written ones */
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

RtTrainer *rt_trainer_new(const Spec *s, CpuData *data, const char *cache_dir, int mode_override,
                          RtTrainStatus *status, char *err, size_t nerr) {
  *status = RT_TRAIN_ERROR;
  RtTrainer *tr = calloc(1, sizeof *tr);
  if (!tr) {
    snprintf(err, nerr, "out of memory");
    return NULL;
  }
  const char *impl = s->model.cuda_graph_impl;
  if (mode_override >= 0)
    tr->mode = (RtMode)mode_override;
  else if (strcmp(impl, "full_iteration") == 0)
    tr->mode = RT_MODE_FULL_ITERATION;
  else if (strcmp(impl, "local") == 0 || strcmp(impl, "transformer_engine") == 0)
    tr->mode = RT_MODE_SCOPED;
  else
    tr->mode = RT_MODE_EAGER;
  tr->warmup = (int)s->model.cuda_graph_warmup_steps;
  tr->data = data;
  tr->seed = (uint64_t)s->train.seed;
  /* The planned step, as `stepc build` writes it (plan.h): one rank's step (Spec.per_rank, as
   * artifact_build plans it), so that an fp8 recipe runs its fp8 linears here too (without it the
   * lowering keeps the bf16 linears `stepc plan` models); the executor runs the graph's order, which
   * is the schedule's. */
  Spec *rs = malloc(sizeof *rs);
  if (!rs) {
    snprintf(err, nerr, "out of memory");
    rt_trainer_free(tr);
    return NULL;
  }
  *rs = *s;
  rs->per_rank = true;
  int lrc = plan_build(rs, 0, &tr->p, NULL, err, nerr);
  free(rs);
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
  if (!tr->p.lp_ok) { /* the plan's launch program (plan.h): what stepc build stores and the runtime plays */
    *status = RT_TRAIN_UNSUPPORTED;
    snprintf(err, nerr, "%s", tr->p.lp_why);
    rt_trainer_free(tr);
    return NULL;
  }
  if (plan_program_build(tr->p.g, &tr->p.sc, NULL, &tr->prog) || load_kernels(&tr->d, &tr->p.ew, cache_dir) ||
      rt_blas_open(&tr->d, RT_BLAS_WORKSPACE_BYTES) || rt_timer_new(&tr->d, &tr->timer) ||
      !(tr->x = rt_player_new(&tr->d, &tr->p.lp)) || rt_player_init(tr->x, tr->seed)) {
    snprintf(err, nerr, "%s", tr->d.err[0] ? tr->d.err : "out of memory");
    rt_trainer_free(tr);
    return NULL;
  }
  if (tr->mode == RT_MODE_SCOPED &&
      (!(tr->scope = calloc((size_t)tr->p.sr.n + 1, sizeof *tr->scope)) ||
       (tr->nscope = plan_scope_points(&tr->p.sc, &tr->p.sr, tr->scope)) < 0 ||
       !(tr->scoped = rt_scoped_new(&tr->d, tr->x, tr->p.g, tr->prog.p.micro_points, tr->prog.p.npoints,
                                    tr->scope, tr->nscope, err, nerr)))) {
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
  int64_t b = t->shape[0], T = t->shape[1], kept = 0;
  for (int mb = 0; mb < g->num_microbatches; mb++) {
    if (tr->data->fill(tr->data, step, mb, b, T, tr->tok + mb * b * T, tr->tg + mb * b * T) != 0) {
      snprintf(err, nerr, "the data source failed at step %lld", (long long)step);
      return -1;
    }
    kept += cpu_data_count_kept(tr->tg + mb * b * T, b * T, tr->data->vocab);
    tr->seeds[mb] = rt_step_seed(tr->seed, step, mb);
  }
  if (!kept) {
    snprintf(err, nerr, "step %lld: every target is masked", (long long)step);
    return -1;
  }
  /* one rank: the loss denominator is the mean kept tokens per micro-batch (ir/ops/loss.c) */
  if (rt_player_stage(tr->x, tr->tok, tr->tg, tr->seeds, (double)kept / (double)g->num_microbatches)) {
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
    int rc = enqueue_step(tr);
    RtGraph gr;
    int rc2 = rt_capture_end(d, &gr);
    if (rc || rc2) return fail(tr, err, nerr);
    tr->graph = gr;
    tr->captured = true;
  }
  if (rt_timer_start(d, &tr->timer)) return fail(tr, err, nerr);
  int rc = !replay      ? enqueue_step(tr)
           : tr->scoped ? rt_scoped_enqueue_step(tr->scoped)
                        : rt_graph_launch(d, &tr->graph);
  if (rc) return fail(tr, err, nerr);
  if (rt_timer_stop(d, &tr->timer, &st->ms)) return fail(tr, err, nerr);
  if (rt_player_read_losses(tr->x, tr->losses)) return fail(tr, err, nerr);
  double lr = 0, gn = 0, loss = 0;
  if (rt_trainer_read(tr, tr->p.g->lr, &lr) || rt_trainer_read(tr, tr->p.g->grad_norm, &gn))
    return fail(tr, err, nerr);
  for (int mb = 0; mb < tr->p.g->num_microbatches; mb++)
    loss += tr->losses[mb];
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
