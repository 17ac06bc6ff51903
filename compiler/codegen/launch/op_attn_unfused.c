/* op_attn_unfused.c — dispatch of the unfused attention backend (ir/ops/attention.c):
 * ATTN_SCORES, CAUSAL_MASK, SOFTMAX, ATTN_PV and their backward ops. Dropout on the probabilities
 * is the ordinary DROPOUT op (op_basic.c: Philox mask keyed by its stream, regenerated in
 * backward and in any replay).
 *
 * The products run as cuBLASLt strided-batched GEMMs, one call per query head h batched over
 * the B sequences: inside q (B,T,H,D) head h's rows are H*D apart and sequence b starts T*H*D
 * further on, and head h reads K/V group g = h / (H/G) (rows G*D apart), so no transpose is
 * needed. (One call batched over B*H would need a single stride per batch index, which (b, h)
 * inside (B,T,H,D) does not have.) Scores and probabilities are (B,H,T,T), contiguous per (b, h).
 * The GQA reductions (dK, dV: a group sums over its H/G query heads) run as that many calls into
 * the same output, the first with beta = 0 and the rest with beta = 1, in head order, so the sum
 * is deterministic. rt_gemm_run keys its algorithm on the operands' alignment; tensor bases are
 * 256-byte aligned in every GPU plan, so the alignment comes from the head offsets alone and two
 * plans of one recipe (recompute or not, scoped or not) run the same algorithms, bitwise equal.
 *
 * A SOFTMAX that reads a causally masked (B,H,T,T) score tensor runs as kernels/softmax.cuh's
 * causal softmax (scale 1); its backward is then the causal backward, which equals the plain one
 * on probabilities that are zero above the diagonal. Any other softmax (the MoE router's scores
 * over the experts) runs as the row softmax of op_moe.c. */
#include <stdio.h>

#include "codegen/launch/exec_internal.h"
#include "codegen/launch/launchers.h"

typedef struct {
  int64_t B, T, H, G, D;
} Dims;

static int need_bf16(RtExec *x, const Op *op) {
  for (int i = 0; i < op->nin + op->nout; i++) {
    const Tensor *t = rt_t(x, i < op->nin ? op->in[i] : op->out[i - op->nin]);
    if (t->dtype != DT_BF16)
      return rt_fail(x->d, "%s: %s is %s, the unfused attention kernels take bf16", op_name(op->kind),
                     t->name, dtype_name(t->dtype));
  }
  return RT_OK;
}

/* From the head count H and a k/v-like (B,T,G,D) tensor. */
static int dims(RtExec *x, const Op *op, int64_t H, int kt, Dims *a) {
  const Tensor *k = rt_t(x, kt);
  *a = (Dims){k->shape[0], k->shape[1], H, k->shape[2], k->shape[3]};
  if (a->G <= 0 || a->H % a->G)
    return rt_fail(x->d, "%s: %lld heads over %lld groups", op_name(op->kind), (long long)a->H,
                   (long long)a->G);
  return need_bf16(x, op);
}

static CUdeviceptr at(CUdeviceptr base, int64_t elems) { return base + (CUdeviceptr)(2 * elems); }

/* Per-head operand views: q/o/dq/dO rows (b, t, h), k/v rows (b, t, g), scores (b, h, i, j). */
static int64_t ld_q(const Dims *a) { return a->H * a->D; }
static int64_t ld_k(const Dims *a) { return a->G * a->D; }
static int64_t st_q(const Dims *a) { return a->T * a->H * a->D; }
static int64_t st_k(const Dims *a) { return a->T * a->G * a->D; }
static int64_t st_s(const Dims *a) { return a->H * a->T * a->T; }
static int64_t off_s(const Dims *a, int64_t h) { return h * a->T * a->T; }
static int64_t grp(const Dims *a, int64_t h) { return h / (a->H / a->G); }

