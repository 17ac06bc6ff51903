/* fp8.c — fp8 linears with per-tensor scaling, as Transformer Engine's two recipes Megatron names:
 * current scaling (Float8CurrentScaling, fp8_recipe = "tensorwise") and delayed scaling
 * (DelayedScaling, fp8_recipe = "delayed"):
 *
 *   current  amax  = max |x| over the whole tensor
 *            scale = fp8_max / amax in fp32 (1 for an amax of 0, inf or NaN; the fp32 maximum where the
 *                    quotient overflows), fp8_max 448 (E4M3) or 57344 (E5M2)
 *   delayed  scale = the tensor's scale in its persistent state (ops/fp8.h: fp8_delayed_scale, from
 *                    the amaxes of earlier steps); the cast folds max |x| into the state's current
 *                    amax entry, and FP8_SCALE_UPDATE later turns the history into the next scale
 *   q     = fp8(x * scale): x * scale rounded once to fp32, then to the nearest value of the format,
 *           ties to the even one, saturated to +-fp8_max (cvt.rn.satfinite); scale_inv = 1 / scale
 *   a product of two fp8 operands = (sum_k qa qb) * scale_inv_a * scale_inv_b, fp32 accumulation
 *
 *   FP8_QUANT   x (M, K) [, st] -> q (M, K), qT (K, M), s (1): q in format i[0] (0 E4M3, 1 E5M2), its
 *               transpose, scale_inv. i[1] = 1: delayed, with the state st (1 + len, n) and column
 *               i[2] (i[3] = 1: records no amax, an evaluation's op_for_eval). The weights' cast (once
 *               a micro-batch) and the output gradients'; its gradient is straight-through: the
 *               gradient of q is x's. Under model.fp8_param the weights' casts read the fp32 masters
 *               and write persistent fp8 weights (ROLE_PARAM_FP8) once a step, after the optimizer
 *               (compiler/lower/lower_blocks.h lb_fp8_param_casts); LINEAR_FP8's gradient of such a
 *               weight goes to its fp32 param.
 *   LINEAR_FP8  x (..., K), wq (N, K), wqT (K, N), sw (1) [, b (N)] [, stx, stdy] -> y (..., N),
 *               xqT (K, M), sx (1), xq (M, K): y = x's cast times wq (+ b), forward format i[0]; xqT
 *               the only copy of x the backward keeps (1 byte an element), xq the row-wise copy the
 *               forward product reads (a workspace, live in the op only). i[2] = 1: delayed, x's
 *               state stx column i[3], and its gradient's cast dy's state stdy column i[4] (i[5] = 1:
 *               x's cast records no amax, an evaluation's op_for_eval). Its
 *               gradient casts dy in the backward format i[1] (FP8_QUANT) and runs two FP8_GEMMs:
 *               dx = dy wq, dwq = dy^T x, the latter passed to the weight through FP8_QUANT's
 *               straight-through rule; a bias's gradient is LINEAR_BGRAD over dy itself.
 *   FP8_GEMM    a (..., K), b (N, K) fp8, sa, sb (1) -> c (..., N) = a b^T sa sb in dtype i[0]: the "TN"
 *               product Hopper's fp8 tensor cores take (both operands contiguous in K), which is why
 *               the casts keep transposed copies.
 *   FP8_SCALE_UPDATE  st (1 + len, n), in place: TE's amax_and_scale_update for every column, format
 *               i[0], amax_compute_algo i[1] (ops/fp8.h: most_recent or max), margin i[2]. Where the
 *               current amax is not 0: the history rolls (entry i takes entry i + 1, the last the
 *               current amax, the current one becomes 0); amax = the current one (most_recent) or the
 *               max over the rolled window (max, 0 when it did not roll); scale = fp8_max / 2^margin /
 *               amax when amax is finite and > 0, else the previous scale; the fp32 maximum where that
 *               overflows. i[3] = 1: first the current amaxes (row 1) := their maximum over every
 *               rank of the job (TE's amax reduction over Megatron's amax group, TP x DP x CP),
 *               so that every rank's scales are alike and a TP shard's are the whole tensor's.
 *
 * The routed experts' grouped fp8 linears (Transformer Engine's GroupedLinear under fp8, Megatron's
 * TEGroupedLinear): every expert's GEMM has its own quantizers, so each cast below is E casts, one an
 * expert, each with its own amax (current scaling) or its own column of the delayed state (expert e's
 * is column i[c] + e); an expert without rows casts nothing (amax 0: scale 1, scale_inv 1) and its
 * products are 0. The expert segments seg (E, 2) int32 are MOE_DISPATCH's (ops/moe_experts.c: rows
 * [seg[e][0], seg[e][0] + seg[e][1]) are expert e's; rows in no segment, empty capacity slots, are
 * cast as 0 and their outputs are 0).
 *
 *   FP8_QUANT_GROUPED  i[4] = 0: w (E, N, K) [, st] -> q (E, N, K), qT (E, K, N), s (E): each expert's
 *               weight cast alone (the experts' weights, once a micro-batch). i[4] = 1: x (R, K), seg
 *               [, st] -> q (R, K), qT (K, R), s (E): each expert's rows cast alone (the output
 *               gradient in the backward). Format i[0]; i[1] = 1 delayed with the state st, expert e
 *               at column i[2] + e (i[3] = 1: records no amax). Its gradient is straight-through.
 *   GROUPED_LINEAR_FP8  x (R, K), wq (E, N, K), wqT (E, K, N), sw (E), seg (E, 2) [, stx, stdy] ->
 *               y (R, N), xqT (K, R), sx (E), xq (R, K): y[r] = xq[r] wq_e^T sx[e] sw[e] for the rows
 *               r of expert e, xq x's per-expert cast (a workspace), xqT the copy the backward keeps.
 *               Attributes as LINEAR_FP8's (i[0], i[1] formats; i[2] = 1 delayed, x's columns from
 *               i[3], dy's from i[4]; i[5] = 1 records no amax). Its gradient casts dy per expert
 *               (FP8_QUANT_GROUPED, i[4] = 1) and runs GROUPED_FP8_DGRAD and GROUPED_FP8_WGRAD.
 *   GROUPED_FP8_DGRAD  a (R, N), b (E, K, N) fp8, sa, sb (E), seg -> c (R, K): c[r] = a[r] b_e^T sa[e]
 *               sb[e] (dx = dy wq_e, from wq's transpose: the "TN" layout), dtype i[0].
 *   GROUPED_FP8_WGRAD  a (N, R), b (K, R) fp8, sa, sb (E), seg -> c (E, N, K): c_e = the sum over
 *               expert e's rows r of a[:, r] b[:, r]^T, times sa[e] sb[e] (dW_e = dy_e^T x_e from both
 *               transposes), dtype i[0].
 *
 * When the delayed state updates (compiler/lower/lower_blocks.c lb_fp8_delayed_updates): the inputs'
 * and output gradients' states at the end of each micro-batch's backward, the weights' once a step
 * (optimizer phase). Transformer Engine updates the forward casts' state when the forward's
 * fp8_autocast exits and the backward's when the first fp8 module's backward ends; no cast reads a
 * forward state in between but a recompute, which TE makes use the forward's scales
 * (get_old_fp8_meta_tensors_for_recompute) and which here sees them unchanged because the update
 * comes after the backward. Megatron casts each weight once a step (is_first_microbatch: the later
 * micro-batches reuse the cached copy, whose amax entry stays 0, so their updates leave its state
 * alone): here every micro-batch recasts it with the same scale (the same bytes) and its state
 * updates once. An evaluation (stepc_eval) casts with the current scales and records no amax, so that
 * the next step is bitwise the one without it (TE's no-grad forward records amaxes that its next
 * update folds in: the one difference, after an evaluation only).
 *
 * The CPU executor keeps the fp8 tensors as their values (unscaled codes' values, exact in fp32);
 * fp8_round is the rounding (ir/ops/fp8.h), checked bit for bit against CUDA's own host conversions
 * (tests/unit/fp8_rounding.c).
 * Every sum is in a fixed order, so a step is reproducible. */
