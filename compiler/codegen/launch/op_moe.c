/* op_moe.c — dispatch of the MoE ops (ir/ops/moe_router.c, moe_dispatch.c, moe_experts.c), the
 * MLA head split/concat (mla.c), and the two pieces of the router that the dense rows hand over:
 * the linear with an fp32 weight (Megatron keeps the router weight fp32) and the softmax over the
 * experts (not a causal attention softmax). Kernels in kernels/moe.cuh.
 *
 * Capturable: the dispatch writes the per-expert segments on the device and the grouped GEMMs
 * read them there; their grids are static bounds (the tensor-core forward/dgrad: ceil(N/128) + E
 * row tiles, each block finding its expert; the others every row of the permuted buffer for every
 * expert), blocks past an expert's count return at once. Where capacity can leave rows of the
 * permuted buffer empty, the buffer is zeroed first (a memset in the stream), as the CPU
 * reference's rows are. Deterministic: every sum in a fixed order (kernels/moe.cuh). */
#include "codegen/launch/exec_internal.h"
#include "codegen/launch/launchers.h"
#include "kernels/launch.h"

#define STRIDE(work) rt_grid_stride(x->d, work), 256, 0
#define MOE_MAX_EXPERTS 256      /* moe_dispatch's shared memory: 34 E ints under 48 KiB */
#define MOE_MAX_TOPK 32          /* router_topk_forward's per-thread array */
#define MOE_TOPK_MAX_EXPERTS 512 /* router_topk_forward: 16 experts a lane (MOE_TOPK_PER_LANE) */

/* Checks each operand's dtype against sig, one letter per input then output: b bf16, f fp32,
 * i int32, - any. */
static int dtypes(RtExec *x, const Op *op, const char *sig) {
  for (int i = 0; sig[i] && i < op->nin + op->nout; i++) {
    int t = i < op->nin ? op->in[i] : op->out[i - op->nin];
    DType want = sig[i] == 'b' ? DT_BF16 : sig[i] == 'f' ? DT_F32 : DT_I32;
    if (sig[i] != '-' && rt_t(x, t)->dtype != want)
      return rt_fail(x->d, "%s: %s is %s, the CUDA kernel takes %s", op_name(op->kind), rt_t(x, t)->name,
                     dtype_name(rt_t(x, t)->dtype), dtype_name(want));
  }
  return RT_OK;
}

/* Whether the permuted buffer laid out by the dispatch that wrote `t` (row_of or the segments)
 * can hold rows no assignment lands on: capacity without padding, a local expert range (the
 * allgather dispatcher's static bound), or no dispatch known. */
int rt_moe_may_leave_rows(const RtExec *x, int t) {
  int p = rt_t(x, t)->producer;
  const Op *d = p >= 0 ? &x->g->op[p] : NULL;
  return !d || d->kind != OP_MOE_DISPATCH || (d->a.i[1] > 0 && !d->a.i[2]) || d->a.i[4] > 0;
}

static int zero(RtExec *x, const Op *op, int out) {
  return rt_memset0(x->d, rt_out(x, op, out), (size_t)rt_t(x, op->out[out])->bytes);
}

/* ---- MLA ---- */

/* HEAD_SPLIT in (joined) out (p1, p2); HEAD_CONCAT in (p1 [, p2]) out (joined). i = H, a, b, H2. */
static int head(RtExec *x, const Op *op, int split) {
  if (dtypes(x, op, split ? "bbb" : op->nin == 2 ? "bbb" : "bb")) return RT_ERROR;
  const Tensor *t = rt_t(x, op->in[0]);
  long ntok = (long)(t->shape[0] * t->shape[1]);
  int H = (int)op->a.i[0], a = (int)op->a.i[1], b = (int)op->a.i[2], H2 = (int)op->a.i[3];
  if (split) {
    int64_t work = ntok * ((int64_t)H * a + (int64_t)H2 * b);
    return rt_launch_mla_head_split(x->d, STRIDE(work), rt_out(x, op, 0), rt_out(x, op, 1), rt_in(x, op, 0),
                                    ntok, H, a, b, H2);
  }
  CUdeviceptr p2 = op->nin == 2 ? rt_in(x, op, 1) : 0;
  return rt_launch_mla_head_concat(x->d, STRIDE(ntok * H * (a + b)), rt_out(x, op, 0), rt_in(x, op, 0), p2,
                                   ntok, H, a, b, H2);
}
static int rt_op_head_split(RtExec *x, const Op *op) { return head(x, op, 1); }
static int rt_op_head_concat(RtExec *x, const Op *op) { return head(x, op, 0); }

