/* dropout.c — DROPOUT: y = x * keep / (1 - p), keep = (u >= p) with u from the counter-based RNG
 * keyed by (seed, step, micro-batch, stream, element). The mask is an output (uint8, one byte per
 * element as in Megatron's activation accounting) that the backward reads; a replay regenerates
 * the identical mask from the same key.
 * Attributes: f[0] = p, i[0] = stream (unique per dropout site, chosen by lowering), i[1] = d > 0
 * when x is this tensor-parallel rank's slice of the one-rank tensor along dimension d (its heads
 * under TP, its sequence rows under SP: rank r holds the r-th of TP equal blocks of that dimension,
 * CpuCtx.tp): each element draws at its index in the one-rank tensor, so the ranks' masks together
 * are the one-rank mask; 0: x is whole. */
#ifndef OPS_KERNEL_PASS
#include "ops/ops.h"

static int dropout_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0);
  if (!(op->a.f[0] > 0 && op->a.f[0] < 1)) return ops_err(err, n, "p = %g must be in (0, 1)", op->a.f[0]);
  if (op->a.i[1] < 0 || op->a.i[1] >= x->ndim)
    return ops_err(err, n, "i[1] = %lld names no dimension of a %d-D x", (long long)op->a.i[1], x->ndim);
  ops_out_like(&out[0], x, "dropout");
  ops_out_like(&out[1], x, "dropout_mask");
  out[1].dtype = DT_U8;
  return 0;
}

static int dropout_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  int in[2] = {dout[0], o.out[1]}, of[1] = {o.in[0]};
  return ops_grad_op(g, OP_DROPOUT_BWD, in, 2, &o.a, &din[0], of) < 0 ? -1 : 0;
}

static int dropout_bwd_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  (void)err, (void)n;
  ops_out_like(&out[0], ops_in(g, op, 0), "dx");
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

/* The backward in a generated chain: dropout_apply's dropout_keep with the same Philox words. Its
 * mask input is never read on CUDA: the mask is regenerated from (seed, stream). */
static const OpEw dropout_bwd_ew = {
    1, "fSU",
    "  const unsigned thr# = dropout_threshold(f#);\n  const float scale# = dropout_scale(f#);\n"
    "  const unsigned long long seed# = *S#;\n",
    "    const philox4 r# = dropout_bits(seed#, U#, (unsigned long long)g);\n"
    "    const unsigned w#[4] = {r#.x, r#.y, r#.z, r#.w};\n",
    "dropout_keep(w#[k], thr#, scale#, $0)"};

const OpInfo op_dropout_info = {"dropout",
                                1,
                                1,
                                2,
                                dropout_infer,
                                ops_flops_elementwise,
                                dropout_backward,
                                {dropout_cpu_f32, dropout_cpu_f64},
                                .facts = {.cost = COST_ELEMENTWISE,
                                          .ceiling = CEIL_DRAM,
                                          .inplace = INPLACE_IN0,
                                          .rng = RNG_ALWAYS,
                                          .sink = SINK_NO,
                                          .matmul = MATMUL_NONE,
                                          .ew = &OP_EW_NONE}};
const OpInfo op_dropout_bwd_info = {"dropout_bwd",
                                    2,
                                    2,
                                    1,
                                    dropout_bwd_infer,
                                    ops_flops_elementwise,
                                    NULL,
                                    {dropout_bwd_cpu_f32, dropout_bwd_cpu_f64},
                                    .facts = {.cost = COST_ELEMENTWISE,
                                              .ceiling = CEIL_DRAM,
                                              .inplace = INPLACE_IN0,
                                              .rng = RNG_NONE,
                                              .sink = SINK_NO,
                                              .matmul = MATMUL_NONE,
                                              .ew = &dropout_bwd_ew}};

#else /* OPS_KERNEL_PASS */

typedef struct {
  const real *x;
  uint8_t *mask;
  real *y;
  uint64_t key;
  float p;
  real scale;
  /* a slice (i[1]): element (o, l, r) of x (outer, rows, inner) is (o, off + l, r) of the one-rank
   * tensor (outer, full, inner); rows 0: whole */
  int64_t rows, full, off, inner;
} K(DropArgs);

static uint64_t K(dropout_index)(const K(DropArgs) * a, int64_t i) {
  if (!a->rows) return (uint64_t)i;
  int64_t r = i % a->inner, l = (i / a->inner) % a->rows, o = i / (a->inner * a->rows);
  return (uint64_t)((o * a->full + a->off + l) * a->inner + r);
}

static void K(dropout_range)(void *p, int64_t lo, int64_t hi) {
  const K(DropArgs) *a = p;
  for (int64_t i = lo; i < hi; i++) {
    uint8_t keep = ops_rng_uniform(a->key, K(dropout_index)(a, i)) >= a->p;
    a->mask[i] = keep;
    a->y[i] = keep ? a->x[i] * a->scale : 0;
  }
}

static void K(dropout_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  K(DropArgs)
  a = {.x = in[0],
       .mask = out[1],
       .y = out[0],
       .key = ops_rng_key(c, op->a.i[0]),
       .p = (float)op->a.f[0],
       .scale = (real)(1.0 / (1.0 - op->a.f[0]))};
  const Tensor *x = &c->g->t[op->in[0]];
  int d = (int)op->a.i[1];
  if (d > 0 && c->tp) {
    a.rows = x->shape[d], a.full = x->shape[d] * c->tp->size, a.off = (int64_t)c->tp->rank * x->shape[d];
    a.inner = 1;
    for (int k = d + 1; k < x->ndim; k++)
      a.inner *= x->shape[k];
  }
  c->parallel_for(c, tensor_numel(x), K(dropout_range), &a);
}

static void K(dropout_bwd_range)(void *p, int64_t lo, int64_t hi) {
  const K(DropArgs) *a = p;
  for (int64_t i = lo; i < hi; i++)
    a->y[i] = a->mask[i] ? a->x[i] * a->scale : 0;
}

static void K(dropout_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  K(DropArgs)
  a = {.x = in[0],
       .mask = in[1],
       .y = out[0],
       .p = (float)op->a.f[0],
       .scale = (real)(1.0 / (1.0 - op->a.f[0]))};
  c->parallel_for(c, tensor_numel(&c->g->t[op->in[0]]), K(dropout_bwd_range), &a);
}

#endif
