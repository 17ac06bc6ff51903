/* moe_dispatch.c — token permutation to experts and back (Megatron's token dispatcher on one
 * rank: the routing map's preprocess, permute, unpermute).
 *
 * Static shapes. How many tokens each expert receives is known only at run time, but the graph
 * (and the memory plan) must be static. The permuted buffer therefore has a fixed row count N and
 * the per-expert layout is carried by tensors:
 *   no capacity factor:  N = T*k. Every (token, slot) assignment lands in exactly one row, so the
 *                        total is static even though the per-expert counts are not; experts are
 *                        contiguous (offsets = prefix sums of the counts), no row is wasted.
 *   capacity factor:     N = E*cap, cap = ceil(T*k/E * factor). Expert e owns rows
 *                        [e*cap, e*cap + cap): fixed offsets, the count says how many are real.
 *                        With pad_expert_input_to_capacity the count is cap (padding rows are
 *                        zero tokens with zero probability, computed like Megatron's padded
 *                        experts); without it, rows past the count are skipped by the grouped
 *                        GEMM and stay zero.
 * The order inside an expert is by token index: deterministic, and Megatron's permute order
 * (routing_map.T nonzero).
 *
 *   MOE_DISPATCH     idx (..., k) int32 [, probs (..., k) for drop policy 1]
 *                    -> row_of (..., k) int32: row of assignment (t, j) in the permuted buffer,
 *                       -1 if dropped;
 *                       seg (E, 2) int32: per expert {first row, rows to compute};
 *                       tokens_per_expert (E) int32: assignments before dropping (aux loss).
 *                    i[0] = E, i[1] = cap (0 = no capacity, no dropping), i[2] = pad to capacity,
 *                    i[3] = drop policy: 0 position (the earliest tokens are kept), 1 probs (the
 *                    highest routing probabilities are kept; ties to the earlier token; Megatron's
 *                    default moe_token_drop_policy). i[4] = El, a local expert range (0 = all E
 *                    experts): the allgather token dispatcher under expert parallelism permutes
 *                    the gathered tokens for the rank's experts [r El, (r + 1) El) only, r its EP
 *                    rank (known at run time: CpuCtx.ep, the device's rank slot; the artifact is
 *                    every rank's). seg and tokens_per_expert then cover those El experts (local
 *                    expert l = expert r El + l), laid out as above among themselves; assignments
 *                    to other experts get row -1 (their tokens come back as zero from this rank's
 *                    unpermute). Integer outputs: not differentiable.
 *   MOE_PERMUTE      x (..., C), probs (..., k), row_of -> xp (N, C), pp (N): row row_of[t,j] gets
 *                    token t and its probability for that expert; unused rows are zero. i[0] = N.
 *   MOE_PERMUTE_BWD  dxp, dpp, row_of -> dx (..., C), dprobs (..., k)
 *   MOE_UNPERMUTE    yp (N, C), row_of -> y (..., C) = sum over j of yp[row_of[t, j]] (dropped
 *                    assignments contribute nothing). The probabilities were applied by the
 *                    expert activation (MOE_ACT), as Megatron's grouped experts do. i[0] = N.
 *   MOE_UNPERMUTE_BWD dy, row_of -> dyp (N, C) */
#ifndef OPS_KERNEL_PASS
#include "ops/ops.h"

static int dispatch_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *idx = ops_in(g, op, 0);
  int64_t e = op->a.i[0], cap = op->a.i[1];
  int64_t cnt = op->a.i[4];
  if (idx->dtype != DT_I32 || e < 1 || cap < 0) return ops_err(err, n, "expects int32 idx, E >= 1, cap >= 0");
  if (op->a.i[3] == 1 && (op->nin != 2 || !ops_same_shape(ops_in(g, op, 1), idx)))
    return ops_err(err, n, "drop policy probs needs the routing probabilities");
  if (cnt < 0 || (cnt && e % cnt))
    return ops_err(err, n, "expects i[4] = local experts dividing E = %lld (0: all)", (long long)e);
  int64_t el = cnt ? cnt : e;
  ops_out_like(&out[0], idx, "row_of");
  ops_out_shape(&out[1], DT_I32, "expert_segments", 2, el, 2, 1, 1);
  ops_out_shape(&out[2], DT_I32, "tokens_per_expert", 1, el, 1, 1, 1);
  return 0;
}

