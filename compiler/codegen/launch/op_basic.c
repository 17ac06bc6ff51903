/* op_basic.c — dispatch of the elementwise, embedding, RoPE, dropout, activation and QKV-layout
 * ops (ir/ops/elementwise.c, embedding.c, rope.c, dropout.c, activation.c, attention.c). */
#include "codegen/launch/exec_internal.h"
#include "codegen/launch/launchers.h"
#include "kernels/launch.h"

/* grid, block and shared memory of a grid-stride kernel over `work` items */
#define STRIDE(work) rt_grid_stride(x->d, work), 256, 0

static int need_bf16(RtExec *x, const Op *op, int tensor) {
  if (rt_t(x, tensor)->dtype == DT_BF16) return RT_OK;
  return rt_fail(x->d, "%s: %s is %s, the kernel takes bf16", op_name(op->kind), rt_t(x, tensor)->name,
                 dtype_name(rt_t(x, tensor)->dtype));
}

static int dropout_add(RtExec *x, const Op *dr, const Op *add);

/* An fp32 ADD (the MoE load-balancing losses into the training loss): out = a, then out += b,
 * whichever of a and b the plan put in out's slot going first. */
static int add_f32(RtExec *x, const Op *op) {
  for (int i = 0; i < 2; i++)
    if (rt_t(x, op->in[i])->dtype != DT_F32)
      return rt_fail(x->d, "add into fp32 %s of %s %s", rt_t(x, op->out[0])->name,
                     dtype_name(rt_t(x, op->in[i])->dtype), rt_t(x, op->in[i])->name);
  CUdeviceptr y = rt_out(x, op, 0), a = rt_in(x, op, 0), b = rt_in(x, op, 1);
  long n = (long)rt_numel(x, op->out[0]);
  if (y == b)
    b = a; /* y already holds b: add a */
  else if (y != a && rt_copy_d2d(x->d, y, a, (size_t)n * 4))
    return RT_ERROR;
  return rt_launch_grad_accumulate_f32(x->d, STRIDE(n), y, b, n);
}

static int rt_op_add(RtExec *x, const Op *op) {
  int o = rt_op_index(x, op), f = x->fz->fuse[o];
  if (f == RT_FUSE_LINEAR_ADD) return rt_op_linear_add(x, &x->g->op[x->fz->peer[o]], op);
  if (f == RT_FUSE_DROPOUT_ADD) return dropout_add(x, &x->g->op[x->fz->peer[o]], op);
  if (f == RT_FUSE_NORM_BWD_ADD) return rt_op_norm_bwd_add(x, &x->g->op[x->fz->peer[o]], op);
  if (rt_t(x, op->out[0])->dtype == DT_F32) return add_f32(x, op);
  if (need_bf16(x, op, op->out[0])) return RT_ERROR;
  long n = (long)rt_numel(x, op->out[0]);
  return rt_launch_residual_add(x->d, STRIDE(n), rt_out(x, op, 0), rt_in(x, op, 0), rt_in(x, op, 1), n);
}

static int rt_op_accum(RtExec *x, const Op *op) {
  CUdeviceptr acc = rt_out(x, op, 0), gr = rt_in(x, op, 0);
  long n = (long)rt_numel(x, op->out[0]);
  if (rt_t(x, op->out[0])->dtype != DT_F32)
    return rt_fail(x->d, "accum into %s: not fp32", rt_t(x, op->out[0])->name);
  return (rt_t(x, op->in[0])->dtype == DT_F32 ? rt_launch_grad_accumulate_f32
                                              : rt_launch_grad_accumulate_bf16)(x->d, STRIDE(n), acc, gr, n);
}

static int rt_op_zero(RtExec *x, const Op *op) {
  for (int i = 0; i < op->nout; i++)
    if (rt_memset0(x->d, rt_out(x, op, i), (size_t)rt_t(x, op->out[i])->bytes)) return RT_ERROR;
  return RT_OK;
}

static int rt_op_fill(RtExec *x, const Op *op) {
  for (int i = 0; i < op->nout; i++) {
    if (rt_t(x, op->out[i])->dtype != DT_F32) return rt_fail(x->d, "fill of a non-fp32 tensor");
    long n = (long)rt_numel(x, op->out[i]);
    if (rt_launch_fill_f32(x->d, STRIDE(n), rt_out(x, op, i), (float)op->a.f[0], n)) return RT_ERROR;
  }
  return RT_OK;
}

