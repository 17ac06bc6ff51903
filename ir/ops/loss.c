/* loss.c — CROSS_ENTROPY: loss (1) = the sum over the kept tokens of lse(logits) - logits[target],
 * divided by the step's loss denominator D (CpuCtx.loss_den), with the row log-sum-exp (B,T) kept
 * for the backward (which therefore reads logits, targets and lse). A target outside [0, V) (-100,
 * PyTorch's ignore_index) masks its token: loss 0, gradient 0, and it is not counted.
 *
 * Megatron's normalisation: the step's objective is the sum of the kept tokens' losses over the
 * whole global batch (every micro-batch, every data-parallel rank) divided by the number of kept
 * tokens in it. The step averages its micro-batches' losses (the backward seeds each with
 * 1 / num_microbatches, compiler/passes/autodiff.c) and data parallelism averages over ranks, so
 * D = kept tokens of the global batch / (num_microbatches * ranks) gives exactly that objective; with
 * no masked token D = B*T, the plain mean. Run alone (D unset) D is this op's kept tokens, the mean
 * over them (PyTorch's cross_entropy with ignore_index). CROSS_ENTROPY_BWD's first input is the loss
 * gradient (1); each kept token's gradient weighs it / D.
 *
 * Vocab-parallel (tensor parallelism, Megatron's vocab_parallel_cross_entropy): i[0] = 1 (on both
 * ops) when the logits are this TP rank's vocabulary range [rank * V_l, (rank + 1) * V_l) of
 * V = V_l * TP. No rank holds a row's whole logits: the row maxima are all-reduced (max), then
 * the sums of exp(x - max), then the target logits (each the one rank's that holds it); every rank
 * gets the same lse and loss. The backward is local: softmax from the global lse, minus one at the
 * target on the rank that holds it. Targets are kept when in [0, V). */
#ifndef OPS_KERNEL_PASS
#include "ops/ops.h"

static int ce_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0), *tg = ops_in(g, op, 1);
  if (x->ndim != 3 || tg->ndim != 2 || tg->dtype != DT_I32 || x->shape[0] != tg->shape[0] ||
      x->shape[1] != tg->shape[1])
    return ops_err(err, n, "expects logits (B,T,V) and targets (B,T) int32");
  ops_out_shape(&out[0], DT_F32, "loss", 1, 1, 1, 1, 1);
  ops_out_shape(&out[1], DT_F32, "lse", 2, x->shape[0], x->shape[1], 1, 1);
  return 0;
}

static int ce_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  int in[4] = {dout[0], o.in[0], o.in[1], o.out[1]}, of[1] = {o.in[0]};
  return ops_grad_op(g, OP_CROSS_ENTROPY_BWD, in, 4, &o.a, &din[0], of) < 0 ? -1 : 0;
}

static int ce_bwd_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  (void)err, (void)n;
  ops_out_like(&out[0], ops_in(g, op, 1), "dlogits");
  return 0;
}

