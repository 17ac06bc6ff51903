/* attention.c — the unfused attention backend as separate ops with materialised tensors, and the
 * QKV split shared by both backends.
 *
 *   SPLIT_QKV   qkv (B,T,(H+2G)D) -> q (B,T,H,D), k (B,T,G,D), v (B,T,G,D)   i[0]=H i[1]=G i[2]=D
 *               (stepc's layout is [all Q | all K | all V]; Megatron interleaves per group, which
 *               is the same math up to a permutation of linear_qkv's rows)
 *   ATTN_SCORES s (B,H,T,T) = q k^T * f[0]                  GQA: head h reads group h / (H/G)
 *   CAUSAL_MASK s[i, j > i] = -inf (i[0]=0) or 0 (i[0]=1, which is its own gradient)
 *   SOFTMAX     over the last dim; the backward reads its output
 *   ATTN_PV     o (B,T,H*D) = p v
 * Every kernel splits work over output rows and sums over the reduction index in order. */
#ifndef OPS_KERNEL_PASS
#include "ops/ops.h"

static int split_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0);
  int64_t h = op->a.i[0], gq = op->a.i[1], d = op->a.i[2];
  if (h <= 0 || gq <= 0 || d <= 0 || h % gq || x->ndim != 3 || ops_last(x) != (h + 2 * gq) * d)
    return ops_err(err, n, "qkv (B,T,%lld) does not match H=%lld G=%lld D=%lld", (long long)ops_last(x),
                   (long long)h, (long long)gq, (long long)d);
  ops_out_shape(&out[0], x->dtype, "query", 4, x->shape[0], x->shape[1], h, d);
  ops_out_shape(&out[1], x->dtype, "key", 4, x->shape[0], x->shape[1], gq, d);
  ops_out_shape(&out[2], x->dtype, "value", 4, x->shape[0], x->shape[1], gq, d);
  return 0;
}

static int split_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0 || dout[1] < 0 || dout[2] < 0)
    return graph_fail(g, "split_qkv: every output needs a gradient");
  int of[1] = {o.in[0]};
  return ops_grad_op(g, OP_CONCAT_QKV, dout, 3, &o.a, &din[0], of) < 0 ? -1 : 0;
}

static int concat_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  (void)err, (void)n;
  const Tensor *q = ops_in(g, op, 0);
  ops_out_shape(&out[0], q->dtype, "qkv", 3, q->shape[0], q->shape[1],
                (op->a.i[0] + 2 * op->a.i[1]) * op->a.i[2], 1);
  return 0;
}

static int scores_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *q = ops_in(g, op, 0), *k = ops_in(g, op, 1);
  if (q->ndim != 4 || k->ndim != 4 || q->shape[0] != k->shape[0] || q->shape[1] != k->shape[1] ||
      q->shape[3] != k->shape[3] || q->shape[2] % k->shape[2])
    return ops_err(err, n, "expects q (B,T,H,D) and k (B,T,G,D) with G dividing H");
  ops_out_shape(&out[0], q->dtype, "scores", 4, q->shape[0], q->shape[2], q->shape[1], q->shape[1]);
  return 0;
}

static double scores_flops(const Graph *g, const Op *op) {
  const Tensor *q = ops_in(g, op, 0);
  return 2.0 * (double)tensor_numel(q) * (double)q->shape[1];
}

static int scores_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  int in[3] = {dout[0], o.in[0], o.in[1]}, of[2] = {o.in[0], o.in[1]};
  return ops_grad_op(g, OP_ATTN_SCORES_BWD, in, 3, &o.a, din, of) < 0 ? -1 : 0;
}

static int scores_bwd_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  (void)err, (void)n;
  ops_out_like(&out[0], ops_in(g, op, 1), "dq");
  ops_out_like(&out[1], ops_in(g, op, 2), "dk");
  return 0;
}