/* S (b,h) (T,T) = alpha X (b,h rows, ld H D) . Y (b,g rows, ld G D)^T: scores, and dP in ATTN_PV_BWD. */
static int qk_t(RtExec *x, const Dims *a, CUdeviceptr S, CUdeviceptr X, CUdeviceptr Y, float alpha) {
  RtGemm gb = {.kind = RT_GEMM_NT,
               .m = a->T,
               .n = a->T,
               .k = a->D,
               .lda = ld_q(a),
               .ldb = ld_k(a),
               .ldc = a->T,
               .stride_a = st_q(a),
               .stride_b = st_k(a),
               .stride_c = st_s(a),
               .batch = a->B,
               .alpha = alpha};
  for (int64_t h = 0; h < a->H; h++) {
    gb.a = at(X, h * a->D), gb.b = at(Y, grp(a, h) * a->D), gb.c = at(S, off_s(a, h));
    if (rt_gemm_run(x->d, &gb)) return RT_ERROR;
  }
  return RT_OK;
}

/* O (b,h rows, ld H D) = alpha P (b,h) (T,T) . Y (b,g rows, ld G D): context, and dQ in
 * ATTN_SCORES_BWD. */
static int p_v(RtExec *x, const Dims *a, CUdeviceptr O, CUdeviceptr P, CUdeviceptr Y, float alpha) {
  RtGemm gb = {.kind = RT_GEMM_NN,
               .m = a->T,
               .n = a->D,
               .k = a->T,
               .lda = a->T,
               .ldb = ld_k(a),
               .ldc = ld_q(a),
               .stride_a = st_s(a),
               .stride_b = st_k(a),
               .stride_c = st_q(a),
               .batch = a->B,
               .alpha = alpha};
  for (int64_t h = 0; h < a->H; h++) {
    gb.a = at(P, off_s(a, h)), gb.b = at(Y, grp(a, h) * a->D), gb.c = at(O, h * a->D);
    if (rt_gemm_run(x->d, &gb)) return RT_ERROR;
  }
  return RT_OK;
}

/* Z (b,g rows, ld G D) = alpha sum_{h in g} P (b,h)^T . X (b,h rows, ld H D): dV and dK. */
static int pt_x(RtExec *x, const Dims *a, CUdeviceptr Z, CUdeviceptr P, CUdeviceptr X, float alpha) {
  RtGemm gb = {.kind = RT_GEMM_TN,
               .m = a->T,
               .n = a->D,
               .k = a->T,
               .lda = a->T,
               .ldb = ld_q(a),
               .ldc = ld_k(a),
               .stride_a = st_s(a),
               .stride_b = st_q(a),
               .stride_c = st_k(a),
               .batch = a->B,
               .alpha = alpha};
  int64_t rep = a->H / a->G;
  for (int64_t h = 0; h < a->H; h++) {
    gb.a = at(P, off_s(a, h)), gb.b = at(X, h * a->D), gb.c = at(Z, grp(a, h) * a->D),
    gb.beta = h % rep ? 1.0f : 0.0f;
    if (rt_gemm_run(x->d, &gb)) return RT_ERROR;
  }
  return RT_OK;
}

/* in (q, k) out (s (B,H,T,T)) f[0] = scale */
static int rt_op_attn_scores(RtExec *x, const Op *op) {
  Dims a;
  if (dims(x, op, rt_t(x, op->in[0])->shape[2], op->in[1], &a)) return RT_ERROR;
  return qk_t(x, &a, rt_out(x, op, 0), rt_in(x, op, 0), rt_in(x, op, 1), (float)op->a.f[0]);
}

/* in (ds, q, k) out (dq, dk): dq = scale ds k, dk = scale sum_h ds^T q */
static int rt_op_attn_scores_bwd(RtExec *x, const Op *op) {
  Dims a;
  if (dims(x, op, rt_t(x, op->in[1])->shape[2], op->in[2], &a)) return RT_ERROR;
  float scale = (float)op->a.f[0];
  CUdeviceptr ds = rt_in(x, op, 0), q = rt_in(x, op, 1), k = rt_in(x, op, 2);
  return p_v(x, &a, rt_out(x, op, 0), ds, k, scale) || pt_x(x, &a, rt_out(x, op, 1), ds, q, scale) ? RT_ERROR
                                                                                                   : RT_OK;
}

/* in (p (B,H,T,T), v) out (o (B,T,H*D)) */
static int rt_op_attn_pv(RtExec *x, const Op *op) {
  Dims a;
  if (dims(x, op, rt_t(x, op->in[0])->shape[1], op->in[1], &a)) return RT_ERROR;
  return p_v(x, &a, rt_out(x, op, 0), rt_in(x, op, 0), rt_in(x, op, 1), 1.0f);
}

