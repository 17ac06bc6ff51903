/* train.c — the training loop and the gradient check on the CPU reference executor.
 *
 * Training runs the planned step, as the GPU will: the recipe's recompute regions and replays
 * (recompute.c), one schedule (schedule.c) and the memory plan's arena offsets (memplan.c), with
 * every freed arena range poisoned between its last use and its reuse (runtime/cpu/program.c). One step: for
 * each micro-batch the micro program (forward, backward with replays; main gradients accumulate),
 * then the tail (reduction, clipping, AdamW, zeroing). The RNG key is (train.seed, step, micro). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cpu_train.h"
#include "lower/lower.h"
#include "ops/ops.h"
#include "passes/autodiff.h"
#include "plan/plan.h"
#include "runtime/cpu/program.h"

const char *spec_data_path(const Spec *s) {
  bool use_path =
      s->present[SPEC_F_data_path] && s->data.path[0] && !(s->present[SPEC_F_data_mock] && s->data.mock);
  return use_path ? s->data.path : NULL;
}

int cpu_data_open_spec(const Spec *s, CpuData *d, char *err, size_t nerr) {
  return cpu_data_open(d, (uint64_t)s->train.seed, s->model.vocab_size, s->model.seq_length,
                       spec_data_path(s), err, nerr);
}

struct CpuTrainer {
  Plan p; /* the planned step at 4 bytes per float (plan_build, as `stepc build` plans the CPU image) */
  const Graph *g; /* p.g */
  PlanProgram prog;
  PlanExec *x;
  CpuData *data;
  uint64_t seed;
  int64_t step;
};

CpuTrainer *cpu_trainer_new(const Spec *s, CpuData *data, int nthreads, int *lower_rc, char *err,
                            size_t nerr) {
  CpuTrainer *tr = calloc(1, sizeof *tr);
  if (!tr) return NULL;
  *lower_rc = plan_build(s, 4, &tr->p, NULL, err, nerr);
  if (*lower_rc != PLAN_OK) {
    free(tr);
    return NULL;
  }
  tr->g = tr->p.g;
  if (tr->p.mp.region &&
      tr->p.sc.dp > 1) { /* the region's ranks overlap: only stepc_open's per-rank view runs them */
    snprintf(
        err, nerr,
        "the distributed optimizer shards the optimizer state over %d data-parallel ranks: run the step's "
        "ranks (stepc build, then stepc run DIR --nproc %d)",
        tr->p.sc.dp, tr->p.sc.dp);
    cpu_trainer_free(tr);
    return NULL;
  }
  if (plan_program_build(tr->p.g, &tr->p.sc, &tr->p.mp, &tr->prog) != 0) {
    snprintf(err, nerr, "out of memory");
    cpu_trainer_free(tr);
    return NULL;
  }
  tr->x = plan_exec_new(tr->g, &tr->prog.p, nthreads, err, nerr);
  if (!tr->x) {
    cpu_trainer_free(tr);
    return NULL;
  }
  tr->data = data;
  tr->seed = (uint64_t)s->train.seed;
  cpu_exec_init_params(plan_exec_cpu(tr->x), tr->seed);
  return tr;
}

int cpu_trainer_step(CpuTrainer *tr, CpuStepStats *st, char *err, size_t nerr) {
  const Graph *g = tr->g;
  tr->step++;
  double loss = 0;
  /* the loss's denominator (ir/ops/loss.c): the step's kept targets over its micro-batches */
  const Tensor *t = &g->t[g->tokens];
  int64_t n = tensor_numel(t), kept = 0, k = 0;
  int32_t *tok = malloc((size_t)n * sizeof *tok), *tg = malloc((size_t)n * sizeof *tg);
  int rc = tok && tg ? 0 : -1;
  if (rc) snprintf(err, nerr, "out of memory");
  for (int64_t mb = 0; mb < g->num_microbatches && !rc; mb++, kept += k)
    if ((rc = cpu_data_kept(tr->data, tr->step, &mb, 1, t->shape[0], t->shape[1], tok, tg, &k)))
      snprintf(err, nerr, "the data source failed%s%s", tr->data->err[0] ? ": " : "", tr->data->err);
  free(tok), free(tg);
  if (rc) return -1;
  if (kept == 0) {
    snprintf(err, nerr, "step %lld: every target is masked: the loss, a mean over no token, is undefined",
             (long long)tr->step);
    return -1;
  }
  cpu_exec_set_loss_den(plan_exec_cpu(tr->x), (double)kept / (double)g->num_microbatches);
  for (int64_t mb = 0; mb < g->num_microbatches; mb++) {
    double l = 0;
    if (plan_exec_micro(tr->x, tr->data, tr->seed, tr->step, mb, &l, err, nerr) != 0) return -1;
    loss += l;
  }
  plan_exec_tail(tr->x);
  CpuExec *e = plan_exec_cpu(tr->x);
  st->step = tr->step;
  st->loss = loss / (double)g->num_microbatches;
  st->lr = cpu_exec_get(e, g->lr, 0);
  st->grad_norm = cpu_exec_get(e, g->grad_norm, 0);
  if (!isfinite(st->loss)) {
    snprintf(err, nerr, "the loss is not finite at step %lld", (long long)tr->step);
    return -1;
  }
  return 0;
}

