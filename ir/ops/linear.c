/* linear.c — LINEAR y = x W^T (+ b), and its gradients LINEAR_DGRAD (dx = dy W), LINEAR_WGRAD
 * (dW = dy^T x), LINEAR_BGRAD (db = sum over rows of dy).
 *
 * x (..., K) is treated as M = prod(leading dims) rows. W is (N, K) as in torch.nn.Linear.
 * Reference kernels sum each output element over the reduction index in order and split work
 * only over output rows, so the result does not depend on the number of threads. */
#ifndef OPS_KERNEL_PASS
#include "ops/ops.h"

static int linear_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0), *w = ops_in(g, op, 1);
  if (w->ndim != 2 || ops_last(x) != w->shape[1])
    return ops_err(err, n, "%s (..., %lld) does not match weight %s (N, K=%lld)", x->name,
                   (long long)ops_last(x), w->name, (long long)w->shape[1]);
  if (op->nin == 3 && (ops_in(g, op, 2)->ndim != 1 || ops_in(g, op, 2)->shape[0] != w->shape[0]))
    return ops_err(err, n, "bias %s is not (%lld)", ops_in(g, op, 2)->name, (long long)w->shape[0]);
  ops_out_like(&out[0], x, "out");
  out[0].shape[x->ndim - 1] = w->shape[0];
  return 0;
}

static double linear_flops(const Graph *g, const Op *op) {
  const Tensor *x = ops_in(g, op, 0), *w = ops_in(g, op, 1);
  return 2.0 * (double)ops_rows(x) * (double)w->shape[0] * (double)w->shape[1];
}

static int linear_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  int dy = dout[0], x = o.in[0], w = o.in[1];
  if (dy < 0) return 0;
  if (g->t[x].role != ROLE_INPUT) {
    int in[2] = {dy, w}, of[1] = {x};
    if (ops_grad_op(g, OP_LINEAR_DGRAD, in, 2, NULL, &din[0], of) < 0) return -1;
  }
  int in[2] = {dy, x}, of[1] = {w};
  if (ops_grad_op(g, OP_LINEAR_WGRAD, in, 2, NULL, &din[1], of) < 0) return -1;
  if (o.nin == 3) {
    int bof[1] = {o.in[2]};
    if (ops_grad_op(g, OP_LINEAR_BGRAD, &dy, 1, NULL, &din[2], bof) < 0) return -1;
  }
  return 0;
}

static int dgrad_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *dy = ops_in(g, op, 0), *w = ops_in(g, op, 1);
  if (w->ndim != 2 || ops_last(dy) != w->shape[0]) return ops_err(err, n, "dy does not match W (N, K)");
  ops_out_like(&out[0], dy, "dgrad");
  out[0].shape[dy->ndim - 1] = w->shape[1];
  return 0;
}

static int wgrad_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *dy = ops_in(g, op, 0), *x = ops_in(g, op, 1);
  if (ops_rows(dy) != ops_rows(x)) return ops_err(err, n, "dy and x differ in rows");
  ops_out_shape(&out[0], x->dtype, "wgrad", 2, ops_last(dy), ops_last(x), 1, 1);
  return 0;
}

static double wgrad_flops(const Graph *g, const Op *op) {
  return 2.0 * (double)ops_rows(ops_in(g, op, 0)) * (double)ops_last(ops_in(g, op, 0)) *
         (double)ops_last(ops_in(g, op, 1));
}

static double dgrad_flops(const Graph *g, const Op *op) {
  const Tensor *w = ops_in(g, op, 1);
  return 2.0 * (double)ops_rows(ops_in(g, op, 0)) * (double)w->shape[0] * (double)w->shape[1];
}

static int bgrad_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  (void)err, (void)n;
  const Tensor *dy = ops_in(g, op, 0);
  ops_out_shape(&out[0], dy->dtype, "bgrad", 1, ops_last(dy), 1, 1, 1);
  return 0;
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

const OpInfo op_linear_info = {"linear",
                               2,
                               3,
                               1,
                               linear_infer,
                               linear_flops,
                               linear_backward,
                               {linear_cpu_f32, linear_cpu_f64},
                               .facts = {.cost = COST_GEMM,
                                         .ceiling = CEIL_GEMM,
                                         .inplace = INPLACE_NONE,
                                         .rng = RNG_NONE,
                                         .sink = SINK_NO,
                                         .matmul = MATMUL_FWD,
                                         .ew = &OP_EW_NONE}};