static int same_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  (void)err, (void)n;
  ops_out_like(&out[0], ops_in(g, op, 0),
               op->kind == OP_SOFTMAX       ? "probs"
               : op->kind == OP_CAUSAL_MASK ? "masked_scores"
                                            : "dx");
  return 0;
}

static int mask_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  OpAttrs a = {.i = {1}};
  int of[1] = {o.in[0]};
  return ops_grad_op(g, OP_CAUSAL_MASK, &dout[0], 1, &a, &din[0], of) < 0 ? -1 : 0;
}

static int softmax_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  int in[2] = {dout[0], o.out[0]}, of[1] = {o.in[0]};
  return ops_grad_op(g, OP_SOFTMAX_BWD, in, 2, NULL, &din[0], of) < 0 ? -1 : 0;
}

static int pv_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *p = ops_in(g, op, 0), *v = ops_in(g, op, 1);
  if (p->ndim != 4 || v->ndim != 4 || p->shape[0] != v->shape[0] || p->shape[2] != v->shape[1] ||
      p->shape[3] != v->shape[1] || p->shape[1] % v->shape[2])
    return ops_err(err, n, "expects p (B,H,T,T) and v (B,T,G,D) with G dividing H");
  ops_out_shape(&out[0], v->dtype, "context", 3, v->shape[0], v->shape[1], p->shape[1] * v->shape[3], 1);
  return 0;
}

static double pv_flops(const Graph *g, const Op *op) {
  const Tensor *p = ops_in(g, op, 0), *v = ops_in(g, op, 1);
  return 2.0 * (double)tensor_numel(p) * (double)v->shape[3];
}

static int pv_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  int in[3] = {dout[0], o.in[0], o.in[1]}, of[2] = {o.in[0], o.in[1]};
  return ops_grad_op(g, OP_ATTN_PV_BWD, in, 3, &o.a, din, of) < 0 ? -1 : 0;
}

static int pv_bwd_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  (void)err, (void)n;
  ops_out_like(&out[0], ops_in(g, op, 1), "dp");
  ops_out_like(&out[1], ops_in(g, op, 2), "dv");
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

const OpInfo op_split_qkv_info = {"split_qkv",
                                  1,
                                  1,
                                  3,
                                  split_infer,
                                  NULL,
                                  split_backward,
                                  {split_cpu_f32, split_cpu_f64},
                                  .facts = {.cost = COST_ROPE_QKV,
                                            .ceiling = CEIL_DRAM,
                                            .inplace = INPLACE_NONE,
                                            .rng = RNG_NONE,
                                            .sink = SINK_NO,
                                            .matmul = MATMUL_NONE,
                                            .ew = &OP_EW_NONE}};
const OpInfo op_concat_qkv_info = {"concat_qkv",
                                   3,
                                   3,
                                   1,
                                   concat_infer,
                                   NULL,
                                   NULL,
                                   {concat_cpu_f32, concat_cpu_f64},
                                   .facts = {.cost = COST_ROPE_QKV,
                                             .ceiling = CEIL_DRAM,
                                             .inplace = INPLACE_NONE,
                                             .rng = RNG_NONE,
                                             .sink = SINK_NO,
                                             .matmul = MATMUL_NONE,
                                             .ew = &OP_EW_NONE}};
const OpInfo op_attn_scores_info = {"attn_scores",
                                    2,
                                    2,
                                    1,
                                    scores_infer,
                                    scores_flops,
                                    scores_backward,
                                    {scores_cpu_f32, scores_cpu_f64},
                                    .facts = {.cost = COST_GEMM,
                                              .ceiling = CEIL_GEMM,
                                              .inplace = INPLACE_NONE,
                                              .rng = RNG_NONE,
                                              .sink = SINK_NO,
                                              .matmul = MATMUL_NONE,
                                              .ew = &OP_EW_NONE}};
