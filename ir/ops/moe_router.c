/* moe_router.c — the MoE router's top-k and the auxiliary load-balancing loss.
 *
 *   ROUTER_TOPK      x (..., E) -> probs (..., k), idx (..., k) int32
 *                    i[0] = k; i[1] = mode:
 *                      0  x are router logits: take the top k logits, then softmax over those k
 *                         (Megatron's default moe_router_pre_softmax=False, score function
 *                         softmax: the k probabilities of a token sum to 1);
 *                      1  x are scores already (the softmax over all experts, pre_softmax=True):
 *                         gather the top k, not renormalized.
 *                    Order: descending score; equal scores go to the lower expert index, so the
 *                    choice is deterministic (torch.topk leaves ties unspecified).
 *   ROUTER_TOPK_BWD  dprobs, probs, idx -> dx (..., E); zero outside the selected experts.
 *                    i[2] = E (copied from the forward's input).
 *   MOE_AUX_LOSS     scores (..., E) (softmax over all experts), idx (..., k) int32 (the top-k
 *                    routing map) -> loss (1) = coeff * E / (k * T^2) * sum_e tpe_e * sum_t
 *                    scores[t, e], with tpe_e the tokens routed to e before any capacity dropping:
 *                    coeff * E * sum_e f_e P_e with f_e = tpe_e / (T k) and P_e the mean router
 *                    probability, Megatron's switch_load_balancing_loss_func. f[0] = coeff,
 *                    i[0] = k. The counts come from idx here, as in Megatron's router, so the
 *                    loss needs nothing from the token dispatcher. They are integers: the
 *                    gradient flows through P only. i[2] > 1 (sequence parallelism, the TP size):
 *                    the counts are the TP group's and T its tokens (K(aux_group)).
 *   MOE_AUX_LOSS_BWD dloss (1), idx -> dscores (..., E); i[1] = E (the backward reads no forward
 *                    activation). */
#ifndef OPS_KERNEL_PASS
#include "ops/ops.h"

static int topk_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0);
  int64_t k = op->a.i[0];
  if (k < 1 || k > ops_last(x))
    return ops_err(err, n, "top-k %lld of %lld experts", (long long)k, (long long)ops_last(x));
  if (op->a.i[1] != 0 && op->a.i[1] != 1)
    return ops_err(err, n, "mode %lld (0 top-k then softmax, 1 gather)", (long long)op->a.i[1]);
  ops_out_like(&out[0], x, "probs");
  out[0].shape[x->ndim - 1] = k;
  out[1] = out[0];
  out[1].dtype = DT_I32;
  out[1].suffix = "expert_idx";
  return 0;
}

static double topk_flops(const Graph *g, const Op *op) {
  return (double)tensor_numel(ops_in(g, op, 0)) * (double)op->a.i[0] +
         4.0 * (double)tensor_numel(&g->t[op->out[0]]);
}

static int topk_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  OpAttrs a = o.a;
  a.i[2] = ops_last(&g->t[o.in[0]]);
  int in[3] = {dout[0], o.out[0], o.out[1]}, of[1] = {o.in[0]};
  return ops_grad_op(g, OP_ROUTER_TOPK_BWD, in, 3, &a, &din[0], of) < 0 ? -1 : 0;
}

static int topk_bwd_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *dp = ops_in(g, op, 0), *idx = ops_in(g, op, 2);
  if (!ops_same_shape(dp, idx) || idx->dtype != DT_I32) return ops_err(err, n, "dprobs and idx differ");
  ops_out_like(&out[0], dp, "dlogits");
  out[0].shape[dp->ndim - 1] = op->a.i[2];
  return 0;
}

static int aux_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *s = ops_in(g, op, 0), *idx = ops_in(g, op, 1);
  if (idx->dtype != DT_I32 || ops_rows(idx) != ops_rows(s) || ops_last(idx) != op->a.i[0] || op->a.i[0] < 1)
    return ops_err(err, n, "expects scores (..., E) and int32 idx (..., k=%lld) over the same tokens",
                   (long long)op->a.i[0]);
  ops_out_shape(&out[0], DT_F32, "aux_loss", 1, 1, 1, 1, 1);
  return 0;
}

