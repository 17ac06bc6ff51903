/* embedding.c — EMBED (word embeddings: y[b,t] = W[tok[b,t]]), POS_ADD (learned absolute
 * positions: y[b,t] = x[b,t] + P[t]) and their gradients.
 *
 * EMBED_BWD takes the vocabulary size as i[0] rather than W itself, so that the backward does not
 * appear to read the table. POS_ADD_BWD likewise takes the table's row count as i[0].
 *
 * Sequence parallelism: POS_ADD's i[0] = 1 (POS_ADD_BWD's i[1] = 1) when x holds this TP rank's
 * block of each sequence, rows [rank * T_l, (rank + 1) * T_l) (ir/ops/tp.c's TP_SCATTER): row t
 * adds P[rank * T_l + t], and the gradient is the rank's rows of dP, zero elsewhere (the optimizer
 * sums a replicated parameter's gradient over the group under SP).
 *
 * Vocab-parallel (tensor parallelism, Megatron's VocabParallelEmbedding): EMBED's i[0] = 1 (and
 * EMBED_BWD's i[1] = 1) when W is this TP rank's rows [rank * V_l, (rank + 1) * V_l) of the table:
 * a token outside them gives a zero row (the TP_ALLREDUCE or TP_SCATTER that follows sums the one
 * rank's row in) and no gradient. An out-of-range token reads global row 0, as one rank does. */
#ifndef OPS_KERNEL_PASS
#include "ops/ops.h"

static int embed_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *tok = ops_in(g, op, 0), *w = ops_in(g, op, 1);
  if (tok->dtype != DT_I32 || tok->ndim != 2 || w->ndim != 2)
    return ops_err(err, n, "expects tokens (B, T) int32 and a table (V, C)");
  ops_out_shape(&out[0], w->dtype, "out", 3, tok->shape[0], tok->shape[1], w->shape[1], 1);
  return 0;
}

static int embed_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  OpAttrs a = {.i = {g->t[o.in[1]].shape[0], o.a.i[0]}};
  int in[2] = {dout[0], o.in[0]}, of[1] = {o.in[1]};
  return ops_grad_op(g, OP_EMBED_BWD, in, 2, &a, &din[1], of) < 0 ? -1 : 0;
}

static int embed_bwd_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *dy = ops_in(g, op, 0);
  if (op->a.i[0] <= 0) return ops_err(err, n, "i[0] (vocabulary size) must be set");
  ops_out_shape(&out[0], dy->dtype, "wgrad", 2, op->a.i[0], ops_last(dy), 1, 1);
  return 0;
}

static int pos_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0), *p = ops_in(g, op, 1);
  if (x->ndim != 3 || p->ndim != 2 || p->shape[1] != x->shape[2] ||
      (!op->a.i[0] && p->shape[0] < x->shape[1]))
    return ops_err(err, n, "expects x (B, T, C) and a table (S >= T, C)");
  ops_out_like(&out[0], x, "out");
  return 0;
}

static int pos_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  din[0] = dout[0];
  OpAttrs a = {.i = {g->t[o.in[1]].shape[0], o.a.i[0]}};
  int of[1] = {o.in[1]};
  return ops_grad_op(g, OP_POS_ADD_BWD, &dout[0], 1, &a, &din[1], of) < 0 ? -1 : 0;
}

static int pos_bwd_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *dy = ops_in(g, op, 0);
  if (op->a.i[0] < dy->shape[1]) return ops_err(err, n, "i[0] (table rows) must be >= T");
  ops_out_shape(&out[0], dy->dtype, "wgrad", 2, op->a.i[0], dy->shape[2], 1, 1);
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

const OpInfo op_embed_info = {"embed",
                              2,
                              2,
                              1,
                              embed_infer,
                              NULL,
                              embed_backward,
                              {embed_cpu_f32, embed_cpu_f64},
                              .facts = {.cost = COST_EMBEDDING,
                                        .ceiling = CEIL_DRAM,
                                        .inplace = INPLACE_NONE,
                                        .rng = RNG_NONE,
                                        .sink = SINK_NO,
                                        .matmul = MATMUL_NONE,
                                        .ew = &OP_EW_NONE}};
const OpInfo op_embed_bwd_info = {"embed_bwd",
                                  2,
                                  2,
                                  1,
                                  embed_bwd_infer,
                                  NULL,
                                  NULL,
                                  {embed_bwd_cpu_f32, embed_bwd_cpu_f64},
                                  .facts = {.cost = COST_EMBEDDING,
                                            .ceiling = CEIL_DRAM,
                                            .inplace = INPLACE_NONE,
                                            .rng = RNG_NONE,
                                            .sink = SINK_YES,
                                            .matmul = MATMUL_NONE,
                                            .ew = &OP_EW_NONE}};
const OpInfo op_pos_add_info = {"pos_add",
                                2,
                                2,
                                1,
                                pos_infer,
                                ops_flops_elementwise,
                                pos_backward,
                                {pos_cpu_f32, pos_cpu_f64},
                                .facts = {.cost = COST_EMBEDDING,
                                          .ceiling = CEIL_DRAM,
                                          .inplace = INPLACE_NONE,
                                          .rng = RNG_NONE,
                                          .sink = SINK_NO,
                                          .matmul = MATMUL_NONE,
                                          .ew = &OP_EW_NONE}};