#ifndef OPS_KERNEL_PASS
#include "ops/fp8.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

static int fp8_mbits(int fmt) { return fmt == FP8_E5M2 ? 2 : 3; }
static int fp8_emin(int fmt) { return fmt == FP8_E5M2 ? -14 : -6; } /* exponent of the least normal */
static int fp8_bias(int fmt) { return fmt == FP8_E5M2 ? 15 : 7; }

float fp8_max(int fmt) { return fmt == FP8_E5M2 ? 57344.0f : 448.0f; }

/* The grid's spacing at |x| is 2^(max(e, emin) - mbits), e the exponent of x's leading bit; x over
 * that spacing is exact in double, and nearbyint rounds it to nearest even (the default mode). */
double fp8_round(double x, int fmt) {
  if (isnan(x) || x == 0) return x;
  double a = fabs(x), top = fp8_max(fmt);
  if (a > top)
    return copysign(top, x); /* beyond the largest finite value: a tie above it rounds
                                up, so saturates too (satfinite) */
  int e;
  frexp(a, &e);
  int lead = e - 1 < fp8_emin(fmt) ? fp8_emin(fmt) : e - 1;
  double quantum = ldexp(1.0, lead - fp8_mbits(fmt));
  double r = nearbyint(a / quantum) * quantum;
  return copysign(r > top ? top : r, x);
}

uint8_t fp8_encode(double x, int fmt) {
  double r = fp8_round(x, fmt);
  if (isnan(r)) return 0x7f; /* both formats' NaN with the sign clear, as CUDA's conversion */
  uint8_t sign = signbit(r) ? 0x80 : 0;
  double a = fabs(r);
  if (a == 0) return sign;
  int e, m = fp8_mbits(fmt);
  frexp(a, &e);
  int lead = e - 1;
  if (lead < fp8_emin(fmt)) /* subnormal: exponent field 0, a = mant 2^(emin - m) */
    return (uint8_t)(sign | (uint8_t)ldexp(a, m - fp8_emin(fmt)));
  int mant = (int)(ldexp(a, m - lead)) - (1 << m);
  return (uint8_t)(sign | (uint8_t)((lead + fp8_bias(fmt)) << m) | (uint8_t)mant);
}

double fp8_decode(uint8_t b, int fmt) {
  int m = fp8_mbits(fmt), ebits = 7 - m;
  int ef = (b >> m) & ((1 << ebits) - 1), mant = b & ((1 << m) - 1);
  double v;
  if (fmt == FP8_E4M3 && ef == 15 && mant == 7)
    v = NAN; /* E4M3 has no infinities: S.1111.111 is its NaN */
  else if (fmt == FP8_E5M2 && ef == 31)
    v = mant ? NAN : INFINITY;
  else if (ef == 0)
    v = ldexp((double)mant, fp8_emin(fmt) - m);
  else
    v = ldexp((double)((1 << m) + mant), ef - fp8_bias(fmt) - m);
  return b & 0x80 ? -v : v;
}

float fp8_scale(float amax, int fmt) {
  if (!(amax > 0.0f) || !isfinite(amax)) return 1.0f;
  float s = fp8_max(fmt) / amax;
  return isinf(s) ? FLT_MAX : s;
}

