/* tp.c — tensor parallelism's collectives as ops (Megatron's megatron/core/tensor_parallel/mappings.py),
 * each a conjugate pair with its gradient, over the rank's TP group (CpuCtx.tp; NULL: one rank,
 * every op an identity):
 *
 *   TP_COPY       y = x                     copy to the TP region: forward identity,
 *                                           backward dx = TP_ALLREDUCE(dy)
 *   TP_ALLREDUCE  y = sum over the group of x   reduce from the TP region: backward identity (dx = dy,
 *                                           no op). Also run in place (graph_op_into, out == in) on
 *                                           main gradients and the norm's sum of squares
 *   TP_GATHER     x (B, T/TP, ...) -> y (B, T, ...)   all-gather along the sequence (dim 1): rank r's
 *                                           rows are y[:, r*T/TP .. (r+1)*T/TP); backward TP_SCATTER
 *   TP_SCATTER    x (B, T, ...) -> y (B, T/TP, ...)   reduce-scatter along the sequence: rank r gets
 *                                           the group's sum of its rows; backward TP_GATHER
 *
 * i[0] = the TP size (the group's ranks; shapes of GATHER / SCATTER follow from it). i[1] = 1 runs
 * TP_ALLREDUCE, TP_GATHER and TP_SCATTER over the expert-parallel group instead (CpuCtx.ep; i[0] its
 * size): the optimizer's sum of the expert gradients' squares (ir/ops/ep.c), and the allgather
 * token dispatcher's all-gather of the tokens, probabilities and expert indices and the
 * reduce-scatter of the experts' outputs (compiler/lower/lower_moe.c). TP_GATHER also takes int32
 * tensors (the expert indices: bytes copied, no gradient); the other collectives are float. Sums are in
 * group-rank order (rank 0 + rank 1 + ...), in the executor's precision, so a run is reproducible;
 * they differ from one rank's single GEMM in rounding only (a row-parallel linear sums TP partial
 * products). Megatron's sequence-parallel layout is [s, b, h] (sequence first); stepc's activations
 * are (B, T, C), so a sequence shard is every sequence's T/TP rows, not one contiguous block.
 *
 *   BIAS_ADD      x (..., C), b (C) -> y = x + b on every row: a row-parallel linear's bias, which
 *                 Megatron's RowParallelLinear adds once, after the reduction (TP_ALLREDUCE, or on
 *                 the rank's rows after TP_SCATTER). Backward dx = dy, db = LINEAR_BGRAD(dy) (under SP
 *                 a replicated parameter's gradient of the rank's rows, summed over the group by the
 *                 optimizer: compiler/passes/optimizer.c).
 *
 * Replicated shard rows (Tensor.tp_rep: linear_qkv's K and V rows when there are fewer key/value
 * groups than TP ranks, each group's rows held by the TP/G ranks whose query heads use it). Each of
 * those ranks' gradient of the rows is its heads' part; the optimizer sums them over the ranks
 * sharing them with one all-reduce over the whole TP group of a zero-padded buffer, built and read
 * by two optimizer-phase ops (graph_op_into; no gradient rule):
 *
 *   TP_REP_PACK    in [g (R, ...)] out [buf (nrep S, ...), g]: buf := zeros but for this rank's part
 *                  of each replicated segment k, at its one-rank rows [k S + (rank / rep) part, + part),
 *                  copied from g's rows [row0 + k part, + part); those rows of g := 0 (so that the
 *                  sharded gradients' sum of squares, all-reduced over TP, counts g's other rows only;
 *                  the all-reduced buf, alike on every rank, counts each replicated row once)
 *   TP_REP_UNPACK  in [buf, g] out [g]: g's rows [row0 + k part, + part) := buf's rows of this rank
 *
 * i[0] = TP, i[1] = rep (the ranks holding each part), i[2] = row0 (the shard's first replicated
 * row), i[3] = nrep (consecutive replicated segments), i[4] = S (a segment's rows in the one-rank
 * tensor); part = S rep / TP rows. Rows are along dim 0 (the rest of g's dims a row). Between the two
 * the optimizer all-reduces buf (TP_ALLREDUCE in place). */
#ifndef OPS_KERNEL_PASS
#include "ops/ops.h"

static int tp_like_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  (void)err, (void)n;
  ops_out_like(&out[0], ops_in(g, op, 0), op->kind == OP_TP_COPY ? "tp_copy" : "tp_sum");
  return 0;
}

