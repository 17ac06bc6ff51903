/* op_dense.c — dispatch of the linear ops (cuBLASLt) and the norms (ir/ops/linear.c,
 * norm.c). Weight, bias and norm-parameter gradients accumulate into their fp32 main gradients
 * (exec.h's fusion); their row sums go through the executor's partial-sum scratch in a fixed
 * order, so they are deterministic. */
#include "codegen/launch/exec_internal.h"
#include "codegen/launch/launchers.h"
#include "kernels/launch.h"

static int rt_op_linear(RtExec *x, const Op *op) {
  const Tensor *a = rt_t(x, op->in[0]), *w = rt_t(x, op->in[1]);
  if (w->dtype == DT_F32) return rt_op_router_linear(x, op); /* the MoE router's fp32 weight */
  CUdeviceptr bias = op->nin == 3 ? rt_in(x, op, 2) : 0;
  return rt_gemm(x->d, RT_GEMM_NT, ops_rows(a), w->shape[0], w->shape[1], rt_in(x, op, 0), rt_in(x, op, 1),
                 rt_out(x, op, 0), 0, 0, bias);
}

/* y + r for an ADD (y, r) or (r, y) whose y is this LINEAR's only reader: D = x W^T (+ b) + r,
 * r as cuBLASLt's C (beta = 1), D the add's output, so the product is rounded to bf16 once, after
 * the residual is added (compiler/passes/fuse.c chose the pair; the plan keeps D off every operand). */
int rt_op_linear_add(RtExec *x, const Op *lin, const Op *add) {
  const Tensor *a = rt_t(x, lin->in[0]), *w = rt_t(x, lin->in[1]);
  int y = lin->out[0], r = add->in[0] == y ? add->in[1] : add->in[0];
  CUdeviceptr d = rt_out(x, add, 0), c = rt_exec_ptr(x, r);
  int64_t M = ops_rows(a), N = w->shape[0], K = w->shape[1];
  RtGemm g = {.kind = RT_GEMM_NT,
              .m = M,
              .n = N,
              .k = K,
              .lda = K,
              .ldb = K,
              .ldc = N,
              .batch = 1,
              .a = rt_in(x, lin, 0),
              .b = rt_in(x, lin, 1),
              .c = c,
              .d = d == c ? 0 : d,
              .bias = lin->nin == 3 ? rt_in(x, lin, 2) : 0,
              .alpha = 1.0f,
              .beta = 1.0f};
  if (rt_gemm_run(x->d, &g)) return RT_ERROR;
  return RT_OK;
}

/* dx (M, K) = dy (M, N) . W (N, K) */
static int rt_op_linear_dgrad(RtExec *x, const Op *op) {
  const Tensor *dy = rt_t(x, op->in[0]), *w = rt_t(x, op->in[1]);
  if (w->dtype == DT_F32) return rt_op_router_linear_dgrad(x, op);
  return rt_gemm(x->d, RT_GEMM_NN, ops_rows(dy), w->shape[1], w->shape[0], rt_in(x, op, 0), rt_in(x, op, 1),
                 rt_out(x, op, 0), 0, 0, 0);
}

/* dW (N, K) = dy (M, N)^T . x (M, K); straight into the fp32 main gradient when fused: added to it,
 * or stored where it is the gradient's first writer of a one-micro-batch step (RT_FUSE_WGRAD_STORE,
 * its ZERO skipped). */
static int rt_op_linear_wgrad(RtExec *x, const Op *op) {
  const Tensor *dy = rt_t(x, op->in[0]), *a = rt_t(x, op->in[1]);
  int sink = x->fz->sink[op->out[0]],
      add = sink >= 0 && x->fz->fuse[rt_op_index(x, op)] != RT_FUSE_WGRAD_STORE;
  CUdeviceptr c = sink >= 0 ? rt_exec_ptr(x, sink) : rt_out(x, op, 0);
  return rt_gemm(x->d, RT_GEMM_TN, ops_last(dy), ops_last(a), ops_rows(dy), rt_in(x, op, 0), rt_in(x, op, 1),
                 c, sink >= 0, add, 0);
}