/* Vocab-parallel (tensor parallelism: EMBED's i[0], EMBED_BWD's i[1]): the token ids as rows of this
 * rank's shard of V rows (-1 where another rank holds the row: a zero row, no gradient) into the op
 * workspace, which the launches then read instead of the tokens (ir/ops/embedding.c). */
static CUdeviceptr vocab_local(RtExec *x, CUdeviceptr tk, int N, int V, int tp) {
  if (tp <= 1) return tk;
  return rt_launch_tp_vocab_local(x->d, STRIDE(N), x->work, tk, N, V, V * tp, x->rank) ? 0 : x->work;
}

static int rt_op_embed(RtExec *x, const Op *op) {
  const Tensor *tok = rt_t(x, op->in[0]), *w = rt_t(x, op->in[1]);
  CUdeviceptr y = rt_out(x, op, 0), tk = rt_in(x, op, 0), wte = rt_in(x, op, 1), wpe = 0;
  int N = (int)tensor_numel(tok), T = (int)tok->shape[1], C = (int)w->shape[1], V = (int)w->shape[0];
  if (op->a.i[0] && !(tk = vocab_local(x, tk, N, V, x->tp))) return RT_ERROR;
  return rt_launch_embedding_forward(x->d, STRIDE((int64_t)N * C / 8), y, tk, wte, wpe, N, T, C, V);
}

static int rt_op_embed_bwd(RtExec *x, const Op *op) {
  const Tensor *dy = rt_t(x, op->in[0]);
  CUdeviceptr dw = rt_exec_ptr(x, x->fz->sink[op->out[0]]), g = rt_in(x, op, 0), tk = rt_in(x, op, 1);
  int N = (int)ops_rows(dy), C = (int)ops_last(dy), V = (int)op->a.i[0];
  if (op->a.i[1] && !(tk = vocab_local(x, tk, N, V, x->tp))) return RT_ERROR;
  return rt_launch_embedding_backward_token(x->d, rt_dim1((unsigned)(4 * x->d->sm_count)), 256, 0, dw, g, tk,
                                            N, C, V);
}

static int rt_op_pos_add(RtExec *x, const Op *op) {
  const Tensor *t = rt_t(x, op->in[0]);
  CUdeviceptr y = rt_out(x, op, 0), a = rt_in(x, op, 0), p = rt_in(x, op, 1);
  long N = (long)(t->shape[0] * t->shape[1]);
  int T = (int)t->shape[1], C = (int)t->shape[2];
  return rt_launch_pos_add(x->d, STRIDE(N * C), y, a, p, N, T, C, op->a.i[0] ? x->rank : 0);
}

static int rt_op_pos_add_bwd(RtExec *x, const Op *op) {
  const Tensor *dy = rt_t(x, op->in[0]);
  CUdeviceptr dw = rt_exec_ptr(x, x->fz->sink[op->out[0]]), g = rt_in(x, op, 0);
  int B = (int)dy->shape[0], T = (int)dy->shape[1], C = (int)dy->shape[2];
  return rt_launch_embedding_backward_position(x->d, STRIDE((int64_t)T * C / 8), dw, g, B, T, C,
                                               op->a.i[1] ? x->rank : 0);
}

/* The fused QKV split + RoPE group ending at op o (compiler/passes/fuse.c, FUSE_ROPE_QKV): forward, the
 * split (peer) and its two RoPEs; backward, the two inverse RoPEs (peer, peer + 1) and the concat
 * (o). One block per token row (rope.cuh). */
