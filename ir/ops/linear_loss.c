/* linear_loss.c — the output layer and its loss over chunks of the tokens, so that only one
 * chunk's logits exist at a time (model.output_layer_chunks, docs/recipe-reference.md).
 *
 * LINEAR_CROSS_ENTROPY: in (x (B,T,C), W (V,C), targets (B,T) int32), a.i[0] = chunks (divides
 * B*T); out (loss (1) fp32, token_loss (B,T) fp32, logits_chunk (B*T/chunks, V) workspace). The
 * rows of x, in order, split into `chunks` runs of n = B*T/chunks; chunk c's logits
 * x[c n : (c+1) n] W^T go through the cross entropy (a target outside [0, V) is ignored: loss 0,
 * gradient 0, not counted); token_loss[r] = lse(logits[r]) - logits[r][target]; loss = the sum of
 * token_loss in token order / D, the loss denominator CROSS_ENTROPY over the whole logits divides
 * by (ir/ops/loss.c: the step's, else the op's kept tokens).
 *
 * LINEAR_CROSS_ENTROPY_BWD: in (dloss (1), x, W, targets), a.i[0] = chunks; out (dx like x,
 * dW like W): per chunk, dlogits = dloss / D (softmax - onehot), dx rows = dlogits W,
 * dW += dlogits^T x rows, summed over the chunks in order. Run alone (the CPU reference) it
 * recomputes each chunk's logits; the CUDA executor runs it inside the forward's launch, over the
 * forward's logits chunk, where the loss gradient is a constant (compiler/passes/fuse.c), so each chunk is
 * multiplied once and its gradient taken in place.
 *
 * The reference kernels run the op table's own LINEAR, CROSS_ENTROPY(_BWD), LINEAR_DGRAD and
 * LINEAR_WGRAD kernels on each chunk, so a chunk computes what those ops compute on its rows. */
#ifndef OPS_KERNEL_PASS
#include "ops/ops.h"

static int lce_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0), *w = ops_in(g, op, 1), *tg = ops_in(g, op, 2);
  int64_t rows = ops_rows(x), chunks = op->a.i[0];
  if (w->ndim != 2 || ops_last(x) != w->shape[1])
    return ops_err(err, n, "%s (..., %lld) does not match the output weight %s (V, C=%lld)", x->name,
                   (long long)ops_last(x), w->name, (long long)w->shape[1]);
  if (tg->dtype != DT_I32 || tensor_numel(tg) != rows)
    return ops_err(err, n, "expects one int32 target per row of %s", x->name);
  if (chunks < 1 || rows % chunks)
    return ops_err(err, n, "%lld chunks do not divide the %lld tokens", (long long)chunks, (long long)rows);
  ops_out_shape(&out[0], DT_F32, "loss", 1, 1, 1, 1, 1);
  ops_out_like(&out[1], tg, "token_loss");
  out[1].dtype = DT_F32;
  ops_out_shape(&out[2], x->dtype, "logits_chunk", 2, rows / chunks, w->shape[0], 1, 1);
  out[2].role = ROLE_WORKSPACE;
  return 0;
}

static int lce_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  int in[4] = {dout[0], o.in[0], o.in[1], o.in[2]}, out[2], of[2] = {o.in[0], o.in[1]};
  if (ops_grad_op(g, OP_LINEAR_CROSS_ENTROPY_BWD, in, 4, &o.a, out, of) < 0) return -1;
  din[0] = out[0], din[1] = out[1];
  return 0;
}

static int lce_bwd_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  (void)err, (void)n;
  ops_out_like(&out[0], ops_in(g, op, 1), "dx");
  ops_out_like(&out[1], ops_in(g, op, 2), "dw");
  return 0;
}

/* The logits product, plus 4 products (dgrad, wgrad) in the backward; the cross entropy's 3 per
 * logit in each (its forward, then its gradient). A backward run alone multiplies the logits once
 * more (the reference's recompute), not counted: fused, the forward's product serves it. */