float fp8_scaled_max(int fmt, int margin) { return fp8_max(fmt) * (float)ldexp(1.0, -margin); }

/* A delayed state (ops/fp8.h): fp32 (1 + len, n) with len >= 1 and column col in it. */
static int state_check(const Tensor *st, int64_t col, char *err, size_t n) {
  if (st->dtype != DT_F32 || st->ndim != 2 || st->shape[0] < 2 || col < 0 || col >= st->shape[1])
    return ops_err(err, n, "the delayed-scaling state %s is not fp32 (1 + history, n) with a column %lld",
                   st->name, (long long)col);
  return 0;
}

static int quant_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0);
  if (op->a.i[0] != 0 && op->a.i[0] != 1) return ops_err(err, n, "format i[0] must be 0 (E4M3) or 1 (E5M2)");
  if ((op->a.i[1] != 0 && op->a.i[1] != 1) || (op->nin == 2) != (op->a.i[1] == 1))
    return ops_err(err, n, "i[1] 1 (delayed scaling) takes the state as its second input, 0 none");
  if (op->nin == 2 && state_check(ops_in(g, op, 1), op->a.i[2], err, n)) return -1;
  DType f = op->a.i[0] ? DT_F8E5M2 : DT_F8E4M3;
  ops_out_like(&out[0], x, "fp8");
  out[0].dtype = f;
  ops_out_shape(&out[1], f, "fp8_t", 2, ops_last(x), ops_rows(x), 1, 1);
  ops_out_shape(&out[2], DT_F32, "fp8_scale_inv", 1, 1, 1, 1, 1);
  return 0;
}

/* straight-through: the cast's gradient is the identity (Transformer Engine's) */
static int quant_backward(Graph *g, int op, const int *dout, int *din) {
  (void)g, (void)op;
  din[0] = dout[0];
  return 0;
}

/* LINEAR_FP8's inputs before the delayed states (4, or 5 with a bias). */
static int linear_fp8_nbase(const Op *op) { return op->nin - (op->a.i[2] == 1 ? 2 : 0); }

static int linear_fp8_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0), *wq = ops_in(g, op, 1), *wqt = ops_in(g, op, 2), *sw = ops_in(g, op, 3);
  int nb = linear_fp8_nbase(op);
  if ((op->a.i[2] != 0 && op->a.i[2] != 1) || nb < 4 || nb > 5)
    return ops_err(err, n, "i[2] 1 (delayed scaling) takes two states after x, wq, wqT, sw [, b]; 0 none");
  if (wq->ndim != 2 || ops_last(x) != wq->shape[1] || wqt->ndim != 2 || wqt->shape[0] != wq->shape[1] ||
      wqt->shape[1] != wq->shape[0] || tensor_numel(sw) != 1)
    return ops_err(err, n, "%s (..., %lld) does not match the fp8 weight %s (N, K) and its transpose",
                   x->name, (long long)ops_last(x), wq->name);
  if (nb == 5 && (ops_in(g, op, 4)->ndim != 1 || ops_in(g, op, 4)->shape[0] != wq->shape[0]))
    return ops_err(err, n, "bias %s is not (%lld)", ops_in(g, op, 4)->name, (long long)wq->shape[0]);
  if ((op->a.i[0] != 0 && op->a.i[0] != 1) || (op->a.i[1] != 0 && op->a.i[1] != 1))
    return ops_err(err, n, "formats i[0], i[1] must be 0 (E4M3) or 1 (E5M2)");
  if (op->a.i[2] == 1 && (state_check(ops_in(g, op, nb), op->a.i[3], err, n) ||
                          state_check(ops_in(g, op, nb + 1), op->a.i[4], err, n)))
    return -1;
  DType f = op->a.i[0] ? DT_F8E5M2 : DT_F8E4M3;
  ops_out_like(&out[0], x, "out");
  out[0].shape[x->ndim - 1] = wq->shape[0];
  ops_out_shape(&out[1], f, "fp8_t", 2, ops_last(x), ops_rows(x), 1, 1);
  ops_out_shape(&out[2], DT_F32, "fp8_scale_inv", 1, 1, 1, 1, 1);
  ops_out_shape(&out[3], f, "fp8_rows", 2, ops_rows(x), ops_last(x), 1, 1);
  out[3].role = ROLE_WORKSPACE;
  return 0;
}

static double linear_fp8_flops(const Graph *g, const Op *op) {
  const Tensor *x = ops_in(g, op, 0), *wq = ops_in(g, op, 1);
  return 2.0 * (double)ops_rows(x) * (double)wq->shape[0] * (double)wq->shape[1];
}

/* The backward in the layout Hopper's fp8 products need: dy cast once to both copies. */
static int linear_fp8_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  int dy = dout[0], x = o.in[0], wq = o.in[1], wqt = o.in[2], sw = o.in[3], xqt = o.out[1], sx = o.out[2];
  if (dy < 0) return 0;
  int nb = linear_fp8_nbase(&o), delayed = o.a.i[2] == 1;
  /* dy's cast: delayed, with the output gradients' state (the linear's last input) at column i[4] */
  OpAttrs qa = {.i = {o.a.i[1], delayed, delayed ? o.a.i[4] : 0}};
  int q[3], qin[2] = {dy, delayed ? o.in[nb + 1] : -1};
  if (ops_grad_op(g, OP_FP8_QUANT, qin, delayed ? 2 : 1, &qa, q, NULL) < 0) return -1;
  /* the weight's gradient is named and typed after the weight the cast read (FP8_QUANT passes it on),
   * or, for an fp8 primary weight (ROLE_PARAM_FP8), after its fp32 param */
  int wp = g->t[wq].producer, w = wp >= 0 && g->op[wp].kind == OP_FP8_QUANT ? g->op[wp].in[0] : wq;
  if (g->t[wq].role == ROLE_PARAM_FP8) w = g->t[wq].of;
  OpAttrs ga = {.i = {g->t[dy].dtype}};
  if (g->t[x].role != ROLE_INPUT) {
    int in[4] = {q[0], wqt, q[2], sw}, of[1] = {x};
    if (ops_grad_op(g, OP_FP8_GEMM, in, 4, &ga, &din[0], of) < 0) return -1;
  }
  int in[4] = {q[1], xqt, q[2], sx}, of[1] = {w};
  if (ops_grad_op(g, OP_FP8_GEMM, in, 4, &ga, &din[1], of) < 0) return -1;
  if (nb == 5) {
    int bof[1] = {o.in[4]};
    if (ops_grad_op(g, OP_LINEAR_BGRAD, &dy, 1, NULL, &din[4], bof) < 0) return -1;
  }
  return 0;
}