/* out (C) += column sums of `partial` (G, ld), in group order. */
static int colsum(RtExec *x, CUdeviceptr out, CUdeviceptr partial, int G, int C, int ld) {
  return rt_launch_colsum_accumulate(x->d, rt_dim1((unsigned)((C + 31) / 32)), 32 * STEPC_COLSUM_WARPS, 0,
                                     out, partial, G, C, ld);
}

static int groups(const RtExec *x, int N) { return N < x->norm_groups ? N : x->norm_groups; }

unsigned rt_norm_blocks(const RtExec *x, const Op *op) {
  int bwd = op->kind == OP_RMSNORM_BWD || op->kind == OP_LAYERNORM_BWD;
  const Tensor *a = rt_t(x, op->in[bwd]);
  int N = (int)ops_rows(a), rows = stepc_norm_fwd_rows((int)ops_last(a));
  return bwd ? (unsigned)groups(x, N) : (unsigned)((N + rows - 1) / rows);
}

static int rt_op_linear_bgrad(RtExec *x, const Op *op) {
  const Tensor *dy = rt_t(x, op->in[0]);
  int N = (int)ops_rows(dy), C = (int)ops_last(dy), G = groups(x, N);
  CUdeviceptr p = x->norm_partial, g = rt_in(x, op, 0);
  if (rt_launch_bias_backward_partial(x->d, rt_dim((unsigned)((C + 511) / 512), (unsigned)G, 1), 256, 0, p, g,
                                      N, C))
    return RT_ERROR;
  return colsum(x, rt_exec_ptr(x, x->fz->sink[op->out[0]]), p, G, C, C);
}

/* RMSNORM: in (x, w) out (y, rstd); LAYERNORM: in (x, w, b) out (y, mean, rstd); y's fp8 amax folded
 * into its slot where the compiler fused it (rt_amax_slot). */
static int rt_op_norm(RtExec *x, const Op *op) {
  const Tensor *a = rt_t(x, op->in[0]);
  int N = (int)ops_rows(a), C = (int)ops_last(a);
  float eps = (float)op->a.f[0];
  if (C % 8) return rt_fail(x->d, "norm width %d is not a multiple of 8", C);
  RtDim grid = rt_dim1(rt_norm_blocks(x, op));
  unsigned block = stepc_norm_fwd_threads(C);
  CUdeviceptr y = rt_out(x, op, 0), in = rt_in(x, op, 0), w = rt_in(x, op, 1);
  CUdeviceptr am = rt_amax_slot(x, op), ap = am ? x->amax_partial : 0;
  int o = rt_op_index(x, op);
  if (x->fz->fuse[o] == RT_FUSE_ADD_NORM) {
    /* the ADD in front (its output is this norm's input): residual_*norm_forward writes the sum,
     * rounded as residual_add rounds it, then normalises exactly those values: the bits of the
     * two kernels, in one pass */
    const Op *add = &x->g->op[x->fz->peer[o]];
    CUdeviceptr ra = rt_in(x, add, 0), rb = rt_in(x, add, 1);
    if (op->kind == OP_RMSNORM)
      return rt_launch_residual_rmsnorm_forward(x->d, grid, block, 0, in, y, rt_out(x, op, 1), ra, rb, w, N,
                                                C, eps, ap, am);
    return rt_launch_residual_layernorm_forward(x->d, grid, block, 0, in, y, rt_out(x, op, 1),
                                                rt_out(x, op, 2), ra, rb, w, rt_in(x, op, 2), N, C, eps, ap,
                                                am);
  }
  if (op->kind == OP_RMSNORM)
    return rt_launch_rmsnorm_forward(x->d, grid, block, 0, y, rt_out(x, op, 1), in, w, N, C, eps, ap, am);
  return rt_launch_layernorm_forward(x->d, grid, block, 0, y, rt_out(x, op, 1), rt_out(x, op, 2), in, w,
                                     rt_in(x, op, 2), N, C, eps, ap, am);
}

/* RMSNORM_BWD: in (dy, x, w, rstd) out (dx, dw); LAYERNORM_BWD: in (dy, x, w, mean, rstd) out
 * (dx, dw, db). dx goes to `dx`; with an addend (one pass only) dx + addend does, as residual_add
 * would sum them; am (one pass only, or 0): the fp8 amax slot of what goes to `dx`. */