static int permute_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0), *p = ops_in(g, op, 1), *ro = ops_in(g, op, 2);
  if (!ops_same_shape(p, ro) || ro->dtype != DT_I32 || ops_rows(x) != ops_rows(ro) || op->a.i[0] < 1)
    return ops_err(err, n, "expects x (..., C), probs and row_of (..., k) over the same tokens, N >= 1");
  ops_out_shape(&out[0], x->dtype, "permuted_tokens", 2, op->a.i[0], ops_last(x), 1, 1);
  ops_out_shape(&out[1], p->dtype, "permuted_probs", 1, op->a.i[0], 1, 1, 1);
  return 0;
}

static int permute_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0 && dout[1] < 0) return 0;
  if (dout[0] < 0 || dout[1] < 0) return graph_fail(g, "moe_permute: both outputs need a gradient");
  int in[3] = {dout[0], dout[1], o.in[2]}, of[2] = {o.in[0], o.in[1]};
  return ops_grad_op(g, OP_MOE_PERMUTE_BWD, in, 3, &o.a, din, of) < 0 ? -1 : 0;
}

static int permute_bwd_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  (void)err, (void)n;
  const Tensor *dxp = ops_in(g, op, 0), *ro = ops_in(g, op, 2);
  ops_out_like(&out[0], ro, "dx");
  out[0].dtype = dxp->dtype;
  out[0].shape[ro->ndim - 1] = ops_last(dxp);
  ops_out_like(&out[1], ro, "dprobs");
  out[1].dtype = ops_in(g, op, 1)->dtype;
  return 0;
}

static int unpermute_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *yp = ops_in(g, op, 0), *ro = ops_in(g, op, 1);
  if (yp->ndim != 2 || yp->shape[0] != op->a.i[0] || ro->dtype != DT_I32)
    return ops_err(err, n, "expects yp (N=%lld, C) and int32 row_of", (long long)op->a.i[0]);
  ops_out_like(&out[0], ro, "combined");
  out[0].dtype = yp->dtype;
  out[0].shape[ro->ndim - 1] = yp->shape[1];
  return 0;
}

static int unpermute_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  int in[2] = {dout[0], o.in[1]}, of[1] = {o.in[0]};
  return ops_grad_op(g, OP_MOE_UNPERMUTE_BWD, in, 2, &o.a, &din[0], of) < 0 ? -1 : 0;
}

static int unpermute_bwd_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  (void)err, (void)n;
  const Tensor *dy = ops_in(g, op, 0);
  ops_out_shape(&out[0], dy->dtype, "dyp", 2, op->a.i[0], ops_last(dy), 1, 1);
  return 0;
}

#define OPS_KERNEL_PASS
#define OPS_REAL 32
#include "ops/real.h"
#include __FILE__
#undef OPS_REAL
#define OPS_REAL 64
#include "ops/real.h"
#include __FILE__
#undef OPS_KERNEL_PASS

const OpInfo op_moe_dispatch_info = {"moe_dispatch",
                                     1,
                                     2,
                                     3,
                                     dispatch_infer,
                                     NULL,
                                     NULL,
                                     {dispatch_cpu_f32, dispatch_cpu_f64},
                                     .facts = {.cost = COST_MOE_ROUTING,
                                               .ceiling = CEIL_DRAM,
                                               .inplace = INPLACE_NONE,
                                               .rng = RNG_NONE,
                                               .sink = SINK_NO,
                                               .matmul = MATMUL_NONE,
                                               .ew = &OP_EW_NONE}};
const OpInfo op_moe_permute_info = {"moe_permute",
                                    3,
                                    3,
                                    2,
                                    permute_infer,
                                    NULL,
                                    permute_backward,
                                    {permute_cpu_f32, permute_cpu_f64},
                                    .facts = {.cost = COST_MOE_ROUTING,
                                              .ceiling = CEIL_DRAM,
                                              .inplace = INPLACE_NONE,
                                              .rng = RNG_NONE,
                                              .sink = SINK_NO,
                                              .matmul = MATMUL_NONE,
                                              .ew = &OP_EW_NONE}};
