/* op_fp8.c — dispatch of the fp8 ops (ir/ops/fp8.c): current- and delayed-scaling casts and the
 * delayed states' update (kernels/fp8.cuh), fp8 GEMMs through cuBLASLt (runtime/gemm.c; rt.h
 * RT_GEMM_E4M3). Every product is the K-contiguous "NT"
 * form Hopper's fp8 tensor cores take: the forward reads x's row-wise copy and the weight's, the
 * dgrad dy's row-wise copy and the weight's transpose, the wgrad dy's and x's transposes. The routed
 * experts' grouped fp8 linears run the same three products per expert in the warp-specialised fp8
 * grouped GEMMs (kernels/moe.cuh grouped_fp8_tn_ws, grouped_fp8_wgrad_ws: operands through TMA tensor
 * maps, rt_fp8_tmaps), their casts in kernels/fp8.cuh's grouped casts (each expert its own scale). */
#include "codegen/launch/exec_internal.h"
#include "codegen/launch/launchers.h"
#include "kernels/launch.h"
#include "ops/fp8.h"

static int64_t elt_type(DType t) { return t == DT_F8E5M2 ? RT_GEMM_E5M2 : RT_GEMM_E4M3; }

/* Column col of the delayed state tensor t (ir/ops/fp8.h): its scale, and through *amax its current
 * amax entry (0 in the evaluation's lowering, which records no amax: ir/ops/fp8.c). */
static CUdeviceptr state_col(RtExec *x, int t, int64_t col, CUdeviceptr *amax) {
  CUdeviceptr p = rt_exec_ptr(x, t) + (CUdeviceptr)(4 * col);
  *amax = x->eval ? 0 : p + (CUdeviceptr)(4 * rt_t(x, t)->shape[1]);
  return p;
}

/* q (M, K) and/or qT (K, M) (0: not wanted) and scale_inv of x (M, K), format fmt (0 E4M3, 1 E5M2),
 * cast by op. Current scaling: the amax partials (one per block of 2048 elements, at most gn_groups
 * of them) into the scratch's RT_SCRATCH_AMAX, then the cast, which reduces them again in every
 * block; or, where x's producer folded its amax into a slot (rt_amax_slot), the cast alone reading
 * that slot as its one partial. dscale non-zero: delayed scaling, one launch, the scale there and
 * the amax folded into damax by the cast's blocks. x is bf16, or fp32 (the _f32 kernels: an fp8
 * primary weight's cast of its master). */
static int cast(RtExec *x, const Op *op, CUdeviceptr q, CUdeviceptr qT, CUdeviceptr sinv, CUdeviceptr in,
                int64_t M, int64_t K, int fmt, CUdeviceptr dscale, CUdeviceptr damax) {
  if (M % 16 || K % 16)
    return rt_exec_refuse(
        x, "an fp8 cast of (%lld, %lld): the CUDA kernels take dimensions that are multiples of 16",
        (long long)M, (long long)K);
  int64_t n = M * K, want = (n + 2047) / 2048;
  int np = (int)(want < x->gn_groups ? want : x->gn_groups);
  CUdeviceptr part = x->amax_partial, slot = rt_amax_slot(x, op);
  int f32 = rt_t(x, op->in[0])->dtype == DT_F32; /* an fp8 primary weight's master (model.fp8_param) */
  if (np < 1) np = 1;
  if (dscale)
    part = 0, np = 0;
  else if (slot)
    part = slot, np = 1;
  else if ((f32 ? rt_launch_fp8_amax_partial_f32 : rt_launch_fp8_amax_partial)(x->d, rt_dim1((unsigned)np),
                                                                               256, 0, part, in, (long)n))
    return RT_ERROR;
  RtDim grid = rt_dim((unsigned)((K + 63) / 64), (unsigned)((M + 63) / 64), 1);
  return (f32 ? rt_launch_fp8_cast_transpose_f32 : rt_launch_fp8_cast_transpose)(
      x->d, grid, 256, 0, q, qT, sinv, in, part, np, (int)M, (int)K, fmt, dscale, damax);
}