static int tp_seq_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0);
  int64_t tp = op->a.i[0];
  if (tp < 1 || x->ndim < 2 || (op->kind == OP_TP_SCATTER && x->shape[1] % tp))
    return ops_err(err, n, "expects x (B, T, ...) with T divisible by i[0] = %lld (the TP size)",
                   (long long)tp);
  if (!dtype_is_float(x->dtype) && (op->kind == OP_TP_SCATTER || x->dtype != DT_I32))
    return ops_err(err, n, "expects a float x (int32 only through the gather: nothing is summed)");
  ops_out_like(&out[0], x, op->kind == OP_TP_GATHER ? "sp_gather" : "sp_scatter");
  out[0].shape[1] = op->kind == OP_TP_GATHER ? x->shape[1] * tp : x->shape[1] / tp;
  return 0;
}

/* copy: the gradient is the group's sum (every rank's branch used the same x) */
static int tp_copy_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  int of[1] = {o.in[0]};
  return ops_grad_op(g, OP_TP_ALLREDUCE, dout, 1, &o.a, &din[0], of) < 0 ? -1 : 0;
}

static int tp_allreduce_backward(Graph *g, int op, const int *dout, int *din) {
  (void)g, (void)op;
  din[0] = dout[0];
  return 0;
}

static int tp_seq_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  int of[1] = {o.in[0]};
  OpKind k = o.kind == OP_TP_GATHER ? OP_TP_SCATTER : OP_TP_GATHER;
  return ops_grad_op(g, k, dout, 1, &o.a, &din[0], of) < 0 ? -1 : 0;
}

static int bias_add_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0), *b = ops_in(g, op, 1);
  if (b->ndim != 1 || b->shape[0] != ops_last(x))
    return ops_err(err, n, "expects b (C) with C = x's last dimension (%lld)", (long long)ops_last(x));
  ops_out_like(&out[0], x, "bias_add");
  return 0;
}

static int bias_add_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  din[0] = dout[0];
  int of[1] = {o.in[1]};
  return ops_grad_op(g, OP_LINEAR_BGRAD, dout, 1, NULL, &din[1], of) < 0 ? -1 : 0;
}

/* The replicated rows' layout of a TP_REP_PACK / _UNPACK op on g (R, ...), checked: part rows of g
 * per segment, and inner elements a row. -1 with err when the attributes do not fit g. */
static int rep_layout(const Op *op, const Tensor *g, int64_t *part, int64_t *inner, char *err, size_t n) {
  int64_t tp = op->a.i[0], rep = op->a.i[1], row0 = op->a.i[2], nrep = op->a.i[3], S = op->a.i[4];
  if (tp < 2 || tp > 1024 || rep < 1 || tp % rep || nrep < 1 || nrep > IR_TP_MAX_SEGS || S < 1 ||
      S > IR_MAX_NUMEL || (S * rep) % tp || row0 < 0 || !dtype_is_float(g->dtype))
    return ops_err(err, n,
                   "expects i[0] = TP (2..1024), i[1] = rep dividing it, i[3] = 1..%d segments of i[4] "
                   "rows whose parts (i[4] rep / TP) are whole, over a float g",
                   IR_TP_MAX_SEGS);
  *part = S * rep / tp;
  *inner = tensor_numel(g) / g->shape[0];
  if (row0 > g->shape[0] || nrep * *part > g->shape[0] - row0)
    return ops_err(err, n, "%lld segments of %lld rows from row %lld do not fit g's %lld rows",
                   (long long)nrep, (long long)*part, (long long)row0, (long long)g->shape[0]);
  return 0;
}

/* buf: g's shape with nrep S rows */
static void rep_buf_shape(const Op *op, const Tensor *g, OpOut *o) {
  ops_out_like(o, g, "tp_rep_rows");
  o->role = ROLE_ACT_GRAD;
  o->shape[0] = op->a.i[3] * op->a.i[4];
}

/* in [g] out [buf, g] */
static int tp_rep_pack_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *gr = ops_in(g, op, 0);
  int64_t part, inner;
  if (rep_layout(op, gr, &part, &inner, err, n)) return -1;
  rep_buf_shape(op, gr, &out[0]);
  ops_out_like(&out[1], gr, "grad");
  out[1].role = gr->role;
  return 0;
}

/* in [buf, g] out [g] */
static int tp_rep_unpack_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *buf = ops_in(g, op, 0), *gr = ops_in(g, op, 1);
  int64_t part, inner;
  if (rep_layout(op, gr, &part, &inner, err, n)) return -1;
  OpOut want;
  rep_buf_shape(op, gr, &want);
  bool same = buf->ndim == want.ndim && buf->dtype == gr->dtype;
  for (int d = 0; same && d < buf->ndim; d++)
    same = buf->shape[d] == want.shape[d];
  if (!same) return ops_err(err, n, "expects buf shaped as g with i[3] i[4] rows, of g's dtype");
  ops_out_like(&out[0], gr, "grad");
  out[0].role = gr->role;
  return 0;
}

