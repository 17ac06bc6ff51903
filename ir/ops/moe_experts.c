/* moe_experts.c — the routed experts computed grouped: one op over all experts, each expert's
 * rows given by the segments MOE_DISPATCH wrote (see moe_dispatch.c for the static layout).
 *
 *   GROUPED_LINEAR        x (N, K), W (E, Nout, K), seg (E, 2) int32 -> y (N, Nout):
 *                         y[r] = x[r] W_e^T for r in [seg[e][0], seg[e][0] + seg[e][1]); other
 *                         rows (capacity slots left empty) are zero. Megatron's grouped GEMM.
 *   GROUPED_LINEAR_DGRAD  dy, W, seg -> dx (N, K)
 *   GROUPED_LINEAR_WGRAD  dy, x, seg -> dW (E, Nout, K)
 *   MOE_ACT               h (N, F or 2F), pp (N) -> y (N, F) = act(h) * pp: the activation of the
 *                         experts' fc1 output, times each row's routing probability (Megatron's
 *                         grouped MLP applies the probabilities here, in bias_act_func; this is
 *                         the op the moe_act recompute label wraps: it keeps fc1's output and the
 *                         probabilities). i[0] = gated (GLU: [a | b] = h, y = act(a) * b * p),
 *                         i[1] = activation: 0 silu, 1 gelu (erf), 2 relu, 3 squared relu.
 *   MOE_ACT_BWD           dy, h, pp -> dh, dpp
 * FLOPs count all N rows: exact without capacity (N = T*k) and with padding, an upper bound when
 * capacity drops tokens without padding. Kernels split work over output rows (or, for the weight
 * gradient, over (expert, output feature)) and sum each element in a fixed order. */
#ifndef OPS_KERNEL_PASS
#include "ops/ops.h"

enum { MOE_ACT_SILU, MOE_ACT_GELU, MOE_ACT_RELU, MOE_ACT_SQRELU };

static int seg_ok(const Tensor *seg, int64_t e) {
  return seg->dtype == DT_I32 && seg->ndim == 2 && seg->shape[0] == e && seg->shape[1] == 2;
}

static int gl_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0), *w = ops_in(g, op, 1), *seg = ops_in(g, op, 2);
  if (x->ndim != 2 || w->ndim != 3 || w->shape[2] != x->shape[1] || !seg_ok(seg, w->shape[0]))
    return ops_err(
        err, n, "expects x (N, K), W (E, Nout, K), seg (E, 2) int32; got x (.., %lld), W (%lld, %lld, %lld)",
        (long long)ops_last(x), (long long)w->shape[0], (long long)w->shape[1], (long long)w->shape[2]);
  ops_out_shape(&out[0], x->dtype, "out", 2, x->shape[0], w->shape[1], 1, 1);
  return 0;
}

static double gl_flops(const Graph *g, const Op *op) { /* 2 N Nout K for all three ops */
  const Tensor *a = ops_in(g, op, 0), *b = ops_in(g, op, 1);
  if (op->kind == OP_GROUPED_LINEAR)
    return 2.0 * (double)a->shape[0] * (double)b->shape[1] * (double)b->shape[2];
  if (op->kind == OP_GROUPED_LINEAR_DGRAD)
    return 2.0 * (double)a->shape[0] * (double)b->shape[1] * (double)b->shape[2];
  return 2.0 * (double)a->shape[0] * (double)a->shape[1] * (double)b->shape[1];
}

static int gl_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  int x = o.in[0], w = o.in[1], seg = o.in[2];
  int di[3] = {dout[0], w, seg}, dof[1] = {x};
  if (ops_grad_op(g, OP_GROUPED_LINEAR_DGRAD, di, 3, NULL, &din[0], dof) < 0) return -1;
  int wi[3] = {dout[0], x, seg}, wof[1] = {w};
  return ops_grad_op(g, OP_GROUPED_LINEAR_WGRAD, wi, 3, NULL, &din[1], wof) < 0 ? -1 : 0;
}

