/* ep.c — expert parallelism's token exchange as ops (Megatron's MoEAlltoAllTokenDispatcher,
 * megatron/core/transformer/moe/token_dispatcher.py), over the rank's expert-parallel group
 * (CpuCtx.ep; NULL: one rank). The E experts are split over EP ranks: rank r owns experts
 * [r El, (r+1) El), El = E / EP. Every rank routes and permutes its own tokens over all E experts
 * (MOE_DISPATCH, MOE_PERMUTE: expert e's rows are the contiguous segment seg[e] of the permuted
 * buffer); these ops move each segment to the expert's owner and back.
 *
 *   EP_COUNTS   seg (E, 2) int32 -> all_seg (EP, E, 2) int32, lseg (El, 2) int32
 *               The counts exchanged first (Megatron's all-to-all of tokens_per_expert): all_seg[s]
 *               is EP rank s's seg. lseg is this rank's receive layout: local expert l's rows are
 *               [lseg[l][0], + lseg[l][1]), compact, experts in order (l = 0, 1, ...), and inside
 *               an expert the sources in rank order — Megatron's layout after sort_chunks_by_idxs.
 *               i[0] = EP. Integer outputs: not differentiable.
 *   EP_DISPATCH x (N, ...), all_seg -> xr (R, ...)      the forward all-to-all: xr's expert l,
 *               source s block is source s's rows seg_s[r El + l] of x. Rows past the received
 *               total are zero. i[0] = EP, i[1] = R (the static receive bound, below).
 *               Backward: dx = EP_COMBINE(dxr).
 *   EP_COMBINE  y (R, ...), all_seg -> yp (N, ...)      the reverse all-to-all: every owner's block
 *               for this rank goes back to the rows it came from (seg[e] of this rank); rows in no
 *               segment are zero. i[0] = EP, i[1] = N. Backward: dy = EP_DISPATCH(dyp).
 * EP_DISPATCH and EP_COMBINE are each other's adjoint (a row permutation, zero elsewhere), so
 * the pair is exact in any precision: rows are copied, never summed.
 *
 * Static receive bound R (the graph's shapes, and the memory plan, must not depend on routing; a
 * dropless step on CUDA is one captured graph). Dropless: each of the EP sources sends at most
 * min(k, El) rows per token to one rank (a token's top-k experts are distinct), so R = EP * B*T *
 * min(k, El) — every token of every rank routed to this rank's experts. With a capacity factor,
 * each source sends at most cap rows per expert (with padding exactly cap), so R = EP * El * cap
 * = E * cap, the same as the local permuted buffer. The executor moves only the actual counts;
 * rows past them are zero and the grouped GEMMs skip them (they lie in no expert's segment). */
#ifndef OPS_KERNEL_PASS
#include "ops/ops.h"

static int counts_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *seg = ops_in(g, op, 0);
  int64_t ep = op->a.i[0];
  if (seg->dtype != DT_I32 || seg->ndim != 2 || seg->shape[1] != 2 || ep < 1 || seg->shape[0] % ep)
    return ops_err(err, n, "expects seg (E, 2) int32 with E divisible by i[0] = %lld (the EP size)",
                   (long long)ep);
  ops_out_shape(&out[0], DT_I32, "ep_segments", 3, ep, seg->shape[0], 2, 1);
  ops_out_shape(&out[1], DT_I32, "ep_local_segments", 2, seg->shape[0] / ep, 2, 1, 1);
  return 0;
}

static int move_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0), *as = ops_in(g, op, 1);
  if (as->dtype != DT_I32 || as->ndim != 3 || as->shape[0] != op->a.i[0] || op->a.i[1] < 1 || x->ndim < 1)
    return ops_err(err, n, "expects x (rows, ...), all_seg (EP=%lld, E, 2) int32, rows i[1] >= 1",
                   (long long)op->a.i[0]);
  ops_out_like(&out[0], x, op->kind == OP_EP_DISPATCH ? "ep_received" : "ep_returned");
  out[0].shape[0] = op->a.i[1];
  return 0;
}

/* each op's gradient is the other over the same exchange, back to the input's row count */
static int move_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  OpAttrs a = o.a;
  a.i[1] = g->t[o.in[0]].shape[0];
  int in[2] = {dout[0], o.in[1]}, of[1] = {o.in[0]};
  OpKind k = o.kind == OP_EP_DISPATCH ? OP_EP_COMBINE : OP_EP_DISPATCH;
  return ops_grad_op(g, k, in, 2, &a, &din[0], of) < 0 ? -1 : 0;
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

#define EP_FACTS                                                                                             \
  .facts = {.cost = COST_OTHER,                                                                              \
            .ceiling = CEIL_DRAM,                                                                            \
            .inplace = INPLACE_NONE,                                                                         \
            .rng = RNG_NONE,                                                                                 \
            .sink = SINK_NO,                                                                                 \
            .matmul = MATMUL_NONE,                                                                           \
            .ew = &OP_EW_NONE}

const OpInfo op_ep_counts_info = {
    "ep_counts", 1, 1, 2, counts_infer, NULL, NULL, {ep_counts_cpu_f32, ep_counts_cpu_f64}, EP_FACTS};