/* ---- the router ---- */

/* LINEAR in (x bf16, W fp32 (E, C)) out (y bf16) */
int rt_op_router_linear(RtExec *x, const Op *op) {
  if (op->nin != 2) return rt_fail(x->d, "linear with an fp32 weight: a bias is not built on CUDA");
  if (dtypes(x, op, "bfb")) return RT_ERROR;
  const Tensor *a = rt_t(x, op->in[0]), *w = rt_t(x, op->in[1]);
  int N = (int)ops_rows(a), E = (int)w->shape[0], C = (int)w->shape[1];
  return rt_launch_router_linear_forward(
      x->d, rt_dim((unsigned)((N + 63) / 64), (unsigned)((E + 63) / 64), 1), STEPC_ROUTER_THREADS,
      stepc_router_fwd_smem(), rt_out(x, op, 0), rt_in(x, op, 0), rt_in(x, op, 1), N, E, C);
}

/* LINEAR_DGRAD in (dy bf16, W fp32) out (dx bf16) */
int rt_op_router_linear_dgrad(RtExec *x, const Op *op) {
  if (dtypes(x, op, "bfb")) return RT_ERROR;
  const Tensor *dy = rt_t(x, op->in[0]), *w = rt_t(x, op->in[1]);
  int N = (int)ops_rows(dy), E = (int)w->shape[0], C = (int)w->shape[1];
  return rt_launch_router_linear_dgrad(x->d, rt_dim((unsigned)((C + 63) / 64), (unsigned)((N + 63) / 64), 1),
                                       STEPC_ROUTER_THREADS, stepc_router_dgrad_smem(), rt_out(x, op, 0),
                                       rt_in(x, op, 0), rt_in(x, op, 1), N, E, C);
}

/* SOFTMAX / SOFTMAX_BWD over the last dim of any tensor (the router's scores). */
int rt_op_softmax_rows(RtExec *x, const Op *op) {
  int bwd = op->kind == OP_SOFTMAX_BWD;
  if (dtypes(x, op, bwd ? "bbb" : "bb")) return RT_ERROR;
  const Tensor *s = rt_t(x, op->in[0]);
  long rows = (long)ops_rows(s);
  int E = (int)ops_last(s);
  RtDim grid = rt_dim1((unsigned)((rows + 7) / 8));
  if (bwd)
    return rt_launch_softmax_rows_backward(x->d, grid, 256, 0, rt_out(x, op, 0), rt_in(x, op, 0),
                                           rt_in(x, op, 1), rows, E);
  return rt_launch_softmax_rows_forward(x->d, grid, 256, 0, rt_out(x, op, 0), rt_in(x, op, 0), rows, E);
}

/* in (x (..., E)) out (probs (..., k), idx); i = k, mode */
static int rt_op_router_topk(RtExec *x, const Op *op) {
  if (dtypes(x, op, "bbi")) return RT_ERROR;
  const Tensor *s = rt_t(x, op->in[0]);
  int N = (int)ops_rows(s), E = (int)ops_last(s), k = (int)op->a.i[0];
  if (k > MOE_MAX_TOPK)
    return rt_fail(x->d, "router top-k %d: the CUDA kernel takes k <= %d", k, MOE_MAX_TOPK);
  if (E > MOE_TOPK_MAX_EXPERTS)
    return rt_fail(x->d, "router top-k over %d experts: the CUDA kernel takes at most %d", E,
                   MOE_TOPK_MAX_EXPERTS);
  return rt_launch_router_topk_forward(x->d, STRIDE(32 * (int64_t)N), rt_out(x, op, 0), rt_out(x, op, 1),
                                       rt_in(x, op, 0), N, E, k, (int)op->a.i[1]);
}