/* FP8_QUANT: x [, state] -> q, qT, scale_inv (i[0] the format; i[1] 1: delayed, state column i[2]). */
static int rt_op_fp8_quant(RtExec *x, const Op *op) {
  const Tensor *a = rt_t(x, op->in[0]);
  CUdeviceptr ds = 0, da = 0;
  if (op->a.i[1] == 1) ds = state_col(x, op->in[1], op->a.i[2], &da);
  return cast(x, op, rt_out(x, op, 0), rt_out(x, op, 1), rt_out(x, op, 2), rt_in(x, op, 0), ops_rows(a),
              ops_last(a), (int)op->a.i[0], ds, da);
}

/* One fp8 product c (M, N) = a (M, K) b (N, K)^T sa sb; c is the fp32 main gradient (accumulated,
 * or stored by the wgrad-store fusion) where the compiler sank it there. */
static int fp8_gemm(RtExec *x, const Op *op, CUdeviceptr a, CUdeviceptr b, DType ta, DType tb, CUdeviceptr sa,
                    CUdeviceptr sb, int64_t M, int64_t N, int64_t K, int out, CUdeviceptr bias, int fast) {
  if (M % 16 || N % 16 || K % 16)
    return rt_exec_refuse(
        x, "an fp8 GEMM of (%lld, %lld) by (%lld, %lld): cuBLASLt takes dimensions that are multiples of 16",
        (long long)M, (long long)K, (long long)N, (long long)K);
  int sink = x->fz->sink[out], add = sink >= 0 && x->fz->fuse[rt_op_index(x, op)] != RT_FUSE_WGRAD_STORE;
  RtGemm g = {.kind = RT_GEMM_NT,
              .m = M,
              .n = N,
              .k = K,
              .lda = K,
              .ldb = K,
              .ldc = N,
              .batch = 1,
              .c_f32 = sink >= 0,
              .a_type = elt_type(ta),
              .b_type = elt_type(tb),
              .fast_accum = fast,
              .a = a,
              .b = b,
              .c = sink >= 0 ? rt_exec_ptr(x, sink) : rt_exec_ptr(x, out),
              .bias = bias,
              .a_scale = sa,
              .b_scale = sb,
              .alpha = 1.0f,
              .beta = add ? 1.0f : 0.0f};
  return rt_gemm_run(x->d, &g);
}

/* LINEAR_FP8: in (x, wq, wqT, sw [, b] [, x's state, dy's state]) out (y, xqT, sx, xq): x cast once to
 * both copies (delayed with i[2] = 1: x's state column i[3]), then the forward product with fast
 * accumulation (Transformer Engine's fprop setting). */
static int rt_op_linear_fp8(RtExec *x, const Op *op) {
  const Tensor *a = rt_t(x, op->in[0]), *wq = rt_t(x, op->in[1]);
  int64_t M = ops_rows(a), N = wq->shape[0], K = wq->shape[1];
  int delayed = op->a.i[2] == 1, nb = op->nin - (delayed ? 2 : 0);
  CUdeviceptr ds = 0, da = 0;
  if (delayed) ds = state_col(x, op->in[nb], op->a.i[3], &da);
  if (cast(x, op, rt_out(x, op, 3), rt_out(x, op, 1), rt_out(x, op, 2), rt_in(x, op, 0), M, K,
           (int)op->a.i[0], ds, da))
    return RT_ERROR;
  return fp8_gemm(x, op, rt_out(x, op, 3), rt_in(x, op, 1), rt_t(x, op->out[3])->dtype, wq->dtype,
                  rt_out(x, op, 2), rt_in(x, op, 3), M, N, K, op->out[0], nb == 5 ? rt_in(x, op, 4) : 0, 1);
}

/* FP8_GEMM: in (a (M, K), b (N, K), sa, sb) out c (M, N), split accumulation (dgrad, wgrad). */
static int rt_op_fp8_gemm(RtExec *x, const Op *op) {
  const Tensor *a = rt_t(x, op->in[0]), *b = rt_t(x, op->in[1]);
  return fp8_gemm(x, op, rt_in(x, op, 0), rt_in(x, op, 1), a->dtype, b->dtype, rt_in(x, op, 2),
                  rt_in(x, op, 3), ops_rows(a), b->shape[0], ops_last(a), op->out[0], 0, 0);
}

