/* activation.c — SWIGLU (y = silu(a) * b with [a | b] = x split on the last dim, as Megatron's
 * gated_linear_unit with silu), GEGLU (y = gelu(a) * b, gated_linear_unit with gelu), GELU (exact,
 * erf form, torch's default) and RELU_ACT (i[0] = 0: relu, 1: squared relu, Megatron's
 * squared_relu = relu(x)^2), with gradients that read the activation's input only.
 *
 * GELU is the erf form in GEGLU too: Megatron's unfused glu() calls config.activation_func =
 * F.gelu (approximate='none'); only its fused bias_geglu (bias_activation_fusion, which stepc has
 * no field for) uses the tanh approximation, and then for GELU as well. */
#ifndef OPS_KERNEL_PASS
#include "ops/ops.h"

static int swiglu_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0);
  if (ops_last(x) % 2) return ops_err(err, n, "last dim %lld is odd", (long long)ops_last(x));
  ops_out_like(&out[0], x, "out");
  out[0].shape[x->ndim - 1] /= 2;
  return 0;
}

static int gelu_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  (void)err, (void)n;
  ops_out_like(&out[0], ops_in(g, op, 0), "out");
  return 0;
}

static int act_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  int in[2] = {dout[0], o.in[0]}, of[1] = {o.in[0]};
  OpKind bk = o.kind == OP_SWIGLU  ? OP_SWIGLU_BWD
              : o.kind == OP_GEGLU ? OP_GEGLU_BWD
              : o.kind == OP_GELU  ? OP_GELU_BWD
                                   : OP_RELU_ACT_BWD;
  return ops_grad_op(g, bk, in, 2, &o.a, &din[0], of) < 0 ? -1 : 0;
}

static int act_bwd_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  (void)err, (void)n;
  ops_out_like(&out[0], ops_in(g, op, 1), "dx");
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

const OpInfo op_swiglu_info = {"swiglu",
                               1,
                               1,
                               1,
                               swiglu_infer,
                               ops_flops_elementwise,
                               act_backward,
                               {glu_cpu_f32, glu_cpu_f64},
                               .facts = {.cost = COST_ACTIVATION,
                                         .ceiling = CEIL_DRAM,
                                         .inplace = INPLACE_NONE,
                                         .rng = RNG_NONE,
                                         .sink = SINK_NO,
                                         .matmul = MATMUL_NONE,
                                         .ew = &OP_EW_NONE}};
/* in place: dx over x (both rows x 2f; dx[j], dx[j+f] come from x[j], x[j+f] of the same row,
 * read first) */
const OpInfo op_swiglu_bwd_info = {"swiglu_bwd",
                                   2,
                                   2,
                                   1,
                                   act_bwd_infer,
                                   ops_flops_elementwise,
                                   NULL,
                                   {glu_bwd_cpu_f32, glu_bwd_cpu_f64},
                                   .facts = {.cost = COST_ACTIVATION,
                                             .ceiling = CEIL_DRAM,
                                             .inplace = INPLACE_IN1,
                                             .rng = RNG_NONE,
                                             .sink = SINK_NO,
                                             .matmul = MATMUL_NONE,
                                             .ew = &OP_EW_NONE}};
const OpInfo op_gelu_info = {"gelu",
                             1,
                             1,
                             1,
                             gelu_infer,
                             ops_flops_elementwise,
                             act_backward,
                             {gelu_cpu_f32, gelu_cpu_f64},
                             .facts = {.cost = COST_ACTIVATION,
                                       .ceiling = CEIL_DRAM,
                                       .inplace = INPLACE_IN0,
                                       .rng = RNG_NONE,
                                       .sink = SINK_NO,
                                       .matmul = MATMUL_NONE,
                                       .ew = &OP_EW_NONE}};
/* in place: dx over dy */
const OpInfo op_gelu_bwd_info = {"gelu_bwd",
                                 2,
                                 2,
                                 1,
                                 act_bwd_infer,
                                 ops_flops_elementwise,
                                 NULL,
                                 {gelu_bwd_cpu_f32, gelu_bwd_cpu_f64},
                                 .facts = {.cost = COST_ACTIVATION,
                                           .ceiling = CEIL_DRAM,
                                           .inplace = INPLACE_IN0,
                                           .rng = RNG_NONE,
                                           .sink = SINK_NO,
                                           .matmul = MATMUL_NONE,
                                           .ew = &OP_EW_NONE}};