const OpInfo op_ep_dispatch_info = {
    "ep_dispatch", 2, 2, 1, move_infer, NULL, move_backward, {ep_dispatch_cpu_f32, ep_dispatch_cpu_f64},
    EP_FACTS};
const OpInfo op_ep_combine_info = {
    "ep_combine", 2, 2, 1, move_infer, NULL, move_backward, {ep_combine_cpu_f32, ep_combine_cpu_f64},
    EP_FACTS};

#else /* OPS_KERNEL_PASS */

/* The integer ops are the same in both passes: compiled once. */
#if OPS_REAL == 32
/* all_seg := every EP rank's seg (a rank alone: its own, the others' empty); lseg from it. */
static void ep_counts(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *st = &c->g->t[op->in[0]];
  int ep = (int)op->a.i[0], me = ops_ep_rank(c);
  int64_t e = st->shape[0], el = e / ep, n = 2 * e;
  int32_t *all = out[0], *lseg = out[1];
  CpuTp *g = c->ep;
  if (ep > 1 && g && g->size == ep) {
    if (g->all_gather(g, in[0], all, n * (int64_t)sizeof(int32_t))) g->failed = 1;
  } else {
    memset(all, 0, (size_t)(ep * n) * sizeof *all);
    memcpy(all + (int64_t)me * n, in[0], (size_t)n * sizeof *all);
    if (ep > 1 && g) g->failed = 1;
  }
  int32_t at = 0;
  for (int64_t l = 0; l < el; l++) {
    int32_t cnt = 0;
    for (int s = 0; s < ep; s++)
      cnt += all[(int64_t)s * n + 2 * ((int64_t)me * el + l) + 1];
    lseg[2 * l] = at, lseg[2 * l + 1] = cnt;
    at += cnt;
  }
}
#endif
static void K(ep_counts_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  ep_counts(c, op, in, out);
}

/* Every EP rank's `rows` x `w` block into one buffer, rank after rank (NULL on failure, flagged). */
static real *K(ep_gather)(const CpuCtx *c, const void *x, int64_t rows, int64_t w, int ep) {
  size_t bytes = (size_t)(rows * w) * sizeof(real);
  real *all = calloc((size_t)ep, bytes + 1);
  CpuTp *g = c->ep;
  if (!all || (ep > 1 && (!g || g->size != ep || g->all_gather(g, x, all, (int64_t)bytes)))) {
    if (g) g->failed = 1;
    free(all);
    return NULL;
  }
  if (ep == 1) memcpy(all, x, bytes);
  return all;
}

static void K(ep_dispatch_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]], *as = &c->g->t[op->in[1]];
  int ep = (int)op->a.i[0], me = ops_ep_rank(c);
  int64_t n = x->shape[0], w = tensor_numel(x) / n, r = op->a.i[1], e = as->shape[1], el = e / ep;
  const int32_t *seg = in[1];
  real *xr = out[0], *all = K(ep_gather)(c, in[0], n, w, ep);
  memset(xr, 0, (size_t)(r * w) * sizeof(real));
  if (!all) return;
  int64_t at = 0;
  for (int64_t l = 0; l < el; l++)
    for (int s = 0; s < ep; s++) {
      const int32_t *sg = seg + ((int64_t)s * e + (int64_t)me * el + l) * 2;
      if (sg[1] <= 0) continue;
      if (at + sg[1] > r || sg[0] < 0 ||
          sg[0] + sg[1] > n) { /* past the static bound: impossible by construction */
        if (c->ep) c->ep->failed = 1;
        free(all);
        return;
      }
      memcpy(xr + at * w, all + ((int64_t)s * n + sg[0]) * w, (size_t)(sg[1] * w) * sizeof(real));
      at += sg[1];
    }
  free(all);
}

static void K(ep_combine_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *y = &c->g->t[op->in[0]], *as = &c->g->t[op->in[1]];
  int ep = (int)op->a.i[0], me = ops_ep_rank(c);
  int64_t r = y->shape[0], w = tensor_numel(y) / r, n = op->a.i[1], e = as->shape[1], el = e / ep;
  const int32_t *seg = in[1];
  real *yp = out[0], *all = K(ep_gather)(c, in[0], r, w, ep);
  memset(yp, 0, (size_t)(n * w) * sizeof(real));
  if (!all) return;
  for (int o = 0; o < ep; o++) { /* owner o's receive buffer, walked in its layout */
    int64_t at = 0;
    for (int64_t l = 0; l < el; l++)
      for (int s = 0; s < ep; s++) {
        const int32_t *sg = seg + ((int64_t)s * e + (int64_t)o * el + l) * 2;
        if (sg[1] <= 0) continue;
        if (at + sg[1] > r || sg[0] < 0 || sg[0] + sg[1] > n) {
          if (c->ep) c->ep->failed = 1;
          free(all);
          return;
        }
        if (s == me)
          memcpy(yp + (int64_t)sg[0] * w, all + ((int64_t)o * r + at) * w,
                 (size_t)(sg[1] * w) * sizeof(real));
        at += sg[1];
      }
  }
  free(all);
}

#endif