const OpInfo op_linear_dgrad_info = {"linear_dgrad",
                                     2,
                                     2,
                                     1,
                                     dgrad_infer,
                                     dgrad_flops,
                                     NULL,
                                     {dgrad_cpu_f32, dgrad_cpu_f64},
                                     .facts = {.cost = COST_GEMM,
                                               .ceiling = CEIL_GEMM,
                                               .inplace = INPLACE_NONE,
                                               .rng = RNG_NONE,
                                               .sink = SINK_NO,
                                               .matmul = MATMUL_DGRAD,
                                               .ew = &OP_EW_NONE}};
/* sink: cuBLASLt may accumulate (beta = 1) */
const OpInfo op_linear_wgrad_info = {"linear_wgrad",
                                     2,
                                     2,
                                     1,
                                     wgrad_infer,
                                     wgrad_flops,
                                     NULL,
                                     {wgrad_cpu_f32, wgrad_cpu_f64},
                                     .facts = {.cost = COST_GEMM,
                                               .ceiling = CEIL_GEMM,
                                               .inplace = INPLACE_NONE,
                                               .rng = RNG_NONE,
                                               .sink = SINK_YES,
                                               .matmul = MATMUL_WGRAD,
                                               .ew = &OP_EW_NONE}};
const OpInfo op_linear_bgrad_info = {"linear_bgrad",
                                     1,
                                     1,
                                     1,
                                     bgrad_infer,
                                     ops_flops_elementwise,
                                     NULL,
                                     {bgrad_cpu_f32, bgrad_cpu_f64},
                                     .facts = {.cost = COST_ELEMENTWISE,
                                               .ceiling = CEIL_DRAM,
                                               .inplace = INPLACE_NONE,
                                               .rng = RNG_NONE,
                                               .sink = SINK_YES,
                                               .matmul = MATMUL_NONE,
                                               .ew = &OP_EW_NONE}};

#else /* OPS_KERNEL_PASS */

/* C (M, N) = A (M, K) · B (N, K)^T (+ bias), rows [lo, hi) of C; 4x4 register tiles keep 16
 * independent sums in flight, each still summed over k in order. */
typedef struct {
  const real *a, *b, *bias;
  real *c;
  int64_t m, n, k;
} K(GemmArgs);

static void K(gemm_nt_range)(void *p, int64_t lo, int64_t hi) {
  const K(GemmArgs) *g = p;
  int64_t n = g->n, k = g->k;
  int64_t i = lo;
  for (; i + 4 <= hi; i += 4) {
    const real *a0 = g->a + i * k, *a1 = a0 + k, *a2 = a1 + k, *a3 = a2 + k;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
      const real *b0 = g->b + j * k, *b1 = b0 + k, *b2 = b1 + k, *b3 = b2 + k;
      real s[4][4] = {{0}};
      for (int64_t q = 0; q < k; q++) {
        real x0 = a0[q], x1 = a1[q], x2 = a2[q], x3 = a3[q];
        real y0 = b0[q], y1 = b1[q], y2 = b2[q], y3 = b3[q];
        s[0][0] += x0 * y0, s[0][1] += x0 * y1, s[0][2] += x0 * y2, s[0][3] += x0 * y3;
        s[1][0] += x1 * y0, s[1][1] += x1 * y1, s[1][2] += x1 * y2, s[1][3] += x1 * y3;
        s[2][0] += x2 * y0, s[2][1] += x2 * y1, s[2][2] += x2 * y2, s[2][3] += x2 * y3;
        s[3][0] += x3 * y0, s[3][1] += x3 * y1, s[3][2] += x3 * y2, s[3][3] += x3 * y3;
      }
      for (int r = 0; r < 4; r++)
        for (int cc = 0; cc < 4; cc++)
          g->c[(i + r) * n + j + cc] = s[r][cc] + (g->bias ? g->bias[j + cc] : 0);
    }
    for (; j < n; j++)
      for (int r = 0; r < 4; r++) {
        const real *ar = g->a + (i + r) * k, *bj = g->b + j * k;
        real s = 0;
        for (int64_t q = 0; q < k; q++)
          s += ar[q] * bj[q];
        g->c[(i + r) * n + j] = s + (g->bias ? g->bias[j] : 0);
      }
  }
  for (; i < hi; i++)
    for (int64_t j = 0; j < n; j++) {
      const real *ar = g->a + i * k, *bj = g->b + j * k;
      real s = 0;
      for (int64_t q = 0; q < k; q++)
        s += ar[q] * bj[q];
      g->c[i * n + j] = s + (g->bias ? g->bias[j] : 0);
    }
}

