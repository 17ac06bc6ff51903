/* train.c — the training loop and the gradient check on the CPU reference executor.
 *
 * One step: for each micro-batch, fill the inputs, run the forward and backward phases (main
 * gradients accumulate); then the reduce phase (empty on one rank) and the optimizer phase (LR,
 * norm, clipping, AdamW, zeroing). The RNG key is (train.seed, step, micro-batch). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff.h"
#include "lower.h"
#include "ops/ops.h"
#include "runtime/cpu/train.h"

struct CpuTrainer {
  Graph *g;
  CpuExec *e;
  CpuData *data;
  uint64_t seed;
  int64_t step;
  int32_t *tok, *tg;
};

static int fill_inputs(CpuExec *e, const Graph *g, CpuData *d, int64_t step, int64_t micro, int32_t *tok, int32_t *tg) {
  const Tensor *t = &g->t[g->tokens];
  int64_t b = t->shape[0], T = t->shape[1];
  if (d->fill(d, step, micro, b, T, tok, tg) != 0) return -1;
  memcpy(cpu_exec_ptr(e, g->tokens), tok, (size_t)(b * T) * sizeof *tok);
  memcpy(cpu_exec_ptr(e, g->targets), tg, (size_t)(b * T) * sizeof *tg);
  return 0;
}

CpuTrainer *cpu_trainer_new(const Spec *s, CpuData *data, int nthreads, int *lower_rc, char *err, size_t nerr) {
  CpuTrainer *tr = calloc(1, sizeof *tr);
  if (!tr) return NULL;
  *lower_rc = lower_step(s, &tr->g, err, nerr);
  if (*lower_rc != LOWER_OK) {
    free(tr);
    return NULL;
  }
  graph_plan_trivial(tr->g, 4);
  tr->e = cpu_exec_new(tr->g, CPU_F32, nthreads, err, nerr);
  int64_t n = tensor_numel(&tr->g->t[tr->g->tokens]);
  tr->tok = malloc((size_t)n * sizeof *tr->tok);
  tr->tg = malloc((size_t)n * sizeof *tr->tg);
  if (!tr->e || !tr->tok || !tr->tg) {
    if (tr->e) snprintf(err, nerr, "out of memory");
    cpu_trainer_free(tr);
    return NULL;
  }
  tr->data = data;
  tr->seed = (uint64_t)s->train.seed;
  cpu_exec_init_params(tr->e, tr->seed);
  return tr;
}

int cpu_trainer_step(CpuTrainer *tr, CpuStepStats *st, char *err, size_t nerr) {
  const Graph *g = tr->g;
  tr->step++;
  double loss = 0;
  for (int64_t mb = 0; mb < g->num_microbatches; mb++) {
    if (fill_inputs(tr->e, g, tr->data, tr->step, mb, tr->tok, tr->tg) != 0) {
      snprintf(err, nerr, "the data source failed at step %lld", (long long)tr->step);
      return -1;
    }
    cpu_exec_set_key(tr->e, tr->seed, tr->step, mb);
    cpu_exec_run(tr->e, IR_PHASE_BIT(IR_PHASE_FORWARD) | IR_PHASE_BIT(IR_PHASE_BACKWARD));
    loss += cpu_exec_get(tr->e, g->loss, 0);
  }
  cpu_exec_run(tr->e, IR_PHASE_BIT(IR_PHASE_REDUCE) | IR_PHASE_BIT(IR_PHASE_OPTIMIZER));
  st->step = tr->step;
  st->loss = loss / (double)g->num_microbatches;
  st->lr = cpu_exec_get(tr->e, g->lr, 0);
  st->grad_norm = cpu_exec_get(tr->e, g->grad_norm, 0);
  if (!isfinite(st->loss)) {
    snprintf(err, nerr, "the loss is not finite at step %lld", (long long)tr->step);
    return -1;
  }
  return 0;
}

const Graph *cpu_trainer_graph(const CpuTrainer *tr) { return tr->g; }

void cpu_trainer_free(CpuTrainer *tr) {
  if (!tr) return;
  cpu_exec_free(tr->e);
  graph_free(tr->g);
  free(tr->tok);
  free(tr->tg);
  free(tr);
}

/* ---- gradient check ---- */

