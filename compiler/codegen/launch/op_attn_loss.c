/* op_attn_loss.c — dispatch of attention (ir/ops/flash.c), the fused cross-entropy (loss.c) and the
 * chunked output layer with its loss (linear_loss.c). */
#include "codegen/launch/exec_internal.h"
#include "codegen/launch/launchers.h"
#include "kernels/launch.h"

typedef struct {
  int B, T, H, G, D, Dv;
  float scale;
} AttnDims;

static int attn_dims(RtExec *x, const Op *op, int qin, AttnDims *a) {
  const Tensor *q = rt_t(x, op->in[qin]), *k = rt_t(x, op->in[qin + 1]), *v = rt_t(x, op->in[qin + 2]);
  *a = (AttnDims){(int)q->shape[0], (int)q->shape[1], (int)q->shape[2], (int)k->shape[2],
                  (int)q->shape[3], (int)v->shape[3], (float)op->a.f[0]};
  if (op->a.f[1] > 0) return rt_fail(x->d, "attention dropout (p = %g) does not run on CUDA yet", op->a.f[1]);
  if (!op->a.i[1]) return rt_fail(x->d, "non-causal attention does not run on CUDA yet");
  if (x->attn_cudnn[op - x->g->op]) return RT_OK;
  if (a->Dv != a->D)
    return rt_fail(x->d,
                   "value head dim %d != query/key head dim %d: only cuDNN (attention_backend=fused) runs it",
                   a->Dv, a->D);
  if (!stepc_flash_supported(a->T, a->D) && (a->D < 1 || a->D > 128))
    return rt_fail(x->d, "head size %d: the attention kernels take head sizes up to 128", a->D);
  return RT_OK;
}

/* The cuDNN call of a forward (bwd 0: in q, k, v out o, lse) or backward (bwd 1) attention op. */
static RtSdpa sdpa_call(RtExec *x, const Op *op, int bwd, const AttnDims *a) {
  RtSdpa s = {.bwd = bwd,
              .b = a->B,
              .t = a->T,
              .h = a->H,
              .g = a->G,
              .dqk = a->D,
              .dv = a->Dv,
              .deterministic = op->a.i[3] != 0,
              .scale = a->scale};
  if (!bwd) {
    s.q = rt_in(x, op, 0), s.k = rt_in(x, op, 1), s.v = rt_in(x, op, 2), s.o = rt_out(x, op, 0),
    s.lse = rt_out(x, op, 1);
  } else {
    s.dout = rt_in(x, op, 0), s.q = rt_in(x, op, 1), s.k = rt_in(x, op, 2), s.v = rt_in(x, op, 3),
    s.o = rt_in(x, op, 4);
    s.lse = rt_in(x, op, 5), s.dq = rt_out(x, op, 0), s.dk = rt_out(x, op, 1), s.dvv = rt_out(x, op, 2);
  }
  return s;
}

static int is_attention(OpKind k) {
  return k == OP_FLASH_ATTN || k == OP_FLASH_ATTN_BWD || k == OP_FLASH_ATTN_DV || k == OP_FLASH_ATTN_DV_BWD;
}

/* Decides each attention op's kernels (x->attn_cudnn) and builds its cuDNN plan, so that no plan
 * is built inside a capture: fused = cuDNN or a clear error; auto = cuDNN when it loads and has an
 * engine for the shape, else stepc's flash kernels; flash = flash. */
int rt_attn_resolve(RtExec *x, int *unsupported) {
  for (int o = 0; o < x->g->nop; o++) {
    const Op *op = &x->g->op[o];
    if (!is_attention(op->kind) || op->a.i[2] == ATTN_IMPL_FLASH) continue;
    int bwd = op->kind == OP_FLASH_ATTN_BWD || op->kind == OP_FLASH_ATTN_DV_BWD;
    x->attn_cudnn[o] = 1;
    AttnDims a;
    if (attn_dims(x, op, bwd, &a)) return RT_ERROR;
    RtSdpa s = sdpa_call(x, op, bwd, &a);
    int rc = rt_sdpa_prepare(x->d, &s);
    if (rc == RT_OK) continue;
    if (op->a.i[2] != ATTN_IMPL_AUTO || a.Dv != a.D || rc != RT_UNSUPPORTED) {
      *unsupported = rc == RT_UNSUPPORTED;
      return RT_ERROR;
    }
    rt_clear_error(x->d); /* auto: stepc's own kernels instead */
    x->attn_cudnn[o] = 0;
  }
  return RT_OK;
}