/* Row blocks of 4 so that the tile path is taken whatever the split. */
static void K(gemm_nt)(const CpuCtx *c, K(GemmArgs) * g);
static void K(gemm_nt_blocks)(void *p, int64_t lo, int64_t hi) {
  const K(GemmArgs) *g = p;
  int64_t end = hi * 4 > g->m ? g->m : hi * 4;
  K(gemm_nt_range)(p, lo * 4, end);
}
static void K(gemm_nt)(const CpuCtx *c, K(GemmArgs) * g) {
  c->parallel_for(c, (g->m + 3) / 4, K(gemm_nt_blocks), g);
}

/* ops.h: the same product for another op's reference (fp8.c's products of quantized operands). */
void K(ops_gemm_nt)(const CpuCtx *c, const real *a, const real *b, const real *bias, real *out, int64_t m,
                    int64_t n, int64_t k) {
  K(GemmArgs) g = {a, b, bias, out, m, n, k};
  K(gemm_nt)(c, &g);
}

/* Transposes src (R, C) into dst (C, R). */
static void K(transpose)(const real *src, real *dst, int64_t r, int64_t cdim) {
  for (int64_t i = 0; i < r; i++)
    for (int64_t j = 0; j < cdim; j++)
      dst[j * r + i] = src[i * cdim + j];
}

static void K(linear_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]], *w = &c->g->t[op->in[1]];
  K(GemmArgs) g = {in[0], in[1], op->nin == 3 ? in[2] : NULL, out[0], ops_rows(x), w->shape[0], w->shape[1]};
  K(gemm_nt)(c, &g);
}

/* dx (M, K) = dy (M, N) · W (N, K) = dy · (W^T)^T: one transpose of the (small) weight, then NT. */
static void K(dgrad_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *dy = &c->g->t[op->in[0]], *w = &c->g->t[op->in[1]];
  int64_t n = w->shape[0], k = w->shape[1];
  real *wt = malloc((size_t)(n * k) * sizeof(real));
  if (!wt) return;
  K(transpose)(in[1], wt, n, k);
  K(GemmArgs) g = {in[0], wt, NULL, out[0], ops_rows(dy), k, n};
  K(gemm_nt)(c, &g);
  free(wt);
}

/* dW (N, K) = dy^T (N, M) · x (M, K) = dy^T · (x^T)^T: transpose both, then NT over M. */
static void K(wgrad_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *dy = &c->g->t[op->in[0]], *x = &c->g->t[op->in[1]];
  int64_t m = ops_rows(dy), n = ops_last(dy), k = ops_last(x);
  real *dyt = malloc((size_t)(m * n) * sizeof(real)), *xt = malloc((size_t)(m * k) * sizeof(real));
  if (dyt && xt) {
    K(transpose)(in[0], dyt, m, n);
    K(transpose)(in[1], xt, m, k);
    K(GemmArgs) g = {dyt, xt, NULL, out[0], n, k, m};
    K(gemm_nt)(c, &g);
  }
  free(dyt);
  free(xt);
}

typedef struct {
  const real *dy;
  real *db;
  int64_t m, n;
} K(BgradArgs);

static void K(bgrad_range)(void *p, int64_t lo, int64_t hi) {
  const K(BgradArgs) *a = p;
  for (int64_t j = lo; j < hi; j++) {
    real s = 0;
    for (int64_t i = 0; i < a->m; i++)
      s += a->dy[i * a->n + j];
    a->db[j] = s;
  }
}

static void K(bgrad_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *dy = &c->g->t[op->in[0]];
  K(BgradArgs) a = {in[0], out[0], ops_rows(dy), ops_last(dy)};
  c->parallel_for(c, a.n, K(bgrad_range), &a);
}

#endif