/* in (do, p, v) out (dp, dv): dp = do v^T, dv = sum_h p^T do */
static int rt_op_attn_pv_bwd(RtExec *x, const Op *op) {
  Dims a;
  if (dims(x, op, rt_t(x, op->in[1])->shape[1], op->in[2], &a)) return RT_ERROR;
  CUdeviceptr dO = rt_in(x, op, 0), pr = rt_in(x, op, 1), vv = rt_in(x, op, 2);
  return qk_t(x, &a, rt_out(x, op, 0), dO, vv, 1.0f) || pt_x(x, &a, rt_out(x, op, 1), pr, dO, 1.0f) ? RT_ERROR
                                                                                                    : RT_OK;
}

/* in (s) out (masked): i[0] = 0 fills -inf above the diagonal, 1 fills 0 (the backward) */
static int rt_op_causal_mask(RtExec *x, const Op *op) {
  if (need_bf16(x, op)) return RT_ERROR;
  const Tensor *s = rt_t(x, op->in[0]);
  long rows = (long)ops_rows(s);
  int T = (int)ops_last(s);
  return rt_launch_causal_mask_fill(x->d, rt_grid_stride(x->d, (int64_t)rows * T), 256, 0, rt_out(x, op, 0),
                                    rt_in(x, op, 0), rows, T, op->a.i[0] != 0);
}

/* Whether this SOFTMAX (or SOFTMAX_BWD, through its forward) reads a forward CAUSAL_MASK's
 * (B,H,T,T) output. */
static int causal_softmax(const Graph *g, const Op *op) {
  const Tensor *in = &g->t[op->in[op->kind == OP_SOFTMAX ? 0 : 1]];
  const Op *src = in->producer >= 0 ? &g->op[in->producer] : NULL;
  if (op->kind == OP_SOFTMAX_BWD) return src && src->kind == OP_SOFTMAX && causal_softmax(g, src);
  return in->ndim == 4 && in->shape[2] == in->shape[3] && src && src->kind == OP_CAUSAL_MASK &&
         src->a.i[0] == 0;
}

/* in (masked) out (p): one block per row */
static int rt_op_softmax(RtExec *x, const Op *op) {
  if (!causal_softmax(x->g, op)) return rt_op_softmax_rows(x, op);
  if (need_bf16(x, op)) return RT_ERROR;
  const Tensor *s = rt_t(x, op->in[0]);
  int T = (int)ops_last(s), BH = (int)(ops_rows(s) / T);
  return rt_launch_softmax_causal_forward(x->d, rt_dim1((unsigned)(ops_rows(s))), 256, 0, rt_out(x, op, 0),
                                          rt_in(x, op, 0), BH, T, 1.0f);
}

/* in (dp, p) out (ds) */
static int rt_op_softmax_bwd(RtExec *x, const Op *op) {
  if (!causal_softmax(x->g, op)) return rt_op_softmax_rows(x, op);
  if (need_bf16(x, op)) return RT_ERROR;
  const Tensor *s = rt_t(x, op->in[0]);
  int T = (int)ops_last(s), BH = (int)(ops_rows(s) / T);
  return rt_launch_softmax_causal_backward(x->d, rt_dim1((unsigned)(ops_rows(s))), 256, 0, rt_out(x, op, 0),
                                           rt_in(x, op, 0), rt_in(x, op, 1), BH, T, 1.0f);
}

/* This family's rows of the per-kind launch table (exec.c gathers every family's). */
const RtOpRow RT_OPS_ATTN_UNFUSED[] = {
    {OP_ATTN_SCORES, rt_op_attn_scores}, {OP_ATTN_SCORES_BWD, rt_op_attn_scores_bwd},
    {OP_CAUSAL_MASK, rt_op_causal_mask}, {OP_SOFTMAX, rt_op_softmax},
    {OP_SOFTMAX_BWD, rt_op_softmax_bwd}, {OP_ATTN_PV, rt_op_attn_pv},
    {OP_ATTN_PV_BWD, rt_op_attn_pv_bwd}, {OP_COUNT, NULL},
};