/* in (dprobs, probs, idx) out (dx (..., E)); i = k, mode, E */
static int rt_op_router_topk_bwd(RtExec *x, const Op *op) {
  if (dtypes(x, op, "bbib")) return RT_ERROR;
  int N = (int)ops_rows(rt_t(x, op->in[0])), E = (int)op->a.i[2], k = (int)op->a.i[0];
  return rt_launch_router_topk_backward(x->d, STRIDE(32 * (int64_t)N), rt_out(x, op, 0), rt_in(x, op, 0),
                                        rt_in(x, op, 1), rt_in(x, op, 2), N, E, k, (int)op->a.i[1]);
}

/* in (scores (..., E), idx (..., k)) out (loss (1) fp32); f[0] = coeff, i[0] = k */
/* Under sequence parallelism (i[2] = the TP size): the experts' token counts of the whole TP group,
 * the rank's counted into the op workspace and all-reduced there (ir/ops/moe_router.c); 0 otherwise. */
static int aux_tp(const Op *op) { return op->a.i[2] > 1 ? (int)op->a.i[2] : 1; }
static CUdeviceptr aux_counts(RtExec *x, const Op *op, int T, int E, int k) {
  if (aux_tp(op) <= 1) return 0;
  CUdeviceptr idx = rt_in(x, op, 1);
  RtColl c = {.op = RT_COLL_ALLREDUCE_SUM,
              .dtype = RT_COLL_F32,
              .group = RT_COLL_GROUP_TP,
              .count = E,
              .src = x->work,
              .dst = x->work};
  return rt_launch_moe_expert_counts(x->d, rt_dim1(1), 1024, (unsigned)(4 * E), x->work, idx, (long)T * k,
                                     E) ||
                 rt_coll(x->d, &c)
             ? 0
             : x->work;
}

static int rt_op_moe_aux_loss(RtExec *x, const Op *op) {
  if (dtypes(x, op, "bif")) return RT_ERROR;
  const Tensor *s = rt_t(x, op->in[0]);
  int T = (int)ops_rows(s), E = (int)ops_last(s), k = (int)op->a.i[0];
  if (E > 1024) return rt_fail(x->d, "moe_aux_loss: %d experts, the CUDA kernel takes at most 1024", E);
  CUdeviceptr counts = aux_counts(x, op, T, E, k);
  if (op->a.i[2] > 1 && !counts) return RT_ERROR;
  return rt_launch_moe_aux_loss_forward(x->d, rt_dim1(1), 1024, (unsigned)(8 * E + 4096 + 128),
                                        rt_out(x, op, 0), rt_in(x, op, 0), rt_in(x, op, 1), T, E, k,
                                        (float)op->a.f[0], counts, T * aux_tp(op));
}

/* in (dloss (1) fp32, idx) out (dscores (..., E)); i[1] = E */
static int rt_op_moe_aux_loss_bwd(RtExec *x, const Op *op) {
  if (dtypes(x, op, "fib")) return RT_ERROR;
  int T = (int)ops_rows(rt_t(x, op->in[1])), E = (int)op->a.i[1], k = (int)op->a.i[0];
  int64_t blocks = ((int64_t)T * E + 1023) / 1024;
  CUdeviceptr counts = aux_counts(x, op, T, E, k);
  if (op->a.i[2] > 1 && !counts) return RT_ERROR;
  return rt_launch_moe_aux_loss_backward(x->d, rt_dim1((unsigned)(blocks < 64 ? blocks : 64)), 1024,
                                         (unsigned)(4 * E), rt_out(x, op, 0), rt_in(x, op, 0),
                                         rt_in(x, op, 1), T, E, k, (float)op->a.f[0], counts, T * aux_tp(op));
}

/* ---- the token dispatcher ---- */

/* in (idx) out (row_of, seg (E, 2), tokens per expert (E)); i = E, cap, pad, drop policy, and El
 * (0 = all): the rank's El experts [r El, (r + 1) El) only, r read from the device's EP-rank slot */