/* FP8_SCALE_UPDATE: the state out[0] (1 + len, n) in place, one thread per column (i[0] format,
 * i[1] amax algorithm, i[2] margin: ir/ops/fp8.c), its row of current amaxes first all-reduced (max)
 * over every rank (the amax group) where i[3] = 1. */
static int rt_op_fp8_scale_update(RtExec *x, const Op *op) {
  const Tensor *st = rt_t(x, op->out[0]);
  int n = (int)st->shape[1];
  RtColl amax = {.op = RT_COLL_ALLREDUCE_MAX,
                 .dtype = RT_COLL_F32,
                 .group = RT_COLL_GROUP_AMAX,
                 .count = n,
                 .src = rt_out(x, op, 0) + (CUdeviceptr)n * 4,
                 .dst = rt_out(x, op, 0) + (CUdeviceptr)n * 4};
  if (op->a.i[3] == 1 && rt_coll(x->d, &amax)) return RT_ERROR;
  return rt_launch_fp8_scale_update(x->d, rt_dim1((unsigned)((n + 127) / 128)), 128, 0, rt_out(x, op, 0), n,
                                    (int)st->shape[0] - 1, (int)op->a.i[1],
                                    fp8_scaled_max((int)op->a.i[0], (int)op->a.i[2]));
}

/* ---- the routed experts' grouped fp8 linears ---- */

/* A grouped cast's partial maxima an expert (fp8_amax_partial_grouped's grid (P, E)): one a 16384
 * elements of an expert's average share, 1 to 16. */
static int64_t grouped_parts(int64_t numel, int64_t E) {
  int64_t p = (numel / (E > 0 ? E : 1) + 16383) / 16384;
  return p < 1 ? 1 : p > 16 ? 16 : p;
}

/* The cast op runs (FP8_QUANT_GROUPED, GROUPED_LINEAR_FP8's of x): its input x and expert count. */
static int grouped_cast_of(const RtExec *x, const Op *op, const Tensor **in, int64_t *E) {
  if (op->kind == OP_GROUPED_LINEAR_FP8)
    *in = rt_t(x, op->in[0]), *E = rt_t(x, op->in[1])->shape[0];
  else if (op->kind == OP_FP8_QUANT_GROUPED)
    *in = rt_t(x, op->in[0]), *E = op->a.i[4] == 1 ? rt_t(x, op->in[1])->shape[0] : (*in)->shape[0];
  else
    return 0;
  return 1;
}

int64_t rt_fp8_grouped_scratch(const RtExec *x, const Op *op) {
  const Tensor *in;
  int64_t E;
  if (!grouped_cast_of(x, op, &in, &E)) return 0;
  return E * grouped_parts(tensor_numel(in), E) + E;
}

/* q and qT (0: not wanted) and scale_inv (E) of a grouped cast of in: weights (seg 0) E blocks of
 * (M, K), or rows (seg the segments) of in (M, K); format fmt; delayed with the state columns from
 * dscale (damax their amax entries, 0: records none). The partials, then the E scales, in the amax
 * scratch. */