const Graph *cpu_trainer_graph(const CpuTrainer *tr) { return tr->g; }

void cpu_trainer_free(CpuTrainer *tr) {
  if (!tr) return;
  plan_exec_free(tr->x);
  plan_program_free(&tr->prog);
  plan_free(&tr->p);
  free(tr);
}

/* ---- gradient check ---- */

/* Relative error of fd against an, fd carrying up to `floor` of round-off: below it both count as
 * zero, and the part of their difference within it is not counted (a gradient element of 5e-5
 * beside a round-off of 1e-9 would otherwise fail a 1e-5 tolerance on noise alone). */
static double rel_err(double fd, double an, double floor) {
  double den = fabs(fd) > fabs(an) ? fabs(fd) : fabs(an);
  return den < floor ? 0.0 : fmax(0.0, fabs(fd - an) - floor) / den; /* both zero (to round-off): agree */
}

/* Central difference of the objective along u (u NULL: along element j alone), step h; *noise gets
 * the round-off the difference carries: 64 ulps of the objective over the step (a derivative
 * smaller than that cannot be measured, e.g. a router weight's ~1e-18 against fd's ~1e-10 noise on
 * a loss of 20 at h = 1e-5). */
static double central(CpuExec *e, int p, int64_t numel, const double *p0, const double *u, int64_t j,
                      double h, double (*objective)(CpuExec *e, void *ctx), void *ctx, double *noise) {
  double f[2];
  for (int s = 0; s < 2; s++) {
    double step = s ? -h : h;
    if (u)
      for (int64_t i = 0; i < numel; i++)
        cpu_exec_set(e, p, i, p0[i] + step * u[i]);
    else
      cpu_exec_set(e, p, j, p0[j] + step);
    f[s] = objective(e, ctx);
  }
  if (u)
    for (int64_t i = 0; i < numel; i++)
      cpu_exec_set(e, p, i, p0[i]);
  else
    cpu_exec_set(e, p, j, p0[j]);
  double fmag = fabs(f[0]) > fabs(f[1]) ? fabs(f[0]) : fabs(f[1]);
  *noise = fmax(1e-12, 64 * DBL_EPSILON * fmag / h);
  return (f[0] - f[1]) / (2 * h);
}

/* rel_err of the central difference against `an`, at step h and, when they disagree, at h/10 and
 * h/100, keeping the best; *fd gets the difference that gave it. The loss is only piecewise
 * smooth: MoE routing (top-k, capacity dropping) jumps where two router scores tie, and a step
 * that crosses such a point measures the jump, not the derivative; a smaller step stops crossing
 * it. A wrong gradient rule disagrees at every step, so keeping the best cannot hide one. */
static double check_fd(CpuExec *e, int p, int64_t numel, const double *p0, const double *u, int64_t j,
                       double h, double an, double (*objective)(CpuExec *e, void *ctx), void *ctx,
                       double *fd) {
  double noise;
  *fd = central(e, p, numel, p0, u, j, h, objective, ctx, &noise);
  double re = rel_err(*fd, an, noise);
  for (double hh = h / 10; re > GRADCHECK_TOL / 10 && hh >= h / 100 * 0.999; hh /= 10) {
    double f2 = central(e, p, numel, p0, u, j, hh, objective, ctx, &noise), r2 = rel_err(f2, an, noise);
    if (r2 < re) re = r2, *fd = f2;
  }
  return re;
}