static int rope_qkv(RtExec *x, int o) {
  const Graph *g = x->g;
  const Op *first = &g->op[x->fz->peer[o]], *last = &g->op[o];
  int fwd = first->kind == OP_SPLIT_QKV;
  const Op *qkv = fwd ? first : last, *rq = NULL, *rk = NULL;
  for (int r = x->fz->peer[o] + !!fwd; r <= o - !fwd; r++) {
    const Op *rope = &g->op[r];
    if (rope->kind != OP_ROPE) return rt_fail(x->d, "op %d: a fused QKV RoPE group without its RoPE", o);
    if (fwd ? rope->in[0] == qkv->out[0] : rope->out[0] == qkv->in[0]) rq = rope;
    if (fwd ? rope->in[0] == qkv->out[1] : rope->out[0] == qkv->in[1]) rk = rope;
  }
  if (!rq || !rk) return rt_fail(x->d, "op %d: the fused QKV RoPE group does not rotate q and k", o);
  const Tensor *q = rt_t(x, rq->out[0]);
  long N = (long)(q->shape[0] * q->shape[1]);
  int T = (int)q->shape[1], H = (int)qkv->a.i[0], G = (int)qkv->a.i[1], D = (int)qkv->a.i[2];
  float base = (float)rq->a.f[0], factor = (float)rq->a.f[1];
  if (D % 16 || D / 2 > STEPC_ROPE_MAX_HALF)
    return rt_fail(x->d, "head size %d: the fused QKV RoPE takes multiples of 16", D);
  if (fwd)
    return rt_launch_rope_split_qkv(x->d, rt_dim1((unsigned)N), STEPC_ROPE_QKV_THREADS, 0, rt_out(x, rq, 0),
                                    rt_out(x, rk, 0), rt_out(x, qkv, 2), rt_in(x, qkv, 0), N, T, H, G, D,
                                    base, factor);
  RtDim grid = rt_dim1(rt_rope_qkv_blocks(x, qkv)); /* the amax partials are sized by it */
  CUdeviceptr am = rt_amax_slot(x, qkv), ap = am ? x->amax_partial : 0; /* linear_qkv's dy, fp8 */
  return rt_launch_rope_concat_qkv(x->d, grid, STEPC_ROPE_QKV_THREADS, 0, rt_out(x, qkv, 0), rt_in(x, rq, 0),
                                   rt_in(x, rk, 0), rt_in(x, qkv, 2), N, T, H, G, D, base, factor, ap, am);
}

/* The backward's grid at its CONCAT_QKV op: a block a token row of dqkv (B, T, (H+2G)D), at most
 * one wave of 16 blocks an SM (8 gn_groups), the blocks looping over the rows: with the fp8 amax
 * folded in, every block ends with a fence and a ticket on one counter (common.cuh amax_fold), and
 * at L8's 8192 rows, a block each, the kernel took 101 us against 73 us without the fold (H100). */
unsigned rt_rope_qkv_blocks(const RtExec *x, const Op *op) {
  int64_t n = ops_rows(rt_t(x, op->out[0])), cap = 8 * (int64_t)x->gn_groups;
  return (unsigned)(n < cap ? n : cap);
}

static int rt_op_rope(RtExec *x, const Op *op) {
  int o = rt_op_index(x, op);
  if (x->fz->fuse[o] == RT_FUSE_ROPE_QKV) return rope_qkv(x, o);
  const Tensor *t = rt_t(x, op->in[0]);
  CUdeviceptr y = rt_out(x, op, 0), a = rt_in(x, op, 0);
  int B = (int)t->shape[0], T = (int)t->shape[1], H = (int)t->shape[2], D = (int)t->shape[3];
  float base = (float)op->a.f[0], factor = (float)op->a.f[1];
  return (op->a.i[0] > 0 ? rt_launch_rope_forward : rt_launch_rope_backward)(
      x->d, STRIDE(tensor_numel(t) / 2), y, a, B, T, H, D, base, factor);
}

/* DROPOUT and DROPOUT_BWD share the attributes (p, stream), so the backward regenerates the
 * forward's mask from the micro-batch's seed (copied to seed_cur before the micro-batch's ops);
 * the mask output is not written. */