static int fp8_dtype(DType d) { return d == DT_F8E4M3 || d == DT_F8E5M2; }

static int fp8_gemm_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *a = ops_in(g, op, 0), *b = ops_in(g, op, 1);
  if (!fp8_dtype(a->dtype) || !fp8_dtype(b->dtype) || b->ndim != 2 || ops_last(a) != b->shape[1] ||
      tensor_numel(ops_in(g, op, 2)) != 1 || tensor_numel(ops_in(g, op, 3)) != 1)
    return ops_err(err, n, "expects fp8 a (M, K), b (N, K) and their two scales; got %s, %s", a->name,
                   b->name);
  if (op->a.i[0] != DT_BF16 && op->a.i[0] != DT_F32 && op->a.i[0] != DT_F64)
    return ops_err(err, n, "output dtype i[0] must be bf16 or fp32");
  /* a's leading dims kept: an input gradient has its input's shape (B, T, K), whose dim 1 a
   * sequence-parallel reduce-scatter splits */
  ops_out_like(&out[0], a, "fp8_product");
  out[0].dtype = (DType)op->a.i[0];
  out[0].shape[out[0].ndim - 1] = b->shape[0];
  return 0;
}

static double fp8_gemm_flops(const Graph *g, const Op *op) {
  const Tensor *a = ops_in(g, op, 0), *b = ops_in(g, op, 1);
  return 2.0 * (double)ops_rows(a) * (double)b->shape[0] * (double)b->shape[1];
}

/* The cast reads x twice (its amax, then the cast) and writes both copies. */
static double quant_bytes(const Graph *g, const Op *op) {
  const Tensor *x = ops_in(g, op, 0);
  double n = (double)tensor_numel(x);
  return n * (2.0 * (double)dtype_size(x->dtype) + 2.0);
}

/* LINEAR_FP8: the cast (as FP8_QUANT's) and the product's operands and output, not its workspace
 * twice. */
static double linear_fp8_bytes(const Graph *g, const Op *op) {
  const Tensor *x = ops_in(g, op, 0), *y = &g->t[op->out[0]];
  double n = (double)tensor_numel(x);
  return n * (2.0 * (double)dtype_size(x->dtype) + 2.0) + n + (double)tensor_numel(ops_in(g, op, 1)) +
         (double)tensor_numel(y) * (double)dtype_size(y->dtype);
}

static int scale_update_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  (void)g, (void)op, (void)out;
  return ops_err(err, n, "FP8_SCALE_UPDATE updates its state in place (graph_op_into)");
}

/* The state read and written once. */
static double scale_update_bytes(const Graph *g, const Op *op) {
  return 8.0 * (double)tensor_numel(&g->t[op->out[0]]);
}

/* ---- the routed experts' grouped fp8 linears ---- */

/* seg: MOE_DISPATCH's expert segments, (E, 2) int32 with E = e. */
static int seg_check(const Tensor *seg, int64_t e, char *err, size_t n) {
  if (seg->dtype != DT_I32 || seg->ndim != 2 || seg->shape[0] != e || seg->shape[1] != 2)
    return ops_err(err, n, "the expert segments %s are not (%lld, 2) int32", seg->name, (long long)e);
  return 0;
}

static int gquant_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0);
  int segd = op->a.i[4] == 1, delayed = op->a.i[1] == 1;
  if (op->a.i[0] != 0 && op->a.i[0] != 1) return ops_err(err, n, "format i[0] must be 0 (E4M3) or 1 (E5M2)");
  if ((op->a.i[4] != 0 && !segd) || (op->a.i[1] != 0 && !delayed) || op->nin != 1 + segd + delayed)
    return ops_err(err, n, "takes x [, seg (i[4] = 1)] [, the delayed state (i[1] = 1)]");
  if (segd ? x->ndim != 2 : x->ndim != 3)
    return ops_err(err, n, "%s must be %s", x->name, segd ? "(R, K) with its segments" : "(E, N, K)");
  int64_t e = segd ? ops_in(g, op, 1)->shape[0] : x->shape[0];
  if (segd && seg_check(ops_in(g, op, 1), e, err, n)) return -1;
  if (delayed && (state_check(ops_in(g, op, op->nin - 1), op->a.i[2], err, n) ||
                  state_check(ops_in(g, op, op->nin - 1), op->a.i[2] + e - 1, err, n)))
    return -1;
  DType f = op->a.i[0] ? DT_F8E5M2 : DT_F8E4M3;
  ops_out_like(&out[0], x, "fp8");
  out[0].dtype = f;
  if (segd)
    ops_out_shape(&out[1], f, "fp8_t", 2, x->shape[1], x->shape[0], 1, 1);
  else
    ops_out_shape(&out[1], f, "fp8_t", 3, e, x->shape[2], x->shape[1], 1);
  ops_out_shape(&out[2], DT_F32, "fp8_scale_inv", 1, e, 1, 1, 1);
  return 0;
}