static double rel_err(double fd, double an) {
  double den = fabs(fd) > fabs(an) ? fabs(fd) : fabs(an);
  return den < 1e-12 ? 0.0 : fabs(fd - an) / den; /* both zero (to round-off): agree */
}

double cpu_gradcheck_exec(CpuExec *e, const Graph *g, double (*objective)(CpuExec *e, void *ctx), void *ctx,
                          double an_scale, const GradcheckOptions *opt, GradcheckRow **rows, int *nrows) {
  int n = 0;
  for (int i = 0; i < g->nt; i++) n += g->t[i].role == ROLE_GRAD;
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
    double *an = malloc((size_t)numel * sizeof *an), *p0 = malloc((size_t)numel * sizeof *p0), *u = malloc((size_t)numel * sizeof *u);
    if (!an || !p0 || !u) {
      free(an), free(p0), free(u), free(r);
      return -1;
    }
    for (int64_t j = 0; j < numel; j++) {
      an[j] = cpu_exec_get(e, gi, j) * an_scale;
      p0[j] = cpu_exec_get(e, p, j);
      /* a random direction: checks the whole tensor's gradient at once */
      u[j] = (double)(ops_mix64((uint64_t)gi * 1000003u + (uint64_t)j) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
    }
    /* directional derivative */
    double dir = 0;
    for (int64_t j = 0; j < numel; j++) dir += an[j] * u[j];
    for (int64_t j = 0; j < numel; j++) cpu_exec_set(e, p, j, p0[j] + h * u[j]);
    double fp = objective(e, ctx);
    for (int64_t j = 0; j < numel; j++) cpu_exec_set(e, p, j, p0[j] - h * u[j]);
    double fm = objective(e, ctx);
    for (int64_t j = 0; j < numel; j++) cpu_exec_set(e, p, j, p0[j]);
    double fd = (fp - fm) / (2 * h);
    row->worst_rel = rel_err(fd, dir), row->fd = fd, row->an = dir;
    /* single elements, largest |gradient| first */
    for (int c = 0; c < opt->elements && c < numel; c++) {
      int64_t best = -1;
      for (int64_t j = 0; j < numel; j++)
        if (!isnan(an[j]) && (best < 0 || fabs(an[j]) > fabs(an[best]))) best = j;
      if (best < 0) break;
      cpu_exec_set(e, p, best, p0[best] + h);
      fp = objective(e, ctx);
      cpu_exec_set(e, p, best, p0[best] - h);
      fm = objective(e, ctx);
      cpu_exec_set(e, p, best, p0[best]);
      fd = (fp - fm) / (2 * h);
      double re = rel_err(fd, an[best]);
      if (re > row->worst_rel) row->worst_rel = re, row->fd = fd, row->an = an[best];
      an[best] = NAN; /* next-largest next time */
    }
    if (row->worst_rel > worst || isnan(row->worst_rel)) worst = isnan(row->worst_rel) ? INFINITY : row->worst_rel;
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

double cpu_gradcheck_spec(const Spec *s, CpuData *data, const GradcheckOptions *opt, int nthreads, GradcheckRow **rows,
                          int *nrows, int *lower_rc, char *err, size_t nerr) {
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
    if (fill_inputs(e, g, data, 1, 0, tok, tg) == 0) {
      cpu_exec_set_key(e, (uint64_t)s->train.seed, 1, 0); /* fixed: dropout masks do not move */
      cpu_exec_run(e, IR_PHASE_BIT(IR_PHASE_FORWARD) | IR_PHASE_BIT(IR_PHASE_BACKWARD));
      worst = cpu_gradcheck_exec(e, g, loss_objective, g, (double)g->num_microbatches, opt, rows, nrows);
      if (worst < 0) snprintf(err, nerr, "out of memory");
    } else snprintf(err, nerr, "the data source failed");
  } else if (e) snprintf(err, nerr, "out of memory");
  free(tok), free(tg);
  cpu_exec_free(e);
  graph_free(g);
  return worst;
}
