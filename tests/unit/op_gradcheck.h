/* op_gradcheck.h — the harness shared by the per-op gradient tests (test_op_grad.c,
 * test_moe_grad.c): a seeded random source, parameter helpers, and `opcheck_run`, which
 * differentiates chosen outputs of a small forward graph and checks every parameter's gradient
 * against central finite differences in fp64.
 *
 * Objective: sum_i <out_i, R_i> for fixed random R_i (never 0), so that every output element is
 * checked. Tolerance OPCHECK_TOL = 1e-5: in fp64 with h = 1e-5 the central difference's truncation
 * error is ~h^2 f''' ~ 1e-10 and round-off ~1e-16 |f| / h ~ 1e-10 relative to the objective, so a
 * correct rule sits at 1e-11..1e-7 (largest for small gradient elements); a wrong rule is off by
 * O(1). Header-only: each test is one executable. */
#ifndef STEPC_TEST_OP_GRADCHECK_H
#define STEPC_TEST_OP_GRADCHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "passes/autodiff.h"
#include "ops/ops.h"
#include "cli/cpu_train.h"

#define OPCHECK_TOL 1e-5

static uint64_t rng_state;
static int64_t rnd(int64_t lo, int64_t hi) { /* inclusive */
  rng_state = ops_mix64(rng_state);
  return lo + (int64_t)(rng_state % (uint64_t)(hi - lo + 1));
}

static int param(Graph *g, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  int64_t sh[4] = {d0, d1, d2, d3};
  return graph_param(g, name, DT_F32, ndim, sh, IR_INIT_NORMAL, 1.0);
}

typedef struct {
  Graph *g;
  int n, outs[4], seeds[4];
} OpcheckObj;

static double opcheck_objective(CpuExec *e, void *ctx) {
  OpcheckObj *o = ctx;
  cpu_exec_run(e, IR_PHASE_BIT(IR_PHASE_FORWARD));
  double s = 0;
  for (int i = 0; i < o->n; i++)
    for (int64_t j = 0, n = tensor_numel(&o->g->t[o->outs[i]]); j < n; j++)
      s += cpu_exec_get(e, o->outs[i], j) * cpu_exec_get(e, o->seeds[i], j);
  return s;
}

/* Fills the graph's non-parameter inputs (token ids, routing maps) once the executor exists. */
typedef void (*OpcheckFill)(CpuExec *e, const Graph *g, void *ctx);

/* Differentiates outputs `outs` of the forward graph g, checks every parameter, prints one line
 * (`width` columns for the name) and frees g. Returns 1 on failure. */
static int opcheck_run(const char *what, int width, Graph *g, const int *outs, int nout, OpcheckFill fill, void *ctx) {
  OpcheckObj o = {.g = g, .n = nout};
  graph_set_phase(g, IR_PHASE_BACKWARD);
  for (int i = 0; i < nout; i++) {
    char name[IR_NAME_MAX];
    snprintf(name, sizeof name, "%s.seed", g->t[outs[i]].name);
    o.outs[i] = outs[i];
    o.seeds[i] = graph_tensor(g, name, DT_F32, ROLE_INPUT, g->t[outs[i]].ndim, g->t[outs[i]].shape);
  }
  if (g->err[0] || autodiff_build(g, o.outs, o.seeds, nout) != 0) {
    printf("%-*s FAILED to build: %s\n", width, what, g->err);
    graph_free(g);
    return 1;
  }
  graph_plan_trivial(g, 8);
  char err[256];
  CpuExec *e = cpu_exec_new(g, CPU_F64, 2, err, sizeof err);
  if (!e) {
    printf("%-*s FAILED: %s\n", width, what, err);
    graph_free(g);
    return 1;
  }
  cpu_exec_init_params(e, rng_state);
  if (fill) fill(e, g, ctx);
  for (int i = 0; i < nout; i++)
    for (int64_t j = 0, n = tensor_numel(&g->t[o.seeds[i]]); j < n; j++)
      cpu_exec_set(e, o.seeds[i], j, (rnd(0, 1) ? 1 : -1) * (double)rnd(100, 1000) / 1000.0); /* never 0: no vacuous check */
  cpu_exec_set_key(e, 99, 1, 0);
  cpu_exec_run(e, IR_PHASE_BIT(IR_PHASE_FORWARD) | IR_PHASE_BIT(IR_PHASE_BACKWARD));
  GradcheckOptions opt = {.elements = 3, .h = 1e-5};
  GradcheckRow *rows = NULL;
  int nrows = 0;
  double worst = cpu_gradcheck_exec(e, g, opcheck_objective, &o, 1.0, &opt, &rows, &nrows);
  int bad = !(worst >= 0 && worst <= OPCHECK_TOL) || nrows == 0;
  printf("%-*s worst rel %.2e over %d param(s)%s\n", width, what, worst, nrows, bad ? "  FAILED" : "");
  for (int i = 0; (bad || getenv("STEPC_TEST_VERBOSE")) && i < nrows; i++)
    printf("    %-40s %.3e fd %.9e an %.9e\n", rows[i].name, rows[i].worst_rel, rows[i].fd, rows[i].an);
  free(rows);
  cpu_exec_free(e);
  graph_free(g);
  return bad;
}

#endif