static int rt_op_moe_dispatch(RtExec *x, const Op *op) {
  if (dtypes(x, op, "iiii")) return RT_ERROR;
  int E = (int)(op->a.i[4] ? op->a.i[4] : op->a.i[0]), cap = (int)op->a.i[1], pad = op->a.i[2] != 0;
  if (op->a.i[3] != 0)
    return rt_fail(x->d,
                   "moe_dispatch: the drop policy by probabilities does not run on CUDA yet (position does)");
  if (E > MOE_MAX_EXPERTS)
    return rt_fail(x->d, "moe_dispatch: %d experts, the CUDA kernel takes at most %d", E, MOE_MAX_EXPERTS);
  long n = (long)rt_numel(x, op->in[0]);
  return rt_launch_moe_dispatch(x->d, rt_dim1(1), 1024, (unsigned)(34 * 4 * E), rt_out(x, op, 0),
                                rt_out(x, op, 1), rt_out(x, op, 2), rt_in(x, op, 0), n, E, cap, pad,
                                op->a.i[4] ? x->rank + 4 : 0);
}

/* MOE_PERMUTE in (x (..., C), probs (..., k), row_of) out (xp (N, C), pp (N)); MOE_UNPERMUTE_BWD
 * in (dy (..., C), row_of) out (dyp (N, C)): the tokens scattered to their rows. */
static int scatter(RtExec *x, const Op *op) {
  int probs = op->nin == 3;
  if (dtypes(x, op, probs ? "bbibb" : "bib")) return RT_ERROR;
  const Tensor *ro = rt_t(x, op->in[op->nin - 1]);
  long n = (long)tensor_numel(ro);
  int k = (int)ops_last(ro), C = (int)ops_last(rt_t(x, op->in[0]));
  if (rt_moe_may_leave_rows(x, op->in[op->nin - 1]) && (zero(x, op, 0) || (probs && zero(x, op, 1))))
    return RT_ERROR;
  return rt_launch_moe_scatter_rows(x->d, STRIDE(n * C), rt_out(x, op, 0), probs ? rt_out(x, op, 1) : 0,
                                    rt_in(x, op, 0), probs ? rt_in(x, op, 1) : 0, rt_in(x, op, op->nin - 1),
                                    n, k, C);
}
static int rt_op_moe_permute(RtExec *x, const Op *op) { return scatter(x, op); }
static int rt_op_moe_unpermute_bwd(RtExec *x, const Op *op) { return scatter(x, op); }

/* MOE_UNPERMUTE in (yp (N, C), row_of) out (y (..., C)); MOE_PERMUTE_BWD in (dxp, dpp, row_of)
 * out (dx, dprobs): each token's rows summed. */
static int gather(RtExec *x, const Op *op) {
  int probs = op->nin == 3;
  if (dtypes(x, op, probs ? "bbibb" : "bib")) return RT_ERROR;
  const Tensor *ro = rt_t(x, op->in[op->nin - 1]);
  long T = (long)ops_rows(ro);
  int k = (int)ops_last(ro), C = (int)ops_last(rt_t(x, op->in[0]));
  return rt_launch_moe_gather_rows(x->d, STRIDE(T * C), rt_out(x, op, 0), probs ? rt_out(x, op, 1) : 0,
                                   rt_in(x, op, 0), probs ? rt_in(x, op, 1) : 0, rt_in(x, op, op->nin - 1), T,
                                   k, C);
}
static int rt_op_moe_unpermute(RtExec *x, const Op *op) { return gather(x, op); }
static int rt_op_moe_permute_bwd(RtExec *x, const Op *op) { return gather(x, op); }

/* ---- the grouped expert GEMMs: block 256, grid (output column tiles, row tiles of N, E) ---- */
#define MOE_TILE 64 /* kernels/moe.cuh */

static RtDim group_grid(int64_t cols, int64_t rows, int64_t E) {
  return rt_dim((unsigned)((cols + MOE_TILE - 1) / MOE_TILE), (unsigned)((rows + MOE_TILE - 1) / MOE_TILE),
                (unsigned)E);
}

/* The tensor-core kernels (kernels/launch.h: 128 x 256 tiles) take widths that are multiples of 8
 * (16-byte copies); the CUDA-core ones (64 x 64) anything. */