const OpInfo op_attn_scores_bwd_info = {"attn_scores_bwd",
                                        3,
                                        3,
                                        2,
                                        scores_bwd_infer,
                                        NULL,
                                        NULL,
                                        {scores_bwd_cpu_f32, scores_bwd_cpu_f64},
                                        .facts = {.cost = COST_GEMM,
                                                  .ceiling = CEIL_GEMM,
                                                  .inplace = INPLACE_NONE,
                                                  .rng = RNG_NONE,
                                                  .sink = SINK_NO,
                                                  .matmul = MATMUL_NONE,
                                                  .ew = &OP_EW_NONE}};
const OpInfo op_causal_mask_info = {"causal_mask",
                                    1,
                                    1,
                                    1,
                                    same_infer,
                                    ops_flops_elementwise,
                                    mask_backward,
                                    {mask_cpu_f32, mask_cpu_f64},
                                    .facts = {.cost = COST_ELEMENTWISE,
                                              .ceiling = CEIL_DRAM,
                                              .inplace = INPLACE_NONE,
                                              .rng = RNG_NONE,
                                              .sink = SINK_NO,
                                              .matmul = MATMUL_NONE,
                                              .ew = &OP_EW_NONE}};
const OpInfo op_softmax_info = {"softmax",
                                1,
                                1,
                                1,
                                same_infer,
                                ops_flops_elementwise,
                                softmax_backward,
                                {softmax_cpu_f32, softmax_cpu_f64},
                                .facts = {.cost = COST_ELEMENTWISE,
                                          .ceiling = CEIL_DRAM,
                                          .inplace = INPLACE_NONE,
                                          .rng = RNG_NONE,
                                          .sink = SINK_NO,
                                          .matmul = MATMUL_NONE,
                                          .ew = &OP_EW_NONE}};
const OpInfo op_softmax_bwd_info = {"softmax_bwd",
                                    2,
                                    2,
                                    1,
                                    same_infer,
                                    ops_flops_elementwise,
                                    NULL,
                                    {softmax_bwd_cpu_f32, softmax_bwd_cpu_f64},
                                    .facts = {.cost = COST_ELEMENTWISE,
                                              .ceiling = CEIL_DRAM,
                                              .inplace = INPLACE_NONE,
                                              .rng = RNG_NONE,
                                              .sink = SINK_NO,
                                              .matmul = MATMUL_NONE,
                                              .ew = &OP_EW_NONE}};
const OpInfo op_attn_pv_info = {"attn_pv",
                                2,
                                2,
                                1,
                                pv_infer,
                                pv_flops,
                                pv_backward,
                                {pv_cpu_f32, pv_cpu_f64},
                                .facts = {.cost = COST_GEMM,
                                          .ceiling = CEIL_GEMM,
                                          .inplace = INPLACE_NONE,
                                          .rng = RNG_NONE,
                                          .sink = SINK_NO,
                                          .matmul = MATMUL_NONE,
                                          .ew = &OP_EW_NONE}};
const OpInfo op_attn_pv_bwd_info = {"attn_pv_bwd",
                                    3,
                                    3,
                                    2,
                                    pv_bwd_infer,
                                    NULL,
                                    NULL,
                                    {pv_bwd_cpu_f32, pv_bwd_cpu_f64},
                                    .facts = {.cost = COST_GEMM,
                                              .ceiling = CEIL_GEMM,
                                              .inplace = INPLACE_NONE,
                                              .rng = RNG_NONE,
                                              .sink = SINK_NO,
                                              .matmul = MATMUL_NONE,
                                              .ew = &OP_EW_NONE}};

#else /* OPS_KERNEL_PASS */

typedef struct {
  const real *a, *b, *c;
  real *x, *y;
  int64_t bsz, t, h, g, d;
  real scale;
  int flag;
} K(AttnArgs);