const OpInfo op_moe_permute_bwd_info = {"moe_permute_bwd",
                                        3,
                                        3,
                                        2,
                                        permute_bwd_infer,
                                        NULL,
                                        NULL,
                                        {permute_bwd_cpu_f32, permute_bwd_cpu_f64},
                                        .facts = {.cost = COST_MOE_ROUTING,
                                                  .ceiling = CEIL_DRAM,
                                                  .inplace = INPLACE_NONE,
                                                  .rng = RNG_NONE,
                                                  .sink = SINK_NO,
                                                  .matmul = MATMUL_NONE,
                                                  .ew = &OP_EW_NONE}};
const OpInfo op_moe_unpermute_info = {"moe_unpermute",
                                      2,
                                      2,
                                      1,
                                      unpermute_infer,
                                      ops_flops_elementwise,
                                      unpermute_backward,
                                      {unpermute_cpu_f32, unpermute_cpu_f64},
                                      .facts = {.cost = COST_MOE_ROUTING,
                                                .ceiling = CEIL_DRAM,
                                                .inplace = INPLACE_NONE,
                                                .rng = RNG_NONE,
                                                .sink = SINK_NO,
                                                .matmul = MATMUL_NONE,
                                                .ew = &OP_EW_NONE}};
const OpInfo op_moe_unpermute_bwd_info = {"moe_unpermute_bwd",
                                          2,
                                          2,
                                          1,
                                          unpermute_bwd_infer,
                                          NULL,
                                          NULL,
                                          {unpermute_bwd_cpu_f32, unpermute_bwd_cpu_f64},
                                          .facts = {.cost = COST_MOE_ROUTING,
                                                    .ceiling = CEIL_DRAM,
                                                    .inplace = INPLACE_NONE,
                                                    .rng = RNG_NONE,
                                                    .sink = SINK_NO,
                                                    .matmul = MATMUL_NONE,
                                                    .ew = &OP_EW_NONE}};

#else /* OPS_KERNEL_PASS */

/* Whether assignment a (flat index t*k + j) of expert e survives capacity `cap` under policy
 * probs: fewer than cap assignments of e rank above it. Quadratic in the assignments, which is
 * fine for a reference executor that runs test-sized models. */
static bool K(keep_by_probs)(const int32_t *idx, const real *p, int64_t n, int64_t a, int64_t cap) {
  int64_t above = 0;
  for (int64_t b = 0; b < n && above < cap; b++)
    if (b != a && idx[b] == idx[a] && (p[b] > p[a] || (p[b] == p[a] && b < a))) above++;
  return above < cap;
}

/* Serial: a scan over the assignments in token order defines the layout. */
static void K(dispatch_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *it = &c->g->t[op->in[0]];
  const int32_t *idx = in[0];
  const real *p = op->nin > 1 ? in[1] : NULL;
  int32_t *row_of = out[0], *seg = out[1], *tpe = out[2];
  int64_t n = tensor_numel(it), cap = op->a.i[1], e = op->a.i[4] ? op->a.i[4] : op->a.i[0],
          first = op->a.i[4] ? ops_ep_rank(c) * e : 0; /* the experts laid out: local x = expert first + x */
  bool pad = op->a.i[2] != 0, by_probs = op->a.i[3] == 1;
  for (int64_t x = 0; x < e; x++)
    tpe[x] = 0;
  for (int64_t a = 0; a < n; a++)
    if (idx[a] >= first && idx[a] < first + e) tpe[idx[a] - first]++;
  int64_t off = 0;
  for (int64_t x = 0; x < e; x++) {
    seg[2 * x] = (int32_t)(cap ? x * cap : off);
    seg[2 * x + 1] = 0; /* used as the cursor below, then the count */
    off += tpe[x];
  }
  for (int64_t a = 0; a < n; a++) {
    int32_t x = idx[a] - (int32_t)first;
    if (x < 0 || x >= e) { /* another rank's expert */
      row_of[a] = -1;
      continue;
    }
    bool keep = !cap || (by_probs ? K(keep_by_probs)(idx, p, n, a, cap) : seg[2 * x + 1] < cap);
    row_of[a] = keep ? seg[2 * x] + seg[2 * x + 1]++ : -1;
  }
  if (cap && pad)
    for (int64_t x = 0; x < e; x++)
      seg[2 * x + 1] = (int32_t)cap;
}