int rt_exec_attn_kind(const RtExec *x, int o) {
  const Op *op = &x->g->op[o];
  if (!is_attention(op->kind) || !rt_exec_op_runs(x, o)) return 0;
  if (!x->attn_cudnn[o]) return 1;
  const Tensor *q = rt_t(x, op->in[op->kind == OP_FLASH_ATTN || op->kind == OP_FLASH_ATTN_DV ? 0 : 1]);
  const Tensor *v = rt_t(x, op->in[op->kind == OP_FLASH_ATTN || op->kind == OP_FLASH_ATTN_DV ? 2 : 3]);
  int64_t D = q->shape[3];
  /* stepc's kernels take it (attn_dims): the same head dim for values, up to 128 */
  int flash_takes = v->shape[3] == D && (stepc_flash_supported(q->shape[1], D) || (D >= 1 && D <= 128));
  return op->a.i[2] == ATTN_IMPL_AUTO && flash_takes ? 3 : 2;
}

int rt_exec_run_attn_flash(RtExec *x, int o) {
  if (rt_exec_attn_kind(x, o) != 3) return rt_fail(x->d, "op %d has no flash alternative", o);
  x->attn_cudnn[o] = 0; /* lowered as attention_backend=flash would, then cuDNN's again */
  int rc = rt_exec_run_op(x, o);
  x->attn_cudnn[o] = 1;
  return rc;
}

int64_t rt_exec_attn_workspace(const RtExec *x) { return attn_cudnn_workspace_max(x->g, x->attn_cudnn); }

/* in (q, k, v) out (o (B,T,H*Dv), lse (B,H,T)) */
static int rt_op_flash(RtExec *x, const Op *op) {
  AttnDims a;
  if (attn_dims(x, op, 0, &a)) return RT_ERROR;
  if (x->attn_cudnn[op - x->g->op]) {
    RtSdpa s = sdpa_call(x, op, 0, &a);
    return rt_sdpa_run(x->d, &s);
  }
  CUdeviceptr o = rt_out(x, op, 0), lse = rt_out(x, op, 1), q = rt_in(x, op, 0), k = rt_in(x, op, 1),
              v = rt_in(x, op, 2);
  int wg = stepc_flash_wg(x->d->cc_major);
  if (stepc_flash_supported(a.T, a.D))
    return (a.D == 64 ? rt_launch_flash_attention_forward_d64 : rt_launch_flash_attention_forward_d128)(
        x->d, rt_dim((unsigned)(a.T / stepc_flash_fwd_rows(wg)), (unsigned)a.H, (unsigned)a.B),
        STEPC_FLASH_THREADS, stepc_flash_fwd_smem(a.D, wg), o, lse, q, k, v, a.B, a.T, a.H, a.G, a.scale);
  int64_t rows = (int64_t)a.B * a.H * a.T;
  return rt_launch_attn_plain_forward(x->d, rt_dim1((unsigned)((rows + 3) / 4)), 128, 0, o, lse, q, k, v, a.B,
                                      a.T, a.H, a.G, a.D, a.scale);
}