/* split (flag 0) / concat (flag 1), per token */
static void K(split_range)(void *p, int64_t lo, int64_t hi) {
  const K(AttnArgs) *a = p;
  int64_t qn = a->h * a->d, kn = a->g * a->d, w = qn + 2 * kn;
  for (int64_t r = lo; r < hi; r++) {
    real *qkv = a->x + r * w;
    real *q = (real *)a->a + r * qn, *k = (real *)a->b + r * kn, *v = (real *)a->c + r * kn;
    if (a->flag) {
      memcpy(qkv, q, (size_t)qn * sizeof(real));
      memcpy(qkv + qn, k, (size_t)kn * sizeof(real));
      memcpy(qkv + qn + kn, v, (size_t)kn * sizeof(real));
    } else {
      memcpy(q, qkv, (size_t)qn * sizeof(real));
      memcpy(k, qkv + qn, (size_t)kn * sizeof(real));
      memcpy(v, qkv + qn + kn, (size_t)kn * sizeof(real));
    }
  }
}

static void K(split_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]];
  K(AttnArgs)
  a = {out[0],      out[1],     out[2],     in[0],      NULL, x->shape[0],
       x->shape[1], op->a.i[0], op->a.i[1], op->a.i[2], 0,    0};
  c->parallel_for(c, x->shape[0] * x->shape[1], K(split_range), &a);
}

static void K(concat_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *q = &c->g->t[op->in[0]];
  K(AttnArgs)
  a = {in[0], in[1], in[2], out[0], NULL, q->shape[0], q->shape[1], op->a.i[0], op->a.i[1], op->a.i[2], 0, 1};
  c->parallel_for(c, q->shape[0] * q->shape[1], K(split_range), &a);
}

/* Index helpers: q/o rows are (b, t, h), k/v rows are (b, t, g), score rows are (b, h, i). */
#define QIDX(a, b_, t_, h_) ((((b_) * (a)->t + (t_)) * (a)->h + (h_)) * (a)->d)
#define KIDX(a, b_, t_, g_) ((((b_) * (a)->t + (t_)) * (a)->g + (g_)) * (a)->d)
#define SIDX(a, b_, h_, i_) ((((b_) * (a)->h + (h_)) * (a)->t + (i_)) * (a)->t)

/* scores rows r = (b, h, i): s = scale q_i . k_j */
static void K(scores_range)(void *p, int64_t lo, int64_t hi) {
  const K(AttnArgs) *a = p;
  for (int64_t r = lo; r < hi; r++) {
    int64_t i = r % a->t, h = (r / a->t) % a->h, b = r / (a->t * a->h), gq = h / (a->h / a->g);
    const real *q = a->a + QIDX(a, b, i, h);
    for (int64_t j = 0; j < a->t; j++) {
      const real *k = a->b + KIDX(a, b, j, gq);
      real s = 0;
      for (int64_t d = 0; d < a->d; d++)
        s += q[d] * k[d];
      a->x[r * a->t + j] = s * a->scale;
    }
  }
}

static void K(scores_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *q = &c->g->t[op->in[0]], *k = &c->g->t[op->in[1]];
  K(AttnArgs)
  a = {in[0],       in[1],       NULL,        out[0],           NULL, q->shape[0], q->shape[1],
       q->shape[2], k->shape[2], q->shape[3], (real)op->a.f[0], 0};
  c->parallel_for(c, a.bsz * a.h * a.t, K(scores_range), &a);
}

/* dq rows (b, h, i): dq_i = scale sum_j ds_ij k_j */
static void K(scores_bwd_q)(void *p, int64_t lo, int64_t hi) {
  const K(AttnArgs) *a = p;
  for (int64_t r = lo; r < hi; r++) {
    int64_t i = r % a->t, h = (r / a->t) % a->h, b = r / (a->t * a->h), gq = h / (a->h / a->g);
    real *dq = a->x + QIDX(a, b, i, h);
    const real *ds = a->c + r * a->t;
    for (int64_t d = 0; d < a->d; d++)
      dq[d] = 0;
    for (int64_t j = 0; j < a->t; j++) {
      const real *k = a->b + KIDX(a, b, j, gq);
      for (int64_t d = 0; d < a->d; d++)
        dq[d] += ds[j] * k[d];
    }
    for (int64_t d = 0; d < a->d; d++)
      dq[d] *= a->scale;
  }
}

