/* program.c — the CPU reference executor over a step's program (program.h). */
#include "runtime/cpu/program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct PlanExec {
  const Graph *g;
  CpuProgram p;
  CpuExec *e;
  int64_t poisoned;
  int32_t *tok, *tg;
};

PlanExec *plan_exec_new(const Graph *g, const CpuProgram *prog, int nthreads, char *err, size_t nerr) {
  PlanExec *x = calloc(1, sizeof *x);
  if (!x) return snprintf(err, nerr, "out of memory"), NULL;
  x->g = g, x->p = *prog;
  int64_t n = tensor_numel(&g->t[g->tokens]);
  x->tok = malloc((size_t)n * sizeof *x->tok);
  x->tg = malloc((size_t)n * sizeof *x->tg);
  if (!x->tok || !x->tg) {
    snprintf(err, nerr, "out of memory");
    plan_exec_free(x);
    return NULL;
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
  free(x->tok), free(x->tg);
  free(x);
}

CpuExec *plan_exec_cpu(PlanExec *x) { return x->e; }
int64_t plan_exec_poisoned(const PlanExec *x) { return x->poisoned; }

static void poison_after(PlanExec *x, int q) {
  if (!x->p.poison_start) return;
  for (int k = x->p.poison_start[q]; k < x->p.poison_start[q + 1]; k++) {
    int t = x->p.poison[k];
    memset(cpu_exec_ptr(x->e, t), 0xFF, (size_t)x->g->t[t].bytes); /* all-ones: a NaN in fp32 */
    x->poisoned += x->g->t[t].bytes;
  }
}

static void run_point(PlanExec *x, int q) {
  cpu_exec_run_op(x->e, x->p.point_op[q]);
  poison_after(x, q);
}

int plan_exec_point_eval(PlanExec *x, int q) {
  if (cpu_exec_run_op_eval(x->e, x->p.point_op[q]) != 0) return -1;
  poison_after(x, q);
  return 0;
}

int plan_exec_begin_micro(PlanExec *x, CpuData *d, uint64_t seed, int64_t step, int64_t micro, char *err,
                          size_t nerr) {
  if (cpu_data_feed(x->e, x->g, d, step, micro, x->tok, x->tg) != 0) {
    snprintf(err, nerr, "the data source failed%s%s", d->err[0] ? ": " : "", d->err);
    return -1;
  }
  cpu_exec_set_key(x->e, seed, step, micro);
  return 0;
}

int plan_exec_micro_points(const PlanExec *x) { return x->p.micro_points; }
int plan_exec_points(const PlanExec *x) { return x->p.npoints; }
void plan_exec_point(PlanExec *x, int q) { run_point(x, q); }

int plan_exec_micro(PlanExec *x, CpuData *d, uint64_t seed, int64_t step, int64_t micro, double *loss,
                    char *err, size_t nerr) {
  if (plan_exec_begin_micro(x, d, seed, step, micro, err, nerr) != 0) return -1;
  int nmicro_ops = plan_exec_micro_points(x);
  for (int q = 0; q < nmicro_ops; q++)
    run_point(x, q);
  *loss = cpu_exec_get(x->e, x->g->loss, 0);
  return 0;
}

void plan_exec_tail(PlanExec *x) {
  for (int q = plan_exec_micro_points(x); q < x->p.npoints; q++)
    run_point(x, q);
}