static int glinear_fp8_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0), *wq = ops_in(g, op, 1), *wqt = ops_in(g, op, 2), *sw = ops_in(g, op, 3);
  int delayed = op->a.i[2] == 1;
  if ((op->a.i[2] != 0 && !delayed) || op->nin != (delayed ? 7 : 5))
    return ops_err(err, n, "i[2] 1 (delayed scaling) takes two states after x, wq, wqT, sw, seg; 0 none");
  if (x->ndim != 2 || wq->ndim != 3 || wq->shape[2] != x->shape[1] || wqt->ndim != 3 ||
      wqt->shape[0] != wq->shape[0] || wqt->shape[1] != wq->shape[2] || wqt->shape[2] != wq->shape[1] ||
      tensor_numel(sw) != wq->shape[0])
    return ops_err(
        err, n,
        "%s (R, %lld) does not match the experts' fp8 weights %s (E, N, K), their transposes and scales",
        x->name, (long long)ops_last(x), wq->name);
  int64_t e = wq->shape[0];
  if (seg_check(ops_in(g, op, 4), e, err, n)) return -1;
  if ((op->a.i[0] != 0 && op->a.i[0] != 1) || (op->a.i[1] != 0 && op->a.i[1] != 1))
    return ops_err(err, n, "formats i[0], i[1] must be 0 (E4M3) or 1 (E5M2)");
  for (int k = 0; k < 2 && delayed; k++)
    if (state_check(ops_in(g, op, 5 + k), op->a.i[3 + k], err, n) ||
        state_check(ops_in(g, op, 5 + k), op->a.i[3 + k] + e - 1, err, n))
      return -1;
  DType f = op->a.i[0] ? DT_F8E5M2 : DT_F8E4M3;
  ops_out_shape(&out[0], x->dtype, "out", 2, x->shape[0], wq->shape[1], 1, 1);
  ops_out_shape(&out[1], f, "fp8_t", 2, x->shape[1], x->shape[0], 1, 1);
  ops_out_shape(&out[2], DT_F32, "fp8_scale_inv", 1, e, 1, 1, 1);
  ops_out_shape(&out[3], f, "fp8_rows", 2, x->shape[0], x->shape[1], 1, 1);
  out[3].role = ROLE_WORKSPACE;
  return 0;
}

/* 2 R N K for all three (R the rows, N K an expert's weight) */
static double glinear_fp8_flops(const Graph *g, const Op *op) {
  const Tensor *a = ops_in(g, op, 0), *b = ops_in(g, op, 1);
  if (op->kind == OP_GROUPED_FP8_WGRAD)
    return 2.0 * (double)a->shape[0] * (double)a->shape[1] * (double)b->shape[0];
  return 2.0 * (double)a->shape[0] * (double)b->shape[1] * (double)b->shape[2];
}

/* As linear_fp8_backward, expert by expert: dy cast per expert, once, to both layouts. */
static int glinear_fp8_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  int dy = dout[0], x = o.in[0], wq = o.in[1], wqt = o.in[2], sw = o.in[3], seg = o.in[4], xqt = o.out[1],
      sx = o.out[2];
  if (dy < 0) return 0;
  int delayed = o.a.i[2] == 1;
  OpAttrs qa = {.i = {o.a.i[1], delayed, delayed ? o.a.i[4] : 0, 0, 1}};
  int q[3], qin[3] = {dy, seg, delayed ? o.in[6] : -1};
  if (ops_grad_op(g, OP_FP8_QUANT_GROUPED, qin, delayed ? 3 : 2, &qa, q, NULL) < 0) return -1;
  int wp = g->t[wq].producer, w = wp >= 0 && g->op[wp].kind == OP_FP8_QUANT_GROUPED ? g->op[wp].in[0] : wq;
  if (g->t[wq].role == ROLE_PARAM_FP8) w = g->t[wq].of; /* an fp8 primary weight: its fp32 master */
  OpAttrs ga = {.i = {g->t[dy].dtype}};
  int din_[5] = {q[0], wqt, q[2], sw, seg}, dof[1] = {x};
  if (g->t[x].role != ROLE_INPUT && ops_grad_op(g, OP_GROUPED_FP8_DGRAD, din_, 5, &ga, &din[0], dof) < 0)
    return -1;
  int win[5] = {q[1], xqt, q[2], sx, seg}, wof[1] = {w};
  return ops_grad_op(g, OP_GROUPED_FP8_WGRAD, win, 5, &ga, &din[1], wof) < 0 ? -1 : 0;
}

static int gfp8_gemm_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *a = ops_in(g, op, 0), *b = ops_in(g, op, 1), *sa = ops_in(g, op, 2), *sb = ops_in(g, op, 3);
  bool wgrad = op->kind == OP_GROUPED_FP8_WGRAD;
  int64_t e = ops_in(g, op, 4)->shape[0];
  if (!fp8_dtype(a->dtype) || !fp8_dtype(b->dtype) || a->ndim != 2 || b->ndim != (wgrad ? 2 : 3) ||
      (wgrad ? b->shape[1] != a->shape[1] : b->shape[0] != e || b->shape[2] != a->shape[1]) ||
      tensor_numel(sa) != e || tensor_numel(sb) != e)
    return ops_err(err, n, "expects fp8 %s and the experts' scales; got %s, %s",
                   wgrad ? "a (N, R), b (K, R)" : "a (R, N), b (E, K, N)", a->name, b->name);
  if (seg_check(ops_in(g, op, 4), e, err, n)) return -1;
  if (op->a.i[0] != DT_BF16 && op->a.i[0] != DT_F32 && op->a.i[0] != DT_F64)
    return ops_err(err, n, "output dtype i[0] must be bf16 or fp32");
  if (wgrad)
    ops_out_shape(&out[0], (DType)op->a.i[0], "fp8_product", 3, e, a->shape[0], b->shape[0], 1);
  else
    ops_out_shape(&out[0], (DType)op->a.i[0], "fp8_product", 2, a->shape[0], b->shape[1], 1, 1);
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