typedef struct {
  const real *x, *p, *dxp, *dpp;
  const int32_t *row_of;
  real *y, *q, *dx, *dp;
  int64_t k, c;
} K(PermArgs);

static void K(permute_range)(void *arg, int64_t lo, int64_t hi) {
  const K(PermArgs) *a = arg;
  for (int64_t t = lo; t < hi; t++)
    for (int64_t j = 0; j < a->k; j++) {
      int32_t r = a->row_of[t * a->k + j];
      if (r < 0) continue;
      memcpy(a->y + r * a->c, a->x + t * a->c, (size_t)a->c * sizeof(real));
      a->q[r] = a->p[t * a->k + j];
    }
}

static void K(permute_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *ro = &c->g->t[op->in[2]], *xp = &c->g->t[op->out[0]];
  memset(out[0], 0, (size_t)xp->bytes);
  memset(out[1], 0, (size_t)c->g->t[op->out[1]].bytes);
  K(PermArgs)
  a = {.x = in[0],
       .p = in[1],
       .row_of = in[2],
       .y = out[0],
       .q = out[1],
       .k = ops_last(ro),
       .c = ops_last(xp)};
  c->parallel_for(c, ops_rows(ro), K(permute_range), &a);
}

static void K(permute_bwd_range)(void *arg, int64_t lo, int64_t hi) {
  const K(PermArgs) *a = arg;
  for (int64_t t = lo; t < hi; t++) {
    real *dx = a->dx + t * a->c;
    for (int64_t i = 0; i < a->c; i++)
      dx[i] = 0;
    for (int64_t j = 0; j < a->k; j++) {
      int32_t r = a->row_of[t * a->k + j];
      a->dp[t * a->k + j] = r < 0 ? 0 : a->dpp[r];
      if (r < 0) continue;
      for (int64_t i = 0; i < a->c; i++)
        dx[i] += a->dxp[r * a->c + i];
    }
  }
}

static void K(permute_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *ro = &c->g->t[op->in[2]];
  K(PermArgs)
  a = {.dxp = in[0],
       .dpp = in[1],
       .row_of = in[2],
       .dx = out[0],
       .dp = out[1],
       .k = ops_last(ro),
       .c = ops_last(&c->g->t[op->in[0]])};
  c->parallel_for(c, ops_rows(ro), K(permute_bwd_range), &a);
}

/* unpermute: y[t] = sum_j yp[row_of[t, j]] (x = yp); its backward copies dy[t] back (y = dyp). */
static void K(unpermute_range)(void *arg, int64_t lo, int64_t hi) {
  const K(PermArgs) *a = arg;
  for (int64_t t = lo; t < hi; t++) {
    real *y = a->y + t * a->c;
    for (int64_t i = 0; i < a->c; i++)
      y[i] = 0;
    for (int64_t j = 0; j < a->k; j++) {
      int32_t r = a->row_of[t * a->k + j];
      if (r >= 0)
        for (int64_t i = 0; i < a->c; i++)
          y[i] += a->x[r * a->c + i];
    }
  }
}

static void K(unpermute_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *ro = &c->g->t[op->in[1]];
  K(PermArgs)
  a = {.x = in[0], .row_of = in[1], .y = out[0], .k = ops_last(ro), .c = ops_last(&c->g->t[op->in[0]])};
  c->parallel_for(c, ops_rows(ro), K(unpermute_range), &a);
}

static void K(unpermute_bwd_range)(void *arg, int64_t lo, int64_t hi) {
  const K(PermArgs) *a = arg;
  for (int64_t t = lo; t < hi; t++)
    for (int64_t j = 0; j < a->k; j++) {
      int32_t r = a->row_of[t * a->k + j];
      if (r >= 0) memcpy(a->y + r * a->c, a->x + t * a->c, (size_t)a->c * sizeof(real));
    }
}

static void K(unpermute_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *ro = &c->g->t[op->in[1]];
  memset(out[0], 0, (size_t)c->g->t[op->out[0]].bytes);
  K(PermArgs)
  a = {.x = in[0], .row_of = in[1], .y = out[0], .k = ops_last(ro), .c = ops_last(&c->g->t[op->in[0]])};
  c->parallel_for(c, ops_rows(ro), K(unpermute_bwd_range), &a);
}

#endif