static double lce_flops(const Graph *g, const Op *op) {
  int bwd = op->kind == OP_LINEAR_CROSS_ENTROPY_BWD;
  const Tensor *x = ops_in(g, op, bwd), *w = ops_in(g, op, bwd + 1);
  double logits = (double)ops_rows(x) * (double)w->shape[0];
  return (bwd ? 4.0 : 2.0) * logits * (double)w->shape[1] + 3.0 * logits;
}

/* One chunk's tensors, for the op table's kernels: they read shapes from their context's graph. */
enum { LC_X, LC_W, LC_LOGITS, LC_TG, LC_LOSS, LC_LSE, LC_DLOSS, LC_DX, LC_DW, LC_N };
typedef struct {
  Tensor t[LC_N];
  Graph g;
  CpuCtx c;
  int prec; /* the op table's cpu[] index: 0 fp32, 1 fp64 */
} LcChunk;

static void lc_shape(Tensor *t, int64_t rows, int64_t cols) {
  t->ndim = 2;
  t->shape[0] = rows, t->shape[1] = cols, t->shape[2] = t->shape[3] = 1;
}

static void lc_init(LcChunk *k, const CpuCtx *c, int prec, int64_t n, int64_t v, int64_t d) {
  memset(k, 0, sizeof *k);
  lc_shape(&k->t[LC_X], n, d);
  lc_shape(&k->t[LC_W], v, d);
  lc_shape(&k->t[LC_LOGITS], n, v);
  lc_shape(&k->t[LC_TG], n, 1);
  lc_shape(&k->t[LC_LOSS], 1, 1);
  lc_shape(&k->t[LC_LSE], n, 1);
  lc_shape(&k->t[LC_DLOSS], 1, 1);
  lc_shape(&k->t[LC_DX], n, d);
  lc_shape(&k->t[LC_DW], v, d);
  k->g.t = k->t;
  k->g.nt = LC_N;
  k->c = *c;
  k->c.g = &k->g;
  k->prec = prec;
}

/* Runs the op table's kernel of `kind` on chunk tensors in[0..nin) -> out[0..nout) at pin / pout. */
static void lc_run(const LcChunk *k, OpKind kind, int nin, const int *in, void *const *pin, int nout,
                   const int *out, void *const *pout) {
  Op op = {.kind = kind, .nin = nin, .nout = nout};
  memcpy(op.in, in, (size_t)nin * sizeof *in);
  memcpy(op.out, out, (size_t)nout * sizeof *out);
  op_info(kind)->cpu[k->prec](&k->c, &op, pin, pout);
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

/* cost class gemm: its products dominate (cost.c times its launch with a model of its own);
 * ceiling DRAM, as the roofline has always had it (only an unfused backward takes the plain
 * roofline, and the CUDA executor refuses that one) */
const OpInfo op_linear_cross_entropy_info = {"linear_cross_entropy",
                                             3,
                                             3,
                                             3,
                                             lce_infer,
                                             lce_flops,
                                             lce_backward,
                                             {lce_cpu_f32, lce_cpu_f64},
                                             .facts = {.cost = COST_GEMM,
                                                       .ceiling = CEIL_DRAM,
                                                       .inplace = INPLACE_NONE,
                                                       .rng = RNG_NONE,
                                                       .sink = SINK_NO,
                                                       .matmul = MATMUL_NONE,
                                                       .ew = &OP_EW_NONE}};
/* sink: its dW (output 1) adds each chunk's product into the main gradient */
const OpInfo op_linear_cross_entropy_bwd_info = {"linear_cross_entropy_bwd",
                                                 4,
                                                 4,
                                                 2,
                                                 lce_bwd_infer,
                                                 lce_flops,
                                                 NULL,
                                                 {lce_bwd_cpu_f32, lce_bwd_cpu_f64},
                                                 .facts = {.cost = COST_GEMM,
                                                           .ceiling = CEIL_DRAM,
                                                           .inplace = INPLACE_NONE,
                                                           .rng = RNG_NONE,
                                                           .sink = SINK_YES,
                                                           .matmul = MATMUL_NONE,
                                                           .ew = &OP_EW_NONE}};

#else /* OPS_KERNEL_PASS */

static void K(lce_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]], *w = &c->g->t[op->in[1]];
  int64_t rows = ops_rows(x), d = ops_last(x), v = w->shape[0], n = rows / op->a.i[0];
  const real *xp = in[0];
  const int32_t *tg = in[2];
  real *tok = out[1], *logits = out[2], chunk_loss;
  LcChunk k;
  lc_init(&k, c, OPS_REAL == 64, n, v, d);
  for (int64_t r0 = 0; r0 < rows; r0 += n) {
    lc_run(&k, OP_LINEAR, 2, (int[]){LC_X, LC_W}, (void *[]){(void *)(xp + r0 * d), in[1]}, 1,
           (int[]){LC_LOGITS}, (void *[]){logits});
    lc_run(&k, OP_CROSS_ENTROPY, 2, (int[]){LC_LOGITS, LC_TG}, (void *[]){logits, (void *)(tg + r0)}, 2,
           (int[]){LC_LOSS, LC_LSE}, (void *[]){&chunk_loss, tok + r0});
    for (int64_t r = 0; r < n; r++) { /* the row's log-sum-exp becomes its loss */
      int32_t t = tg[r0 + r];
      tok[r0 + r] = t >= 0 && t < v ? tok[r0 + r] - logits[r * v + t] : 0;
    }
  }
  double sum = 0; /* in token order, in double, as CROSS_ENTROPY's */
  for (int64_t r = 0; r < rows; r++)
    sum += (double)tok[r];
  ((real *)out[0])[0] = (real)(sum / ops_loss_den(c, tg, rows, v));
}

