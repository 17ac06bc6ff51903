/* norm.c — RMSNORM and LAYERNORM over the last dim, and their gradients.
 *
 * Attributes: f[0] = epsilon. Forward keeps 1/rms (RMSNorm) or mean and 1/std (LayerNorm) per
 * row, fp32, for the backward, which reads x, the weight and those statistics. */
#ifndef OPS_KERNEL_PASS
#include "ops/ops.h"

static int norm_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0);
  int64_t c = ops_last(x);
  for (int i = 1; i < op->nin; i++)
    if (ops_in(g, op, i)->ndim != 1 || ops_in(g, op, i)->shape[0] != c)
      return ops_err(err, n, "%s is not (%lld)", ops_in(g, op, i)->name, (long long)c);
  ops_out_like(&out[0], x, "out");
  bool ln = op->kind == OP_LAYERNORM;
  OpOut *stat = &out[1];
  ops_out_like(stat, x, ln ? "mean" : "rstd");
  stat->dtype = DT_F32;
  stat->ndim = x->ndim - 1;
  if (ln) {
    out[2] = *stat;
    out[2].suffix = "rstd";
  }
  return 0;
}

static int norm_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  bool ln = o.kind == OP_LAYERNORM;
  int in[5] = {dout[0], o.in[0], o.in[1], o.out[1], ln ? o.out[2] : -1};
  int of[3] = {o.in[0], o.in[1], ln ? o.in[2] : -1};
  return ops_grad_op(g, ln ? OP_LAYERNORM_BWD : OP_RMSNORM_BWD, in, ln ? 5 : 4, &o.a, din, of) < 0 ? -1 : 0;
}

static int norm_bwd_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  (void)err, (void)n;
  const Tensor *x = ops_in(g, op, 1), *w = ops_in(g, op, 2);
  ops_out_like(&out[0], x, "dx");
  ops_out_like(&out[1], w, "dw");
  if (op->kind == OP_LAYERNORM_BWD) ops_out_like(&out[2], w, "db");
  return 0;
}

static double norm_flops(const Graph *g, const Op *op) {
  return 8.0 * (double)tensor_numel(ops_in(g, op, 0));
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

const OpInfo op_rmsnorm_info = {"rmsnorm",
                                2,
                                2,
                                2,
                                norm_infer,
                                norm_flops,
                                norm_backward,
                                {norm_cpu_f32, norm_cpu_f64},
                                .facts = {.cost = COST_NORM,
                                          .ceiling = CEIL_DRAM,
                                          .inplace = INPLACE_NONE,
                                          .rng = RNG_NONE,
                                          .sink = SINK_NO,
                                          .matmul = MATMUL_NONE,
                                          .ew = &OP_EW_NONE}};
const OpInfo op_rmsnorm_bwd_info = {"rmsnorm_bwd",
                                    4,
                                    4,
                                    2,
                                    norm_bwd_infer,
                                    norm_flops,
                                    NULL,
                                    {norm_bwd_cpu_f32, norm_bwd_cpu_f64},
                                    .facts = {.cost = COST_NORM,
                                              .ceiling = CEIL_DRAM,
                                              .inplace = INPLACE_NONE,
                                              .rng = RNG_NONE,
                                              .sink = SINK_YES,
                                              .matmul = MATMUL_NONE,
                                              .ew = &OP_EW_NONE}};
const OpInfo op_layernorm_info = {"layernorm",
                                  3,
                                  3,
                                  3,
                                  norm_infer,
                                  norm_flops,
                                  norm_backward,
                                  {norm_cpu_f32, norm_cpu_f64},
                                  .facts = {.cost = COST_NORM,
                                            .ceiling = CEIL_DRAM,
                                            .inplace = INPLACE_NONE,
                                            .rng = RNG_NONE,
                                            .sink = SINK_NO,
                                            .matmul = MATMUL_NONE,
                                            .ew = &OP_EW_NONE}};
const OpInfo op_layernorm_bwd_info = {"layernorm_bwd",
                                      5,
                                      5,
                                      3,
                                      norm_bwd_infer,
                                      norm_flops,
                                      NULL,
                                      {norm_bwd_cpu_f32, norm_bwd_cpu_f64},
                                      .facts = {.cost = COST_NORM,
                                                .ceiling = CEIL_DRAM,
                                                .inplace = INPLACE_NONE,
                                                .rng = RNG_NONE,
                                                .sink = SINK_YES,
                                                .matmul = MATMUL_NONE,
                                                .ew = &OP_EW_NONE}};

#else /* OPS_KERNEL_PASS */

typedef struct {
  const real *x, *w, *b, *dy, *mean, *rstd;
  real *y, *omean, *orstd, *dx, *dw, *db;
  int64_t rows, c;
  real eps;
  int ln;
} K(NormArgs);

static void K(norm_range)(void *p, int64_t lo, int64_t hi) {
  const K(NormArgs) *a = p;
  for (int64_t r = lo; r < hi; r++) {
    const real *x = a->x + r * a->c;
    real *y = a->y + r * a->c;
    real mean = 0, var = 0;
    if (a->ln) {
      for (int64_t j = 0; j < a->c; j++)
        mean += x[j];
      mean /= (real)a->c;
    }
    for (int64_t j = 0; j < a->c; j++)
      var += (x[j] - mean) * (x[j] - mean);
    real rstd = 1 / RSQRT(var / (real)a->c + a->eps);
    for (int64_t j = 0; j < a->c; j++)
      y[j] = (x[j] - mean) * rstd * a->w[j] + (a->ln ? a->b[j] : 0);
    if (a->ln) a->omean[r] = mean;
    a->orstd[r] = rstd;
  }
}

static void K(norm_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]];
  int ln = op->kind == OP_LAYERNORM;
  K(NormArgs)
  a = {.x = in[0],
       .w = in[1],
       .b = ln ? in[2] : NULL,
       .y = out[0],
       .omean = ln ? out[1] : NULL,
       .orstd = ln ? out[2] : out[1],
       .rows = ops_rows(x),
       .c = ops_last(x),
       .eps = (real)op->a.f[0],
       .ln = ln};
  c->parallel_for(c, a.rows, K(norm_range), &a);
}