static int dropout(RtExec *x, const Op *op, int backward) {
  CUdeviceptr y = rt_out(x, op, 0), a = rt_in(x, op, 0), seed = x->seed_cur;
  long n = (long)rt_numel(x, op->in[0]);
  float p = rt_dropout_p(x, op);
  unsigned id = (unsigned)op->a.i[0];
  int d = (int)op->a.i[1];
  if (d > 0) { /* a tensor-parallel slice: each element's bits at its one-rank index */
    const Tensor *t = rt_t(x, op->in[0]);
    long inner = 1;
    for (int k = d + 1; k < t->ndim; k++)
      inner *= (long)t->shape[k];
    return rt_launch_dropout_slice(x->d, STRIDE(n), y, a, n, p, seed, id, (long)t->shape[d], inner, x->tp,
                                   x->rank);
  }
  return (backward ? rt_launch_dropout_backward : rt_launch_dropout_forward)(x->d, STRIDE((n + 3) / 4), y, a,
                                                                             n, p, seed, id);
}
int rt_op_dropout(RtExec *x, const Op *op) { return dropout(x, op, 0); }

/* DROPOUT -> ADD whose dropout output has no other reader: out = r + dropout(in) in one kernel
 * (compiler/passes/fuse.c). Same grid, seed slot, stream id and element count as `dropout`, so the same
 * Philox mask as dropout_backward and a replay regenerate; the kept value is scaled and added in
 * fp32 and rounded once. */
static int dropout_add(RtExec *x, const Op *dr, const Op *add) {
  int yt = dr->out[0], rt = add->in[0] == yt ? add->in[1] : add->in[0];
  CUdeviceptr y = rt_out(x, add, 0), r = rt_exec_ptr(x, rt), a = rt_in(x, dr, 0), seed = x->seed_cur;
  long n = (long)rt_numel(x, dr->in[0]);
  float p = rt_dropout_p(x, dr);
  unsigned id = (unsigned)dr->a.i[0];
  if (rt_launch_dropout_residual_forward(x->d, STRIDE((n + 3) / 4), y, r, a, n, p, seed, id)) return RT_ERROR;
  return RT_OK;
}
int rt_op_dropout_bwd(RtExec *x, const Op *op) { return dropout(x, op, 1); }

/* The gated activations, SWIGLU and GEGLU: rows [gate | up], the same launch for either; the
 * output's fp8 amax (the gradient's, backward) folded into its slot where the compiler fused it
 * (rt_amax_slot). The forward's output and the backward's incoming gradient are (N, F). */
unsigned rt_glu_blocks(const RtExec *x, const Op *op) {
  const Tensor *t = rt_t(x, op->kind == OP_SWIGLU || op->kind == OP_GEGLU ? op->out[0] : op->in[0]);
  return rt_grid1d(x->d, ops_rows(t) * ops_last(t) / 8);
}

static int rt_op_swiglu(RtExec *x, const Op *op) {
  const Tensor *y = rt_t(x, op->out[0]);
  CUdeviceptr o = rt_out(x, op, 0), a = rt_in(x, op, 0), am = rt_amax_slot(x, op),
              ap = am ? x->amax_partial : 0;
  int N = (int)ops_rows(y), F = (int)ops_last(y);
  RtDim grid = rt_dim1(rt_glu_blocks(x, op));
  if (F % 8) return rt_fail(x->d, "%s width %d is not a multiple of 8", op_name(op->kind), F);
  if (op->kind == OP_GEGLU) return rt_launch_geglu_forward(x->d, grid, 256, 0, o, a, N, F, ap, am);
  return rt_launch_swiglu_forward(x->d, grid, 256, 0, o, a, N, F, ap, am);
}

static int rt_op_swiglu_bwd(RtExec *x, const Op *op) {
  const Tensor *dy = rt_t(x, op->in[0]);
  CUdeviceptr dx = rt_out(x, op, 0), g = rt_in(x, op, 0), a = rt_in(x, op, 1);
  CUdeviceptr am = rt_amax_slot(x, op), ap = am ? x->amax_partial : 0;
  int N = (int)ops_rows(dy), F = (int)ops_last(dy);
  RtDim grid = rt_dim1(rt_glu_blocks(x, op));
  if (op->kind == OP_GEGLU_BWD) return rt_launch_geglu_backward(x->d, grid, 256, 0, dx, g, a, N, F, ap, am);
  return rt_launch_swiglu_backward(x->d, grid, 256, 0, dx, g, a, N, F, ap, am);
}

static int rt_op_gelu(RtExec *x, const Op *op) {
  CUdeviceptr o = rt_out(x, op, 0), a = rt_in(x, op, 0);
  long n = (long)rt_numel(x, op->in[0]);
  return rt_launch_gelu_forward(x->d, STRIDE(n), o, a, n);
}