static int use_tc(int Nout, int K) { return Nout % 8 == 0 && K % 8 == 0; }
static unsigned tiles(int64_t n, int tile) { return (unsigned)((n + tile - 1) / tile); }

/* The warp-specialised kernels' tensor maps (kernels/moe.cuh, grouped_linear_*_ws): GROUPED_LINEAR's x
 * (N, K) in boxes of 64 x 128 rows and W (E, Nout, K) in 64 x 256 x 1; GROUPED_LINEAR_DGRAD's dy
 * (N, Nout) in 64 x 128 and W in 64 x 64 x 1; GROUPED_LINEAR_WGRAD's dy and x in 64 x 64. Where the
 * tensor-core kernels run (use_tc) on bf16. */
int rt_moe_tmaps(const RtExec *x, const Op *op, RtTmap *t) {
  if (op->kind == OP_GROUPED_LINEAR_WGRAD) {
    const Tensor *dy = rt_t(x, op->in[0]), *a = rt_t(x, op->in[1]), *dw = rt_t(x, op->out[0]);
    int o = rt_op_index(x, op), sink = x->fz->sink[op->out[0]];
    /* adding into the fp32 main gradient (a later micro-batch's), the persistent kernel's epilogue
     * (a read-modify-write from registers) runs at half the tensor-core kernel's speed (bench/RESULTS.md,
     * session 18): that case keeps grouped_linear_wgrad_tc */
    int adds = sink >= 0 && x->fz->fuse[o] != RT_FUSE_WGRAD_STORE;
    if (dy->dtype != DT_BF16 || a->dtype != DT_BF16 || dw->ndim != 3 ||
        !use_tc((int)dw->shape[1], (int)dw->shape[2]) || adds)
      return 0;
    if (!t) return 2;
    for (int i = 0; i < 2; i++) {
      const Tensor *m = i ? a : dy;
      t[i] = (RtTmap){.ptr = rt_in(x, op, i),
                      .rank = 2,
                      .elem = 2,
                      .dim = {(uint64_t)ops_last(m), (uint64_t)ops_rows(m)},
                      .box = {64, 64}};
    }
    return 2;
  }
  if (op->kind != OP_GROUPED_LINEAR && op->kind != OP_GROUPED_LINEAR_DGRAD) return 0;
  const Tensor *a = rt_t(x, op->in[0]), *w = rt_t(x, op->in[1]);
  if (a->dtype != DT_BF16 || w->dtype != DT_BF16 || w->ndim != 3 ||
      !use_tc((int)w->shape[1], (int)w->shape[2]))
    return 0;
  if (!t) return 2;
  int dgrad = op->kind == OP_GROUPED_LINEAR_DGRAD;
  t[0] = (RtTmap){.ptr = rt_in(x, op, 0),
                  .rank = 2,
                  .elem = 2,
                  .dim = {(uint64_t)ops_last(a), (uint64_t)ops_rows(a)},
                  .box = {64, STEPC_MOE_TC_BM}};
  t[1] = (RtTmap){.ptr = rt_in(x, op, 1),
                  .rank = 3,
                  .elem = 2,
                  .dim = {(uint64_t)w->shape[2], (uint64_t)w->shape[1], (uint64_t)w->shape[0]},
                  .box = {64, dgrad ? 64 : STEPC_MOE_TC_BN, 1}};
  return 2;
}

/* GROUPED_LINEAR in (x (N, K), W (E, Nout, K), seg) out (y (N, Nout)); GROUPED_LINEAR_DGRAD in
 * (dy (N, Nout), W, seg) out (dx (N, K)). */