/* dx per row: with g = dy w and xh = (x - mean) rstd,
 *   dx = rstd (g - mean(g) - xh mean(g xh))   (LayerNorm)
 *   dx = rstd (g - xh mean(g xh))             (RMSNorm, mean = 0) */
static void K(norm_bwd_rows)(void *p, int64_t lo, int64_t hi) {
  const K(NormArgs) *a = p;
  for (int64_t r = lo; r < hi; r++) {
    const real *x = a->x + r * a->c, *dy = a->dy + r * a->c;
    real mean = a->ln ? a->mean[r] : 0, rstd = a->rstd[r];
    real sg = 0, sgx = 0;
    for (int64_t j = 0; j < a->c; j++) {
      real g = dy[j] * a->w[j];
      sg += g;
      sgx += g * (x[j] - mean) * rstd;
    }
    sg /= (real)a->c;
    sgx /= (real)a->c;
    for (int64_t j = 0; j < a->c; j++) {
      real xh = (x[j] - mean) * rstd;
      a->dx[r * a->c + j] = rstd * (dy[j] * a->w[j] - (a->ln ? sg : 0) - xh * sgx);
    }
  }
}

/* dw, db per channel, summed over rows in order. */
static void K(norm_bwd_cols)(void *p, int64_t lo, int64_t hi) {
  const K(NormArgs) *a = p;
  for (int64_t j = lo; j < hi; j++) {
    real sw = 0, sb = 0;
    for (int64_t r = 0; r < a->rows; r++) {
      real dy = a->dy[r * a->c + j];
      sw += dy * (a->x[r * a->c + j] - (a->ln ? a->mean[r] : 0)) * a->rstd[r];
      sb += dy;
    }
    a->dw[j] = sw;
    if (a->ln) a->db[j] = sb;
  }
}

static void K(norm_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[1]];
  int ln = op->kind == OP_LAYERNORM_BWD;
  K(NormArgs)
  a = {.dy = in[0],
       .x = in[1],
       .w = in[2],
       .mean = ln ? in[3] : NULL,
       .rstd = ln ? in[4] : in[3],
       .dx = out[0],
       .dw = out[1],
       .db = ln ? out[2] : NULL,
       .rows = ops_rows(x),
       .c = ops_last(x),
       .ln = ln};
  c->parallel_for(c, a.rows, K(norm_bwd_rows), &a);
  c->parallel_for(c, a.c, K(norm_bwd_cols), &a);
}

#endif