static int grouped_cast(RtExec *x, CUdeviceptr q, CUdeviceptr qT, CUdeviceptr sinv, const Tensor *t,
                        CUdeviceptr in, CUdeviceptr seg, int64_t E, int64_t M, int64_t K, int fmt,
                        CUdeviceptr dscale, CUdeviceptr damax) {
  if (M % 16 || K % 16)
    return rt_exec_refuse(x,
                          "an fp8 cast of the experts' %s (%lld, %lld): the CUDA kernels take "
                          "dimensions that are multiples of 16",
                          t->name, (long long)M, (long long)K);
  if (seg && E > STEPC_FP8_GROUP_EMAX)
    return rt_exec_refuse(x, "an fp8 cast of %s over %lld experts: the CUDA kernel takes %d at most", t->name,
                          (long long)E, STEPC_FP8_GROUP_EMAX);
  int f32 = t->dtype == DT_F32;
  if (!f32 && t->dtype != DT_BF16)
    return rt_fail(x->d, "an fp8 cast of %s: it is %s, the CUDA kernels take bf16 or fp32", t->name,
                   dtype_name(t->dtype));
  int64_t P = grouped_parts(tensor_numel(t), E), each = seg ? 0 : M * K;
  CUdeviceptr part = x->amax_partial, scale = part + (CUdeviceptr)(4 * E * P);
  if (dscale && !damax) P = 0; /* delayed, recording nothing: no partials */
  if (P && (f32 ? rt_launch_fp8_amax_partial_grouped_f32 : rt_launch_fp8_amax_partial_grouped)(
               x->d, rt_dim((unsigned)P, (unsigned)E, 1), 256, 0, part, in, seg, (long)each, (int)K))
    return RT_ERROR;
  if (rt_launch_fp8_scale_grouped(x->d, rt_dim1((unsigned)((E + 127) / 128)), 128, 0, scale, sinv, part,
                                  (int)P, (int)E, fmt, dscale, damax))
    return RT_ERROR;
  RtDim grid = rt_dim((unsigned)((K + 63) / 64), (unsigned)((M + 63) / 64), seg ? 1 : (unsigned)E);
  return (f32 ? rt_launch_fp8_cast_transpose_grouped_f32 : rt_launch_fp8_cast_transpose_grouped)(
      x->d, grid, 256, 0, q, qT, in, scale, seg, (int)E, (int)M, (int)K, fmt);
}

/* FP8_QUANT_GROUPED: i[4] 0: w (E, N, K) [, st] -> q, qT, s (E); 1: x (R, K), seg [, st] -> the same
 * (i[0] the format; i[1] 1: delayed, expert e's state column i[2] + e; i[3] 1: records no amax). */
static int rt_op_fp8_quant_grouped(RtExec *x, const Op *op) {
  const Tensor *a = rt_t(x, op->in[0]);
  int rows = op->a.i[4] == 1;
  int64_t E = rows ? rt_t(x, op->in[1])->shape[0] : a->shape[0];
  CUdeviceptr ds = 0, da = 0;
  if (op->a.i[1] == 1) ds = state_col(x, op->in[op->nin - 1], op->a.i[2], &da);
  if (op->a.i[3] == 1) da = 0;
  return grouped_cast(x, rt_out(x, op, 0), rt_out(x, op, 1), rt_out(x, op, 2), a, rt_in(x, op, 0),
                      rows ? rt_in(x, op, 1) : 0, E, rows ? a->shape[0] : a->shape[1], ops_last(a),
                      (int)op->a.i[0], ds, da);
}

static int fmt_of(const Tensor *t) { return t->dtype == DT_F8E5M2; }

/* The tensor maps of the fp8 grouped GEMMs (kernels/moe.cuh: 128 bytes a box row). GROUPED_LINEAR_FP8:
 * xq (out 3, (R, K)) in boxes of 128 x 128 rows and wq (E, N, K) in 128 x 256 x 1; GROUPED_FP8_DGRAD:
 * a (R, N) and b (E, K, N) the same way; GROUPED_FP8_WGRAD: the transposes a (N, R) in 128 x 128 and
 * b (K, R) in 128 x 256. None where the shapes do not fit (the launch refuses). */