/* cost class other, as the cost model has always had it: the activation scale
 * (compiler/plan/cost_h200.h) was profiled on models without relu, and moving it there would change
 * the predicted times */
const OpInfo op_relu_act_info = {"relu_act",
                                 1,
                                 1,
                                 1,
                                 gelu_infer,
                                 ops_flops_elementwise,
                                 act_backward,
                                 {relu_cpu_f32, relu_cpu_f64},
                                 .facts = {.cost = COST_OTHER,
                                           .ceiling = CEIL_DRAM,
                                           .inplace = INPLACE_NONE,
                                           .rng = RNG_NONE,
                                           .sink = SINK_NO,
                                           .matmul = MATMUL_NONE,
                                           .ew = &OP_EW_NONE}};
const OpInfo op_geglu_info = {"geglu",
                              1,
                              1,
                              1,
                              swiglu_infer,
                              ops_flops_elementwise,
                              act_backward,
                              {glu_cpu_f32, glu_cpu_f64},
                              .facts = {.cost = COST_ACTIVATION,
                                        .ceiling = CEIL_DRAM,
                                        .inplace = INPLACE_NONE,
                                        .rng = RNG_NONE,
                                        .sink = SINK_NO,
                                        .matmul = MATMUL_NONE,
                                        .ew = &OP_EW_NONE}};
/* in place: dx over x, as SWIGLU_BWD */
const OpInfo op_geglu_bwd_info = {"geglu_bwd",
                                  2,
                                  2,
                                  1,
                                  act_bwd_infer,
                                  ops_flops_elementwise,
                                  NULL,
                                  {glu_bwd_cpu_f32, glu_bwd_cpu_f64},
                                  .facts = {.cost = COST_ACTIVATION,
                                            .ceiling = CEIL_DRAM,
                                            .inplace = INPLACE_IN1,
                                            .rng = RNG_NONE,
                                            .sink = SINK_NO,
                                            .matmul = MATMUL_NONE,
                                            .ew = &OP_EW_NONE}};
const OpInfo op_relu_act_bwd_info = {"relu_act_bwd",
                                     2,
                                     2,
                                     1,
                                     act_bwd_infer,
                                     ops_flops_elementwise,
                                     NULL,
                                     {relu_bwd_cpu_f32, relu_bwd_cpu_f64},
                                     .facts = {.cost = COST_OTHER,
                                               .ceiling = CEIL_DRAM,
                                               .inplace = INPLACE_NONE,
                                               .rng = RNG_NONE,
                                               .sink = SINK_NO,
                                               .matmul = MATMUL_NONE,
                                               .ew = &OP_EW_NONE}};

#else /* OPS_KERNEL_PASS */

typedef struct {
  const real *x, *dy;
  real *y;
  int64_t f; /* SwiGLU: output width; RELU_ACT: 1 for squared relu */
} K(ActArgs);

static void K(swiglu_range)(void *p, int64_t lo, int64_t hi) {
  const K(ActArgs) *a = p;
  for (int64_t r = lo; r < hi; r++) {
    const real *x = a->x + r * 2 * a->f;
    for (int64_t j = 0; j < a->f; j++) {
      real u = x[j], v = x[j + a->f], s = 1 / (1 + REXP(-u));
      a->y[r * a->f + j] = u * s * v;
    }
  }
}

static void K(swiglu_bwd_range)(void *p, int64_t lo, int64_t hi) {
  const K(ActArgs) *a = p;
  for (int64_t r = lo; r < hi; r++) {
    const real *x = a->x + r * 2 * a->f, *dy = a->dy + r * a->f;
    real *dx = a->y + r * 2 * a->f;
    for (int64_t j = 0; j < a->f; j++) {
      real u = x[j], v = x[j + a->f], s = 1 / (1 + REXP(-u));
      dx[j] = dy[j] * v * s * (1 + u * (1 - s));
      dx[j + a->f] = dy[j] * u * s;
    }
  }
}