static int rt_op_gelu_bwd(RtExec *x, const Op *op) {
  CUdeviceptr dx = rt_out(x, op, 0), g = rt_in(x, op, 0), a = rt_in(x, op, 1);
  long n = (long)rt_numel(x, op->in[0]);
  return rt_launch_gelu_backward(x->d, STRIDE(n), dx, g, a, n);
}

/* RELU_ACT in [x] out [y]: relu, or squared relu (i[0] = 1, Nemotron's MLPs); its backward in
 * [dy, x] out [dx]. */
static int rt_op_relu(RtExec *x, const Op *op) {
  long n = (long)rt_numel(x, op->in[0]);
  return rt_launch_relu_forward(x->d, STRIDE(n), rt_out(x, op, 0), rt_in(x, op, 0), n, (int)op->a.i[0]);
}

static int rt_op_relu_bwd(RtExec *x, const Op *op) {
  long n = (long)rt_numel(x, op->in[0]);
  return rt_launch_relu_backward(x->d, STRIDE(n), rt_out(x, op, 0), rt_in(x, op, 0), rt_in(x, op, 1), n,
                                 (int)op->a.i[0]);
}

static int qkv(RtExec *x, const Op *op, int split) {
  const Tensor *q = rt_t(x, split ? op->out[0] : op->in[0]);
  long N = (long)(q->shape[0] * q->shape[1]);
  int H = (int)op->a.i[0], G = (int)op->a.i[1], D = (int)op->a.i[2];
  if (D % 8) return rt_fail(x->d, "head size %d is not a multiple of 8", D);
  int64_t work = N * (H + 2 * G) * D / 8;
  if (split) {
    CUdeviceptr oq = rt_out(x, op, 0), ok = rt_out(x, op, 1), ov = rt_out(x, op, 2), in = rt_in(x, op, 0);
    return rt_launch_split_qkv(x->d, STRIDE(work), oq, ok, ov, in, N, H, G, D);
  }
  CUdeviceptr out = rt_out(x, op, 0), iq = rt_in(x, op, 0), ik = rt_in(x, op, 1), iv = rt_in(x, op, 2);
  return rt_launch_concat_qkv(x->d, STRIDE(work), out, iq, ik, iv, N, H, G, D);
}
static int rt_op_split_qkv(RtExec *x, const Op *op) { return qkv(x, op, 1); }
static int rt_op_concat_qkv(RtExec *x, const Op *op) {
  int o = rt_op_index(x, op);
  return x->fz->fuse[o] == RT_FUSE_ROPE_QKV ? rope_qkv(x, o) : qkv(x, op, 0);
}

/* This family's rows of the per-kind launch table (exec.c gathers every family's). */
const RtOpRow RT_OPS_BASIC[] = {
    {OP_ADD, rt_op_add},
    {OP_ACCUM, rt_op_accum},
    {OP_ZERO, rt_op_zero},
    {OP_FILL, rt_op_fill},
    {OP_EMBED, rt_op_embed},
    {OP_EMBED_BWD, rt_op_embed_bwd},
    {OP_POS_ADD, rt_op_pos_add},
    {OP_POS_ADD_BWD, rt_op_pos_add_bwd},
    {OP_ROPE, rt_op_rope},
    {OP_DROPOUT, rt_op_dropout},
    {OP_DROPOUT_BWD, rt_op_dropout_bwd},
    {OP_SWIGLU, rt_op_swiglu},
    {OP_SWIGLU_BWD, rt_op_swiglu_bwd},
    {OP_GEGLU, rt_op_swiglu}, /* the gated activations share their launch (op_basic.c) */
    {OP_GEGLU_BWD, rt_op_swiglu_bwd},
    {OP_GELU, rt_op_gelu},
    {OP_GELU_BWD, rt_op_gelu_bwd},
    {OP_RELU_ACT, rt_op_relu},
    {OP_RELU_ACT_BWD, rt_op_relu_bwd},
    {OP_SPLIT_QKV, rt_op_split_qkv},
    {OP_CONCAT_QKV, rt_op_concat_qkv},
    {OP_COUNT, NULL},
};