static double ce_flops(const Graph *g, const Op *op) {
  return 3.0 * (double)tensor_numel(ops_in(g, op, op->kind == OP_CROSS_ENTROPY ? 0 : 1));
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

const OpInfo op_cross_entropy_info = {"cross_entropy",
                                      2,
                                      2,
                                      2,
                                      ce_infer,
                                      ce_flops,
                                      ce_backward,
                                      {ce_cpu_f32, ce_cpu_f64},
                                      .facts = {.cost = COST_LOSS,
                                                .ceiling = CEIL_DRAM,
                                                .inplace = INPLACE_NONE,
                                                .rng = RNG_NONE,
                                                .sink = SINK_NO,
                                                .matmul = MATMUL_NONE,
                                                .ew = &OP_EW_NONE}};
/* in place: dlogits over logits (the CUDA loss kernel writes them in place) */
const OpInfo op_cross_entropy_bwd_info = {"cross_entropy_bwd",
                                          4,
                                          4,
                                          1,
                                          ce_bwd_infer,
                                          ce_flops,
                                          NULL,
                                          {ce_bwd_cpu_f32, ce_bwd_cpu_f64},
                                          .facts = {.cost = COST_LOSS,
                                                    .ceiling = CEIL_DRAM,
                                                    .inplace = INPLACE_IN1,
                                                    .rng = RNG_NONE,
                                                    .sink = SINK_NO,
                                                    .matmul = MATMUL_NONE,
                                                    .ew = &OP_EW_NONE}};

#else /* OPS_KERNEL_PASS */

typedef struct {
  const real *x, *lse, *dloss;
  const int32_t *tg;
  real *y, *olse;
  int64_t rows, v;
  double den;       /* the backward's loss denominator */
  int64_t off, all; /* vocab-parallel: this rank's first logit and the whole vocabulary (else 0, v) */
} K(CeArgs);

/* Vocab-parallel lse (i[0] = 1): the row maxima, then the sums of exp(x - max), all-reduced over the
 * TP group; tl := each row's target logit, summed over the group (0 where another rank holds it). */
static void K(ce_vocab_parallel)(const CpuCtx *c, const K(CeArgs) * a, real *tl) {
  CpuTp *tp = c->tp;
  int f64 = sizeof(real) == 8;
  real *m = malloc((size_t)a->rows * sizeof *m + 1);
  if (!m) { /* no memory: the loss is NaN, not a wrong number */
    for (int64_t r = 0; r < a->rows; r++)
      a->olse[r] = NAN, tl[r] = 0;
    return;
  }
  for (int64_t r = 0; r < a->rows; r++) {
    const real *x = a->x + r * a->v;
    real mx = -INFINITY;
    for (int64_t j = 0; j < a->v; j++)
      mx = x[j] > mx ? x[j] : mx;
    m[r] = mx;
    int64_t t = a->tg[r] - a->off;
    tl[r] = ops_target_kept(a->tg[r], a->all) && t >= 0 && t < a->v ? x[t] : 0;
  }
  if (tp && tp->allreduce(tp, m, a->rows, f64, 1)) tp->failed = 1;
  for (int64_t r = 0; r < a->rows; r++) {
    const real *x = a->x + r * a->v;
    real sum = 0;
    for (int64_t j = 0; j < a->v; j++)
      sum += REXP(x[j] - m[r]);
    a->olse[r] = sum;
  }
  if (tp && tp->allreduce(tp, a->olse, a->rows, f64, 0)) tp->failed = 1;
  if (tp && tp->allreduce(tp, tl, a->rows, f64, 0)) tp->failed = 1;
  for (int64_t r = 0; r < a->rows; r++)
    a->olse[r] = m[r] + RLOG(a->olse[r]);
  free(m);
}

static void K(ce_range)(void *p, int64_t lo, int64_t hi) {
  const K(CeArgs) *a = p;
  for (int64_t r = lo; r < hi; r++) {
    const real *x = a->x + r * a->v;
    real m = -INFINITY, s = 0;
    for (int64_t j = 0; j < a->v; j++)
      m = x[j] > m ? x[j] : m;
    for (int64_t j = 0; j < a->v; j++)
      s += REXP(x[j] - m);
    a->olse[r] = m + RLOG(s);
  }
}

static void K(ce_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]];
  K(CeArgs) a = {.x = in[0], .tg = in[1], .olse = out[1], .rows = ops_rows(x), .v = ops_last(x)};
  a.all = a.v;
  double sum = 0;   /* in token order, in double: the loss is what runs are compared on */
  if (op->a.i[0]) { /* vocab-parallel */
    a.off = (int64_t)ops_tp_rank(c) * a.v, a.all = a.v * ops_tp_size(c);
    real *tl = malloc((size_t)a.rows * sizeof *tl + 1);
    if (tl) K(ce_vocab_parallel)(c, &a, tl);
    for (int64_t r = 0; r < a.rows; r++)
      if (ops_target_kept(a.tg[r], a.all)) sum += tl ? (double)a.olse[r] - (double)tl[r] : NAN;
    free(tl);
  } else {
    c->parallel_for(c, a.rows, K(ce_range), &a);
    for (int64_t r = 0; r < a.rows; r++)
      if (ops_target_kept(a.tg[r], a.v)) sum += (double)a.olse[r] - (double)a.x[r * a.v + a.tg[r]];
  }
  ((real *)out[0])[0] = (real)(sum / ops_loss_den(c, a.tg, a.rows, a.all));
}

static void K(ce_bwd_range)(void *p, int64_t lo, int64_t hi) {
  const K(CeArgs) *a = p;
  real scale = a->dloss[0] / (real)a->den;
  for (int64_t r = lo; r < hi; r++) {
    const real *x = a->x + r * a->v;
    real *dx = a->y + r * a->v;
    int64_t t = a->tg[r];
    real s = ops_target_kept(t, a->all) ? scale : 0; /* a masked token: gradient 0 */
    t -= a->off;                                     /* vocab-parallel: the local column, if here */
    for (int64_t j = 0; j < a->v; j++)
      dx[j] = (REXP(x[j] - a->lse[r]) - (j == t)) * s;
  }
}

static void K(ce_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[1]];
  K(CeArgs)
  a = {.dloss = in[0],
       .x = in[1],
       .tg = in[2],
       .lse = in[3],
       .y = out[0],
       .rows = ops_rows(x),
       .v = ops_last(x)};
  a.all = a.v;
  if (op->a.i[0]) a.off = (int64_t)ops_tp_rank(c) * a.v, a.all = a.v * ops_tp_size(c);
  a.den = ops_loss_den(c, a.tg, a.rows, a.all);
  c->parallel_for(c, a.rows, K(ce_bwd_range), &a);
}

#endif
