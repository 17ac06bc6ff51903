/* op_basic.c — dispatch of the elementwise, embedding, RoPE, dropout, activation and QKV-layout
 * ops (ir/ops/elementwise.c, embedding.c, rope.c, dropout.c, activation.c, attention.c). */
#include "runtime/cuda/exec_internal.h"

#define LAUNCH1D(k, work, ...)                                                                              \
  do {                                                                                                      \
    void *args_[] = {__VA_ARGS__};                                                                          \
    return rt_launch(x->d, k, rt_grid1d(x->d, work), 1, 1, 256, 0, args_);                                  \
  } while (0)

static int need_bf16(RtExec *x, const Op *op, int tensor) {
  if (rt_t(x, tensor)->dtype == DT_BF16) return RT_OK;
  return rt_fail(x->d, "%s: %s is %s, the kernel takes bf16", op_name(op->kind), rt_t(x, tensor)->name,
                 dtype_name(rt_t(x, tensor)->dtype));
}

static int dropout_add(RtExec *x, const Op *dr, const Op *add);

int rt_op_add(RtExec *x, const Op *op) {
  int o = rt_op_index(x, op), f = x->fuse[o];
  if (f == RT_FUSE_LINEAR_ADD) return rt_op_linear_add(x, &x->g->op[x->peer[o]], op);
  if (f == RT_FUSE_DROPOUT_ADD) return dropout_add(x, &x->g->op[x->peer[o]], op);
  if (need_bf16(x, op, op->out[0])) return RT_ERROR;
  CUdeviceptr y = rt_out(x, op, 0), a = rt_in(x, op, 0), b = rt_in(x, op, 1);
  long n = (long)rt_numel(x, op->out[0]);
  LAUNCH1D(RT_K_residual_add, n, &y, &a, &b, &n);
}

int rt_op_accum(RtExec *x, const Op *op) {
  CUdeviceptr acc = rt_out(x, op, 0), gr = rt_in(x, op, 0);
  long n = (long)rt_numel(x, op->out[0]);
  if (rt_t(x, op->out[0])->dtype != DT_F32) return rt_fail(x->d, "accum into %s: not fp32", rt_t(x, op->out[0])->name);
  RtKernel k = rt_t(x, op->in[0])->dtype == DT_F32 ? RT_K_grad_accumulate_f32 : RT_K_grad_accumulate_bf16;
  LAUNCH1D(k, n, &acc, &gr, &n);
}

int rt_op_zero(RtExec *x, const Op *op) {
  for (int i = 0; i < op->nout; i++)
    if (rt_memset0(x->d, rt_out(x, op, i), (size_t)rt_t(x, op->out[i])->bytes)) return RT_ERROR;
  return RT_OK;
}

int rt_op_fill(RtExec *x, const Op *op) {
  for (int i = 0; i < op->nout; i++) {
    if (rt_t(x, op->out[i])->dtype != DT_F32) return rt_fail(x->d, "fill of a non-fp32 tensor");
    CUdeviceptr p = rt_out(x, op, i);
    float v = (float)op->a.f[0];
    long n = (long)rt_numel(x, op->out[i]);
    void *args[] = {&p, &v, &n};
    if (rt_launch(x->d, RT_K_fill_f32, rt_grid1d(x->d, n), 1, 1, 256, 0, args)) return RT_ERROR;
  }
  return RT_OK;
}

int rt_op_embed(RtExec *x, const Op *op) {
  const Tensor *tok = rt_t(x, op->in[0]), *w = rt_t(x, op->in[1]);
  CUdeviceptr y = rt_out(x, op, 0), tk = rt_in(x, op, 0), wte = rt_in(x, op, 1), wpe = 0;
  int N = (int)tensor_numel(tok), T = (int)tok->shape[1], C = (int)w->shape[1], V = (int)w->shape[0];
  LAUNCH1D(RT_K_embedding_forward, (int64_t)N * C / 8, &y, &tk, &wte, &wpe, &N, &T, &C, &V);
}

int rt_op_embed_bwd(RtExec *x, const Op *op) {
  const Tensor *dy = rt_t(x, op->in[0]);
  CUdeviceptr dw = rt_exec_ptr(x, x->sink[op->out[0]]), g = rt_in(x, op, 0), tk = rt_in(x, op, 1);
  int N = (int)ops_rows(dy), C = (int)ops_last(dy), V = (int)op->a.i[0];
  void *args[] = {&dw, &g, &tk, &N, &C, &V};
  return rt_launch(x->d, RT_K_embedding_backward_token, (unsigned)(4 * x->d->sm_count), 1, 1, 256, 0, args);
}

int rt_op_pos_add(RtExec *x, const Op *op) {
  const Tensor *t = rt_t(x, op->in[0]);
  CUdeviceptr y = rt_out(x, op, 0), a = rt_in(x, op, 0), p = rt_in(x, op, 1);
  long N = (long)(t->shape[0] * t->shape[1]);
  int T = (int)t->shape[1], C = (int)t->shape[2];
  LAUNCH1D(RT_K_pos_add, N * C, &y, &a, &p, &N, &T, &C);
}

int rt_op_pos_add_bwd(RtExec *x, const Op *op) {
  const Tensor *dy = rt_t(x, op->in[0]);
  CUdeviceptr dw = rt_exec_ptr(x, x->sink[op->out[0]]), g = rt_in(x, op, 0);
  int B = (int)dy->shape[0], T = (int)dy->shape[1], C = (int)dy->shape[2];
  LAUNCH1D(RT_K_embedding_backward_position, (int64_t)T * C / 8, &dw, &g, &B, &T, &C);
}