/* dk rows (b, j, g): dk_j = scale sum_{h in g} sum_i ds_hij q_hi */
static void K(scores_bwd_k)(void *p, int64_t lo, int64_t hi) {
  const K(AttnArgs) *a = p;
  int64_t rep = a->h / a->g;
  for (int64_t r = lo; r < hi; r++) {
    int64_t gq = r % a->g, j = (r / a->g) % a->t, b = r / (a->g * a->t);
    real *dk = a->y + r * a->d;
    for (int64_t d = 0; d < a->d; d++)
      dk[d] = 0;
    for (int64_t h = gq * rep; h < (gq + 1) * rep; h++)
      for (int64_t i = 0; i < a->t; i++) {
        real ds = a->c[SIDX(a, b, h, i) + j];
        const real *q = a->a + QIDX(a, b, i, h);
        for (int64_t d = 0; d < a->d; d++)
          dk[d] += ds * q[d];
      }
    for (int64_t d = 0; d < a->d; d++)
      dk[d] *= a->scale;
  }
}

static void K(scores_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *q = &c->g->t[op->in[1]], *k = &c->g->t[op->in[2]];
  K(AttnArgs)
  a = {in[1],       in[2],       in[0],       out[0],      out[1],           q->shape[0],
       q->shape[1], q->shape[2], k->shape[2], q->shape[3], (real)op->a.f[0], 0};
  c->parallel_for(c, a.bsz * a.h * a.t, K(scores_bwd_q), &a);
  c->parallel_for(c, a.bsz * a.t * a.g, K(scores_bwd_k), &a);
}

typedef struct {
  const real *x, *y;
  real *out;
  int64_t t;
  int fill_zero;
} K(RowArgs);

static void K(mask_range)(void *p, int64_t lo, int64_t hi) {
  const K(RowArgs) *a = p;
  for (int64_t r = lo; r < hi; r++) {
    int64_t i = r % a->t;
    for (int64_t j = 0; j < a->t; j++)
      a->out[r * a->t + j] = j > i ? (a->fill_zero ? 0 : -INFINITY) : a->x[r * a->t + j];
  }
}

static void K(mask_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *s = &c->g->t[op->in[0]];
  K(RowArgs) a = {in[0], NULL, out[0], ops_last(s), (int)op->a.i[0]};
  c->parallel_for(c, ops_rows(s), K(mask_range), &a);
}

static void K(softmax_range)(void *p, int64_t lo, int64_t hi) {
  const K(RowArgs) *a = p;
  for (int64_t r = lo; r < hi; r++) {
    const real *x = a->x + r * a->t;
    real *y = a->out + r * a->t, m = -INFINITY, s = 0;
    for (int64_t j = 0; j < a->t; j++)
      m = x[j] > m ? x[j] : m;
    for (int64_t j = 0; j < a->t; j++)
      s += (y[j] = REXP(x[j] - m));
    for (int64_t j = 0; j < a->t; j++)
      y[j] /= s;
  }
}

static void K(softmax_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *s = &c->g->t[op->in[0]];
  K(RowArgs) a = {in[0], NULL, out[0], ops_last(s), 0};
  c->parallel_for(c, ops_rows(s), K(softmax_range), &a);
}

/* ds = p (dp - sum(dp p)) */
static void K(softmax_bwd_range)(void *p, int64_t lo, int64_t hi) {
  const K(RowArgs) *a = p;
  for (int64_t r = lo; r < hi; r++) {
    const real *dp = a->x + r * a->t, *pr = a->y + r * a->t;
    real s = 0;
    for (int64_t j = 0; j < a->t; j++)
      s += dp[j] * pr[j];
    for (int64_t j = 0; j < a->t; j++)
      a->out[r * a->t + j] = pr[j] * (dp[j] - s);
  }
}