/* gelu(x) = x Phi(x) and gelu'(x) = Phi(x) + x phi(x), exact (erf) */
static inline real K(gelu_of)(real x) { return (real)0.5 * x * (1 + RERF(x * (real)0.70710678118654752440)); }
static inline real K(gelu_grad_of)(real x) {
  real cdf = (real)0.5 * (1 + RERF(x * (real)0.70710678118654752440));
  real pdf = REXP((real)-0.5 * x * x) * (real)0.39894228040143267794;
  return cdf + x * pdf;
}

static void K(gelu_range)(void *p, int64_t lo, int64_t hi) {
  const K(ActArgs) *a = p;
  for (int64_t i = lo; i < hi; i++)
    a->y[i] = K(gelu_of)(a->x[i]);
}

static void K(gelu_bwd_range)(void *p, int64_t lo, int64_t hi) {
  const K(ActArgs) *a = p;
  for (int64_t i = lo; i < hi; i++)
    a->y[i] = a->dy[i] * K(gelu_grad_of)(a->x[i]);
}

/* GeGLU: rows of x (2f) = [a | b], y = gelu(a) * b; da = dy * b * gelu'(a), db = dy * gelu(a) */
static void K(geglu_range)(void *p, int64_t lo, int64_t hi) {
  const K(ActArgs) *a = p;
  for (int64_t r = lo; r < hi; r++) {
    const real *x = a->x + r * 2 * a->f;
    for (int64_t j = 0; j < a->f; j++)
      a->y[r * a->f + j] = K(gelu_of)(x[j]) * x[j + a->f];
  }
}

static void K(geglu_bwd_range)(void *p, int64_t lo, int64_t hi) {
  const K(ActArgs) *a = p;
  for (int64_t r = lo; r < hi; r++) {
    const real *x = a->x + r * 2 * a->f, *dy = a->dy + r * a->f;
    real *dx = a->y + r * 2 * a->f;
    for (int64_t j = 0; j < a->f; j++) {
      real u = x[j], v = x[j + a->f];
      dx[j] = dy[j] * v * K(gelu_grad_of)(u);
      dx[j + a->f] = dy[j] * K(gelu_of)(u);
    }
  }
}

/* the gated activations (SWIGLU, GEGLU), over rows */
static void K(glu_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *y = &c->g->t[op->out[0]];
  K(ActArgs) a = {in[0], NULL, out[0], ops_last(y)};
  c->parallel_for(c, ops_rows(y), op->kind == OP_GEGLU ? K(geglu_range) : K(swiglu_range), &a);
}

static void K(glu_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *dy = &c->g->t[op->in[0]];
  K(ActArgs) a = {in[1], in[0], out[0], ops_last(dy)};
  c->parallel_for(c, ops_rows(dy), op->kind == OP_GEGLU_BWD ? K(geglu_bwd_range) : K(swiglu_bwd_range), &a);
}

static void K(gelu_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  K(ActArgs) a = {in[0], NULL, out[0], 0};
  c->parallel_for(c, tensor_numel(&c->g->t[op->in[0]]), K(gelu_range), &a);
}

static void K(gelu_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  K(ActArgs) a = {in[1], in[0], out[0], 0};
  c->parallel_for(c, tensor_numel(&c->g->t[op->in[0]]), K(gelu_bwd_range), &a);
}

/* f = 1: squared relu */
static void K(relu_range)(void *p, int64_t lo, int64_t hi) {
  const K(ActArgs) *a = p;
  for (int64_t i = lo; i < hi; i++) {
    real r = a->x[i] > 0 ? a->x[i] : 0;
    a->y[i] = a->f ? r * r : r;
  }
}

static void K(relu_bwd_range)(void *p, int64_t lo, int64_t hi) {
  const K(ActArgs) *a = p;
  for (int64_t i = lo; i < hi; i++) {
    real x = a->x[i];
    a->y[i] = x > 0 ? a->dy[i] * (a->f ? 2 * x : 1) : 0;
  }
}

static void K(relu_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  K(ActArgs) a = {in[0], NULL, out[0], op->a.i[0]};
  c->parallel_for(c, tensor_numel(&c->g->t[op->in[0]]), K(relu_range), &a);
}

static void K(relu_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  K(ActArgs) a = {in[1], in[0], out[0], op->a.i[0]};
  c->parallel_for(c, tensor_numel(&c->g->t[op->in[0]]), K(relu_bwd_range), &a);
}

#endif