/* bytes: PACK writes buf and moves the rank's rows (read, then zeroed); UNPACK copies the rows back */
static double tp_rep_bytes(const Graph *g, const Op *op) {
  const Tensor *gr = &g->t[op->kind == OP_TP_REP_PACK ? op->in[0] : op->in[1]];
  double es = (double)dtype_size(gr->dtype), row = (double)(tensor_numel(gr) / gr->shape[0]),
         rows = (double)(op->a.i[3] * op->a.i[4] * op->a.i[1] / op->a.i[0]);
  return op->kind == OP_TP_REP_PACK ? es * row * ((double)(op->a.i[3] * op->a.i[4]) + 2 * rows)
                                    : es * row * 2 * rows;
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

#define TP_FACTS(inp)                                                                                        \
  .facts = {.cost = COST_OTHER,                                                                              \
            .ceiling = CEIL_DRAM,                                                                            \
            .inplace = inp,                                                                                  \
            .rng = RNG_NONE,                                                                                 \
            .sink = SINK_NO,                                                                                 \
            .matmul = MATMUL_NONE,                                                                           \
            .ew = &OP_EW_NONE}

const OpInfo op_tp_copy_info = {"tp_copy",
                                1,
                                1,
                                1,
                                tp_like_infer,
                                NULL,
                                tp_copy_backward,
                                {tp_copy_cpu_f32, tp_copy_cpu_f64},
                                TP_FACTS(INPLACE_IN0)};
const OpInfo op_tp_allreduce_info = {"tp_allreduce",
                                     1,
                                     1,
                                     1,
                                     tp_like_infer,
                                     NULL,
                                     tp_allreduce_backward,
                                     {tp_allreduce_cpu_f32, tp_allreduce_cpu_f64},
                                     TP_FACTS(INPLACE_IN0)};
const OpInfo op_tp_gather_info = {"tp_gather",
                                  1,
                                  1,
                                  1,
                                  tp_seq_infer,
                                  NULL,
                                  tp_seq_backward,
                                  {tp_gather_cpu_f32, tp_gather_cpu_f64},
                                  TP_FACTS(INPLACE_NONE)};
const OpInfo op_tp_scatter_info = {"tp_scatter",
                                   1,
                                   1,
                                   1,
                                   tp_seq_infer,
                                   NULL,
                                   tp_seq_backward,
                                   {tp_scatter_cpu_f32, tp_scatter_cpu_f64},
                                   TP_FACTS(INPLACE_NONE)};

const OpInfo op_bias_add_info = {"bias_add",
                                 2,
                                 2,
                                 1,
                                 bias_add_infer,
                                 ops_flops_elementwise,
                                 bias_add_backward,
                                 {bias_add_cpu_f32, bias_add_cpu_f64},
                                 .facts = {.cost = COST_ELEMENTWISE,
                                           .ceiling = CEIL_DRAM,
                                           .inplace = INPLACE_IN0,
                                           .rng = RNG_NONE,
                                           .sink = SINK_NO,
                                           .matmul = MATMUL_NONE,
                                           .ew = &OP_EW_NONE}};

const OpInfo op_tp_rep_pack_info = {"tp_rep_pack",
                                    1,
                                    1,
                                    2,
                                    tp_rep_pack_infer,
                                    NULL,
                                    NULL,
                                    {tp_rep_pack_cpu_f32, tp_rep_pack_cpu_f64},
                                    TP_FACTS(INPLACE_NONE),
                                    .bytes = tp_rep_bytes};
const OpInfo op_tp_rep_unpack_info = {"tp_rep_unpack",
                                      2,
                                      2,
                                      1,
                                      tp_rep_unpack_infer,
                                      NULL,
                                      NULL,
                                      {tp_rep_unpack_cpu_f32, tp_rep_unpack_cpu_f64},
                                      TP_FACTS(INPLACE_NONE),
                                      .bytes = tp_rep_bytes};

#else /* OPS_KERNEL_PASS */

/* TP_REP_PACK (pack 1) / TP_REP_UNPACK (pack 0): the layout above; the attributes were checked by
 * the op's infer (at build, and by image_check at load). */
static void K(tp_rep_rows)(const CpuCtx *c, const Op *op, real *g, real *buf, int pack) {
  const Tensor *gt = &c->g->t[op->in[pack ? 0 : 1]];
  int64_t tp = op->a.i[0], rep = op->a.i[1], row0 = op->a.i[2], nrep = op->a.i[3], S = op->a.i[4],
          part = S * rep / tp, inner = tensor_numel(gt) / gt->shape[0];
  if (c->tp && c->tp->size != tp) { /* another group than the op's: its rows would not fit */
    c->tp->failed = 1;
    return;
  }
  int64_t at = (int64_t)(ops_tp_rank(c) / rep) * part; /* this rank's part in a one-rank segment */
  if (pack) memset(buf, 0, (size_t)(nrep * S * inner) * sizeof(real));
  for (int64_t k = 0; k < nrep; k++) {
    real *rows = g + (row0 + k * part) * inner, *b = buf + (k * S + at) * inner;
    size_t bytes = (size_t)(part * inner) * sizeof(real);
    if (pack)
      memcpy(b, rows, bytes), memset(rows, 0, bytes);
    else
      memcpy(rows, b, bytes);
  }
}

static void K(tp_rep_pack_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  if (out[1] != in[0]) /* in place: g is both */
    memcpy(out[1], in[0], (size_t)tensor_numel(&c->g->t[op->in[0]]) * sizeof(real));
  K(tp_rep_rows)(c, op, out[1], out[0], 1);
}

static void K(tp_rep_unpack_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  if (out[0] != in[1]) memcpy(out[0], in[1], (size_t)tensor_numel(&c->g->t[op->in[1]]) * sizeof(real));
  K(tp_rep_rows)(c, op, out[0], in[0], 0);
}

static void K(bias_add_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]];
  int64_t n = tensor_numel(x), C = ops_last(x);
  const real *xs = in[0], *b = in[1];
  real *y = out[0];
  for (int64_t i = 0; i < n; i++)
    y[i] = xs[i] + b[i % C];
}