static int aux_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  OpAttrs a = o.a;
  a.i[1] = ops_last(&g->t[o.in[0]]);
  int in[2] = {dout[0], o.in[1]}, of[1] = {o.in[0]};
  return ops_grad_op(g, OP_MOE_AUX_LOSS_BWD, in, 2, &a, &din[0], of) < 0 ? -1 : 0;
}

static int aux_bwd_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  (void)err, (void)n;
  const Tensor *idx = ops_in(g, op, 1);
  ops_out_like(&out[0], idx, "dscores");
  out[0].dtype = DT_F32;
  out[0].shape[idx->ndim - 1] = op->a.i[1];
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

const OpInfo op_router_topk_info = {"router_topk",
                                    1,
                                    1,
                                    2,
                                    topk_infer,
                                    topk_flops,
                                    topk_backward,
                                    {topk_cpu_f32, topk_cpu_f64},
                                    .facts = {.cost = COST_MOE_ROUTING,
                                              .ceiling = CEIL_DRAM,
                                              .inplace = INPLACE_NONE,
                                              .rng = RNG_NONE,
                                              .sink = SINK_NO,
                                              .matmul = MATMUL_NONE,
                                              .ew = &OP_EW_NONE}};
const OpInfo op_router_topk_bwd_info = {"router_topk_bwd",
                                        3,
                                        3,
                                        1,
                                        topk_bwd_infer,
                                        ops_flops_elementwise,
                                        NULL,
                                        {topk_bwd_cpu_f32, topk_bwd_cpu_f64},
                                        .facts = {.cost = COST_MOE_ROUTING,
                                                  .ceiling = CEIL_DRAM,
                                                  .inplace = INPLACE_NONE,
                                                  .rng = RNG_NONE,
                                                  .sink = SINK_NO,
                                                  .matmul = MATMUL_NONE,
                                                  .ew = &OP_EW_NONE}};
const OpInfo op_moe_aux_loss_info = {"moe_aux_loss",
                                     2,
                                     2,
                                     1,
                                     aux_infer,
                                     NULL,
                                     aux_backward,
                                     {aux_cpu_f32, aux_cpu_f64},
                                     .facts = {.cost = COST_MOE_ROUTING,
                                               .ceiling = CEIL_DRAM,
                                               .inplace = INPLACE_NONE,
                                               .rng = RNG_NONE,
                                               .sink = SINK_NO,
                                               .matmul = MATMUL_NONE,
                                               .ew = &OP_EW_NONE}};
const OpInfo op_moe_aux_loss_bwd_info = {"moe_aux_loss_bwd",
                                         2,
                                         2,
                                         1,
                                         aux_bwd_infer,
                                         ops_flops_elementwise,
                                         NULL,
                                         {aux_bwd_cpu_f32, aux_bwd_cpu_f64},
                                         .facts = {.cost = COST_MOE_ROUTING,
                                                   .ceiling = CEIL_DRAM,
                                                   .inplace = INPLACE_NONE,
                                                   .rng = RNG_NONE,
                                                   .sink = SINK_NO,
                                                   .matmul = MATMUL_NONE,
                                                   .ew = &OP_EW_NONE}};

#else /* OPS_KERNEL_PASS */

typedef struct {
  const real *x, *dp, *p;
  const int32_t *idx;
  real *probs, *dx;
  int32_t *oidx;
  int64_t e, k;
  int mode;
} K(TopkArgs);

static void K(topk_range)(void *arg, int64_t lo, int64_t hi) {
  const K(TopkArgs) *a = arg;
  for (int64_t r = lo; r < hi; r++) {
    const real *x = a->x + r * a->e;
    real *p = a->probs + r * a->k;
    int32_t *id = a->oidx + r * a->k;
    /* k passes of argmax, skipping the experts already taken: k is small (<= 8 in practice) */
    for (int64_t j = 0; j < a->k; j++) {
      int64_t best = -1;
      for (int64_t e = 0; e < a->e; e++) {
        bool taken = false;
        for (int64_t q = 0; q < j; q++)
          taken |= id[q] == e;
        if (!taken && (best < 0 || x[e] > x[best])) best = e;
      }
      id[j] = (int32_t)best;
      p[j] = x[best];
    }
    if (a->mode == 0) { /* softmax over the selected logits; p[0] is their max */
      real s = 0;
      for (int64_t j = 0; j < a->k; j++)
        s += (p[j] = REXP(p[j] - x[id[0]]));
      for (int64_t j = 0; j < a->k; j++)
        p[j] /= s;
    }
  }
}