static int gl_dgrad_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *dy = ops_in(g, op, 0), *w = ops_in(g, op, 1);
  if (dy->ndim != 2 || w->ndim != 3 || dy->shape[1] != w->shape[1] || !seg_ok(ops_in(g, op, 2), w->shape[0]))
    return ops_err(err, n, "dy (N, Nout) does not match W (E, Nout, K)");
  ops_out_shape(&out[0], dy->dtype, "dgrad", 2, dy->shape[0], w->shape[2], 1, 1);
  return 0;
}

static int gl_wgrad_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *dy = ops_in(g, op, 0), *x = ops_in(g, op, 1), *seg = ops_in(g, op, 2);
  if (dy->ndim != 2 || x->ndim != 2 || dy->shape[0] != x->shape[0] || seg->ndim != 2)
    return ops_err(err, n, "dy (N, Nout) and x (N, K) differ in rows");
  ops_out_shape(&out[0], x->dtype, "wgrad", 3, seg->shape[0], dy->shape[1], x->shape[1], 1);
  return 0;
}

static int act_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *h = ops_in(g, op, 0), *p = ops_in(g, op, 1);
  bool glu = op->a.i[0] != 0;
  if (h->ndim != 2 || p->ndim != 1 || p->shape[0] != h->shape[0] || (glu && h->shape[1] % 2) ||
      op->a.i[1] < 0 || op->a.i[1] > MOE_ACT_SQRELU)
    return ops_err(err, n, "expects h (N, F or 2F), probs (N), activation 0..3");
  ops_out_like(&out[0], h, "out");
  if (glu) out[0].shape[1] /= 2;
  return 0;
}

static int act_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  int in[3] = {dout[0], o.in[0], o.in[1]}, of[2] = {o.in[0], o.in[1]};
  return ops_grad_op(g, OP_MOE_ACT_BWD, in, 3, &o.a, din, of) < 0 ? -1 : 0;
}

static int act_bwd_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  (void)err, (void)n;
  ops_out_like(&out[0], ops_in(g, op, 1), "dh");
  ops_out_like(&out[1], ops_in(g, op, 2), "dprobs");
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

const OpInfo op_grouped_linear_info = {"grouped_linear",
                                       3,
                                       3,
                                       1,
                                       gl_infer,
                                       gl_flops,
                                       gl_backward,
                                       {gl_cpu_f32, gl_cpu_f64},
                                       .facts = {.cost = COST_GROUPED_GEMM,
                                                 .ceiling = CEIL_GEMM,
                                                 .inplace = INPLACE_NONE,
                                                 .rng = RNG_NONE,
                                                 .sink = SINK_NO,
                                                 .matmul = MATMUL_FWD,
                                                 .ew = &OP_EW_NONE}};
const OpInfo op_grouped_linear_dgrad_info = {"grouped_linear_dgrad",
                                             3,
                                             3,
                                             1,
                                             gl_dgrad_infer,
                                             gl_flops,
                                             NULL,
                                             {gl_dgrad_cpu_f32, gl_dgrad_cpu_f64},
                                             .facts = {.cost = COST_GROUPED_GEMM,
                                                       .ceiling = CEIL_GEMM,
                                                       .inplace = INPLACE_NONE,
                                                       .rng = RNG_NONE,
                                                       .sink = SINK_NO,
                                                       .matmul = MATMUL_DGRAD,
                                                       .ew = &OP_EW_NONE}};
/* sink: its tensor-core epilogue adds into the fp32 main gradient */
const OpInfo op_grouped_linear_wgrad_info = {"grouped_linear_wgrad",
                                             3,
                                             3,
                                             1,
                                             gl_wgrad_infer,
                                             gl_flops,
                                             NULL,
                                             {gl_wgrad_cpu_f32, gl_wgrad_cpu_f64},
                                             .facts = {.cost = COST_GROUPED_GEMM,
                                                       .ceiling = CEIL_GEMM,
                                                       .inplace = INPLACE_NONE,
                                                       .rng = RNG_NONE,
                                                       .sink = SINK_YES,
                                                       .matmul = MATMUL_WGRAD,
                                                       .ew = &OP_EW_NONE}};