static void K(tp_copy_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  int64_t n = tensor_numel(&c->g->t[op->in[0]]);
  if (out[0] != in[0]) memcpy(out[0], in[0], (size_t)n * sizeof(real));
}

static void K(tp_allreduce_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  int64_t n = tensor_numel(&c->g->t[op->in[0]]);
  if (out[0] != in[0]) memcpy(out[0], in[0], (size_t)n * sizeof(real));
  CpuTp *tp = op->a.i[1] ? c->ep : c->tp;
  if (tp && tp->size > 1 && tp->allreduce(tp, out[0], n, sizeof(real) == 8, 0)) tp->failed = 1;
}

/* The sequence shards: rank r's block of sequence b is rows [r*tl, (r+1)*tl) of it; `row` elements
 * a row (the dims after T). pack: full (B, T, row) -> per rank (B, tl, row), rank after rank;
 * unpack the reverse. */
static void K(tp_shards)(real *full, real *ranks, int64_t b, int64_t tl, int64_t row, int tp, int pack) {
  size_t blk = (size_t)(tl * row) * sizeof(real);
  for (int r = 0; r < tp; r++)
    for (int64_t i = 0; i < b; i++) {
      real *f = full + (i * tp + r) * tl * row, *s = ranks + ((int64_t)r * b + i) * tl * row;
      if (pack)
        memcpy(s, f, blk);
      else
        memcpy(f, s, blk);
    }
}

/* An int32 x (the expert indices) is gathered as bytes: each int32 a 4-byte element, so the f32
 * pass's shards (sizeof(real) = 4) place it; the f64 pass hands it to the f32 pass's kernel. */
static void K(tp_gather_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]];
#if OPS_REAL == 64
  if (x->dtype == DT_I32) {
    tp_gather_cpu_f32(c, op, in, out);
    return;
  }
#endif
  int64_t n = tensor_numel(x), b = x->shape[0], tl = x->shape[1], row = n / (b * tl);
  CpuTp *tp = op->a.i[1] ? c->ep : c->tp;
  int size = (int)op->a.i[0];
  real *all = size > 1 ? malloc((size_t)(n * size) * sizeof *all) : NULL;
  if (size <= 1) {
    memcpy(out[0], in[0], (size_t)n * sizeof(real));
    return;
  }
  if (!all || !tp || tp->size != size || tp->all_gather(tp, in[0], all, n * (int64_t)sizeof(real))) {
    if (tp) tp->failed = 1;
    free(all);
    return;
  }
  K(tp_shards)(out[0], all, b, tl, row, size, 0);
  free(all);
}

static void K(tp_scatter_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]];
  int size = (int)op->a.i[0];
  int64_t n = tensor_numel(x), b = x->shape[0], tl = x->shape[1] / (size > 0 ? size : 1),
          row = n / x->shape[1] / b;
  CpuTp *tp = op->a.i[1] ? c->ep : c->tp;
  if (size <= 1) {
    memcpy(out[0], in[0], (size_t)n * sizeof(real));
    return;
  }
  real *all = malloc((size_t)n * sizeof *all);
  if (!all || !tp || tp->size != size) {
    if (tp) tp->failed = 1;
    free(all);
    return;
  }
  K(tp_shards)(in[0], all, b, tl, row, size, 1);
  if (tp->reduce_scatter(tp, all, out[0], n / size, sizeof(real) == 8)) tp->failed = 1;
  free(all);
}

#endif