static int grouped(RtExec *x, const Op *op, int dgrad) {
  if (dtypes(x, op, "bbib")) return RT_ERROR;
  const Tensor *a = rt_t(x, op->in[0]), *w = rt_t(x, op->in[1]);
  int Nout = (int)w->shape[1], K = (int)w->shape[2];
  if (rt_moe_may_leave_rows(x, op->in[2]) && zero(x, op, 0)) return RT_ERROR;
  CUdeviceptr out = rt_out(x, op, 0), in = rt_in(x, op, 0), wp = rt_in(x, op, 1), seg = rt_in(x, op, 2);
  if (use_tc(Nout, K)) { /* row tiles: the static bound ceil(N/128) + E of the experts' tiles */
    int64_t E = w->shape[0];
    RtDim g = rt_dim(tiles(dgrad ? K : Nout, STEPC_MOE_TC_BN),
                     tiles(a->shape[0], STEPC_MOE_TC_BM) + (unsigned)E, 1);
    CUdeviceptr ta = rt_exec_tmap(x, op, 0), tb = rt_exec_tmap(x, op, 1);
    if (ta) /* persistent: a block per SM over the same tiles */
      return (dgrad ? rt_launch_grouped_linear_dgrad_ws : rt_launch_grouped_linear_forward_ws)(
          x->d, rt_dim1(stepc_moe_ws_grid(x->d->sm_count, g.x * (long)STEPC_MOE_TC_BN, g.y)),
          STEPC_MOE_WS_THREADS, stepc_moe_ws_smem(), out, ta, tb, seg, Nout, K, (int)E, (int)g.y);
    return (dgrad ? rt_launch_grouped_linear_dgrad_tc : rt_launch_grouped_linear_forward_tc)(
        x->d, g, STEPC_MOE_TC_THREADS, stepc_moe_tc_smem(), out, in, wp, seg, Nout, K, (int)E);
  }
  RtDim grid = group_grid(dgrad ? K : Nout, a->shape[0], w->shape[0]);
  return (dgrad ? rt_launch_grouped_linear_dgrad : rt_launch_grouped_linear_forward)(x->d, grid, 256, 0, out,
                                                                                     in, wp, seg, Nout, K);
}
static int rt_op_grouped_linear(RtExec *x, const Op *op) { return grouped(x, op, 0); }
static int rt_op_grouped_linear_dgrad(RtExec *x, const Op *op) { return grouped(x, op, 1); }

/* The weight gradient's grid: tiles of its (Nout, K) per expert. */
static RtDim wgrad_grid(const Tensor *dw) {
  int64_t Nout = dw->shape[1], K = dw->shape[2], E = dw->shape[0];
  return use_tc((int)Nout, (int)K)
             ? rt_dim(tiles(K, STEPC_MOE_TC_BN), tiles(Nout, STEPC_MOE_TC_BM), (unsigned)E)
             : group_grid(K, Nout, E);
}

int64_t rt_grouped_wgrad_tiles(const RtExec *x, const Op *op) {
  RtDim d = wgrad_grid(rt_t(x, op->out[0]));
  return (int64_t)d.x * d.y * d.z;
}

/* in (dy (N, Nout), x (N, K), seg) out (dW (E, Nout, K)): into the fp32 main gradient when the
 * compiler fused the accumulation (exec.h's sink) — stored there, not added, under the wgrad-store
 * fusion (its ZERO skipped), with the gradient's norm partials where the compiler moved them here
 * (fusions.h norm_by) — else the bf16 dW. */