static void K(lce_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[1]], *w = &c->g->t[op->in[2]];
  int64_t rows = ops_rows(x), d = ops_last(x), v = w->shape[0], n = rows / op->a.i[0];
  const real *xp = in[1];
  const int32_t *tg = in[3];
  real *dx = out[0], *dw = out[1], chunk_loss;
  real dl = ((const real *)in[0])[0];
  real *logits = malloc((size_t)(n * v) * sizeof *logits), *lse = malloc((size_t)n * sizeof *lse);
  real *dwc = malloc((size_t)(v * d) * sizeof *dwc);
  LcChunk k;
  lc_init(&k, c, OPS_REAL == 64, n, v, d);
  k.c.loss_den = ops_loss_den(c, tg, rows, v); /* the whole op's, not a chunk's: each token weighs dl / D */
  for (int64_t r0 = 0; r0 < rows && logits && lse && dwc; r0 += n) {
    void *xc = (void *)(xp + r0 * d), *tc = (void *)(tg + r0);
    lc_run(&k, OP_LINEAR, 2, (int[]){LC_X, LC_W}, (void *[]){xc, in[2]}, 1, (int[]){LC_LOGITS},
           (void *[]){logits});
    lc_run(&k, OP_CROSS_ENTROPY, 2, (int[]){LC_LOGITS, LC_TG}, (void *[]){logits, tc}, 2,
           (int[]){LC_LOSS, LC_LSE}, (void *[]){&chunk_loss, lse});
    /* the gradient over the logits, in place (each element from its own logit) */
    lc_run(&k, OP_CROSS_ENTROPY_BWD, 4, (int[]){LC_DLOSS, LC_LOGITS, LC_TG, LC_LSE},
           (void *[]){&dl, logits, tc, lse}, 1, (int[]){LC_LOGITS}, (void *[]){logits});
    lc_run(&k, OP_LINEAR_DGRAD, 2, (int[]){LC_LOGITS, LC_W}, (void *[]){logits, in[2]}, 1, (int[]){LC_DX},
           (void *[]){dx + r0 * d});
    lc_run(&k, OP_LINEAR_WGRAD, 2, (int[]){LC_LOGITS, LC_X}, (void *[]){logits, xc}, 1, (int[]){LC_DW},
           (void *[]){r0 ? dwc : dw});
    if (r0)
      for (int64_t i = 0; i < v * d; i++)
        dw[i] += dwc[i];
  }
  free(logits), free(lse), free(dwc);
}

#endif