const OpInfo op_moe_act_info = {"moe_act",
                                2,
                                2,
                                1,
                                act_infer,
                                ops_flops_elementwise,
                                act_backward,
                                {moe_act_cpu_f32, moe_act_cpu_f64},
                                .facts = {.cost = COST_ACTIVATION,
                                          .ceiling = CEIL_DRAM,
                                          .inplace = INPLACE_NONE,
                                          .rng = RNG_NONE,
                                          .sink = SINK_NO,
                                          .matmul = MATMUL_NONE,
                                          .ew = &OP_EW_NONE}};
const OpInfo op_moe_act_bwd_info = {"moe_act_bwd",
                                    3,
                                    3,
                                    2,
                                    act_bwd_infer,
                                    ops_flops_elementwise,
                                    NULL,
                                    {moe_act_bwd_cpu_f32, moe_act_bwd_cpu_f64},
                                    .facts = {.cost = COST_ACTIVATION,
                                              .ceiling = CEIL_DRAM,
                                              .inplace = INPLACE_NONE,
                                              .rng = RNG_NONE,
                                              .sink = SINK_NO,
                                              .matmul = MATMUL_NONE,
                                              .ew = &OP_EW_NONE}};

#else /* OPS_KERNEL_PASS */

typedef struct {
  const real *a, *b; /* forward: x, W; dgrad: dy, W; wgrad: dy, x */
  const int32_t *seg;
  real *c;
  int64_t n, e, nout, k;
} K(GroupArgs);

/* The expert whose segment holds row r, or -1 (an empty capacity slot). */
static int64_t K(expert_of)(const int32_t *seg, int64_t e, int64_t r) {
  for (int64_t x = 0; x < e; x++)
    if (r >= seg[2 * x] && r < (int64_t)seg[2 * x] + seg[2 * x + 1]) return x;
  return -1;
}

static void K(gl_range)(void *arg, int64_t lo, int64_t hi) {
  const K(GroupArgs) *a = arg;
  for (int64_t r = lo; r < hi; r++) {
    int64_t x = K(expert_of)(a->seg, a->e, r);
    real *y = a->c + r * a->nout;
    const real *xr = a->a + r * a->k, *w = a->b + (x < 0 ? 0 : x) * a->nout * a->k;
    for (int64_t o = 0; o < a->nout; o++) {
      real s = 0;
      if (x >= 0)
        for (int64_t q = 0; q < a->k; q++)
          s += xr[q] * w[o * a->k + q];
      y[o] = s;
    }
  }
}

static void K(gl_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]], *w = &c->g->t[op->in[1]];
  K(GroupArgs) a = {in[0], in[1], in[2], out[0], x->shape[0], w->shape[0], w->shape[1], w->shape[2]};
  c->parallel_for(c, a.n, K(gl_range), &a);
}

/* dx[r] = dy[r] W_e: dy (N, Nout), W (E, Nout, K) */
static void K(gl_dgrad_range)(void *arg, int64_t lo, int64_t hi) {
  const K(GroupArgs) *a = arg;
  for (int64_t r = lo; r < hi; r++) {
    int64_t x = K(expert_of)(a->seg, a->e, r);
    real *dx = a->c + r * a->k;
    const real *dy = a->a + r * a->nout, *w = a->b + (x < 0 ? 0 : x) * a->nout * a->k;
    for (int64_t q = 0; q < a->k; q++) {
      real s = 0;
      if (x >= 0)
        for (int64_t o = 0; o < a->nout; o++)
          s += dy[o] * w[o * a->k + q];
      dx[q] = s;
    }
  }
}

static void K(gl_dgrad_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *dy = &c->g->t[op->in[0]], *w = &c->g->t[op->in[1]];
  K(GroupArgs) a = {in[0], in[1], in[2], out[0], dy->shape[0], w->shape[0], w->shape[1], w->shape[2]};
  c->parallel_for(c, a.n, K(gl_dgrad_range), &a);
}