const OpInfo op_fp8_quant_info = {"fp8_quant",
                                  1,
                                  2,
                                  3,
                                  quant_infer,
                                  ops_flops_elementwise,
                                  quant_backward,
                                  {quant_cpu_f32, quant_cpu_f64},
                                  .facts = {.cost = COST_FP8_CAST,
                                            .ceiling = CEIL_DRAM,
                                            .inplace = INPLACE_NONE,
                                            .rng = RNG_NONE,
                                            .sink = SINK_NO,
                                            .matmul = MATMUL_NONE,
                                            .ew = &OP_EW_NONE},
                                  .bytes = quant_bytes};
const OpInfo op_linear_fp8_info = {"linear_fp8",
                                   4,
                                   7,
                                   4,
                                   linear_fp8_infer,
                                   linear_fp8_flops,
                                   linear_fp8_backward,
                                   {linear_fp8_cpu_f32, linear_fp8_cpu_f64},
                                   .facts = {.cost = COST_GEMM_FP8,
                                             .ceiling = CEIL_GEMM_FP8,
                                             .inplace = INPLACE_NONE,
                                             .rng = RNG_NONE,
                                             .sink = SINK_NO,
                                             .matmul = MATMUL_FWD,
                                             .ew = &OP_EW_NONE},
                                   .bytes = linear_fp8_bytes};
/* sink: the weight's product may be accumulated (or stored) into the fp32 main gradient */
const OpInfo op_fp8_gemm_info = {"fp8_gemm",
                                 4,
                                 4,
                                 1,
                                 fp8_gemm_infer,
                                 fp8_gemm_flops,
                                 NULL,
                                 {fp8_gemm_cpu_f32, fp8_gemm_cpu_f64},
                                 .facts = {.cost = COST_GEMM_FP8,
                                           .ceiling = CEIL_GEMM_FP8,
                                           .inplace = INPLACE_NONE,
                                           .rng = RNG_NONE,
                                           .sink = SINK_YES,
                                           .matmul = MATMUL_DGRAD,
                                           .ew = &OP_EW_NONE}};

/* in place: the state out[0] (1 + len, n); attributes in ir/ops/fp8.c's header */
const OpInfo op_fp8_scale_update_info = {"fp8_scale_update",
                                         0,
                                         0,
                                         0,
                                         scale_update_infer,
                                         NULL,
                                         NULL,
                                         {scale_update_cpu_f32, scale_update_cpu_f64},
                                         .facts = {.cost = COST_ELEMENTWISE,
                                                   .ceiling = CEIL_DRAM,
                                                   .inplace = INPLACE_NONE,
                                                   .rng = RNG_NONE,
                                                   .sink = SINK_NO,
                                                   .matmul = MATMUL_NONE,
                                                   .ew = &OP_EW_NONE},
                                         .bytes = scale_update_bytes};

/* The routed experts' grouped fp8 linears (on CUDA: compiler/codegen/launch/op_fp8.c, the grouped casts
 * and the fp8 TMA grouped GEMMs). */
const OpInfo op_fp8_quant_grouped_info = {"fp8_quant_grouped",
                                          1,
                                          3,
                                          3,
                                          gquant_infer,
                                          ops_flops_elementwise,
                                          quant_backward,
                                          {gquant_cpu_f32, gquant_cpu_f64},
                                          .facts = {.cost = COST_FP8_CAST,
                                                    .ceiling = CEIL_DRAM,
                                                    .inplace = INPLACE_NONE,
                                                    .rng = RNG_NONE,
                                                    .sink = SINK_NO,
                                                    .matmul = MATMUL_NONE,
                                                    .ew = &OP_EW_NONE},
                                          .bytes = quant_bytes};
const OpInfo op_grouped_linear_fp8_info = {"grouped_linear_fp8",
                                           5,
                                           7,
                                           4,
                                           glinear_fp8_infer,
                                           glinear_fp8_flops,
                                           glinear_fp8_backward,
                                           {glinear_fp8_cpu_f32, glinear_fp8_cpu_f64},
                                           .facts = {.cost = COST_GEMM_FP8,
                                                     .ceiling = CEIL_GEMM_FP8,
                                                     .inplace = INPLACE_NONE,
                                                     .rng = RNG_NONE,
                                                     .sink = SINK_NO,
                                                     .matmul = MATMUL_FWD,
                                                     .ew = &OP_EW_NONE},
                                           .bytes = linear_fp8_bytes};
const OpInfo op_grouped_fp8_dgrad_info = {"grouped_fp8_dgrad",
                                          5,
                                          5,
                                          1,
                                          gfp8_gemm_infer,
                                          glinear_fp8_flops,
                                          NULL,
                                          {gfp8_dgrad_cpu_f32, gfp8_dgrad_cpu_f64},
                                          .facts = {.cost = COST_GEMM_FP8,
                                                    .ceiling = CEIL_GEMM_FP8,
                                                    .inplace = INPLACE_NONE,
                                                    .rng = RNG_NONE,
                                                    .sink = SINK_NO,
                                                    .matmul = MATMUL_DGRAD,
                                                    .ew = &OP_EW_NONE}};