static void K(topk_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]];
  K(TopkArgs)
  a = {.x = in[0],
       .probs = out[0],
       .oidx = out[1],
       .e = ops_last(x),
       .k = op->a.i[0],
       .mode = (int)op->a.i[1]};
  c->parallel_for(c, ops_rows(x), K(topk_range), &a);
}

static void K(topk_bwd_range)(void *arg, int64_t lo, int64_t hi) {
  const K(TopkArgs) *a = arg;
  for (int64_t r = lo; r < hi; r++) {
    const real *dp = a->dp + r * a->k, *p = a->p + r * a->k;
    const int32_t *id = a->idx + r * a->k;
    real *dx = a->dx + r * a->e, dot = 0;
    for (int64_t e = 0; e < a->e; e++)
      dx[e] = 0;
    if (a->mode == 0)
      for (int64_t j = 0; j < a->k; j++)
        dot += p[j] * dp[j];
    for (int64_t j = 0; j < a->k; j++)
      dx[id[j]] = a->mode == 0 ? p[j] * (dp[j] - dot) : dp[j];
  }
}

static void K(topk_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *dp = &c->g->t[op->in[0]];
  K(TopkArgs)
  a = {.dp = in[0],
       .p = in[1],
       .idx = in[2],
       .dx = out[0],
       .e = op->a.i[2],
       .k = op->a.i[0],
       .mode = (int)op->a.i[1]};
  c->parallel_for(c, ops_rows(dp), K(topk_bwd_range), &a);
}

/* Tokens per expert from the routing map. */
static void K(aux_counts)(const int32_t *idx, int64_t n, int64_t e, double *tpe) {
  for (int64_t x = 0; x < e; x++)
    tpe[x] = 0;
  for (int64_t a = 0; a < n; a++)
    tpe[idx[a]] += 1;
}

/* Sequence parallelism (i[2] = the TP size): each rank routes its sequence rows, and the loss is
 * Megatron's over the TP group's tokens — the counts summed over the group and the normalisation its
 * T * TP tokens; each rank's value is its rows' part of the one-rank loss (the scores' sums are the
 * rank's), whose sum over the group lower.c reports (TP_ALLREDUCE, backward identity). Returns the
 * group's size (1 without). */
static int64_t K(aux_group)(const CpuCtx *c, const Op *op, double *tpe, int64_t e) {
  if (op->a.i[2] <= 1) return 1;
  if (!c->tp || c->tp->allreduce(c->tp, tpe, e, 1, 0)) {
    if (c->tp) c->tp->failed = 1;
  }
  return op->a.i[2];
}

/* Serial: one scalar, summed in a fixed order (per expert over tokens, then over experts). */
static void K(aux_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *s = &c->g->t[op->in[0]];
  const real *sc = in[0];
  int64_t t = ops_rows(s), e = ops_last(s), k = op->a.i[0];
  double tpe[e];
  K(aux_counts)(in[1], t * k, e, tpe);
  double tn = (double)t * (double)K(aux_group)(c, op, tpe, e); /* the normalisation's tokens */
  double total = 0;
  for (int64_t x = 0; x < e; x++) {
    double col = 0;
    for (int64_t r = 0; r < t; r++)
      col += (double)sc[r * e + x];
    total += col * tpe[x];
  }
  ((real *)out[0])[0] = (real)(op->a.f[0] * (double)e / ((double)k * tn * tn) * total);
}

static void K(aux_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *ds = &c->g->t[op->out[0]];
  const real *dl = in[0];
  int64_t t = ops_rows(ds), e = ops_last(ds), k = op->a.i[0];
  double tpe[e];
  K(aux_counts)(in[1], t * k, e, tpe);
  double tn = (double)t * (double)K(aux_group)(c, op, tpe, e);
  double scale = op->a.f[0] * (double)e / ((double)k * tn * tn) * (double)dl[0];
  real *d = out[0];
  for (int64_t r = 0; r < t; r++)
    for (int64_t x = 0; x < e; x++)
      d[r * e + x] = (real)(scale * tpe[x]);
}

#endif