static void K(softmax_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *s = &c->g->t[op->in[0]];
  K(RowArgs) a = {in[0], in[1], out[0], ops_last(s), 0};
  c->parallel_for(c, ops_rows(s), K(softmax_bwd_range), &a);
}

/* o rows (b, i, h): o = sum_j p_hij v_j */
static void K(pv_range)(void *p, int64_t lo, int64_t hi) {
  const K(AttnArgs) *a = p;
  for (int64_t r = lo; r < hi; r++) {
    int64_t h = r % a->h, i = (r / a->h) % a->t, b = r / (a->h * a->t), gq = h / (a->h / a->g);
    real *o = a->x + r * a->d;
    const real *pr = a->a + SIDX(a, b, h, i);
    for (int64_t d = 0; d < a->d; d++)
      o[d] = 0;
    for (int64_t j = 0; j < a->t; j++) {
      const real *v = a->b + KIDX(a, b, j, gq);
      for (int64_t d = 0; d < a->d; d++)
        o[d] += pr[j] * v[d];
    }
  }
}

static void K(pv_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *pt = &c->g->t[op->in[0]], *v = &c->g->t[op->in[1]];
  K(AttnArgs)
  a = {in[0],       in[1],        NULL,        out[0],      NULL, v->shape[0],
       v->shape[1], pt->shape[1], v->shape[2], v->shape[3], 1,    0};
  c->parallel_for(c, a.bsz * a.t * a.h, K(pv_range), &a);
}

/* dp rows (b, h, i): dp_ij = do_i . v_j */
static void K(pv_bwd_p)(void *p, int64_t lo, int64_t hi) {
  const K(AttnArgs) *a = p;
  for (int64_t r = lo; r < hi; r++) {
    int64_t i = r % a->t, h = (r / a->t) % a->h, b = r / (a->t * a->h), gq = h / (a->h / a->g);
    const real *dout = a->c + QIDX(a, b, i, h);
    for (int64_t j = 0; j < a->t; j++) {
      const real *v = a->b + KIDX(a, b, j, gq);
      real s = 0;
      for (int64_t d = 0; d < a->d; d++)
        s += dout[d] * v[d];
      a->x[r * a->t + j] = s;
    }
  }
}

/* dv rows (b, j, g): dv_j = sum_{h in g} sum_i p_hij do_hi */
static void K(pv_bwd_v)(void *p, int64_t lo, int64_t hi) {
  const K(AttnArgs) *a = p;
  int64_t rep = a->h / a->g;
  for (int64_t r = lo; r < hi; r++) {
    int64_t gq = r % a->g, j = (r / a->g) % a->t, b = r / (a->g * a->t);
    real *dv = a->y + r * a->d;
    for (int64_t d = 0; d < a->d; d++)
      dv[d] = 0;
    for (int64_t h = gq * rep; h < (gq + 1) * rep; h++)
      for (int64_t i = 0; i < a->t; i++) {
        real pij = a->a[SIDX(a, b, h, i) + j];
        const real *dout = a->c + QIDX(a, b, i, h);
        for (int64_t d = 0; d < a->d; d++)
          dv[d] += pij * dout[d];
      }
  }
}

static void K(pv_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *pt = &c->g->t[op->in[1]], *v = &c->g->t[op->in[2]];
  K(AttnArgs)
  a = {in[1],       in[2],        in[0],       out[0],      out[1], v->shape[0],
       v->shape[1], pt->shape[1], v->shape[2], v->shape[3], 1,      0};
  c->parallel_for(c, a.bsz * a.h * a.t, K(pv_bwd_p), &a);
  c->parallel_for(c, a.bsz * a.t * a.g, K(pv_bwd_v), &a);
}

#undef QIDX
#undef KIDX
#undef SIDX
#endif