/* sink: the experts' weight gradients may be accumulated (or stored) into the fp32 main gradient */
const OpInfo op_grouped_fp8_wgrad_info = {"grouped_fp8_wgrad",
                                          5,
                                          5,
                                          1,
                                          gfp8_gemm_infer,
                                          glinear_fp8_flops,
                                          NULL,
                                          {gfp8_wgrad_cpu_f32, gfp8_wgrad_cpu_f64},
                                          .facts = {.cost = COST_GEMM_FP8,
                                                    .ceiling = CEIL_GEMM_FP8,
                                                    .inplace = INPLACE_NONE,
                                                    .rng = RNG_NONE,
                                                    .sink = SINK_YES,
                                                    .matmul = MATMUL_WGRAD,
                                                    .ew = &OP_EW_NONE}};

#else /* OPS_KERNEL_PASS */

/* q (M, K) and qT (K, M) (either may be NULL) of x (M, K) in format e5m2; returns scale_inv. Current
 * scaling when st is NULL; else delayed: the scale from st[0], max |x| folded into st[n] (a column
 * of a state, n its width: ops/fp8.h) unless the op runs as an evaluation (record 0). */
static real K(cast)(const real *x, int64_t m, int64_t k, int e5m2, real *q, real *qt, real *st, int64_t n,
                    int record) {
  real amax = 0;
  for (int64_t i = 0; i < m * k; i++) {
    real a = x[i] < 0 ? -x[i] : x[i];
    if (a > amax) amax = a;
  }
  float scale;
  if (st) {
    scale = fp8_delayed_scale((float)st[0]);
    if (record) st[n] = (real)fmaxf((float)st[n], (float)amax);
  } else {
    scale = fp8_scale((float)amax, e5m2);
  }
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < k; j++) {
      real v = (real)fp8_round((double)(float)(x[i * k + j] * (real)scale), e5m2);
      if (q) q[i * k + j] = v;
      if (qt) qt[j * m + i] = v;
    }
  return (real)(1.0f / scale);
}

/* Column `col` of the state tensor t, whose storage is p, and through *n its width. */
static real *K(state_col)(const CpuCtx *c, int t, void *p, int64_t col, int64_t *n) {
  *n = c->g->t[t].shape[1];
  return (real *)p + col;
}

static void K(quant_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]];
  real *s = out[2], *st = NULL;
  int64_t n = 0;
  if (op->a.i[1] == 1) st = K(state_col)(c, op->in[1], in[1], op->a.i[2], &n);
  s[0] = K(cast)(in[0], ops_rows(x), ops_last(x), (int)op->a.i[0], out[0], out[1], st, n, op->a.i[3] != 1);
}

/* c (M, N) = (a b^T) scale (+ bias): LINEAR's product of the quantized values (each element summed
 * over k in order), then the two operands' dequantizing factors */
static void K(fp8_product)(const CpuCtx *c, const real *a, const real *b, real scale, const real *bias,
                           real *out, int64_t m, int64_t n, int64_t k) {
  K(ops_gemm_nt)(c, a, b, NULL, out, m, n, k);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++)
      out[i * n + j] = out[i * n + j] * scale + (bias ? bias[j] : 0);
}

static void K(linear_fp8_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]], *wq = &c->g->t[op->in[1]];
  int64_t m = ops_rows(x), k = ops_last(x);
  const real *sw = in[3];
  real *sx = out[2], *st = NULL;
  int nb = linear_fp8_nbase(op);
  int64_t n = 0;
  if (op->a.i[2] == 1) st = K(state_col)(c, op->in[nb], in[nb], op->a.i[3], &n);
  sx[0] = K(cast)(in[0], m, k, (int)op->a.i[0], out[3], out[1], st, n, op->a.i[5] != 1);
  K(fp8_product)(c, out[3], in[1], sx[0] * sw[0], nb == 5 ? in[4] : NULL, out[0], m, wq->shape[0], k);
}

static void K(fp8_gemm_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *a = &c->g->t[op->in[0]], *b = &c->g->t[op->in[1]];
  const real *sa = in[2], *sb = in[3];
  K(fp8_product)(c, in[0], in[1], sa[0] * sb[0], NULL, out[0], ops_rows(a), b->shape[0], ops_last(a));
}

/* Expert e's rows of the segments seg: [*r0, *r0 + return). */
static int64_t K(seg_rows)(const int32_t *seg, int64_t e, int64_t *r0) {
  *r0 = seg[2 * e];
  return seg[2 * e + 1];
}

/* x (R, K)'s rows cast expert by expert (K(cast) on each segment, expert e's state column st + e)
 * into q (R, K) and its transpose qT (K, R), the rows of no segment 0; s[e] the scale_invs. */
static void K(cast_segments)(const real *x, const int32_t *seg, int64_t e, int64_t r, int64_t k, int fmt,
                             real *q, real *qt, real *s, real *st, int64_t n, int record) {
  memset(q, 0, (size_t)(r * k) * sizeof(real));
  for (int64_t x_ = 0; x_ < e; x_++) {
    int64_t r0, m = K(seg_rows)(seg, x_, &r0);
    s[x_] = K(cast)(x + r0 * k, m, k, fmt, q + r0 * k, NULL, st ? st + x_ : NULL, n, record);
  }
  for (int64_t i = 0; i < r; i++)
    for (int64_t j = 0; j < k; j++)
      qt[j * r + i] = q[i * k + j];
}