/* dW[e][o] = sum over the expert's rows r of dy[r][o] x[r]; index = e * Nout + o */
static void K(gl_wgrad_range)(void *arg, int64_t lo, int64_t hi) {
  const K(GroupArgs) *a = arg;
  for (int64_t i = lo; i < hi; i++) {
    int64_t x = i / a->nout, o = i % a->nout;
    real *dw = a->c + i * a->k;
    for (int64_t q = 0; q < a->k; q++)
      dw[q] = 0;
    int64_t r0 = a->seg[2 * x], r1 = r0 + a->seg[2 * x + 1];
    for (int64_t r = r0; r < r1; r++) {
      real d = a->a[r * a->nout + o];
      const real *xr = a->b + r * a->k;
      for (int64_t q = 0; q < a->k; q++)
        dw[q] += d * xr[q];
    }
  }
}

static void K(gl_wgrad_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *dy = &c->g->t[op->in[0]], *x = &c->g->t[op->in[1]], *dw = &c->g->t[op->out[0]];
  K(GroupArgs) a = {in[0], in[1], in[2], out[0], dy->shape[0], dw->shape[0], dw->shape[1], x->shape[1]};
  c->parallel_for(c, a.e * a.nout, K(gl_wgrad_range), &a);
}

typedef struct {
  const real *dy, *h, *p;
  real *y, *dh, *dp;
  int64_t f;
  int glu, act;
} K(ActArgs);

/* act(v) and act'(v), in double so that both passes agree on the function. */
static double K(act_eval)(int act, double v, double *deriv) {
  switch (act) {
  case MOE_ACT_SILU: {
    double s = 1.0 / (1.0 + exp(-v));
    *deriv = s * (1.0 + v * (1.0 - s));
    return v * s;
  }
  case MOE_ACT_GELU: {
    double cdf = 0.5 * (1.0 + erf(v / sqrt(2.0)));
    *deriv = cdf + v * exp(-0.5 * v * v) / sqrt(2.0 * M_PI);
    return v * cdf;
  }
  case MOE_ACT_RELU: *deriv = v > 0 ? 1.0 : 0.0; return v > 0 ? v : 0.0;
  default: *deriv = v > 0 ? 2.0 * v : 0.0; return v > 0 ? v * v : 0.0;
  }
}

static void K(moe_act_range)(void *arg, int64_t lo, int64_t hi) {
  const K(ActArgs) *a = arg;
  int64_t w = a->glu ? 2 * a->f : a->f;
  for (int64_t r = lo; r < hi; r++) {
    const real *h = a->h + r * w;
    double p = (double)a->p[r], dpr = 0;
    for (int64_t i = 0; i < a->f; i++) {
      double d, u = K(act_eval)(a->act, (double)h[i], &d), gate = a->glu ? (double)h[a->f + i] : 1.0;
      if (!a->dy) {
        a->y[r * a->f + i] = (real)(u * gate * p);
        continue;
      }
      double dy = (double)a->dy[r * a->f + i];
      a->dh[r * w + i] = (real)(dy * p * gate * d);
      if (a->glu) a->dh[r * w + a->f + i] = (real)(dy * p * u);
      dpr += dy * u * gate;
    }
    if (a->dy) a->dp[r] = (real)dpr;
  }
}

static void K(moe_act_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *y = &c->g->t[op->out[0]];
  K(ActArgs)
  a = {.h = in[0], .p = in[1], .y = out[0], .f = y->shape[1], .glu = op->a.i[0] != 0, .act = (int)op->a.i[1]};
  c->parallel_for(c, y->shape[0], K(moe_act_range), &a);
}

static void K(moe_act_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *dy = &c->g->t[op->in[0]];
  K(ActArgs)
  a = {.dy = in[0],
       .h = in[1],
       .p = in[2],
       .dh = out[0],
       .dp = out[1],
       .f = dy->shape[1],
       .glu = op->a.i[0] != 0,
       .act = (int)op->a.i[1]};
  c->parallel_for(c, dy->shape[0], K(moe_act_range), &a);
}

#endif