/* in (dO, q, k, v, o, lse) out (dq, dk, dv) */
static int rt_op_flash_bwd(RtExec *x, const Op *op) {
  AttnDims a;
  if (attn_dims(x, op, 1, &a)) return RT_ERROR;
  if (x->attn_cudnn[op - x->g->op]) {
    RtSdpa s = sdpa_call(x, op, 1, &a);
    return rt_sdpa_run(x->d, &s);
  }
  CUdeviceptr dO = rt_in(x, op, 0), q = rt_in(x, op, 1), k = rt_in(x, op, 2), v = rt_in(x, op, 3),
              o = rt_in(x, op, 4), lse = rt_in(x, op, 5), dq = rt_out(x, op, 0), dk = rt_out(x, op, 1),
              dv = rt_out(x, op, 2), ds = x->work;
  if (stepc_flash_supported(a.T, a.D)) {
    int wg = stepc_flash_wg(x->d->cc_major);
    int64_t rows = (int64_t)a.B * a.T * a.H;
    unsigned pre_blocks = (unsigned)((rows * 32 + STEPC_FLASH_PRE_THREADS - 1) / STEPC_FLASH_PRE_THREADS);
    if (rt_launch_flash_attention_backward_preprocess(x->d, rt_dim1(pre_blocks), STEPC_FLASH_PRE_THREADS, 0,
                                                      ds, dO, o, a.B, a.T, a.H, a.D))
      return RT_ERROR;
    if ((a.D == 64 ? rt_launch_flash_attention_backward_dkdv_d64
                   : rt_launch_flash_attention_backward_dkdv_d128)(
            x->d, rt_dim((unsigned)(a.T / STEPC_FLASH_DKDV_KEYS), (unsigned)a.G, (unsigned)a.B),
            STEPC_FLASH_THREADS, stepc_flash_dkdv_smem(a.D, wg), dk, dv, q, k, v, dO, lse, ds, a.B, a.T, a.H,
            a.G, a.scale))
      return RT_ERROR;
    return (a.D == 64 ? rt_launch_flash_attention_backward_dq_d64
                      : rt_launch_flash_attention_backward_dq_d128)(
        x->d, rt_dim((unsigned)(a.T / stepc_flash_dq_rows(wg)), (unsigned)a.H, (unsigned)a.B),
        STEPC_FLASH_THREADS, stepc_flash_dq_smem(a.D, wg), dq, q, k, v, dO, lse, ds, a.B, a.T, a.H, a.G,
        a.scale);
  }
  int64_t qrows = (int64_t)a.B * a.H * a.T, krows = (int64_t)a.B * a.T * a.G;
  if (rt_launch_attn_plain_backward_q(x->d, rt_dim1((unsigned)((qrows + 3) / 4)), 128, 0, dq, ds, q, k, v, o,
                                      dO, lse, a.B, a.T, a.H, a.G, a.D, a.scale))
    return RT_ERROR;
  return rt_launch_attn_plain_backward_kv(x->d, rt_dim1((unsigned)((krows + 3) / 4)), 128, 0, dk, dv, q, k, v,
                                          dO, lse, ds, a.B, a.T, a.H, a.G, a.D, a.scale);
}

/* The loss masks (ir/ops/loss.c): each kept token's loss and gradient are divided by the step's
 * loss denominator D = kept tokens of the global batch / (num_microbatches * ranks), Megatron's
 * normalisation. The launch program is fixed at compile time, so D is a device value the kernels
 * read at x->loss_den. The host computes it before each step and copies it there with the staged
 * inputs (runtime/api_cuda.c stage), outside any captured graph: it must look at the targets
 * anyway, to refuse a step whose global batch masks every target before anything runs (a count on
 * the device could only turn that into NaN), and the ranks' counts are summed by the host
 * communicator that already sums their losses. A graph replays with whatever D was staged last. */

/* The fused cross entropy over N rows of V logits (V % 8 == 0): each row's gradient, weighted
 * dl / D, in place; its loss into per (N). One read of the row where a cluster's registers hold
 * it, else two passes. V twice: the logits carry no padding columns here (V = Vp). */
static int ce_rows(RtExec *x, CUdeviceptr per, CUdeviceptr logits, CUdeviceptr tg, int N, int V, float dl) {
  unsigned th = stepc_ce_threads(V);
  return th ? rt_launch_cross_entropy_cluster(x->d, rt_dim1((unsigned)N * STEPC_CE_CLUSTER), th, 0, per,
                                              logits, tg, N, V, V, dl, x->loss_den)
            : rt_launch_cross_entropy_forward_backward(x->d, rt_dim1((unsigned)N), 512, 0, per, logits, tg, N,
                                                       V, V, dl, x->loss_den);
}

/* in (logits (B,T,V), targets) out (loss (1), lse (B,T)): the fused kernel leaves dlogits in the
 * logits' storage (which CROSS_ENTROPY_BWD's output aliases) and the per-token losses in lse's. */