static void K(gquant_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]];
  real *s = out[2], *st = NULL;
  int64_t n = 0;
  int fmt = (int)op->a.i[0], record = op->a.i[3] != 1;
  if (op->a.i[1] == 1) st = K(state_col)(c, op->in[op->nin - 1], in[op->nin - 1], op->a.i[2], &n);
  if (op->a.i[4] == 1) {
    const Tensor *seg = &c->g->t[op->in[1]];
    K(cast_segments)
    (in[0], in[1], seg->shape[0], x->shape[0], x->shape[1], fmt, out[0], out[1], s, st, n, record);
    return;
  }
  int64_t e = x->shape[0], nk = x->shape[1] * x->shape[2];
  const real *w = in[0];
  real *q = out[0], *qt = out[1];
  for (int64_t x_ = 0; x_ < e; x_++)
    s[x_] = K(cast)(w + x_ * nk, x->shape[1], x->shape[2], fmt, q + x_ * nk, qt + x_ * nk,
                    st ? st + x_ : NULL, n, record);
}

/* Row-segmented products: out[r] (N') = a[r] (K') b_e^T sa[e] sb[e] for each expert's rows, b (E, N', K');
 * the rows of no segment 0. */
static void K(grouped_rows_product)(const CpuCtx *c, const real *a, const real *b, const real *sa,
                                    const real *sb, const int32_t *seg, int64_t e, real *out, int64_t r,
                                    int64_t n, int64_t k) {
  memset(out, 0, (size_t)(r * n) * sizeof(real));
  for (int64_t x_ = 0; x_ < e; x_++) {
    int64_t r0, m = K(seg_rows)(seg, x_, &r0);
    if (m > 0) K(fp8_product)(c, a + r0 * k, b + x_ * n * k, sa[x_] * sb[x_], NULL, out + r0 * n, m, n, k);
  }
}

static void K(glinear_fp8_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]], *wq = &c->g->t[op->in[1]];
  int64_t e = wq->shape[0], r = x->shape[0], k = x->shape[1];
  real *st = NULL;
  int64_t n = 0;
  if (op->a.i[2] == 1) st = K(state_col)(c, op->in[5], in[5], op->a.i[3], &n);
  K(cast_segments)(in[0], in[4], e, r, k, (int)op->a.i[0], out[3], out[1], out[2], st, n, op->a.i[5] != 1);
  K(grouped_rows_product)(c, out[3], in[1], out[2], in[3], in[4], e, out[0], r, wq->shape[1], k);
}

static void K(gfp8_dgrad_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *a = &c->g->t[op->in[0]], *b = &c->g->t[op->in[1]];
  K(grouped_rows_product)
  (c, in[0], in[1], in[2], in[3], in[4], b->shape[0], out[0], a->shape[0], b->shape[1], b->shape[2]);
}

/* c_e (N, K) = a[:, rows of e] b[:, rows of e]^T sa[e] sb[e], a (N, R), b (K, R): each expert's columns
 * copied to contiguous (N, m), (K, m) first. */
static void K(gfp8_wgrad_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *a = &c->g->t[op->in[0]], *b = &c->g->t[op->in[1]], *seg = &c->g->t[op->in[4]];
  int64_t n = a->shape[0], k = b->shape[0], r = a->shape[1], e = seg->shape[0];
  const real *av = in[0], *bv = in[1], *sa = in[2], *sb = in[3];
  real *cv = out[0];
  memset(cv, 0, (size_t)(e * n * k) * sizeof(real));
  real *ta = malloc((size_t)(n * r + k * r + 1) * sizeof(real)), *tb = ta + n * r;
  if (!ta) return;
  for (int64_t x_ = 0; x_ < e; x_++) {
    int64_t r0, m = K(seg_rows)(in[4], x_, &r0);
    if (m <= 0) continue;
    for (int64_t i = 0; i < n; i++)
      memcpy(ta + i * m, av + i * r + r0, (size_t)m * sizeof(real));
    for (int64_t i = 0; i < k; i++)
      memcpy(tb + i * m, bv + i * r + r0, (size_t)m * sizeof(real));
    K(fp8_product)(c, ta, tb, sa[x_] * sb[x_], NULL, cv + x_ * n * k, n, k, m);
  }
  free(ta);
}

/* Transformer Engine's amax_and_scale_update (delayed_scaling.cu, kernel_bulk) on every column of
 * the state, in fp32: the roll in place, in order (entry i takes entry i + 1 before that one is
 * written), and max as fmaxf (which drops a NaN, as TE's does). */
static void K(scale_update_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  (void)in;
  const Tensor *t = &c->g->t[op->out[0]];
  int64_t n = t->shape[1], len = t->shape[0] - 1;
  float top = fp8_scaled_max((int)op->a.i[0], (int)op->a.i[2]);
  real *st = out[0];
  CpuTp *grp = c->amax;
  if (op->a.i[3] == 1 && grp && grp->size > 1 && grp->allreduce(grp, st + n, n, sizeof(real) == 8, 1))
    grp->failed = 1;
  for (int64_t j = 0; j < n; j++) {
    real *h = st + n + j;
    float last = (float)h[0], amax = 0.0f;
    if (last != 0.0f)
      for (int64_t i = 0; i < len; i++) {
        float a = i < len - 1 ? (float)h[(i + 1) * n] : last;
        amax = fmaxf(amax, a);
        h[i * n] = i > 0 ? (real)a : 0;
      }
    if (op->a.i[1] == FP8_AMAX_MOST_RECENT) amax = last;
    float scale = isfinite(amax) && amax > 0.0f ? top / amax : fp8_delayed_scale((float)st[j]);
    st[j] = (real)(isinf(scale) ? FLT_MAX : scale);
  }
}

#endif /* OPS_KERNEL_PASS */