int rt_fp8_tmaps(const RtExec *x, const Op *op, RtTmap *t) {
  if (op->kind != OP_GROUPED_LINEAR_FP8 && op->kind != OP_GROUPED_FP8_DGRAD &&
      op->kind != OP_GROUPED_FP8_WGRAD)
    return 0;
  int fwd = op->kind == OP_GROUPED_LINEAR_FP8, wgrad = op->kind == OP_GROUPED_FP8_WGRAD;
  const Tensor *a = rt_t(x, fwd ? op->out[3] : op->in[0]), *b = rt_t(x, op->in[1]);
  /* rows R and widths n, k: rows of bytes whose length is a multiple of 16 (the TMA's row pitch) */
  int64_t R = a->shape[wgrad], n = wgrad ? a->shape[0] : b->shape[1], k = b->shape[wgrad ? 0 : 2];
  if (R % 16 || n % 16 || k % 16) return 0;
  if (!t) return 2;
  CUdeviceptr pa = fwd ? rt_out(x, op, 3) : rt_in(x, op, 0), pb = rt_in(x, op, 1);
  t[0] = (RtTmap){.ptr = pa,
                  .rank = 2,
                  .elem = 1,
                  .dim = {(uint64_t)a->shape[1], (uint64_t)a->shape[0]},
                  .box = {128, STEPC_MOE_TC_BM}};
  if (wgrad)
    t[1] = (RtTmap){.ptr = pb,
                    .rank = 2,
                    .elem = 1,
                    .dim = {(uint64_t)b->shape[1], (uint64_t)b->shape[0]},
                    .box = {128, STEPC_MOE_TC_BN}};
  else
    t[1] = (RtTmap){.ptr = pb,
                    .rank = 3,
                    .elem = 1,
                    .dim = {(uint64_t)b->shape[2], (uint64_t)b->shape[1], (uint64_t)b->shape[0]},
                    .box = {128, STEPC_MOE_TC_BN, 1}};
  return 2;
}

/* c (R, Nout) bf16 = a[r] b_e^T sa[e] sb[e] over the experts' rows (grouped_fp8_tn_ws), its rows of no
 * expert zeroed first where the dispatch may leave such rows. */
static int grouped_tn(RtExec *x, const Op *op, int out, const Tensor *a, const Tensor *b, CUdeviceptr sa,
                      CUdeviceptr sb, CUdeviceptr seg, int seg_t) {
  const Tensor *c = rt_t(x, op->out[out]);
  CUdeviceptr ta = rt_exec_tmap(x, op, 0), tb = rt_exec_tmap(x, op, 1);
  int64_t R = a->shape[0], E = b->shape[0], Nout = b->shape[1], K = b->shape[2];
  if (!ta)
    return rt_exec_refuse(
        x, "the fp8 grouped GEMM takes rows (%lld) and widths (%lld, %lld) that are multiples of 16",
        (long long)R, (long long)Nout, (long long)K);
  if (c->dtype != DT_BF16)
    return rt_fail(x->d, "%s: %s is %s, the CUDA kernel writes bf16", op_name(op->kind), c->name,
                   dtype_name(c->dtype));
  if (rt_moe_may_leave_rows(x, seg_t) && rt_memset0(x->d, rt_out(x, op, out), (size_t)c->bytes))
    return RT_ERROR;
  long row_tiles = (long)((R + STEPC_MOE_TC_BM - 1) / STEPC_MOE_TC_BM + E);
  return rt_launch_grouped_fp8_tn_ws(x->d, rt_dim1(stepc_moe_ws_grid(x->d->sm_count, (long)Nout, row_tiles)),
                                     STEPC_MOE_WS_THREADS, stepc_moe_ws_smem(), rt_out(x, op, out), ta, tb,
                                     sa, sb, seg, (int)Nout, (int)K, (int)E, (int)row_tiles, fmt_of(a),
                                     fmt_of(b));
}

/* GROUPED_LINEAR_FP8: in (x (R, K), wq (E, N, K), wqT, sw (E), seg [, stx, stdy]) out (y (R, N), xqT
 * (K, R), sx (E), xq (R, K)): x's rows cast expert by expert (delayed with i[2] = 1: x's columns from
 * i[3]; i[5] 1: records no amax), then the forward product. */
static int rt_op_grouped_linear_fp8(RtExec *x, const Op *op) {
  const Tensor *a = rt_t(x, op->in[0]), *wq = rt_t(x, op->in[1]);
  int64_t E = wq->shape[0];
  CUdeviceptr ds = 0, da = 0;
  if (op->a.i[2] == 1) ds = state_col(x, op->in[5], op->a.i[3], &da);
  if (op->a.i[5] == 1) da = 0;
  if (grouped_cast(x, rt_out(x, op, 3), rt_out(x, op, 1), rt_out(x, op, 2), a, rt_in(x, op, 0),
                   rt_in(x, op, 4), E, a->shape[0], a->shape[1], (int)op->a.i[0], ds, da))
    return RT_ERROR;
  return grouped_tn(x, op, 0, rt_t(x, op->out[3]), wq, rt_out(x, op, 2), rt_in(x, op, 3), rt_in(x, op, 4),
                    op->in[4]);
}