int rt_op_rope(RtExec *x, const Op *op) {
  const Tensor *t = rt_t(x, op->in[0]);
  CUdeviceptr y = rt_out(x, op, 0), a = rt_in(x, op, 0);
  int B = (int)t->shape[0], T = (int)t->shape[1], H = (int)t->shape[2], D = (int)t->shape[3];
  float base = (float)op->a.f[0];
  LAUNCH1D(op->a.i[0] > 0 ? RT_K_rope_forward : RT_K_rope_backward, tensor_numel(t) / 2, &y, &a, &B, &T, &H, &D, &base);
}

/* DROPOUT and DROPOUT_BWD share the attributes (p, stream), so the backward regenerates the
 * forward's mask from the micro-batch's seed (copied to seed_cur before the micro-batch's ops);
 * the mask output is not written. */
static int dropout(RtExec *x, const Op *op, RtKernel k) {
  CUdeviceptr y = rt_out(x, op, 0), a = rt_in(x, op, 0), seed = x->seed_cur;
  long n = (long)rt_numel(x, op->in[0]);
  float p = (float)op->a.f[0];
  unsigned id = (unsigned)op->a.i[0];
  LAUNCH1D(k, (n + 3) / 4, &y, &a, &n, &p, &seed, &id);
}
int rt_op_dropout(RtExec *x, const Op *op) { return dropout(x, op, RT_K_dropout_forward); }

/* DROPOUT -> ADD whose dropout output has no other reader: out = r + dropout(in) in one kernel
 * (compiler/fuse.c). Same grid, seed slot, stream id and element count as `dropout`, so the same
 * Philox mask as dropout_backward and a replay regenerate; the kept value is scaled and added in
 * fp32 and rounded once. */
static int dropout_add(RtExec *x, const Op *dr, const Op *add) {
  int yt = dr->out[0], rt = add->in[0] == yt ? add->in[1] : add->in[0];
  CUdeviceptr y = rt_out(x, add, 0), r = rt_exec_ptr(x, rt), a = rt_in(x, dr, 0), seed = x->seed_cur;
  long n = (long)rt_numel(x, dr->in[0]);
  float p = (float)dr->a.f[0];
  unsigned id = (unsigned)dr->a.i[0];
  void *args[] = {&y, &r, &a, &n, &p, &seed, &id};
  if (rt_launch(x->d, RT_K_dropout_residual_forward, rt_grid1d(x->d, (n + 3) / 4), 1, 1, 256, 0, args)) return RT_ERROR;
  return RT_OK;
}
int rt_op_dropout_bwd(RtExec *x, const Op *op) { return dropout(x, op, RT_K_dropout_backward); }

int rt_op_swiglu(RtExec *x, const Op *op) {
  const Tensor *y = rt_t(x, op->out[0]);
  CUdeviceptr o = rt_out(x, op, 0), a = rt_in(x, op, 0);
  int N = (int)ops_rows(y), F = (int)ops_last(y);
  if (F % 8) return rt_fail(x->d, "swiglu width %d is not a multiple of 8", F);
  LAUNCH1D(RT_K_swiglu_forward, (int64_t)N * F / 8, &o, &a, &N, &F);
}

int rt_op_swiglu_bwd(RtExec *x, const Op *op) {
  const Tensor *dy = rt_t(x, op->in[0]);
  CUdeviceptr dx = rt_out(x, op, 0), g = rt_in(x, op, 0), a = rt_in(x, op, 1);
  int N = (int)ops_rows(dy), F = (int)ops_last(dy);
  LAUNCH1D(RT_K_swiglu_backward, (int64_t)N * F / 8, &dx, &g, &a, &N, &F);
}

int rt_op_gelu(RtExec *x, const Op *op) {
  CUdeviceptr o = rt_out(x, op, 0), a = rt_in(x, op, 0);
  long n = (long)rt_numel(x, op->in[0]);
  LAUNCH1D(RT_K_gelu_forward, n, &o, &a, &n);
}

int rt_op_gelu_bwd(RtExec *x, const Op *op) {
  CUdeviceptr dx = rt_out(x, op, 0), g = rt_in(x, op, 0), a = rt_in(x, op, 1);
  long n = (long)rt_numel(x, op->in[0]);
  LAUNCH1D(RT_K_gelu_backward, n, &dx, &g, &a, &n);
}

static int qkv(RtExec *x, const Op *op, int split) {
  const Tensor *q = rt_t(x, split ? op->out[0] : op->in[0]);
  long N = (long)(q->shape[0] * q->shape[1]);
  int H = (int)op->a.i[0], G = (int)op->a.i[1], D = (int)op->a.i[2];
  if (D % 8) return rt_fail(x->d, "head size %d is not a multiple of 8", D);
  int64_t work = N * (H + 2 * G) * D / 8;
  if (split) {
    CUdeviceptr oq = rt_out(x, op, 0), ok = rt_out(x, op, 1), ov = rt_out(x, op, 2), in = rt_in(x, op, 0);
    LAUNCH1D(RT_K_split_qkv, work, &oq, &ok, &ov, &in, &N, &H, &G, &D);
  }
  CUdeviceptr out = rt_out(x, op, 0), iq = rt_in(x, op, 0), ik = rt_in(x, op, 1), iv = rt_in(x, op, 2);
  LAUNCH1D(RT_K_concat_qkv, work, &out, &iq, &ik, &iv, &N, &H, &G, &D);
}
int rt_op_split_qkv(RtExec *x, const Op *op) { return qkv(x, op, 1); }
int rt_op_concat_qkv(RtExec *x, const Op *op) { return qkv(x, op, 0); }
