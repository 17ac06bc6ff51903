/* plan_exec.c — the planned step on the CPU executor, with poisoning (plan_exec.h). */
#include "plan_exec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct PlanExec {
  const Graph *g;
  const Schedule *sc;
  CpuExec *e;
  int npos;
  int *ops;            /* program point -> op id */
  int *pz_start, *pz;  /* CSR: program point -> slots (as a member tensor) to poison after it */
  int64_t poisoned;
  int32_t *tok, *tg;
};

PlanExec *plan_exec_new(const Graph *g, const Schedule *sc, const MemPlan *mp, int nthreads, char *err, size_t nerr) {
  PlanExec *x = calloc(1, sizeof *x);
  if (!x) return NULL;
  x->g = g, x->sc = sc, x->npos = sc->nops;
  x->ops = malloc((size_t)(sc->nops + 1) * sizeof *x->ops);
  x->pz_start = calloc((size_t)sc->nops + 2, sizeof *x->pz_start);
  x->pz = malloc((size_t)(g->nt + 1) * sizeof *x->pz);
  int64_t n = tensor_numel(&g->t[g->tokens]);
  x->tok = malloc((size_t)n * sizeof *x->tok);
  x->tg = malloc((size_t)n * sizeof *x->tg);
  if (!x->ops || !x->pz_start || !x->pz || !x->tok || !x->tg) {
    snprintf(err, nerr, "out of memory");
    plan_exec_free(x);
    return NULL;
  }
  int p = 0;
  for (int i = 0; i < sc->n; i++)
    if (sc->it[i].kind == SCHED_OP) x->ops[p++] = sc->it[i].id;
  if (mp) {
    /* a slot dies at the last point any member is live; poison it once, through one member */
    int *slot_end = malloc((size_t)(g->nt + 1) * sizeof *slot_end), *rep = malloc((size_t)(g->nt + 1) * sizeof *rep);
    if (!slot_end || !rep) {
      free(slot_end), free(rep);
      plan_exec_free(x);
      return NULL;
    }
    for (int s = 0; s < g->nt; s++) slot_end[s] = -1, rep[s] = -1;
    for (int t = 0; t < g->nt; t++) {
      int s = mp->slot[t];
      if (mp->end[t] > slot_end[s]) slot_end[s] = mp->end[t];
      if (rep[s] < 0 || mp->size[t] > mp->size[rep[s]]) rep[s] = t;
    }
    for (int s = 0; s < g->nt; s++)
      if (rep[s] >= 0 && slot_end[s] < x->npos - 1) x->pz_start[slot_end[s] + 1]++;
    for (int q = 0; q < x->npos; q++) x->pz_start[q + 1] += x->pz_start[q];
    int *fill = malloc((size_t)(x->npos + 1) * sizeof *fill);
    if (!fill) {
      free(slot_end), free(rep);
      plan_exec_free(x);
      return NULL;
    }
    memcpy(fill, x->pz_start, (size_t)(x->npos + 1) * sizeof *fill);
    for (int s = 0; s < g->nt; s++)
      if (rep[s] >= 0 && slot_end[s] < x->npos - 1) x->pz[fill[slot_end[s]]++] = rep[s];
    free(fill), free(slot_end), free(rep);
  }
  x->e = cpu_exec_new(g, CPU_F32, nthreads, err, nerr);
  if (!x->e) {
    plan_exec_free(x);
    return NULL;
  }
  return x;
}

void plan_exec_free(PlanExec *x) {
  if (!x) return;
  cpu_exec_free(x->e);
  free(x->ops), free(x->pz_start), free(x->pz), free(x->tok), free(x->tg);
  free(x);
}

CpuExec *plan_exec_cpu(PlanExec *x) { return x->e; }
int64_t plan_exec_poisoned(const PlanExec *x) { return x->poisoned; }

static void run_point(PlanExec *x, int q) {
  cpu_exec_run_op(x->e, x->ops[q]);
  for (int k = x->pz_start[q]; k < x->pz_start[q + 1]; k++) {
    int t = x->pz[k];
    memset(cpu_exec_ptr(x->e, t), 0xFF, (size_t)x->g->t[t].bytes); /* all-ones: a NaN in fp32 */
    x->poisoned += x->g->t[t].bytes;
  }
}

int plan_exec_begin_micro(PlanExec *x, CpuData *d, uint64_t seed, int64_t step, int64_t micro, char *err, size_t nerr) {
  if (cpu_data_feed(x->e, x->g, d, step, micro, x->tok, x->tg) != 0) {
    snprintf(err, nerr, "the data source failed");
    return -1;
  }
  cpu_exec_set_key(x->e, seed, step, micro);
  return 0;
}

int plan_exec_micro_points(const PlanExec *x) {
  int n = 0;
  for (int i = 0; i < x->sc->micro_end; i++) n += x->sc->it[i].kind == SCHED_OP;
  return n;
}

int plan_exec_points(const PlanExec *x) { return x->npos; }
int plan_exec_op_at(const PlanExec *x, int q) { return q >= 0 && q < x->npos ? x->ops[q] : -1; }
void plan_exec_point(PlanExec *x, int q) { run_point(x, q); }

int plan_exec_micro(PlanExec *x, CpuData *d, uint64_t seed, int64_t step, int64_t micro, double *loss, char *err,
                    size_t nerr) {
  if (plan_exec_begin_micro(x, d, seed, step, micro, err, nerr) != 0) return -1;
  int nmicro_ops = plan_exec_micro_points(x);
  for (int q = 0; q < nmicro_ops; q++) run_point(x, q);
  *loss = cpu_exec_get(x->e, x->g->loss, 0);
  return 0;
}

void plan_exec_tail(PlanExec *x) {
  for (int q = plan_exec_micro_points(x); q < x->npos; q++) run_point(x, q);
}
