/* op_fp8.c — dispatch of the fp8 ops (ir/ops/fp8.c): current- and delayed-scaling casts and the
 * delayed states' update (kernels/fp8.cuh), fp8 GEMMs through cuBLASLt (runtime/gemm.c; rt.h
 * RT_GEMM_E4M3). Every product is the K-contiguous "NT"
 * form Hopper's fp8 tensor cores take: the forward reads x's row-wise copy and the weight's, the
 * dgrad dy's row-wise copy and the weight's transpose, the wgrad dy's and x's transposes. */
#include "codegen/launch/exec_internal.h"
#include "codegen/launch/launchers.h"
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
    return rt_fail(x->d, "an fp8 cast of (%lld, %lld): both dimensions must be multiples of 16", (long long)M,
                   (long long)K);
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

const RtOpRow RT_OPS_FP8[] = {
    {OP_FP8_QUANT, rt_op_fp8_quant},
    {OP_LINEAR_FP8, rt_op_linear_fp8},
    {OP_FP8_GEMM, rt_op_fp8_gemm},
    {OP_FP8_SCALE_UPDATE, rt_op_fp8_scale_update},
    {OP_COUNT, NULL},
};