double cpu_gradcheck_exec(CpuExec *e, const Graph *g, double (*objective)(CpuExec *e, void *ctx), void *ctx,
                          double an_scale, const GradcheckOptions *opt, GradcheckRow **rows, int *nrows) {
  int n = 0;
  for (int i = 0; i < g->nt; i++)
    n += g->t[i].role == ROLE_GRAD;
  GradcheckRow *r = calloc((size_t)(n ? n : 1), sizeof *r);
  if (!r) return -1;
  double worst = 0, h = opt->h > 0 ? opt->h : 1e-5;
  int k = 0;
  for (int gi = 0; gi < g->nt; gi++) {
    if (g->t[gi].role != ROLE_GRAD) continue;
    int p = g->t[gi].of;
    int64_t numel = tensor_numel(&g->t[p]);
    GradcheckRow *row = &r[k++];
    snprintf(row->name, sizeof row->name, "%s", g->t[p].name);
    row->numel = numel;
    double *an = malloc((size_t)numel * sizeof *an), *p0 = malloc((size_t)numel * sizeof *p0),
           *u = malloc((size_t)numel * sizeof *u);
    if (!an || !p0 || !u) {
      free(an), free(p0), free(u), free(r);
      return -1;
    }
    for (int64_t j = 0; j < numel; j++) {
      an[j] = cpu_exec_get(e, gi, j) * an_scale;
      p0[j] = cpu_exec_get(e, p, j);
      /* a random direction: checks the whole tensor's gradient at once */
      u[j] =
          (double)(ops_mix64((uint64_t)gi * 1000003u + (uint64_t)j) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
    }
    /* directional derivative */
    double dir = 0, fd;
    for (int64_t j = 0; j < numel; j++)
      dir += an[j] * u[j];
    row->worst_rel = check_fd(e, p, numel, p0, u, 0, h, dir, objective, ctx, &fd), row->fd = fd,
    row->an = dir;
    /* single elements, largest |gradient| first */
    for (int c = 0; c < opt->elements && c < numel; c++) {
      int64_t best = -1;
      for (int64_t j = 0; j < numel; j++)
        if (!isnan(an[j]) && (best < 0 || fabs(an[j]) > fabs(an[best]))) best = j;
      if (best < 0) break;
      double re = check_fd(e, p, numel, p0, NULL, best, h, an[best], objective, ctx, &fd);
      if (re > row->worst_rel) row->worst_rel = re, row->fd = fd, row->an = an[best];
      an[best] = NAN; /* next-largest next time */
    }
    if (row->worst_rel > worst || isnan(row->worst_rel))
      worst = isnan(row->worst_rel) ? INFINITY : row->worst_rel;
    free(an), free(p0), free(u);
  }
  *rows = r;
  *nrows = n;
  return worst;
}

static double loss_objective(CpuExec *e, void *ctx) {
  const Graph *g = ctx;
  cpu_exec_run(e, IR_PHASE_BIT(IR_PHASE_FORWARD));
  return cpu_exec_get(e, g->loss, 0);
}

double cpu_gradcheck_spec(const Spec *s, CpuData *data, const GradcheckOptions *opt, int nthreads,
                          GradcheckRow **rows, int *nrows, int *lower_rc, char *err, size_t nerr) {
  Graph *g = NULL;
  *lower_rc = lower_forward(s, &g, err, nerr);
  if (*lower_rc != LOWER_OK) return -1;
  if (autodiff_build_loss(g) < 0) {
    snprintf(err, nerr, "autodiff failed: %s", g->err);
    graph_free(g);
    return -1;
  }
  graph_plan_trivial(g, 8);
  CpuExec *e = cpu_exec_new(g, CPU_F64, nthreads, err, nerr);
  int64_t n = tensor_numel(&g->t[g->tokens]);
  int32_t *tok = malloc((size_t)n * sizeof *tok), *tg = malloc((size_t)n * sizeof *tg);
  double worst = -1;
  if (e && tok && tg) {
    cpu_exec_init_params(e, (uint64_t)s->train.seed);
    if (cpu_data_feed(e, g, data, 1, 0, tok, tg) == 0) {
      cpu_exec_set_key(e, (uint64_t)s->train.seed, 1, 0); /* fixed: dropout masks do not move */
      cpu_exec_run(e, IR_PHASE_BIT(IR_PHASE_FORWARD) | IR_PHASE_BIT(IR_PHASE_BACKWARD));
      worst = cpu_gradcheck_exec(e, g, loss_objective, g, (double)g->num_microbatches, opt, rows, nrows);
      if (worst < 0) snprintf(err, nerr, "out of memory");
    } else
      snprintf(err, nerr, "the data source failed");
  } else if (e)
    snprintf(err, nerr, "out of memory");
  free(tok), free(tg);
  cpu_exec_free(e);
  graph_free(g);
  return worst;
}