static int norm_bwd(RtExec *x, const Op *op, CUdeviceptr dx, CUdeviceptr addend, CUdeviceptr am) {
  int ln = op->kind == OP_LAYERNORM_BWD;
  const Tensor *a = rt_t(x, op->in[1]);
  int N = (int)ops_rows(a), C = (int)ops_last(a), G = groups(x, N);
  RtDim grid = rt_dim1((unsigned)((N + STEPC_NORM_ROWS_PER_BLOCK - 1) / STEPC_NORM_ROWS_PER_BLOCK));
  unsigned block = 32 * STEPC_NORM_ROWS_PER_BLOCK;
  CUdeviceptr dy = rt_in(x, op, 0), in = rt_in(x, op, 1), w = rt_in(x, op, 2);
  CUdeviceptr mean = ln ? rt_in(x, op, 3) : 0, rstd = rt_in(x, op, ln ? 4 : 3), p = x->norm_partial;
  int W = stepc_norm_bwd_warps(C, ln ? 2 : 1);
  CUdeviceptr ap = am ? x->amax_partial : 0;
  if (W > 0) { /* one pass: dx and the partials */
    unsigned smem = stepc_norm_bwd_smem(C, ln ? 2 : 1, W);
    RtDim gg = rt_dim1(rt_norm_blocks(x, op));
    if (ln ? rt_launch_layernorm_backward(x->d, gg, 32 * (unsigned)W, smem, dx, p, dy, addend, in, w, mean,
                                          rstd, N, C, ap, am)
           : rt_launch_rmsnorm_backward(x->d, gg, 32 * (unsigned)W, smem, dx, p, dy, addend, in, w, rstd, N,
                                        C, ap, am))
      return RT_ERROR;
  } else if (addend || am)
    return rt_fail(x->d,
                   "%s in %s: a fused residual add or fp8 amax needs the one-pass norm backward (rows of %d)",
                   op_name(op->kind), op->tags.module, C);
  else if (ln ? rt_launch_layernorm_backward_input(x->d, grid, block, 0, dx, dy, in, w, mean, rstd, N, C, 0)
              : rt_launch_rmsnorm_backward_input(x->d, grid, block, 0, dx, dy, in, w, rstd, N, C,
                                                 0)) /* accumulate = 0 */
    return RT_ERROR;
  else if (rt_launch_norm_backward_weight_partial(x->d, rt_dim((unsigned)((C + 511) / 512), (unsigned)G, 1),
                                                  256, 0, p, dy, in, mean, rstd, N, C))
    return RT_ERROR;
  if (colsum(x, rt_exec_ptr(x, x->fz->sink[op->out[1]]), p, G, C, 2 * C)) return RT_ERROR;
  return ln ? colsum(x, rt_exec_ptr(x, x->fz->sink[op->out[2]]), p + (CUdeviceptr)(4 * C), G, C, 2 * C)
            : RT_OK;
}

static int rt_op_norm_bwd(RtExec *x, const Op *op) {
  return norm_bwd(x, op, rt_out(x, op, 0), 0, rt_amax_slot(x, op));
}

int rt_op_norm_bwd_add(RtExec *x, const Op *norm, const Op *add) {
  int other = add->in[0] == norm->out[0] ? 1 : 0;
  return norm_bwd(x, norm, rt_out(x, add, 0), rt_in(x, add, other), rt_amax_slot(x, add));
}

/* This family's rows of the per-kind launch table (exec.c gathers every family's). */
const RtOpRow RT_OPS_DENSE[] = {
    {OP_LINEAR, rt_op_linear},
    {OP_LINEAR_DGRAD, rt_op_linear_dgrad},
    {OP_LINEAR_WGRAD, rt_op_linear_wgrad},
    {OP_LINEAR_BGRAD, rt_op_linear_bgrad},
    {OP_RMSNORM, rt_op_norm},
    {OP_RMSNORM_BWD, rt_op_norm_bwd},
    {OP_LAYERNORM, rt_op_norm},
    {OP_LAYERNORM_BWD, rt_op_norm_bwd},
    {OP_COUNT, NULL},
};
