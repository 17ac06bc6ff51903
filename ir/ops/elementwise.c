/* elementwise.c — ADD (residual adds), ACCUM (gradient accumulation, in place), ZERO (in place).
 *
 * FILL writes f[0] everywhere (in place; the loss-gradient seed).
 *
 * ADD's gradient is the output gradient for both inputs: no backward op, the same tensor is
 * handed to both producers (autodiff sums contributions where a tensor has several consumers). */
#ifndef OPS_KERNEL_PASS
#include "ops/ops.h"

static int add_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *a = ops_in(g, op, 0), *b = ops_in(g, op, 1);
  if (!ops_same_shape(a, b)) return ops_err(err, n, "%s and %s differ in shape", a->name, b->name);
  ops_out_like(&out[0], a, "out");
  return 0;
}

static int add_backward(Graph *g, int op, const int *dout, int *din) {
  (void)g, (void)op;
  din[0] = din[1] = dout[0];
  return 0;
}

static int inplace_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  (void)g, (void)op, (void)out;
  return ops_err(err, n, "an in-place op is built with graph_op_into");
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

/* a residual add in a generated chain: residual_add's own sum */
static const OpEw add_ew = {2, "", "", "", "$0 + $1"};

const OpInfo op_add_info = {"add",
                            2,
                            2,
                            1,
                            add_infer,
                            ops_flops_elementwise,
                            add_backward,
                            {add_cpu_f32, add_cpu_f64},
                            .facts = {.cost = COST_ELEMENTWISE,
                                      .ceiling = CEIL_DRAM,
                                      .inplace = INPLACE_IN0,
                                      .rng = RNG_NONE,
                                      .sink = SINK_NO,
                                      .matmul = MATMUL_NONE,
                                      .ew = &add_ew}};
const OpInfo op_accum_info = {"accum",
                              1,
                              1,
                              0,
                              inplace_infer,
                              ops_flops_elementwise,
                              NULL,
                              {accum_cpu_f32, accum_cpu_f64},
                              .facts = {.cost = COST_ELEMENTWISE,
                                        .ceiling = CEIL_DRAM,
                                        .inplace = INPLACE_NONE,
                                        .rng = RNG_NONE,
                                        .sink = SINK_NO,
                                        .matmul = MATMUL_NONE,
                                        .ew = &OP_EW_NONE}};
const OpInfo op_fill_info = {"fill",
                             0,
                             0,
                             0,
                             inplace_infer,
                             NULL,
                             NULL,
                             {fill_cpu_f32, fill_cpu_f64},
                             .facts = {.cost = COST_ELEMENTWISE,
                                       .ceiling = CEIL_DRAM,
                                       .inplace = INPLACE_NONE,
                                       .rng = RNG_NONE,
                                       .sink = SINK_NO,
                                       .matmul = MATMUL_NONE,
                                       .ew = &OP_EW_NONE}};
const OpInfo op_zero_info = {"zero",
                             0,
                             0,
                             0,
                             inplace_infer,
                             NULL,
                             NULL,
                             {zero_cpu_f32, zero_cpu_f64},
                             .facts = {.cost = COST_ELEMENTWISE,
                                       .ceiling = CEIL_DRAM,
                                       .inplace = INPLACE_NONE,
                                       .rng = RNG_NONE,
                                       .sink = SINK_NO,
                                       .matmul = MATMUL_NONE,
                                       .ew = &OP_EW_NONE}};

#else /* OPS_KERNEL_PASS: reference kernels over `real` */

typedef struct {
  const real *a, *b;
  real *y;
} K(AddArgs);

static void K(add_range)(void *p, int64_t lo, int64_t hi) {
  K(AddArgs) *a = p;
  if (a->b)
    for (int64_t i = lo; i < hi; i++)
      a->y[i] = a->a[i] + a->b[i];
  else /* accumulate: y += a */
    for (int64_t i = lo; i < hi; i++)
      a->y[i] += a->a[i];
}

static void K(add_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  K(AddArgs) a = {in[0], in[1], out[0]};
  c->parallel_for(c, tensor_numel(&c->g->t[op->out[0]]), K(add_range), &a);
}

static void K(accum_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  K(AddArgs) a = {in[0], NULL, out[0]};
  c->parallel_for(c, tensor_numel(&c->g->t[op->out[0]]), K(add_range), &a);
}

static void K(fill_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  (void)in;
  real v = (real)op->a.f[0];
  for (int i = 0; i < op->nout; i++) {
    real *t = out[i];
    for (int64_t j = 0, n = tensor_numel(&c->g->t[op->out[i]]); j < n; j++)
      t[j] = v;
  }
}

static void K(zero_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  (void)in;
  for (int i = 0; i < op->nout; i++)
    memset(out[i], 0, (size_t)c->g->t[op->out[i]].bytes);
}

#endif