const OpInfo op_pos_add_bwd_info = {"pos_add_bwd",
                                    1,
                                    1,
                                    1,
                                    pos_bwd_infer,
                                    NULL,
                                    NULL,
                                    {pos_bwd_cpu_f32, pos_bwd_cpu_f64},
                                    .facts = {.cost = COST_EMBEDDING,
                                              .ceiling = CEIL_DRAM,
                                              .inplace = INPLACE_NONE,
                                              .rng = RNG_NONE,
                                              .sink = SINK_YES,
                                              .matmul = MATMUL_NONE,
                                              .ew = &OP_EW_NONE}};

#else /* OPS_KERNEL_PASS */

typedef struct {
  const int32_t *tok;
  const real *src;
  real *dst;
  int64_t rows, c, v, t;
  int64_t off, all; /* vocab-parallel: this rank's first row and the whole vocabulary (else 0, v) */
} K(EmbArgs);

/* The local row of token r, or -1 when another TP rank holds it. */
static int64_t K(embed_row)(const K(EmbArgs) * a, int64_t r) {
  int64_t v = a->tok[r];
  if (v < 0 || v >= a->all) v = 0; /* out-of-range tokens are a data bug; read row 0, never out of bounds */
  v -= a->off;
  return v >= 0 && v < a->v ? v : -1;
}

static void K(embed_range)(void *p, int64_t lo, int64_t hi) {
  const K(EmbArgs) *a = p;
  for (int64_t r = lo; r < hi; r++) {
    int64_t v = K(embed_row)(a, r);
    if (v >= 0)
      memcpy(a->dst + r * a->c, a->src + v * a->c, (size_t)a->c * sizeof(real));
    else
      memset(a->dst + r * a->c, 0, (size_t)a->c * sizeof(real));
  }
}

static void K(embed_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *tok = &c->g->t[op->in[0]], *w = &c->g->t[op->in[1]];
  K(EmbArgs) a = {in[0], in[1], out[0], tensor_numel(tok), w->shape[1], w->shape[0], 0, 0, w->shape[0]};
  if (op->a.i[0]) a.off = (int64_t)ops_tp_rank(c) * a.v, a.all = a.v * ops_tp_size(c);
  c->parallel_for(c, a.rows, K(embed_range), &a);
}

/* Split over channels: each dW element sums its tokens' contributions in token order. */
static void K(embed_bwd_range)(void *p, int64_t lo, int64_t hi) {
  const K(EmbArgs) *a = p;
  for (int64_t v = 0; v < a->v; v++)
    for (int64_t j = lo; j < hi; j++)
      a->dst[v * a->c + j] = 0;
  for (int64_t r = 0; r < a->rows; r++) {
    int64_t v = K(embed_row)(a, r);
    if (v < 0) continue;
    for (int64_t j = lo; j < hi; j++)
      a->dst[v * a->c + j] += a->src[r * a->c + j];
  }
}

static void K(embed_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *dy = &c->g->t[op->in[0]];
  K(EmbArgs) a = {in[1], in[0], out[0], ops_rows(dy), ops_last(dy), op->a.i[0], 0, 0, op->a.i[0]};
  if (op->a.i[1]) a.off = (int64_t)ops_tp_rank(c) * a.v, a.all = a.v * ops_tp_size(c);
  c->parallel_for(c, a.c, K(embed_bwd_range), &a);
}

typedef struct {
  const real *x, *p;
  real *y;
  int64_t b, t, c, s;
  int64_t off; /* sequence parallel: the table row of this rank's first row (else 0) */
} K(PosArgs);

static void K(pos_range)(void *p, int64_t lo, int64_t hi) {
  const K(PosArgs) *a = p;
  for (int64_t r = lo; r < hi; r++) { /* r = b * T + t */
    const real *pr = a->p + (a->off + r % a->t) * a->c;
    for (int64_t j = 0; j < a->c; j++)
      a->y[r * a->c + j] = a->x[r * a->c + j] + pr[j];
  }
}

static void K(pos_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]];
  K(PosArgs) a = {in[0], in[1], out[0], x->shape[0], x->shape[1], x->shape[2], 0, 0};
  if (op->a.i[0]) a.off = (int64_t)ops_tp_rank(c) * a.t;
  /* a table shorter than the group's sequence (never lowered): NaN, not a read past the table */
  if (a.off + a.t > c->g->t[op->in[1]].shape[0]) {
    for (int64_t i = 0; i < a.b * a.t * a.c; i++)
      a.y[i] = (real)NAN;
    return;
  }
  c->parallel_for(c, a.b * a.t, K(pos_range), &a);
}

static void K(pos_bwd_range)(void *p, int64_t lo, int64_t hi) {
  const K(PosArgs) *a = p;
  for (int64_t r = lo; r < hi; r++) /* r = table row */
    for (int64_t j = 0; j < a->c; j++) {
      real s = 0;
      int64_t t = r - a->off;
      if (t >= 0 && t < a->t)
        for (int64_t b = 0; b < a->b; b++)
          s += a->x[(b * a->t + t) * a->c + j];
      a->y[r * a->c + j] = s;
    }
}

static void K(pos_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *dy = &c->g->t[op->in[0]];
  K(PosArgs) a = {in[0], NULL, out[0], dy->shape[0], dy->shape[1], dy->shape[2], op->a.i[0], 0};
  if (op->a.i[1]) a.off = (int64_t)ops_tp_rank(c) * a.t;
  c->parallel_for(c, a.s, K(pos_bwd_range), &a);
}

#endif
