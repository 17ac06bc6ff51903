/* op_ref.c — one op through its fp64 CPU reference (see op_ref.h), run by the CPU executor. */
#include "op_ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cpu/exec.h"

static RefT ref_t(DType dt, double *d, const int *ids, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  RefT t = {.dtype = dt, .d = d, .ids = ids, .shape = {d0, d1, d2, d3}};
  for (t.ndim = 4; t.ndim > 1 && t.shape[t.ndim - 1] == 0; t.ndim--) {
  }
  for (int i = t.ndim; i < 4; i++)
    t.shape[i] = 1;
  return t;
}
RefT ref_f(const double *d, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  return ref_t(DT_F32, (double *)d, NULL, d0, d1, d2, d3);
}
RefT ref_i(const int *ids, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  return ref_t(DT_I32, NULL, ids, d0, d1, d2, d3);
}

static void die(OpKind kind, const char *what) {
  fprintf(stderr, "ref_op %s: %s\n", op_name(kind), what);
  exit(1);
}

static int tensor_of(Graph *g, const RefT *t, const char *role, int i) {
  char name[32];
  snprintf(name, sizeof name, "%s%d", role, i);
  return graph_tensor(g, name, t->dtype, ROLE_INPUT, t->ndim, t->shape);
}

static void put(CpuExec *e, const Graph *g, int id, const RefT *t) {
  for (int64_t j = 0, n = tensor_numel(&g->t[id]); j < n; j++)
    cpu_exec_set(e, id, j, t->ids ? t->ids[j] : t->d[j]);
}

void ref_op(OpKind kind, const OpAttrs *a, const RefT *in, int nin, const RefT *out, int nout, int inplace) {
  Graph *g = graph_new();
  int ids[IR_MAX_IN], outs[IR_MAX_OUT];
  if (!g || nin > IR_MAX_IN || nout > IR_MAX_OUT) die(kind, "too many tensors");
  for (int i = 0; i < nin; i++)
    ids[i] = tensor_of(g, &in[i], "in", i);
  for (int i = 0; inplace && i < nout; i++)
    outs[i] = tensor_of(g, &out[i], "out", i);
  int op =
      inplace ? graph_op_into(g, kind, ids, nin, outs, nout, a) : graph_op(g, kind, ids, nin, a, outs, NULL);
  if (op < 0 || g->err[0]) die(kind, g->err);
  if (g->op[op].nout != nout) die(kind, "the op's output count differs from the call's");
  for (int i = 0; i < nout; i++) {
    int64_t want = 1;
    for (int d = 0; d < out[i].ndim; d++)
      want *= out[i].shape[d];
    if (out[i].d && tensor_numel(&g->t[outs[i]]) != want)
      die(kind, "an output's element count differs from the call's");
  }
  graph_plan_trivial(g, 8);
  char err[256];
  CpuExec *e = cpu_exec_new(g, CPU_F64, 4, err, sizeof err);
  if (!e) die(kind, err);
  for (int i = 0; i < nin; i++)
    put(e, g, ids[i], &in[i]);
  for (int i = 0; inplace && i < nout; i++)
    put(e, g, outs[i], &out[i]);
  cpu_exec_run_op(e, op);
  for (int i = 0; i < nout; i++)
    for (int64_t j = 0, n = out[i].d ? tensor_numel(&g->t[outs[i]]) : 0; j < n; j++)
      out[i].d[j] = cpu_exec_get(e, outs[i], j);
  cpu_exec_free(e);
  graph_free(g);
}

void ref_attention(double *O, double *LSE, double *dQ, double *dK, double *dV, const double *q,
                   const double *k, const double *v, const double *dout, int B, int T, int H, int G, int dk,
                   int dv, double scale) {
  OpAttrs a = {.f = {scale, 0}, .i = {0, 1}}; /* no dropout, causal */
  RefT qkv[3] = {ref_f(q, B, T, H, dk), ref_f(k, B, T, G, dk), ref_f(v, B, T, G, dv)};
  RefT o[2] = {ref_f(O, B, T, (int64_t)H * dv, 0), ref_f(LSE, B, H, T, 0)};
  bool own_dv = dv != dk;
  ref_op(own_dv ? OP_FLASH_ATTN_DV : OP_FLASH_ATTN, &a, qkv, 3, o, 2, 0);
  if (!dout) return;
  RefT in[6] = {ref_f(dout, B, T, (int64_t)H * dv, 0), qkv[0], qkv[1], qkv[2], o[0], o[1]};
  RefT d[3] = {ref_f(dQ, B, T, H, dk), ref_f(dK, B, T, G, dk), ref_f(dV, B, T, G, dv)};
  ref_op(own_dv ? OP_FLASH_ATTN_DV_BWD : OP_FLASH_ATTN_BWD, &a, in, 6, d, 3, 0);
}

void ref_cross_entropy_rows(double *losses, double *dlogits, const double *logits, const int *targets, int N,
                            int V, int Vp, double dloss) {
  double *x = malloc(sizeof *x * (size_t)N * V), *dx = malloc(sizeof *dx * (size_t)N * V),
         *lse = malloc(sizeof *lse * N);
  /* the op alone takes the mean over its kept tokens (ir/ops/loss.c without a step's loss
   * denominator), so its gradient input is dloss times their count: each kept token's gradient
   * then weighs dloss, as the kernels' dloss / *den with *den = 1 */
  long kept = 0;
  for (long n = 0; n < N; n++)
    kept += targets[n] >= 0 && targets[n] < V;
  double mean, dmean = dloss * (double)kept;
  for (long n = 0; n < N; n++)
    memcpy(x + n * V, logits + n * Vp, sizeof *x * V);
  RefT in[4] = {ref_f(&dmean, 1, 0, 0, 0), ref_f(x, 1, N, V, 0), ref_i(targets, 1, N, 0, 0),
                ref_f(lse, 1, N, 0, 0)};
  RefT out[2] = {ref_f(&mean, 1, 0, 0, 0), in[3]};
  ref_op(OP_CROSS_ENTROPY, NULL, in + 1, 2, out, 2, 0);
  ref_op(OP_CROSS_ENTROPY_BWD, NULL, in, 4, (RefT[]){ref_f(dx, 1, N, V, 0)}, 1, 0);
  for (long n = 0; n < N; n++) {
    int t = targets[n];
    losses[n] = t >= 0 && t < V ? lse[n] - x[n * V + t] : 0.0;
    for (int j = 0; j < Vp; j++)
      dlogits[n * Vp + j] = j < V ? dx[n * V + j] : 0.0;
  }
  free(x), free(dx), free(lse);
}