/* The vocab-parallel form (i[0] = 1: this rank's V of the group's tp V columns, ir/ops/loss.c): the
 * row maxima all-reduced (max), then the sums of exp and the target logits (sum), then the loss and
 * the gradient in place from the group's lse — tp_vp's three passes (kernels/tp.cuh) around two
 * collectives over row statistics in the op workspace. */
static int ce_vocab_parallel(RtExec *x, const Op *op, CUdeviceptr per, int N, int V, int tp) {
  CUdeviceptr st = x->work, lg = rt_in(x, op, 0), tg = rt_in(x, op, 1);
  RtColl mx = {.op = RT_COLL_ALLREDUCE_MAX,
               .dtype = RT_COLL_F32,
               .group = RT_COLL_GROUP_TP,
               .count = N,
               .src = st,
               .dst = st};
  RtColl sum = {.op = RT_COLL_ALLREDUCE_SUM,
                .dtype = RT_COLL_F32,
                .group = RT_COLL_GROUP_TP,
                .count = 2 * (int64_t)N,
                .src = st + (CUdeviceptr)N * 4,
                .dst = st + (CUdeviceptr)N * 4};
  return rt_launch_ce_vp_stats(x->d, rt_dim1((unsigned)N), 512, 0, st, lg, tg, N, V, V * tp, x->rank) ||
                 rt_coll(x->d, &mx) ||
                 rt_launch_ce_vp_sumexp(x->d, rt_dim1((unsigned)N), 512, 0, st, lg, N, V) ||
                 rt_coll(x->d, &sum) ||
                 rt_launch_ce_vp_finish(x->d, rt_dim1((unsigned)N), 512, 0, per, lg, tg, st, N, V, V * tp,
                                        x->rank, x->dloss[rt_op_index(x, op)], x->loss_den)
             ? RT_ERROR
             : RT_OK;
}

static int rt_op_cross_entropy(RtExec *x, const Op *op) {
  const Tensor *lg = rt_t(x, op->in[0]);
  int N = (int)ops_rows(lg), V = (int)ops_last(lg);
  if (V % 8) return rt_fail(x->d, "vocabulary %d is not a multiple of 8", V);
  CUdeviceptr per = rt_out(x, op, 1), loss = rt_out(x, op, 0);
  if (op->a.i[0]) { /* vocab-parallel (x->tp 1: lowered at TP 1 by train.force_parallel_lowering) */
    if (ce_vocab_parallel(x, op, per, N, V, x->tp)) return RT_ERROR;
    return rt_launch_loss_reduce(x->d, rt_dim1(1), 1024, 0, loss, per, N, x->loss_den);
  }
  if (ce_rows(x, per, rt_in(x, op, 0), rt_in(x, op, 1), N, V, x->dloss[rt_op_index(x, op)])) return RT_ERROR;
  return rt_launch_loss_reduce(x->d, rt_dim1(1), 1024, 0, loss, per, N, x->loss_den);
}

/* LINEAR_CROSS_ENTROPY with its backward (RT_FUSE_LOSS_BWD, x->slot): in (x (N, K), W (V, K),
 * targets (N)) out (loss, token_loss (N), logits chunk (n, V)), and the backward's dx (N, K) and
 * dW, added into W's fp32 main gradient. For each chunk of n rows, in order: logits = x_c W^T into
 * the chunk; the cross entropy over it in place (its gradient, the rows' losses into token_loss);
 * dx_c = dlogits W; main gradient += dlogits^T x_c. Then the loss, the fixed-order sum of
 * token_loss / D. One stream, a fixed order of every sum: deterministic, and capturable. */