static int rt_op_grouped_linear_wgrad(RtExec *x, const Op *op) {
  if (dtypes(x, op, "bbi")) return RT_ERROR;
  const Tensor *dw = rt_t(x, op->out[0]);
  int o = rt_op_index(x, op), sink = x->fz->sink[op->out[0]];
  if (sink < 0 && dw->dtype != DT_BF16)
    return rt_fail(x->d, "grouped_linear_wgrad: %s is not bf16", dw->name);
  CUdeviceptr out = sink < 0 ? rt_out(x, op, 0) : 0, acc = sink >= 0 ? rt_exec_ptr(x, sink) : 0, norm = 0;
  if (sink >= 0 && x->fz->norm_by[sink] == o && !(norm = rt_exec_norm_slice(x, sink))) return RT_ERROR;
  int store = sink >= 0 && x->fz->fuse[o] == RT_FUSE_WGRAD_STORE;
  int Nout = (int)dw->shape[1], K = (int)dw->shape[2];
  CUdeviceptr dy = rt_in(x, op, 0), in = rt_in(x, op, 1), seg = rt_in(x, op, 2);
  CUdeviceptr tdy = rt_exec_tmap(x, op, 0), tx = rt_exec_tmap(x, op, 1);
  if (tdy) { /* persistent: a block per SM over the same tiles (and norm partials) as the _tc kernel's */
    int64_t E = dw->shape[0];
    unsigned grid = stepc_moe_ws_grid(x->d->sm_count, K, (Nout + STEPC_MOE_TC_BM - 1) / STEPC_MOE_TC_BM * E);
    return rt_launch_grouped_linear_wgrad_ws(x->d, rt_dim1(grid), STEPC_MOE_WS_THREADS, stepc_moe_ws_smem(),
                                             out, acc, tdy, tx, seg, Nout, K, (int)E, store, norm);
  }
  if (use_tc(Nout, K))
    return rt_launch_grouped_linear_wgrad_tc(x->d, wgrad_grid(dw), STEPC_MOE_TC_THREADS, stepc_moe_tc_smem(),
                                             out, acc, dy, in, seg, Nout, K, store, norm);
  return rt_launch_grouped_linear_wgrad(x->d, wgrad_grid(dw), 256, 0, out, acc, dy, in, seg, Nout, K, store,
                                        norm);
}

/* ---- the expert activation ---- */

/* in (h (N, F or 2F), pp (N)) out (y (N, F)); i = gated, activation */
static int rt_op_moe_act(RtExec *x, const Op *op) {
  if (dtypes(x, op, "bbb")) return RT_ERROR;
  const Tensor *y = rt_t(x, op->out[0]);
  int N = (int)y->shape[0], F = (int)y->shape[1];
  return rt_launch_moe_act_forward(x->d, STRIDE((int64_t)N * F), rt_out(x, op, 0), rt_in(x, op, 0),
                                   rt_in(x, op, 1), N, F, op->a.i[0] != 0, (int)op->a.i[1]);
}

/* in (dy, h, pp) out (dh, dpp) */
static int rt_op_moe_act_bwd(RtExec *x, const Op *op) {
  if (dtypes(x, op, "bbbbb")) return RT_ERROR;
  const Tensor *dy = rt_t(x, op->in[0]);
  int N = (int)dy->shape[0], F = (int)dy->shape[1];
  return rt_launch_moe_act_backward(x->d, rt_dim1((unsigned)((N + 7) / 8)), 256, 0, rt_out(x, op, 0),
                                    rt_out(x, op, 1), rt_in(x, op, 0), rt_in(x, op, 1), rt_in(x, op, 2), N, F,
                                    op->a.i[0] != 0, (int)op->a.i[1]);
}

/* This family's rows of the per-kind launch table (exec.c gathers every family's). */
const RtOpRow RT_OPS_MOE[] = {
    {OP_HEAD_SPLIT, rt_op_head_split},
    {OP_HEAD_CONCAT, rt_op_head_concat},
    {OP_ROUTER_TOPK, rt_op_router_topk},
    {OP_ROUTER_TOPK_BWD, rt_op_router_topk_bwd},
    {OP_MOE_AUX_LOSS, rt_op_moe_aux_loss},
    {OP_MOE_AUX_LOSS_BWD, rt_op_moe_aux_loss_bwd},
    {OP_MOE_DISPATCH, rt_op_moe_dispatch},
    {OP_MOE_PERMUTE, rt_op_moe_permute},
    {OP_MOE_PERMUTE_BWD, rt_op_moe_permute_bwd},
    {OP_MOE_UNPERMUTE, rt_op_moe_unpermute},
    {OP_MOE_UNPERMUTE_BWD, rt_op_moe_unpermute_bwd},
    {OP_GROUPED_LINEAR, rt_op_grouped_linear},
    {OP_GROUPED_LINEAR_DGRAD, rt_op_grouped_linear_dgrad},
    {OP_GROUPED_LINEAR_WGRAD, rt_op_grouped_linear_wgrad},
    {OP_MOE_ACT, rt_op_moe_act},
    {OP_MOE_ACT_BWD, rt_op_moe_act_bwd},
    {OP_COUNT, NULL},
};