/* GROUPED_FP8_DGRAD: in (a (R, N), b (E, K, N), sa, sb, seg) out c (R, K). */
static int rt_op_grouped_fp8_dgrad(RtExec *x, const Op *op) {
  return grouped_tn(x, op, 0, rt_t(x, op->in[0]), rt_t(x, op->in[1]), rt_in(x, op, 2), rt_in(x, op, 3),
                    rt_in(x, op, 4), op->in[4]);
}

/* GROUPED_FP8_WGRAD: in (a (N, R), b (K, R), sa, sb, seg) out c (E, N, K): into the fp32 main gradient
 * where the compiler sank it there (stored under the wgrad-store fusion, with the gradient's norm
 * partials where fusions.h norm_by moved them here), else the bf16 c. */
static int rt_op_grouped_fp8_wgrad(RtExec *x, const Op *op) {
  const Tensor *a = rt_t(x, op->in[0]), *b = rt_t(x, op->in[1]), *c = rt_t(x, op->out[0]);
  int o = rt_op_index(x, op), sink = x->fz->sink[op->out[0]];
  CUdeviceptr ta = rt_exec_tmap(x, op, 0), tb = rt_exec_tmap(x, op, 1), norm = 0;
  int64_t E = c->shape[0], Nout = c->shape[1], K = c->shape[2];
  if (!ta)
    return rt_exec_refuse(x,
                          "the fp8 grouped weight gradient takes routed rows "
                          "(%lld) and widths (%lld, %lld) that are multiples of 16",
                          (long long)a->shape[1], (long long)Nout, (long long)K);
  if (sink < 0 && c->dtype != DT_BF16)
    return rt_fail(x->d, "grouped_fp8_wgrad: %s is %s, the CUDA kernel writes bf16", c->name,
                   dtype_name(c->dtype));
  if (sink >= 0 && x->fz->norm_by[sink] == o && !(norm = rt_exec_norm_slice(x, sink))) return RT_ERROR;
  int store = sink >= 0 && x->fz->fuse[o] == RT_FUSE_WGRAD_STORE;
  unsigned grid =
      stepc_moe_ws_grid(x->d->sm_count, (long)K, (long)((Nout + STEPC_MOE_TC_BM - 1) / STEPC_MOE_TC_BM * E));
  return rt_launch_grouped_fp8_wgrad_ws(x->d, rt_dim1(grid), STEPC_MOE_WS_THREADS, stepc_moe_ws_smem(),
                                        sink < 0 ? rt_out(x, op, 0) : 0, sink >= 0 ? rt_exec_ptr(x, sink) : 0,
                                        ta, tb, rt_in(x, op, 2), rt_in(x, op, 3), rt_in(x, op, 4), (int)Nout,
                                        (int)K, (int)E, store, norm, fmt_of(a), fmt_of(b));
}

const RtOpRow RT_OPS_FP8[] = {
    {OP_FP8_QUANT, rt_op_fp8_quant},
    {OP_LINEAR_FP8, rt_op_linear_fp8},
    {OP_FP8_GEMM, rt_op_fp8_gemm},
    {OP_FP8_SCALE_UPDATE, rt_op_fp8_scale_update},
    {OP_FP8_QUANT_GROUPED, rt_op_fp8_quant_grouped},
    {OP_GROUPED_LINEAR_FP8, rt_op_grouped_linear_fp8},
    {OP_GROUPED_FP8_DGRAD, rt_op_grouped_fp8_dgrad},
    {OP_GROUPED_FP8_WGRAD, rt_op_grouped_fp8_wgrad},
    {OP_COUNT, NULL},
};