static int rt_op_linear_cross_entropy(RtExec *x, const Op *op) {
  int o = rt_op_index(x, op), b = x->slot[o];
  if (b <= o || x->fz->fuse[b] != RT_FUSE_LOSS_BWD || x->fz->peer[b] != o)
    return rt_fail(
        x->d, "the chunked output layer runs on CUDA only with its backward in its launch (a constant loss "
              "gradient, the weight gradient into an fp32 main gradient: compiler/passes/fuse.c)");
  const Op *bw = &x->g->op[b];
  const Tensor *a = rt_t(x, op->in[0]), *w = rt_t(x, op->in[1]);
  int64_t N = ops_rows(a), K = ops_last(a), V = w->shape[0], n = N / op->a.i[0], mg = x->fz->sink[bw->out[1]];
  if (V % 8 || K % 8 || a->dtype != DT_BF16 || w->dtype != DT_BF16 || mg < 0 || N > INT32_MAX)
    return rt_fail(
        x->d,
        "the chunked output layer takes bf16 x and W, a vocabulary and width that are multiples of 8 (%lld, "
        "%lld) and its weight gradient sunk into the main gradient",
        (long long)V, (long long)K);
  CUdeviceptr xin = rt_in(x, op, 0), W = rt_in(x, op, 1), tg = rt_in(x, op, 2), tok = rt_out(x, op, 1);
  CUdeviceptr lg = rt_out(x, op, 2), dx = rt_out(x, bw, 0), main = rt_exec_ptr(x, (int)mg);
  /* one micro-batch: the gradient's ZERO between the forward and its backward is this launch's
   * (fuse.c fuse_loss_bwd): the first chunk's product stores the main gradient instead of adding
   * to it (no memset, no read of zeros: 2 GB less to move at Llama 3's vocabulary and width 4096) */
  int store = 0;
  for (int z = o + 1; z < b && !x->eval; z++)
    if (x->g->op[z].kind == OP_ZERO && x->fz->skip[z] && x->g->op[z].nout == 1 && x->g->op[z].out[0] == mg)
      store = 1;
  if (store && N == 0 && rt_memset0(x->d, main, (size_t)rt_t(x, (int)mg)->bytes)) return RT_ERROR;
  /* an evaluation (rt_exec_set_eval): the logits and the rows' losses alone; the cross entropy's
   * in-place gradient lands in the chunk, which nothing reads, and no dx, no main gradient */
  for (int64_t r0 = 0; r0 < N && x->eval; r0 += n)
    if (rt_gemm(x->d, RT_GEMM_NT, n, V, K, xin + (CUdeviceptr)(r0 * K * 2), W, lg, 0, 0, 0) ||
        ce_rows(x, tok + (CUdeviceptr)(r0 * 4), lg, tg + (CUdeviceptr)(r0 * 4), (int)n, (int)V, x->dloss[o]))
      return RT_ERROR;
  for (int64_t r0 = 0; r0 < N && !x->eval; r0 += n) {
    CUdeviceptr xc = xin + (CUdeviceptr)(r0 * K * 2), dxc = dx + (CUdeviceptr)(r0 * K * 2);
    if (rt_gemm(x->d, RT_GEMM_NT, n, V, K, xc, W, lg, 0, 0, 0) ||
        ce_rows(x, tok + (CUdeviceptr)(r0 * 4), lg, tg + (CUdeviceptr)(r0 * 4), (int)n, (int)V,
                x->dloss[o]) ||
        rt_gemm(x->d, RT_GEMM_NN, n, K, V, lg, W, dxc, 0, 0, 0) ||
        rt_gemm(x->d, RT_GEMM_TN, V, K, n, lg, xc, main, 1, !(store && r0 == 0), 0))
      return RT_ERROR;
  }
  return rt_launch_loss_reduce(x->d, rt_dim1(1), 1024, 0, rt_out(x, op, 0), tok, (int)N, x->loss_den);
}

/* This family's rows of the per-kind launch table (exec.c gathers every family's). */
const RtOpRow RT_OPS_ATTN_LOSS[] = {
    {OP_FLASH_ATTN, rt_op_flash},
    {OP_FLASH_ATTN_BWD, rt_op_flash_bwd},
    {OP_FLASH_ATTN_DV, rt_op_flash}, /* value head dim != q/k's (MLA): cuDNN only (attn_dims) */
    {OP_FLASH_ATTN_DV_BWD, rt_op_flash_bwd},
    {OP_CROSS_ENTROPY, rt_op_cross_entropy},
    {OP_LINEAR_CROSS_ENTROPY, rt_op_linear_cross_entropy},
    {OP_COUNT, NULL},
};
