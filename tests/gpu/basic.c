/* basic.c — GPU tests of every kernel but flash attention, against the fp64 references of the ops
 * they implement (ir/ops, run by tests/gpu/op_ref.c).
 *
 * Inputs are drawn as bf16 values, so the reference sees exactly what the kernel sees; the
 * remaining differences are the kernel's fp32 arithmetic and the final rounding of its output.
 * Tolerances (docs/kernels.md has the reasoning):
 *   bf16 outputs: rtol 2^-7 (one bf16 ulp: half an ulp of rounding plus fp32 noise that can tip a
 *     tie), atol a small fraction of the output's scale where results cancel towards zero;
 *   fp32 outputs: rtol 1e-5 and atol scaled to the sum's terms (fp32 sums of <= 10^4 terms);
 *   bit-exact where the kernel's arithmetic is exactly reproducible on the host (embedding,
 *     transposes, casts, dropout masks) and for every determinism/replay check. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/launch.h"
#include "host_bits.h"
#include "op_ref.h"

#define RT_BF16 (1.0 / 128)

/* A bf16 device buffer of n random values in [-amp, amp); its exact values in *d (malloc'd). */
static CUdeviceptr up_bf16(Gpu *g, Rng *r, long n, double amp, double **d) {
  uint16_t *h = malloc(2 * (size_t)n);
  *d = malloc(sizeof **d * (size_t)n);
  rand_bf16(r, h, *d, n, amp);
  CUdeviceptr p = gpu_dup(g, h, 2 * (size_t)n);
  free(h);
  return p;
}

static CUdeviceptr up_f32(Gpu *g, const double *d, long n) {
  float *f = malloc(4 * (size_t)n);
  for (long i = 0; i < n; i++) f[i] = (float)d[i];
  CUdeviceptr p = gpu_dup(g, f, 4 * (size_t)n);
  free(f);
  return p;
}

static double *down_bf16(Gpu *g, CUdeviceptr p, long n) {
  uint16_t *h = malloc(2 * (size_t)n);
  double *d = malloc(sizeof *d * (size_t)n);
  gpu_get(g, h, p, 2 * (size_t)n);
  bf16_to_double(h, d, n);
  free(h);
  return d;
}

static double *down_f32(Gpu *g, CUdeviceptr p, long n) {
  float *f = malloc(4 * (size_t)n);
  double *d = malloc(sizeof *d * (size_t)n);
  gpu_get(g, f, p, 4 * (size_t)n);
  float_to_double(f, d, n);
  free(f);
  return d;
}

static void *down_raw(Gpu *g, CUdeviceptr p, size_t bytes) {
  void *h = malloc(bytes);
  gpu_get(g, h, p, bytes);
  return h;
}

/* The reference rounded to bf16, for checks that must be exact. */
static void round_bf16(double *d, long n) {
  for (long i = 0; i < n; i++) d[i] = host_bf16_to_f32(host_f32_to_bf16((float)d[i]));
}

/* The norm op's reference over x (N, C): LayerNorm where b is given (mean out), else RMSNorm. */
static void norm_ref(double *y, double *mean, double *rstd, const double *x, const double *w, const double *b, int N,
                     int C, float eps) {
  OpAttrs a = {.f = {eps}};
  RefT in[3] = {ref_f(x, N, C, 0, 0), ref_f(w, C, 0, 0, 0), ref_f(b, C, 0, 0, 0)};
  RefT out[3] = {ref_f(y, N, C, 0, 0), ref_f(b ? mean : rstd, N, 0, 0, 0), ref_f(rstd, N, 0, 0, 0)};
  ref_op(b ? OP_LAYERNORM : OP_RMSNORM, &a, in, b ? 3 : 2, out, b ? 3 : 2, 0);
}

/* The norm backward op's reference (ln: LayerNorm, with db) on the fp64 statistics of x: dx, dw
 * and db written. */
static void norm_bwd_ref(double *dx, double *dw, double *db, const double *dy, const double *x, const double *w, int N,
                         int C, float eps, int ln) {
  double *y = malloc(sizeof *y * (size_t)N * C), *mean = malloc(sizeof *mean * N), *rstd = malloc(sizeof *rstd * N);
  double *zero = ln ? calloc((size_t)C, sizeof *zero) : NULL; /* LayerNorm's bias: no part in the statistics */
  norm_ref(y, mean, rstd, x, w, zero, N, C, eps);
  OpAttrs a = {.f = {eps}};
  RefT in[5] = {ref_f(dy, N, C, 0, 0), ref_f(x, N, C, 0, 0), ref_f(w, C, 0, 0, 0), ref_f(ln ? mean : rstd, N, 0, 0, 0),
                ref_f(rstd, N, 0, 0, 0)};
  RefT out[3] = {ref_f(dx, N, C, 0, 0), ref_f(dw, C, 0, 0, 0), ref_f(db, C, 0, 0, 0)};
  ref_op(ln ? OP_LAYERNORM_BWD : OP_RMSNORM_BWD, &a, in, ln ? 5 : 4, out, ln ? 3 : 2, 0);
  free(y), free(mean), free(rstd), free(zero);
}

static void test_embedding(Gpu *g, Rng *r) {
  int B = 4, T = 1024, N = B * T, C = 256, V = 50;
  double *wte, *wpe, *dout;
  CUdeviceptr dwte_ = up_bf16(g, r, (long)V * C, 1, &wte), dwpe_ = up_bf16(g, r, (long)T * C, 1, &wpe);
  CUdeviceptr ddout = up_bf16(g, r, (long)N * C, 1, &dout);
  int *tok = malloc(sizeof *tok * N);
  for (int n = 0; n < N; n++) tok[n] = (int)((rng_uniform(r) + 1) * 0.5 * V) % V;
  tok[5] = -1, tok[77] = V; /* out of range: zero row, no gradient */
  CUdeviceptr dtok = gpu_dup(g, tok, sizeof *tok * N), dout_ = gpu_alloc(g, 2 * (size_t)N * C);
  void *a[] = {&dout_, &dtok, &dwte_, &dwpe_, &N, &T, &C, &V};
  gpu_launch(g, "embedding_forward", gpu_grid1d(g, (long)N * C / 8), 1, 1, 256, 0, a);
  double *want = malloc(sizeof *want * N * C), *got = down_bf16(g, dout_, (long)N * C);
  /* EMBED then POS_ADD. The op reads row 0 for a token outside [0, V) (a data bug it keeps in
   * bounds, ir/ops/embedding.c); the kernel reads a zero row and adds no gradient: the reference
   * runs on token 0 there with the row (and its gradient) zeroed. */
  int *tin = malloc(sizeof *tin * N);
  double *emb = malloc(sizeof *emb * N * C), *dz = malloc(sizeof *dz * N * C), *dw = malloc(sizeof *dw * V * C),
         *dp = malloc(sizeof *dp * T * C);
  memcpy(dz, dout, sizeof *dz * N * C);
  for (int n = 0; n < N; n++) tin[n] = tok[n] >= 0 && tok[n] < V ? tok[n] : 0;
  ref_op(OP_EMBED, NULL, (RefT[]){ref_i(tin, B, T, 0, 0), ref_f(wte, V, C, 0, 0)}, 2, (RefT[]){ref_f(emb, B, T, C, 0)}, 1, 0);
  for (int n = 0; n < N; n++)
    if (tin[n] != tok[n]) memset(emb + (long)n * C, 0, sizeof *emb * C), memset(dz + (long)n * C, 0, sizeof *dz * C);
  ref_op(OP_POS_ADD, NULL, (RefT[]){ref_f(emb, B, T, C, 0), ref_f(wpe, T, C, 0, 0)}, 2, (RefT[]){ref_f(want, B, T, C, 0)}, 1, 0);
  round_bf16(want, (long)N * C);
  gpu_check(g, "embedding_forward (exact)", got, want, (long)N * C, 0, 0);

  double *init = malloc(sizeof *init * V * C), *initp = malloc(sizeof *initp * T * C);
  for (long i = 0; i < (long)V * C; i++) init[i] = rng_uniform(r);
  for (long i = 0; i < (long)T * C; i++) initp[i] = rng_uniform(r);
  CUdeviceptr gw = up_f32(g, init, (long)V * C), gp = up_f32(g, initp, (long)T * C);
  void *b1[] = {&gw, &ddout, &dtok, &N, &C, &V};
  gpu_launch(g, "embedding_backward_token", (unsigned)g->sm_count * 4, 1, 1, 256, 0, b1);
  CUdeviceptr norank = 0; /* no sequence-parallel rank offset */
  void *b2[] = {&gp, &ddout, &B, &T, &C, &norank};
  gpu_launch(g, "embedding_backward_position", gpu_grid1d(g, (long)T * C / 8), 1, 1, 256, 0, b2);
  OpAttrs av = {.i = {V}}, at = {.i = {T}};
  ref_op(OP_EMBED_BWD, &av, (RefT[]){ref_f(dz, B, T, C, 0), ref_i(tin, B, T, 0, 0)}, 2, (RefT[]){ref_f(dw, V, C, 0, 0)}, 1, 0);
  ref_op(OP_POS_ADD_BWD, &at, (RefT[]){ref_f(dout, B, T, C, 0)}, 1, (RefT[]){ref_f(dp, T, C, 0, 0)}, 1, 0);
  for (long i = 0; i < (long)V * C; i++) init[i] = (float)init[i] + dw[i];
  for (long i = 0; i < (long)T * C; i++) initp[i] = (float)initp[i] + dp[i];
  double *gwd = down_f32(g, gw, (long)V * C), *gpd = down_f32(g, gp, (long)T * C);
  /* ~N/V = 80 terms of size <= 1 per entry: fp32 sequential sum error well under 1e-4. */
  gpu_check(g, "embedding_backward_token", gwd, init, (long)V * C, 1e-4, 1e-5);
  gpu_check(g, "embedding_backward_position", gpd, initp, (long)T * C, 1e-5, 1e-5);

  /* Determinism: the same accumulation from the same start, twice, bitwise. */
  float *start = malloc(4 * (size_t)V * C);
  void *runs[2];
  for (long i = 0; i < (long)V * C; i++) start[i] = 0.25f;
  for (int rep = 0; rep < 2; rep++) {
    gpu_put(g, gw, start, 4 * (size_t)V * C);
    gpu_launch(g, "embedding_backward_token", (unsigned)g->sm_count * 4, 1, 1, 256, 0, b1);
    runs[rep] = down_raw(g, gw, 4 * (size_t)V * C);
  }
  gpu_check_bitwise(g, "embedding_backward_token deterministic", runs[0], runs[1], 4 * (size_t)V * C);
  free(runs[0]), free(runs[1]), free(start);
  free(wte), free(wpe), free(dout), free(tok), free(want), free(got), free(init), free(initp), free(gwd), free(gpd);
  free(tin), free(emb), free(dz), free(dw), free(dp);
  gpu_free(g, dwte_), gpu_free(g, dwpe_), gpu_free(g, ddout), gpu_free(g, dtok), gpu_free(g, dout_);
  gpu_free(g, gw), gpu_free(g, gp);
}

/* The norms' forward kernels, the two-kernel backward (backward_input, weight partials + colsum)
 * and the bias partials, at a width of one warp a row (C = 1024), of several whose last slab is
 * short (4104: S = 3) and of more than 8 tiles (66560: 33 tiles over 8 warps, each re-reading its
 * tiles for each pass). */
static void test_norms(Gpu *g, Rng *r, int N, int C) {
  int rows = stepc_norm_fwd_rows(C), G = 7, accumulate = 1, zero = 0;
  CUdeviceptr nul = 0; /* no fused fp8 amax (fp8.c tests it) */
  float eps = 1e-5f;
  long n = (long)N * C;
  double *x, *x2, *w, *bias, *dy, *d0;
  CUdeviceptr dx = up_bf16(g, r, n, 2, &x), dx2 = up_bf16(g, r, n, 2, &x2), dw = up_bf16(g, r, C, 1, &w);
  CUdeviceptr db = up_bf16(g, r, C, 1, &bias), ddy = up_bf16(g, r, n, 1, &dy), dd0 = up_bf16(g, r, n, 1, &d0);
  CUdeviceptr out = gpu_alloc(g, 2 * n), res = gpu_alloc(g, 2 * n), mean = gpu_alloc(g, 4 * N),
              rstd = gpu_alloc(g, 4 * N);
  unsigned grid = (unsigned)((N + rows - 1) / rows), block = stepc_norm_fwd_threads(C);
  unsigned bgrid = (unsigned)((N + STEPC_NORM_ROWS_PER_BLOCK - 1) / STEPC_NORM_ROWS_PER_BLOCK),
           bblock = 32 * STEPC_NORM_ROWS_PER_BLOCK; /* backward_input: a warp a row */
  double *want = malloc(sizeof *want * n), *wm = malloc(sizeof *wm * N), *wr = malloc(sizeof *wr * N);
  char name[96];

  void *a1[] = {&out, &rstd, &dx, &dw, &N, &C, &eps, &nul, &nul};
  gpu_launch(g, "rmsnorm_forward", grid, 1, 1, block, 0, a1);
  norm_ref(want, NULL, wr, x, w, NULL, N, C, eps);
  double *got = down_bf16(g, out, n), *gr = down_f32(g, rstd, N);
  gpu_check(g, (snprintf(name, sizeof name, "%s (C=%d)", "rmsnorm_forward", C), name), got, want, n, 1e-3, RT_BF16);
  gpu_check(g, (snprintf(name, sizeof name, "%s (C=%d)", "rmsnorm_forward rstd", C), name), gr, wr, N, 0, 1e-5);
  free(got), free(gr);

  void *a2[] = {&out, &mean, &rstd, &dx, &dw, &db, &N, &C, &eps, &nul, &nul};
  gpu_launch(g, "layernorm_forward", grid, 1, 1, block, 0, a2);
  norm_ref(want, wm, wr, x, w, bias, N, C, eps);
  got = down_bf16(g, out, n);
  double *gm = down_f32(g, mean, N);
  gr = down_f32(g, rstd, N);
  gpu_check(g, (snprintf(name, sizeof name, "%s (C=%d)", "layernorm_forward", C), name), got, want, n, 1e-3, RT_BF16);
  gpu_check(g, (snprintf(name, sizeof name, "%s (C=%d)", "layernorm_forward mean", C), name), gm, wm, N, 1e-6, 1e-5);
  gpu_check(g, (snprintf(name, sizeof name, "%s (C=%d)", "layernorm_forward rstd", C), name), gr, wr, N, 0, 1e-5);
  free(got), free(gm), free(gr);

  /* Fused residual: residual = bf16(a + b) exactly, the norm of that. */
  double *sum = malloc(sizeof *sum * n);
  for (long i = 0; i < n; i++) sum[i] = host_bf16_to_f32(host_f32_to_bf16((float)x[i] + (float)x2[i]));
  void *a3[] = {&res, &out, &rstd, &dx, &dx2, &dw, &N, &C, &eps, &nul, &nul};
  gpu_launch(g, "residual_rmsnorm_forward", grid, 1, 1, block, 0, a3);
  got = down_bf16(g, res, n);
  gpu_check(g, (snprintf(name, sizeof name, "%s (C=%d)", "residual_rmsnorm_forward residual (exact)", C), name), got, sum, n, 0, 0);
  free(got);
  norm_ref(want, NULL, wr, sum, w, NULL, N, C, eps);
  got = down_bf16(g, out, n);
  gpu_check(g, (snprintf(name, sizeof name, "%s (C=%d)", "residual_rmsnorm_forward out", C), name), got, want, n, 1e-3, RT_BF16);
  free(got);
  void *a4[] = {&res, &out, &mean, &rstd, &dx, &dx2, &dw, &db, &N, &C, &eps, &nul, &nul};
  gpu_launch(g, "residual_layernorm_forward", grid, 1, 1, block, 0, a4);
  norm_ref(want, wm, wr, sum, w, bias, N, C, eps);
  got = down_bf16(g, out, n);
  gpu_check(g, (snprintf(name, sizeof name, "%s (C=%d)", "residual_layernorm_forward out", C), name), got, want, n, 1e-3, RT_BF16);
  free(got);

  /* Backward, on the LayerNorm stats still in mean/rstd (of `sum`); then RMSNorm. dinp starts at
   * d0 and is accumulated for LayerNorm, overwritten for RMSNorm. */
  CUdeviceptr dinp = gpu_alloc(g, 2 * n);
  gpu_copy(g, dinp, dd0, 2 * n);
  double *wdx = malloc(sizeof *wdx * n), *wdw = calloc(2 * C, sizeof *wdw);
  void *b1[] = {&dinp, &ddy, &res, &dw, &mean, &rstd, &N, &C, &accumulate};
  gpu_launch(g, "layernorm_backward_input", bgrid, 1, 1, bblock, 0, b1);
  norm_bwd_ref(wdx, wdw, wdw + C, dy, sum, w, N, C, eps, 1);
  for (long i = 0; i < n; i++) wdx[i] += d0[i];
  got = down_bf16(g, dinp, n);
  /* dx ~ rstd * O(1) terms that partly cancel: atol 2^-8 of that scale */
  gpu_check(g, (snprintf(name, sizeof name, "%s (C=%d)", "layernorm_backward_input (accumulate)", C), name), got, wdx, n, 4e-3, RT_BF16);
  free(got);

  CUdeviceptr partial = gpu_alloc(g, 4 * (size_t)G * 2 * C);
  double *init = malloc(sizeof *init * 2 * C);
  for (int c = 0; c < 2 * C; c++) init[c] = (float)rng_uniform(r);
  CUdeviceptr gw = up_f32(g, init, C), gb = up_f32(g, init + C, C);
  void *b2[] = {&partial, &ddy, &res, &mean, &rstd, &N, &C};
  gpu_launch(g, "norm_backward_weight_partial", (unsigned)((C / 2 + 255) / 256), (unsigned)G, 1, 256, 0, b2);
  int ld = 2 * C;
  CUdeviceptr pb = partial + 4 * (size_t)C;
  void *b3[] = {&gw, &partial, &G, &C, &ld};
  void *b4[] = {&gb, &pb, &G, &C, &ld};
  gpu_launch(g, "colsum_accumulate", (unsigned)((C + 31) / 32), 1, 1, 256, 0, b3);
  gpu_launch(g, "colsum_accumulate", (unsigned)((C + 31) / 32), 1, 1, 256, 0, b4);
  for (int c = 0; c < 2 * C; c++) wdw[c] += init[c];
  double *gwd = down_f32(g, gw, C), *gbd = down_f32(g, gb, C);
  /* sums of N = 300 terms of size ~2: fp32 error ~1e-5 absolute */
  gpu_check(g, (snprintf(name, sizeof name, "%s (C=%d)", "layernorm dweight (partial + colsum)", C), name), gwd, wdw, C, 1e-4, 1e-5);
  gpu_check(g, (snprintf(name, sizeof name, "%s (C=%d)", "layernorm dbias (partial + colsum)", C), name), gbd, wdw + C, C, 1e-4, 1e-5);
  free(gwd), free(gbd);

  void *b5[] = {&out, &rstd, &dx, &dw, &N, &C, &eps, &nul, &nul}; /* fresh RMSNorm stats of x */
  gpu_launch(g, "rmsnorm_forward", grid, 1, 1, block, 0, b5);
  void *b6[] = {&dinp, &ddy, &dx, &dw, &rstd, &N, &C, &zero};
  gpu_launch(g, "rmsnorm_backward_input", bgrid, 1, 1, bblock, 0, b6);
  memset(wdw, 0, sizeof *wdw * 2 * C);
  norm_bwd_ref(wdx, wdw, NULL, dy, x, w, N, C, eps, 0);
  got = down_bf16(g, dinp, n);
  gpu_check(g, (snprintf(name, sizeof name, "%s (C=%d)", "rmsnorm_backward_input", C), name), got, wdx, n, 4e-3, RT_BF16);
  free(got);

  /* Linear-layer bias gradient: column sums of dy. */
  double *bsum = calloc(C, sizeof *bsum);
  for (long i = 0; i < n; i++) bsum[i % C] += dy[i];
  CUdeviceptr gbias = gpu_alloc(g, 4 * (size_t)C);
  void *c1[] = {&partial, &ddy, &N, &C};
  gpu_launch(g, "bias_backward_partial", (unsigned)((C / 2 + 255) / 256), (unsigned)G, 1, 256, 0, c1);
  void *c2[] = {&gbias, &partial, &G, &C, &C};
  gpu_launch(g, "colsum_accumulate", (unsigned)((C + 31) / 32), 1, 1, 256, 0, c2);
  got = down_f32(g, gbias, C);
  gpu_check(g, (snprintf(name, sizeof name, "%s (C=%d)", "bias_backward_partial + colsum", C), name), got, bsum, C, 1e-4, 1e-5);
  free(got), free(bsum);

  free(x), free(x2), free(w), free(bias), free(dy), free(d0), free(want), free(wm), free(wr), free(sum);
  free(wdx), free(wdw), free(init);
  CUdeviceptr bufs[] = {dx, dx2, dw, db, ddy, dd0, out, res, mean, rstd, dinp, partial, gw, gb, gbias};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) gpu_free(g, bufs[i]);
}

/* The one-pass norm backward (rmsnorm_backward / layernorm_backward: dinp and the weight and bias
 * partials) + colsum against the fp64 reference, at widths of one warp a row (1000; 2048, M's hidden
 * size, a whole tile), two (2560, 4096: L8's) and four, the last of 8 columns (6152); bitwise the same
 * on a second run. */
static void test_norm_backward_fused(Gpu *g, Rng *r) {
  int widths[5] = {1000, 2048, 2560, 4096, 6152};
  for (int ci = 0; ci < 5; ci++) {
    for (int ln = 0; ln < 2; ln++) {
      int N = ci < 3 ? 300 : 150, C = widths[ci], rows = stepc_norm_fwd_rows(C), G = 37, P = ln ? 2 : 1,
          W = stepc_norm_bwd_warps(C, P);
      float eps = 1e-5f;
      long n = (long)N * C;
      double *x, *w, *bias, *dy;
      CUdeviceptr dx = up_bf16(g, r, n, 2, &x), dw = up_bf16(g, r, C, 1, &w), db = up_bf16(g, r, C, 1, &bias);
      CUdeviceptr ddy = up_bf16(g, r, n, 1, &dy), out = gpu_alloc(g, 2 * n), mean = gpu_alloc(g, 4 * N),
                  rstd = gpu_alloc(g, 4 * N), dinp = gpu_alloc(g, 2 * n), dinp2 = gpu_alloc(g, 2 * n),
                  partial = gpu_alloc(g, 4 * (size_t)G * 2 * C), gw = gpu_alloc(g, 4 * (size_t)2 * C);
      unsigned grid = (unsigned)((N + rows - 1) / rows), block = stepc_norm_fwd_threads(C),
               smem = stepc_norm_bwd_smem(C, P, W);
      CUdeviceptr none = 0;
      void *f1[] = {&out, &rstd, &dx, &dw, &N, &C, &eps, &none, &none},
           *f2[] = {&out, &mean, &rstd, &dx, &dw, &db, &N, &C, &eps, &none, &none};
      gpu_launch(g, ln ? "layernorm_forward" : "rmsnorm_forward", grid, 1, 1, block, 0, ln ? f2 : f1);
      double *want = malloc(sizeof *want * n), *wm = malloc(sizeof *wm * N), *wr = malloc(sizeof *wr * N);
      norm_ref(want, ln ? wm : NULL, wr, x, w, ln ? bias : NULL, N, C, eps);
      double *fo = down_bf16(g, out, n);
      char name[96];
      snprintf(name, sizeof name, "%s_forward (C=%d)", ln ? "layernorm" : "rmsnorm", C);
      gpu_check(g, name, fo, want, n, 1e-3, RT_BF16);
      free(fo), free(want), free(wm), free(wr);
      void *b1[] = {&dinp, &partial, &ddy, &none, &dx, &dw, &rstd, &N, &C, &none, &none};
      void *b2[] = {&dinp, &partial, &ddy, &none, &dx, &dw, &mean, &rstd, &N, &C, &none, &none};
      gpu_launch(g, ln ? "layernorm_backward" : "rmsnorm_backward", (unsigned)G, 1, 1, 32 * (unsigned)W, smem, ln ? b2 : b1);
      gpu_memset(g, gw, 0, 4 * (size_t)2 * C);
      int ld = 2 * C;
      CUdeviceptr pb = partial + 4 * (size_t)C, gb = gw + 4 * (size_t)C;
      void *c1[] = {&gw, &partial, &G, &C, &ld}, *c2[] = {&gb, &pb, &G, &C, &ld};
      gpu_launch(g, "colsum_accumulate", (unsigned)((C + 31) / 32), 1, 1, 256, 0, c1);
      if (ln) gpu_launch(g, "colsum_accumulate", (unsigned)((C + 31) / 32), 1, 1, 256, 0, c2);
      double *wdx = malloc(sizeof *wdx * n), *wdw = calloc(2 * (size_t)C, sizeof *wdw);
      norm_bwd_ref(wdx, wdw, ln ? wdw + C : NULL, dy, x, w, N, C, eps, ln);
      double *got = down_bf16(g, dinp, n), *gwd = down_f32(g, gw, P * C);
      snprintf(name, sizeof name, "%s_backward dinp (C=%d)", ln ? "layernorm" : "rmsnorm", C);
      gpu_check(g, name, got, wdx, n, 4e-3, RT_BF16);
      snprintf(name, sizeof name, "%s_backward d%s + colsum (C=%d)", ln ? "layernorm" : "rmsnorm", ln ? "weight, dbias" : "weight", C);
      gpu_check(g, name, gwd, wdw, P * C, 1e-4, 1e-5);
      void *b3[] = {&dinp2, &partial, &ddy, &none, &dx, &dw, &rstd, &N, &C, &none, &none};
      void *b4[] = {&dinp2, &partial, &ddy, &none, &dx, &dw, &mean, &rstd, &N, &C, &none, &none};
      void *p1 = down_raw(g, partial, 4 * (size_t)G * 2 * C);
      gpu_launch(g, ln ? "layernorm_backward" : "rmsnorm_backward", (unsigned)G, 1, 1, 32 * (unsigned)W, smem, ln ? b4 : b3);
      void *p2 = down_raw(g, partial, 4 * (size_t)G * 2 * C), *d1 = down_raw(g, dinp, 2 * n), *d2 = down_raw(g, dinp2, 2 * n);
      gpu_check_bitwise(g, "norm backward rerun: dinp", d1, d2, 2 * (size_t)n);
      gpu_check_bitwise(g, "norm backward rerun: partials", p1, p2, 4 * (size_t)G * P * C);
      /* with an addend (FUSE_NORM_BWD_ADD): the bits of the kernel then residual_add */
      long nl = n;
      void *ra[] = {&dinp, &dinp, &out, &nl};
      gpu_launch(g, "residual_add", gpu_grid1d(g, n), 1, 1, 256, 0, ra);
      void *b5[] = {&dinp2, &partial, &ddy, &out, &dx, &dw, &rstd, &N, &C, &none, &none};
      void *b6[] = {&dinp2, &partial, &ddy, &out, &dx, &dw, &mean, &rstd, &N, &C, &none, &none};
      gpu_launch(g, ln ? "layernorm_backward" : "rmsnorm_backward", (unsigned)G, 1, 1, 32 * (unsigned)W, smem, ln ? b6 : b5);
      void *d3 = down_raw(g, dinp, 2 * n), *d4 = down_raw(g, dinp2, 2 * n);
      snprintf(name, sizeof name, "%s_backward + addend == then residual_add (C=%d)", ln ? "layernorm" : "rmsnorm", C);
      gpu_check_bitwise(g, name, d3, d4, 2 * (size_t)n);
      free(d3), free(d4);
      free(p1), free(p2), free(d1), free(d2), free(got), free(gwd), free(wdx), free(wdw), free(x), free(w), free(bias), free(dy);
      CUdeviceptr bufs[] = {dx, dw, db, ddy, out, mean, rstd, dinp, dinp2, partial, gw};
      for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) gpu_free(g, bufs[i]);
    }
  }
}

/* Unscaled (factor 0) and with Llama 3's scaling (factor 32, Llama 3.2's; base 500000 puts
 * frequencies in all three of its bands at D=64 and D=128), against ir/ops' RoPE reference. */
static void test_rope(Gpu *g, Rng *r) {
  int configs[4][4] = {{2, 64, 4, 64}, {1, 4096, 2, 128}, {2, 64, 4, 64}, {1, 4096, 2, 128}}; /* B, T, H, D */
  for (int k = 0; k < 4; k++) {
    int B = configs[k][0], T = configs[k][1], H = configs[k][2], D = configs[k][3];
    float base = k < 2 ? 10000.0f : 500000.0f, factor = k < 2 ? 0.0f : 32.0f;
    long n = (long)B * T * H * D;
    double *x, *want = malloc(sizeof *want * n);
    CUdeviceptr dx = up_bf16(g, r, n, 1, &x), out = gpu_alloc(g, 2 * n);
    void *a[] = {&out, &dx, &B, &T, &H, &D, &base, &factor};
    gpu_launch(g, "rope_forward", gpu_grid1d(g, n / 2), 1, 1, 256, 0, a);
    OpAttrs ra = {.f = {base, factor}, .i = {1}};
    ref_op(OP_ROPE, &ra, (RefT[]){ref_f(x, B, T, H, D)}, 1, (RefT[]){ref_f(want, B, T, H, D)}, 1, 0);
    double *got = down_bf16(g, out, n);
    /* fp32 angles t * inv_freq (as PyTorch builds its table) are off by up to ~t * 2^-24 rad
     * from fp64: atol grows with T. */
    double atol = 1e-4 + T * 6e-8 * 2;
    char name[96];
    snprintf(name, sizeof name, "rope_forward (T=%d, D=%d, base %g, scaling factor %g)", T, D, base, factor);
    gpu_check(g, name, got, want, n, atol, RT_BF16);
    free(got);
    void *b[] = {&out, &out, &B, &T, &H, &D, &base, &factor}; /* in place: backward undoes forward */
    gpu_launch(g, "rope_backward", gpu_grid1d(g, n / 2), 1, 1, 256, 0, b);
    got = down_bf16(g, out, n);
    snprintf(name, sizeof name, "rope_backward(rope_forward(x)) = x (T=%d, scaling factor %g)", T, factor);
    gpu_check(g, name, got, x, n, 2 * atol + 4e-3, 2 * RT_BF16);
    free(got), free(x), free(want);
    gpu_free(g, dx), gpu_free(g, out);
  }
}

/* The fused QKV kernels write the bits of the unfused ones: rope_split_qkv = split_qkv then
 * rope_forward on q and k; rope_concat_qkv = rope_backward on dq and dk then concat_qkv. */
static void test_rope_qkv(Gpu *g, Rng *r) {
  int configs[4][5] = {{2, 64, 4, 2, 64}, {1, 4096, 8, 2, 128}, {2, 64, 4, 2, 64}, {1, 4096, 8, 2, 128}}; /* B, T, H, G, D */
  for (int c = 0; c < 4; c++) {
    int B = configs[c][0], T = configs[c][1], H = configs[c][2], G = configs[c][3], D = configs[c][4];
    long N = (long)B * T, nq = N * H * D, nk = N * G * D, n = nq + 2 * nk;
    float base = 500000.0f, factor = c < 2 ? 0.0f : 32.0f; /* then Llama 3's scaling */
    char name[96];
    double *x;
    CUdeviceptr qkv = up_bf16(g, r, n, 1, &x), q = gpu_alloc(g, 2 * nq), k = gpu_alloc(g, 2 * nk), v = gpu_alloc(g, 2 * nk);
    CUdeviceptr fq = gpu_alloc(g, 2 * nq), fk = gpu_alloc(g, 2 * nk), fv = gpu_alloc(g, 2 * nk), back = gpu_alloc(g, 2 * n),
                fback = gpu_alloc(g, 2 * n);
    void *a[] = {&q, &k, &v, &qkv, &N, &H, &G, &D};
    gpu_launch(g, "split_qkv", gpu_grid1d(g, n / 8), 1, 1, 256, 0, a);
    void *rq[] = {&q, &q, &B, &T, &H, &D, &base, &factor}, *rk[] = {&k, &k, &B, &T, &G, &D, &base, &factor};
    gpu_launch(g, "rope_forward", gpu_grid1d(g, nq / 2), 1, 1, 256, 0, rq);
    gpu_launch(g, "rope_forward", gpu_grid1d(g, nk / 2), 1, 1, 256, 0, rk);
    void *f[] = {&fq, &fk, &fv, &qkv, &N, &T, &H, &G, &D, &base, &factor};
    gpu_launch(g, "rope_split_qkv", (unsigned)N, 1, 1, 128, 0, f);
    size_t bq = 2 * (size_t)nq, bk = 2 * (size_t)nk;
    uint16_t *h1 = malloc(2 * (size_t)n), *h2 = malloc(2 * (size_t)n);
    gpu_get(g, h1, q, bq), gpu_get(g, h1 + nq, k, bk), gpu_get(g, h1 + nq + nk, v, bk);
    gpu_get(g, h2, fq, bq), gpu_get(g, h2 + nq, fk, bk), gpu_get(g, h2 + nq + nk, fv, bk);
    snprintf(name, sizeof name, "rope_split_qkv = split_qkv + rope_forward (T=%d, D=%d, scaling factor %g)", T, D, factor);
    gpu_check_bitwise(g, name, h1, h2, 2 * (size_t)n);
    /* backward on the rotated values as gradients: the fused kernel reads fq, fk, fv */
    void *bq_[] = {&q, &q, &B, &T, &H, &D, &base, &factor}, *bk_[] = {&k, &k, &B, &T, &G, &D, &base, &factor};
    gpu_launch(g, "rope_backward", gpu_grid1d(g, nq / 2), 1, 1, 256, 0, bq_);
    gpu_launch(g, "rope_backward", gpu_grid1d(g, nk / 2), 1, 1, 256, 0, bk_);
    void *cc[] = {&back, &q, &k, &v, &N, &H, &G, &D};
    gpu_launch(g, "concat_qkv", gpu_grid1d(g, n / 8), 1, 1, 256, 0, cc);
    CUdeviceptr none = 0; /* no fused fp8 amax (fp8.c tests it) */
    void *fc[] = {&fback, &fq, &fk, &fv, &N, &T, &H, &G, &D, &base, &factor, &none, &none};
    gpu_launch(g, "rope_concat_qkv", (unsigned)N, 1, 1, 128, 0, fc);
    gpu_get(g, h1, back, 2 * (size_t)n), gpu_get(g, h2, fback, 2 * (size_t)n);
    snprintf(name, sizeof name, "rope_concat_qkv = rope_backward + concat_qkv (T=%d, D=%d, scaling factor %g)", T, D, factor);
    gpu_check_bitwise(g, name, h1, h2, 2 * (size_t)n);
    free(h1), free(h2), free(x);
    CUdeviceptr bufs[] = {qkv, q, k, v, fq, fk, fv, back, fback};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) gpu_free(g, bufs[i]);
  }
}

static void test_softmax_transpose(Gpu *g, Rng *r) {
  int BH = 3, T = 300;
  float scale = 0.125f;
  long n = (long)BH * T * T;
  double *s, *dp, *want = malloc(sizeof *want * n);
  CUdeviceptr ds_ = up_bf16(g, r, n, 8, &s), ddp = up_bf16(g, r, n, 1, &dp), p = gpu_alloc(g, 2 * n);
  void *a[] = {&p, &ds_, &BH, &T, &scale};
  gpu_launch(g, "softmax_causal_forward", (unsigned)(BH * T), 1, 1, 256, 0, a);
  /* CAUSAL_MASK then SOFTMAX of the scaled scores (the kernel takes the scale) */
  double *ss = malloc(sizeof *ss * n), *masked = malloc(sizeof *masked * n);
  for (long i = 0; i < n; i++) ss[i] = scale * s[i];
  OpAttrs ma = {.i = {0}};
  ref_op(OP_CAUSAL_MASK, &ma, (RefT[]){ref_f(ss, BH, T, T, 0)}, 1, (RefT[]){ref_f(masked, BH, T, T, 0)}, 1, 0);
  ref_op(OP_SOFTMAX, NULL, (RefT[]){ref_f(masked, BH, T, T, 0)}, 1, (RefT[]){ref_f(want, BH, T, T, 0)}, 1, 0);
  free(ss), free(masked);
  double *gp = down_bf16(g, p, n);
  gpu_check(g, "softmax_causal_forward", gp, want, n, 1e-6, RT_BF16);
  CUdeviceptr dsc = gpu_alloc(g, 2 * n);
  void *b[] = {&dsc, &ddp, &p, &BH, &T, &scale};
  gpu_launch(g, "softmax_causal_backward", (unsigned)(BH * T), 1, 1, 256, 0, b);
  /* SOFTMAX_BWD on the probabilities the kernel saved, times the scale */
  ref_op(OP_SOFTMAX_BWD, NULL, (RefT[]){ref_f(dp, BH, T, T, 0), ref_f(gp, BH, T, T, 0)}, 2, (RefT[]){ref_f(want, BH, T, T, 0)}, 1, 0);
  for (long i = 0; i < n; i++) want[i] *= scale;
  double *got = down_bf16(g, dsc, n);
  gpu_check(g, "softmax_causal_backward", got, want, n, 1e-5, RT_BF16);
  free(got), free(gp), free(s), free(dp), free(want);
  gpu_free(g, ds_), gpu_free(g, ddp), gpu_free(g, p), gpu_free(g, dsc);

  int B = 2, Tt = 40, H = 3, D = 64;
  long m = (long)B * Tt * H * D;
  double *x;
  CUdeviceptr dx = up_bf16(g, r, m, 1, &x), t1 = gpu_alloc(g, 2 * m), t2 = gpu_alloc(g, 2 * m);
  void *c1[] = {&t1, &dx, &B, &Tt, &H, &D}, *c2[] = {&t2, &t1, &B, &Tt, &H, &D};
  gpu_launch(g, "transpose_bthd_to_bhtd", gpu_grid1d(g, m / 8), 1, 1, 256, 0, c1);
  gpu_launch(g, "transpose_bhtd_to_bthd", gpu_grid1d(g, m / 8), 1, 1, 256, 0, c2);
  double *mid = down_bf16(g, t1, m), *back = down_bf16(g, t2, m);
  int ok = 1;
  for (long i = 0; i < m && ok; i++) { /* (b, t, h, d) -> (b, h, t, d) */
    long d = i % D, h = (i / D) % H, t = (i / D / H) % Tt, bb = i / D / H / Tt;
    ok = mid[((bb * H + h) * Tt + t) * D + d] == x[i];
  }
  gpu_check_true(g, "transpose_bthd_to_bhtd (exact)", ok, NULL);
  gpu_check(g, "transpose round trip (exact)", back, x, m, 0, 0);
  free(x), free(mid), free(back);
  gpu_free(g, dx), gpu_free(g, t1), gpu_free(g, t2);
}

static void test_activations(Gpu *g, Rng *r) {
  int N = 64, F = 512;
  long n = (long)N * F;
  double *in, *dout, *want = malloc(sizeof *want * 2 * n);
  CUdeviceptr din = up_bf16(g, r, 2 * n, 4, &in), ddo = up_bf16(g, r, n, 1, &dout);
  CUdeviceptr out = gpu_alloc(g, 2 * n), dinp = gpu_alloc(g, 4 * n), nul = 0;
  void *a[] = {&out, &din, &N, &F, &nul, &nul};
  gpu_launch(g, "swiglu_forward", gpu_grid1d(g, n / 8), 1, 1, 256, 0, a);
  ref_op(OP_SWIGLU, NULL, (RefT[]){ref_f(in, N, 2 * F, 0, 0)}, 1, (RefT[]){ref_f(want, N, F, 0, 0)}, 1, 0);
  double *got = down_bf16(g, out, n);
  gpu_check(g, "swiglu_forward", got, want, n, 1e-5, RT_BF16);
  free(got);
  void *b[] = {&dinp, &ddo, &din, &N, &F, &nul, &nul};
  gpu_launch(g, "swiglu_backward", gpu_grid1d(g, n / 8), 1, 1, 256, 0, b);
  RefT bin[2] = {ref_f(dout, N, F, 0, 0), ref_f(in, N, 2 * F, 0, 0)};
  ref_op(OP_SWIGLU_BWD, NULL, bin, 2, (RefT[]){ref_f(want, N, 2 * F, 0, 0)}, 1, 0);
  got = down_bf16(g, dinp, 2 * n);
  gpu_check(g, "swiglu_backward", got, want, 2 * n, 1e-5, RT_BF16);
  free(got);

  /* GeGLU, the same layout (rows [gate | up]) */
  gpu_launch(g, "geglu_forward", gpu_grid1d(g, n / 8), 1, 1, 256, 0, a);
  ref_op(OP_GEGLU, NULL, (RefT[]){ref_f(in, N, 2 * F, 0, 0)}, 1, (RefT[]){ref_f(want, N, F, 0, 0)}, 1, 0);
  got = down_bf16(g, out, n);
  gpu_check(g, "geglu_forward (erf)", got, want, n, 1e-5, RT_BF16);
  free(got);
  gpu_launch(g, "geglu_backward", gpu_grid1d(g, n / 8), 1, 1, 256, 0, b);
  ref_op(OP_GEGLU_BWD, NULL, bin, 2, (RefT[]){ref_f(want, N, 2 * F, 0, 0)}, 1, 0);
  got = down_bf16(g, dinp, 2 * n);
  gpu_check(g, "geglu_backward (erf)", got, want, 2 * n, 1e-5, RT_BF16);
  free(got);

  long m = 10007; /* not a multiple of anything: the tail */
  void *c[] = {&out, &din, &m};
  gpu_launch(g, "gelu_forward", gpu_grid1d(g, m), 1, 1, 256, 0, c);
  ref_op(OP_GELU, NULL, (RefT[]){ref_f(in, m, 0, 0, 0)}, 1, (RefT[]){ref_f(want, m, 0, 0, 0)}, 1, 0);
  got = down_bf16(g, out, m);
  gpu_check(g, "gelu_forward (erf)", got, want, m, 1e-5, RT_BF16);
  free(got);
  void *d[] = {&dinp, &ddo, &din, &m};
  gpu_launch(g, "gelu_backward", gpu_grid1d(g, m), 1, 1, 256, 0, d);
  RefT gin[2] = {ref_f(dout, m, 0, 0, 0), ref_f(in, m, 0, 0, 0)};
  ref_op(OP_GELU_BWD, NULL, gin, 2, (RefT[]){ref_f(want, m, 0, 0, 0)}, 1, 0);
  got = down_bf16(g, dinp, m);
  gpu_check(g, "gelu_backward (erf)", got, want, m, 1e-5, RT_BF16);
  free(got);
  /* RELU_ACT: relu and Megatron's squared relu, against ir/ops' reference */
  for (int sq = 0; sq < 2; sq++) {
    OpAttrs ra = {.i = {sq}};
    char name[64];
    void *e[] = {&out, &din, &m, &sq};
    gpu_launch(g, "relu_forward", gpu_grid1d(g, m), 1, 1, 256, 0, e);
    ref_op(OP_RELU_ACT, &ra, (RefT[]){ref_f(in, m, 0, 0, 0)}, 1, (RefT[]){ref_f(want, m, 0, 0, 0)}, 1, 0);
    got = down_bf16(g, out, m);
    snprintf(name, sizeof name, "relu_forward (%s)", sq ? "squared" : "plain");
    gpu_check(g, name, got, want, m, 1e-5, RT_BF16);
    free(got);
    void *f[] = {&dinp, &ddo, &din, &m, &sq};
    gpu_launch(g, "relu_backward", gpu_grid1d(g, m), 1, 1, 256, 0, f);
    ref_op(OP_RELU_ACT_BWD, &ra, gin, 2, (RefT[]){ref_f(want, m, 0, 0, 0)}, 1, 0);
    got = down_bf16(g, dinp, m);
    snprintf(name, sizeof name, "relu_backward (%s)", sq ? "squared" : "plain");
    gpu_check(g, name, got, want, m, 1e-5, RT_BF16);
    free(got);
  }
  free(in), free(dout), free(want);
  gpu_free(g, din), gpu_free(g, ddo), gpu_free(g, out), gpu_free(g, dinp);
}

static void test_dropout(Gpu *g, Rng *r) {
  long n = 100003;
  float p = 0.1f, scale = 1.0f / (1.0f - p);
  unsigned op = 42;
  unsigned long long seed = 0x0123456789abcdefull, seed2 = seed + 1;
  double *x, *res;
  CUdeviceptr dx = up_bf16(g, r, n, 1, &x), dres = up_bf16(g, r, n, 1, &res);
  CUdeviceptr dseed = gpu_dup(g, &seed, 8), out = gpu_alloc(g, 2 * n), out2 = gpu_alloc(g, 2 * n);
  void *a[] = {&out, &dx, &n, &p, &dseed, &op};
  gpu_launch(g, "dropout_forward", gpu_grid1d(g, n / 4 + 1), 1, 1, 256, 0, a);
  double *want = malloc(sizeof *want * n), *got = down_bf16(g, out, n);
  long kept = 0;
  for (long i = 0; i < n; i++) {
    int keep = host_dropout_keep(seed, op, (uint64_t)i, p);
    kept += keep;
    want[i] = keep ? host_bf16_to_f32(host_f32_to_bf16((float)x[i] * scale)) : 0.0;
  }
  gpu_check(g, "dropout_forward = Philox reference (exact)", got, want, n, 0, 0);
  char detail[64];
  snprintf(detail, sizeof detail, "kept %.4f, expect 0.9", (double)kept / n);
  gpu_check_true(g, "dropout keep rate", fabs((double)kept / n - 0.9) < 0.005, detail);

  /* Replay: the same (seed, op) gives the same bits; backward applies the same mask. */
  void *a2[] = {&out2, &dx, &n, &p, &dseed, &op};
  gpu_launch(g, "dropout_forward", gpu_grid1d(g, n / 4 + 1), 1, 1, 256, 0, a2);
  void *h1 = down_raw(g, out, 2 * n), *h2 = down_raw(g, out2, 2 * n);
  gpu_check_bitwise(g, "dropout replay bit-exact", h1, h2, 2 * n);
  free(h2);
  void *bw[] = {&out2, &dx, &n, &p, &dseed, &op}; /* dout = x: backward must equal forward */
  gpu_launch(g, "dropout_backward", gpu_grid1d(g, n / 4 + 1), 1, 1, 256, 0, bw);
  h2 = down_raw(g, out2, 2 * n);
  gpu_check_bitwise(g, "dropout_backward mask = forward mask", h1, h2, 2 * n);
  free(h2);
  gpu_put(g, dseed, &seed2, 8); /* a new step's seed, read from device memory */
  gpu_launch(g, "dropout_forward", gpu_grid1d(g, n / 4 + 1), 1, 1, 256, 0, a2);
  h2 = down_raw(g, out2, 2 * n);
  gpu_check_true(g, "dropout: another seed, another mask", memcmp(h1, h2, 2 * n) != 0, NULL);
  free(h1), free(h2);
  gpu_put(g, dseed, &seed, 8);

  void *c[] = {&out2, &dres, &dx, &n, &p, &dseed, &op};
  gpu_launch(g, "dropout_residual_forward", gpu_grid1d(g, n / 4 + 1), 1, 1, 256, 0, c);
  for (long i = 0; i < n; i++)
    want[i] = res[i] + (host_dropout_keep(seed, op, (uint64_t)i, p) ? x[i] * (double)scale : 0.0);
  free(got);
  got = down_bf16(g, out2, n);
  gpu_check(g, "dropout_residual_forward", got, want, n, 1e-6, RT_BF16);
  free(got), free(want), free(x), free(res);
  gpu_free(g, dx), gpu_free(g, dres), gpu_free(g, dseed), gpu_free(g, out), gpu_free(g, out2);
}

static void test_elementwise(Gpu *g, Rng *r) {
  long n = 4099;
  double *a, *b, *want = malloc(sizeof *want * n);
  CUdeviceptr da = up_bf16(g, r, n, 1, &a), db = up_bf16(g, r, n, 1, &b), out = gpu_alloc(g, 2 * n);
  void *k1[] = {&out, &da, &db, &n};
  gpu_launch(g, "residual_add", gpu_grid1d(g, n), 1, 1, 256, 0, k1);
  for (long i = 0; i < n; i++) want[i] = a[i] + b[i];
  double *got = down_bf16(g, out, n);
  gpu_check(g, "residual_add", got, want, n, 1e-6, RT_BF16);
  free(got);

  double *f = malloc(sizeof *f * n);
  for (long i = 0; i < n; i++) f[i] = (float)(3 * rng_uniform(r));
  CUdeviceptr df = up_f32(g, f, n), acc = up_f32(g, f, n), acc2 = up_f32(g, f, n);
  void *k2[] = {&out, &df, &n};
  gpu_launch(g, "cast_f32_to_bf16", gpu_grid1d(g, n), 1, 1, 256, 0, k2);
  memcpy(want, f, sizeof *want * n);
  round_bf16(want, n);
  got = down_bf16(g, out, n);
  gpu_check(g, "cast_f32_to_bf16 (exact, round to nearest even)", got, want, n, 0, 0);
  free(got);
  CUdeviceptr back = gpu_alloc(g, 4 * n);
  void *k3[] = {&back, &out, &n};
  gpu_launch(g, "cast_bf16_to_f32", gpu_grid1d(g, n), 1, 1, 256, 0, k3);
  got = down_f32(g, back, n);
  gpu_check(g, "cast_bf16_to_f32 (exact)", got, want, n, 0, 0);
  free(got);

  void *k4[] = {&acc, &da, &n};
  gpu_launch(g, "grad_accumulate_bf16", gpu_grid1d(g, n), 1, 1, 256, 0, k4);
  for (long i = 0; i < n; i++) want[i] = (float)(f[i] + a[i]);
  got = down_f32(g, acc, n);
  gpu_check(g, "grad_accumulate_bf16", got, want, n, 0, 1e-7);
  free(got);
  void *k5[] = {&acc2, &df, &n};
  gpu_launch(g, "grad_accumulate_f32", gpu_grid1d(g, n), 1, 1, 256, 0, k5);
  float s = 0.5f;
  CUdeviceptr ds = gpu_dup(g, &s, 4);
  void *k6[] = {&acc2, &ds, &n};
  gpu_launch(g, "scale_f32", gpu_grid1d(g, n), 1, 1, 256, 0, k6);
  got = down_f32(g, acc2, n);
  gpu_check(g, "grad_accumulate_f32 + scale_f32 (exact)", got, f, n, 0, 0); /* (f + f) / 2 */
  free(got);
  float v = 3.25f;
  void *k7[] = {&acc2, &v, &n};
  gpu_launch(g, "fill_f32", gpu_grid1d(g, n), 1, 1, 256, 0, k7);
  got = down_f32(g, acc2, n);
  for (long i = 0; i < n; i++) want[i] = 3.25;
  gpu_check(g, "fill_f32", got, want, n, 0, 0);
  free(got), free(a), free(b), free(f), free(want);
  CUdeviceptr bufs[] = {da, db, out, df, acc, acc2, back, ds};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) gpu_free(g, bufs[i]);
}

static void test_cross_entropy(Gpu *g, Rng *r) {
  int N = 67, V = 1003, Vp = 1008;
  float dloss = 1.0f / 64;
  long n = (long)N * Vp;
  double *x;
  CUdeviceptr dl = up_bf16(g, r, n, 4, &x);
  int *t = malloc(sizeof *t * N);
  for (int i = 0; i < N; i++) t[i] = (int)((rng_uniform(r) + 1) * 0.5 * V) % V;
  t[3] = -100, t[10] = V; /* ignored */
  /* the loss denominator the kernels divide by: the kept targets (the mean over them) */
  float den = (float)(N - 2);
  CUdeviceptr dt = gpu_dup(g, t, sizeof *t * N), losses = gpu_alloc(g, 4 * N), mean = gpu_alloc(g, 4),
              dden = gpu_dup(g, &den, sizeof den);
  void *a[] = {&losses, &dl, &dt, &N, &V, &Vp, &dloss, &dden};
  gpu_launch(g, "cross_entropy_forward_backward", (unsigned)N, 1, 1, 512, 0, a);
  double *wl = malloc(sizeof *wl * N), *wd = malloc(sizeof *wd * n);
  ref_cross_entropy_rows(wl, wd, x, t, N, V, Vp, dloss / den);
  double *gl = down_f32(g, losses, N), *gd = down_bf16(g, dl, n);
  gpu_check(g, "cross_entropy loss", gl, wl, N, 1e-5, 1e-5);
  gpu_check(g, "cross_entropy dlogits (in place)", gd, wd, n, 1e-6 * dloss / den, RT_BF16);
  void *b[] = {&mean, &losses, &N, &dden};
  gpu_launch(g, "loss_reduce", 1, 1, 1, 1024, 0, b);
  double wm = 0, *gm;
  for (int i = 0; i < N; i++) wm += wl[i];
  wm /= den;
  gm = down_f32(g, mean, 1);
  gpu_check(g, "loss_reduce (mean)", gm, &wm, 1, 0, 1e-5);
  free(x), free(t), free(wl), free(wd), free(gl), free(gd), free(gm);
  gpu_free(g, dl), gpu_free(g, dt), gpu_free(g, losses), gpu_free(g, mean), gpu_free(g, dden);
}

/* cross_entropy_cluster (a cluster of blocks per row, the row read once) against the fp64
 * reference, at a padded small vocabulary and at Llama 3's (128256, 256 threads a block), and
 * bitwise the same on a second run. */
static void test_cross_entropy_cluster(Gpu *g, Rng *r) {
  int shapes[2][3] = {{67, 1003, 1008}, {5, 128256, 128256}}; /* N, V, Vp */
  for (int c = 0; c < 2; c++) {
    int N = shapes[c][0], V = shapes[c][1], Vp = shapes[c][2];
    float dloss = 1.0f / 64;
    long n = (long)N * Vp;
    double *x;
    CUdeviceptr dl = up_bf16(g, r, n, 4, &x), dl2 = gpu_alloc(g, 2 * (size_t)n);
    uint16_t *orig = malloc(2 * (size_t)n);
    gpu_get(g, orig, dl, 2 * (size_t)n);
    int *t = malloc(sizeof *t * N);
    for (int i = 0; i < N; i++) t[i] = (int)((rng_uniform(r) + 1) * 0.5 * V) % V;
    t[3] = -100, t[N - 1] = V - 1;
    if (c == 0) t[10] = V; /* ignored */
    CUdeviceptr dt = gpu_dup(g, t, sizeof *t * N), losses = gpu_alloc(g, 4 * N), losses2 = gpu_alloc(g, 4 * N);
    gpu_put(g, dl2, orig, 2 * (size_t)n);
    unsigned th = stepc_ce_threads(Vp);
    float one = 1.0f;
    CUdeviceptr den = gpu_dup(g, &one, sizeof one);
    void *a[] = {&losses, &dl, &dt, &N, &V, &Vp, &dloss, &den}, *b[] = {&losses2, &dl2, &dt, &N, &V, &Vp, &dloss, &den};
    gpu_launch(g, "cross_entropy_cluster", (unsigned)N * STEPC_CE_CLUSTER, 1, 1, th, 0, a);
    gpu_launch(g, "cross_entropy_cluster", (unsigned)N * STEPC_CE_CLUSTER, 1, 1, th, 0, b);
    double *wl = malloc(sizeof *wl * N), *wd = malloc(sizeof *wd * n);
    ref_cross_entropy_rows(wl, wd, x, t, N, V, Vp, dloss);
    double *gl = down_f32(g, losses, N), *gd = down_bf16(g, dl, n);
    gpu_check(g, c ? "cross_entropy_cluster loss (V=128256)" : "cross_entropy_cluster loss", gl, wl, N, 1e-5, 1e-5);
    gpu_check(g, c ? "cross_entropy_cluster dlogits (V=128256)" : "cross_entropy_cluster dlogits", gd, wd, n, 1e-6 * dloss,
              RT_BF16);
    void *l1 = down_raw(g, losses, 4 * (size_t)N), *l2 = down_raw(g, losses2, 4 * (size_t)N);
    void *d1 = down_raw(g, dl, 2 * (size_t)n), *d2 = down_raw(g, dl2, 2 * (size_t)n);
    gpu_check_bitwise(g, "cross_entropy_cluster rerun: losses", l1, l2, 4 * (size_t)N);
    gpu_check_bitwise(g, "cross_entropy_cluster rerun: dlogits", d1, d2, 2 * (size_t)n);
    free(l1), free(l2), free(d1), free(d2), free(x), free(t), free(wl), free(wd), free(gl), free(gd), free(orig);
    gpu_free(g, dl), gpu_free(g, dl2), gpu_free(g, dt), gpu_free(g, losses), gpu_free(g, losses2), gpu_free(g, den);
  }
}

/* The router's linear with its fp32 weight (kernels/moe.cuh: three bf16 parts on the tensor cores),
 * forward and data gradient, against fp64 with the exact fp32 weights. W = base + tiny: base is
 * bf16-exact and equal in 2 x 2 blocks (rows 2i, 2i+1 and columns 2j, 2j+1), tiny a residue
 * ~2^-11 of it that bf16 cannot hold. Rows of x of the form e_2j - e_2j+1 and rows of dy e_2i -
 * e_2i+1 cancel the base, so their outputs are the residues alone: a kernel that kept only
 * bf16(W) would give 0 there and fail. The other rows are random. Shapes off the 64-tiles (N 200,
 * E 72) and a K not a multiple of 8 (C 99, the scalar loads). */
static void test_router_linear_case(Gpu *g, Rng *r, int N, int E, int C) {
  long nx = (long)N * C, nw = (long)E * C, ny = (long)N * E;
  double *w = malloc(sizeof *w * nw), *x = malloc(sizeof *x * nx), *dy = malloc(sizeof *dy * ny);
  double *want = malloc(sizeof *want * (nx > ny ? nx : ny));
  float *wf = malloc(4 * (size_t)nw);
  uint16_t *hx = malloc(2 * (size_t)nx), *hy = malloc(2 * (size_t)ny);
  uint16_t one = host_f32_to_bf16(1.0f), minus = host_f32_to_bf16(-1.0f);
  for (long i = 0; i < nw; i++) {
    int e = (int)(i / C), c = (int)(i % C);
    Rng b = {0x9e37u * (unsigned)(e / 2 + 1) + 0x85ebu * (unsigned)(c / 2 + 1)};
    uint16_t hb;
    double base;
    rand_bf16(&b, &hb, &base, 1, 0.5);
    wf[i] = (float)(base + ldexp(rng_uniform(r), -11) * (fabs(base) + 0.01));
    w[i] = wf[i];
  }
  rand_bf16(r, hx, x, nx, 1), rand_bf16(r, hy, dy, ny, 1);
  for (int n = 0; n < N / 2; n++) { /* cancelling rows: x e_2j - e_2j+1, dy e_2i - e_2i+1 */
    int j = 2 * (n % (C / 2)), i = 2 * (n % (E / 2));
    uint16_t *hxn = hx + (long)n * C, *hyn = hy + (long)n * E;
    double *xn = x + (long)n * C, *dyn = dy + (long)n * E;
    for (int c = 0; c < C; c++) hxn[c] = 0, xn[c] = 0;
    for (int e = 0; e < E; e++) hyn[e] = 0, dyn[e] = 0;
    hxn[j] = one, xn[j] = 1, hxn[j + 1] = minus, xn[j + 1] = -1;
    hyn[i] = one, dyn[i] = 1, hyn[i + 1] = minus, dyn[i + 1] = -1;
  }
  CUdeviceptr dw = gpu_dup(g, wf, 4 * (size_t)nw), dx = gpu_dup(g, hx, 2 * (size_t)nx),
              ddy = gpu_dup(g, hy, 2 * (size_t)ny), out = gpu_alloc(g, 2 * (size_t)ny),
              din = gpu_alloc(g, 2 * (size_t)nx);
  void *fa[] = {&out, &dx, &dw, &N, &E, &C}, *ba[] = {&din, &ddy, &dw, &N, &E, &C};
  gpu_launch(g, "router_linear_forward", (unsigned)((N + 63) / 64), (unsigned)((E + 63) / 64), 1,
             STEPC_ROUTER_THREADS, stepc_router_fwd_smem(), fa);
  gpu_launch(g, "router_linear_dgrad", (unsigned)((C + 63) / 64), (unsigned)((N + 63) / 64), 1,
             STEPC_ROUTER_THREADS, stepc_router_dgrad_smem(), ba);
  char name[96];
  for (long n = 0; n < N; n++)
    for (int e = 0; e < E; e++) {
      double s = 0;
      for (int c = 0; c < C; c++)
        s += x[n * C + c] * w[(long)e * C + c];
      want[n * E + e] = s;
    }
  double *got = down_bf16(g, out, ny);
  snprintf(name, sizeof name, "router_linear_forward N%d E%d C%d", N, E, C);
  gpu_check(g, name, got, want, ny, 4e-6, RT_BF16);
  free(got);
  for (long n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      double s = 0;
      for (int e = 0; e < E; e++)
        s += dy[n * E + e] * w[(long)e * C + c];
      want[n * C + c] = s;
    }
  got = down_bf16(g, din, nx);
  snprintf(name, sizeof name, "router_linear_dgrad N%d E%d C%d", N, E, C);
  gpu_check(g, name, got, want, nx, 4e-6, RT_BF16);
  free(got), free(w), free(x), free(dy), free(want), free(wf), free(hx), free(hy);
  gpu_free(g, dw), gpu_free(g, dx), gpu_free(g, ddy), gpu_free(g, out), gpu_free(g, din);
}

static void test_router_linear(Gpu *g, Rng *r) {
  test_router_linear_case(g, r, 200, 72, 256);
  test_router_linear_case(g, r, 130, 64, 99);
}

/* moe_dispatch (kernels/moe.cuh) against the dispatch it implements (ir/ops/moe_dispatch.c): an
 * expert's rows in assignment order, after the experts before it (or at e cap with a capacity,
 * the assignments past it dropped), assignments outside the local expert range -1; row_of, seg
 * and tokens per expert exact. Nemotron's routing (8192 tokens x 6 of 128 experts), a capacity with
 * padding, and a local range (the allgather dispatcher's EP rank 1 of 4). */
static void test_moe_dispatch_case(Gpu *g, Rng *r, long n, int E, int cap, int pad, int ep_rank, int all) {
  int *idx = malloc(sizeof *idx * n), *want = malloc(sizeof *want * n), cnt[1024] = {0}, off[1024];
  int first = ep_rank >= 0 ? ep_rank * E : 0;
  for (long a = 0; a < n; a++) { /* skewed: half the assignments to the first eighth of the experts */
    double u = 0.5 * (rng_uniform(r) + 1);
    int e = u < 0.5 ? (int)(2 * u * (all / 8)) : (int)((2 * u - 1) * all);
    idx[a] = e < all ? e : all - 1;
  }
  for (long a = 0; a < n; a++)
    if (idx[a] - first >= 0 && idx[a] - first < E) cnt[idx[a] - first]++;
  for (int e = 0, o = 0; e < E; e++)
    off[e] = cap ? e * cap : o, o += cnt[e];
  int seen[1024] = {0}, *wseg = malloc(sizeof *wseg * 2 * E);
  for (long a = 0; a < n; a++) {
    int x = idx[a] - first;
    if (x < 0 || x >= E) {
      want[a] = -1;
      continue;
    }
    int k = seen[x]++;
    want[a] = !cap || k < cap ? off[x] + k : -1;
  }
  for (int e = 0; e < E; e++)
    wseg[2 * e] = off[e], wseg[2 * e + 1] = !cap ? cnt[e] : pad ? cap : (cnt[e] < cap ? cnt[e] : cap);
  CUdeviceptr di = gpu_dup(g, idx, sizeof *idx * n), ro = gpu_alloc(g, sizeof(int) * n),
              sg = gpu_alloc(g, sizeof(int) * 2 * E), tp = gpu_alloc(g, sizeof(int) * E), rk = 0;
  int slot[2] = {0, ep_rank}; /* the device's rank slots {TP, EP}: the kernel reads EP's (op_moe.c x->rank + 4) */
  if (ep_rank >= 0) rk = gpu_dup(g, slot, sizeof slot) + sizeof(int);
  void *a[] = {&ro, &sg, &tp, &di, &n, &E, &cap, &pad, &rk};
  gpu_launch(g, "moe_dispatch", 1, 1, 1, 1024, (unsigned)(34 * 4 * E), a);
  int *got = down_raw(g, ro, sizeof(int) * n), *gseg = down_raw(g, sg, sizeof(int) * 2 * E),
      *gtp = down_raw(g, tp, sizeof(int) * E);
  char name[96];
  snprintf(name, sizeof name, "moe_dispatch n%ld E%d cap%d pad%d rank%d (exact)", n, E, cap, pad, ep_rank);
  gpu_check_true(g, name,
                 !memcmp(got, want, sizeof *want * n) && !memcmp(gseg, wseg, sizeof *wseg * 2 * E) &&
                     !memcmp(gtp, cnt, sizeof *cnt * E),
                 NULL);
  free(got), free(gseg), free(gtp), free(idx), free(want), free(wseg);
  gpu_free(g, di), gpu_free(g, ro), gpu_free(g, sg), gpu_free(g, tp);
  if (rk) gpu_free(g, rk - sizeof(int));
}

static void test_moe_dispatch(Gpu *g, Rng *r) {
  test_moe_dispatch_case(g, r, 8192L * 6, 128, 0, 0, -1, 128);
  test_moe_dispatch_case(g, r, 1000, 64, 20, 1, -1, 64);
  test_moe_dispatch_case(g, r, 1003, 40, 30, 0, -1, 40);
  test_moe_dispatch_case(g, r, 777, 16, 0, 0, 1, 64);
}

/* HEAD_SPLIT / HEAD_CONCAT (kernels/moe.cuh mla_head_split / _concat) exact against the layout of
 * ir/ops/mla.c: joined (ntok, H, a+b) <-> p1 (ntok, H, a), p2 (ntok, H2, b). Mamba's in_proj split
 * (H 1, 16-byte copies), MLA's per-head parts (H 4, a 24, b 16: the 16-byte path too), a shared
 * part (H2 1: split sums it over the heads, concat broadcasts it) and widths off 8 (one element a
 * thread), and a concat without p2 (zeros). */
static void test_head_split_case(Gpu *g, Rng *r, long ntok, int H, int a, int b, int H2, int with_p2) {
  int w = a + b;
  long nj = ntok * H * w, n1 = ntok * H * a, n2 = ntok * H2 * b;
  double *j, *q1, *q2;
  CUdeviceptr dj = up_bf16(g, r, nj, 1, &j), d1 = up_bf16(g, r, n1, 1, &q1), d2 = up_bf16(g, r, n2, 1, &q2);
  CUdeviceptr s1 = gpu_alloc(g, 2 * n1), s2 = gpu_alloc(g, 2 * n2), cj = gpu_alloc(g, 2 * nj),
              p2 = with_p2 ? d2 : 0;
  double *w1 = malloc(sizeof *w1 * n1), *w2 = malloc(sizeof *w2 * n2), *wj = malloc(sizeof *wj * nj);
  for (long t = 0; t < ntok; t++)
    for (int h = 0; h < H; h++)
      for (int c = 0; c < w; c++) {
        long ij = (t * H + h) * w + c;
        if (c < a)
          w1[(t * H + h) * a + c] = j[ij], wj[ij] = q1[(t * H + h) * a + c];
        else
          wj[ij] = with_p2 ? q2[(t * H2 + (H2 == H ? h : 0)) * b + c - a] : 0;
      }
  for (long t = 0; t < ntok; t++)
    for (int h2 = 0; h2 < H2; h2++)
      for (int c = 0; c < b; c++) {
        double v = 0;
        if (H2 == H)
          v = j[(t * H + h2) * w + a + c];
        else {
          float f = 0; /* the kernel's fp32 sum in head order */
          for (int h = 0; h < H; h++)
            f += (float)j[(t * H + h) * w + a + c];
          v = f;
        }
        w2[(t * H2 + h2) * b + c] = v;
      }
  if (H2 != H) round_bf16(w2, n2);
  void *sa[] = {&s1, &s2, &dj, &ntok, &H, &a, &b, &H2}, *ca[] = {&cj, &d1, &p2, &ntok, &H, &a, &b, &H2};
  gpu_launch(g, "mla_head_split", gpu_grid1d(g, nj), 1, 1, 256, 0, sa);
  gpu_launch(g, "mla_head_concat", gpu_grid1d(g, nj), 1, 1, 256, 0, ca);
  double *g1 = down_bf16(g, s1, n1), *g2 = down_bf16(g, s2, n2), *gj = down_bf16(g, cj, nj);
  char name[96];
  snprintf(name, sizeof name, "mla_head_split H%d a%d b%d H2 %d (exact)", H, a, b, H2);
  gpu_check_true(g, name, !memcmp(g1, w1, sizeof *w1 * n1) && !memcmp(g2, w2, sizeof *w2 * n2), NULL);
  snprintf(name, sizeof name, "mla_head_concat H%d a%d b%d H2 %d%s (exact)", H, a, b, H2,
           with_p2 ? "" : " no p2");
  gpu_check(g, name, gj, wj, nj, 0, 0);
  free(j), free(q1), free(q2), free(w1), free(w2), free(wj), free(g1), free(g2), free(gj);
  gpu_free(g, dj), gpu_free(g, d1), gpu_free(g, d2), gpu_free(g, s1), gpu_free(g, s2), gpu_free(g, cj);
}

static void test_head_split(Gpu *g, Rng *r) {
  test_head_split_case(g, r, 300, 1, 4096, 6208, 1, 1);
  test_head_split_case(g, r, 77, 4, 24, 16, 4, 1);
  test_head_split_case(g, r, 77, 4, 24, 16, 4, 0);
  test_head_split_case(g, r, 50, 3, 20, 12, 1, 1);
  test_head_split_case(g, r, 50, 3, 13, 7, 3, 1);
}

/* global_norm_finalize over count partials; the norm's bits, checked against `first` (the previous
 * repetition's, freed) when there is one. */
static void *finalize_norm(Gpu *g, const char *what, CUdeviceptr norm, CUdeviceptr scale, CUdeviceptr partial, int count,
                           float max_norm, void *first) {
  void *b[] = {&norm, &scale, &partial, &count, &max_norm};
  gpu_launch(g, "global_norm_finalize", 1, 1, 1, 1024, 0, b);
  void *now = down_raw(g, norm, 4);
  if (first) gpu_check_bitwise(g, what, first, now, 4);
  free(first);
  return now;
}

static void test_optimizer(Gpu *g, Rng *r) {
  long n = 10003; /* adamw_update's four-wide body and its one-by-one tail */
  double *w = malloc(sizeof *w * n), *m = calloc(n, sizeof *m), *v = calloc(n, sizeof *v),
         *gr = malloc(sizeof *gr * n);
  for (long i = 0; i < n; i++) w[i] = (float)rng_uniform(r);
  CUdeviceptr dw = up_f32(g, w, n), dm = gpu_alloc(g, 4 * n), dv = gpu_alloc(g, 4 * n), dp = gpu_alloc(g, 2 * n);
  CUdeviceptr dg = gpu_alloc(g, 4 * n), dhp = gpu_alloc(g, 4 * 7);
  float gs = 0.5f, wd_mult = 1.0f, lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  CUdeviceptr dgs = gpu_dup(g, &gs, 4);
  for (int step = 1; step <= 3; step++) {
    for (long i = 0; i < n; i++) gr[i] = (float)(0.1 * rng_uniform(r));
    float *gf = malloc(4 * (size_t)n);
    for (long i = 0; i < n; i++) gf[i] = (float)gr[i];
    gpu_put(g, dg, gf, 4 * n);
    free(gf);
    float hp[7] = {lr, b1, b2, eps, wd, 1 - powf(b1, (float)step), 1 - powf(b2, (float)step)};
    gpu_put(g, dhp, hp, sizeof hp);
    CUdeviceptr none = 0; /* no fused fp8 amax (test_adamw_amax) */
    void *a[] = {&dw, &dp, &dg, &dm, &dv, &n, &dhp, &dgs, &wd_mult, &none, &none};
    gpu_launch(g, "adamw_update", gpu_grid1d(g, n), 1, 1, 256, 0, a);
    /* ADAMW's reference on (master w, m, v), in place; inputs grad, clip coefficient, lr, step */
    double coef = gs, lrd = lr;
    int st = step;
    OpAttrs aa = {.f = {b1, b2, eps, wd}};
    RefT ain[4] = {ref_f(gr, n, 0, 0, 0), ref_f(&coef, 1, 0, 0, 0), ref_f(&lrd, 1, 0, 0, 0), ref_i(&st, 1, 0, 0, 0)};
    ref_op(OP_ADAMW, &aa, ain, 4, (RefT[]){ref_f(w, n, 0, 0, 0), ref_f(m, n, 0, 0, 0), ref_f(v, n, 0, 0, 0)}, 3, 1);
  }
  double *gw = down_f32(g, dw, n), *gm = down_f32(g, dm, n), *gv = down_f32(g, dv, n), *gp = down_bf16(g, dp, n);
  /* update magnitude ~lr: fp32 arithmetic on w ~ 1 is exact to ~1e-7 */
  gpu_check(g, "adamw master weights (3 steps)", gw, w, n, 2e-7, 1e-6);
  gpu_check(g, "adamw m", gm, m, n, 1e-9, 1e-5);
  gpu_check(g, "adamw v", gv, v, n, 1e-12, 1e-5);
  round_bf16(gw, n);
  gpu_check(g, "adamw bf16 copy = bf16(master) (exact)", gp, gw, n, 0, 0);
  free(w), free(m), free(v), free(gr), free(gw), free(gm), free(gv), free(gp);
  CUdeviceptr bufs[] = {dw, dm, dv, dp, dg, dhp, dgs};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) gpu_free(g, bufs[i]);

  /* Global norm over three tensors, two-stage, then its clip factor. */
  long sizes[3] = {1000, 50000, 7};
  int G = 64, count = 3 * G;
  float max_norm = 1.0f;
  CUdeviceptr partial = gpu_alloc(g, 4 * (size_t)count), norm = gpu_alloc(g, 4), scale = gpu_alloc(g, 4);
  CUdeviceptr t[3];
  double ss = 0;
  for (int k = 0; k < 3; k++) {
    double *d = malloc(sizeof *d * sizes[k]);
    for (long i = 0; i < sizes[k]; i++) d[i] = (float)(0.01 * rng_uniform(r)), ss += d[i] * d[i];
    t[k] = up_f32(g, d, sizes[k]);
    free(d);
  }
  void *first = NULL;
  for (int rep = 0; rep < 2; rep++) {
    for (int k = 0; k < 3; k++) {
      CUdeviceptr slot = partial + 4 * (size_t)k * G;
      void *a[] = {&slot, &t[k], &sizes[k]};
      gpu_launch(g, "norm_squared_partial", (unsigned)G, 1, 1, 256, 0, a);
    }
    first = finalize_norm(g, "global norm deterministic", norm, scale, partial, count, max_norm, first);
  }
  free(first);
  double want_norm = sqrt(ss), want_scale = fmin(1.0, max_norm / (want_norm + 1e-6));
  double *gn = down_f32(g, norm, 1), *gsc = down_f32(g, scale, 1);
  gpu_check(g, "global norm", gn, &want_norm, 1, 0, 1e-5);
  gpu_check(g, "global norm clip scale", gsc, &want_scale, 1, 0, 1e-5);
  free(gn), free(gsc);
  gpu_free(g, partial), gpu_free(g, norm), gpu_free(g, scale);
  for (int k = 0; k < 3; k++) gpu_free(g, t[k]);
}

/* AdamW of an fp32 parameter (model.fp8_param's master: param null) with the fused fp8 amax: over
 * 3 steps the master, m and v are bitwise those of the launch without it, and the slot holds the
 * bits of the host's max|master| with its ticket back at 0 (what the step's cast of the master then
 * reads instead of its amax pass; tests/gpu/fp8.c checks that cast against the two-pass one). A
 * tensor larger than the grid's threads, and a NaN-free negative largest element. */
static void test_adamw_amax(Gpu *g, Rng *r) {
  long n = 300000;
  float *w = malloc(4 * (size_t)n), *gr = malloc(4 * (size_t)n), *host = malloc(4 * (size_t)n);
  for (long i = 0; i < n; i++) w[i] = (float)(2 * rng_uniform(r) - 1), gr[i] = (float)(0.1 * rng_uniform(r));
  w[n / 3] = -3.5f;
  CUdeviceptr st[2][3], dg = gpu_dup(g, gr, 4 * (size_t)n), dhp = gpu_alloc(g, 4 * 7),
                        part = gpu_alloc(g, 4 * 4096), slot = gpu_alloc(g, 8), none = 0;
  for (int c = 0; c < 2; c++) {
    st[c][0] = gpu_dup(g, w, 4 * (size_t)n), st[c][1] = gpu_alloc(g, 4 * (size_t)n), st[c][2] = gpu_alloc(g, 4 * (size_t)n);
    gpu_memset(g, st[c][1], 0, 4 * (size_t)n), gpu_memset(g, st[c][2], 0, 4 * (size_t)n);
  }
  gpu_memset(g, slot, 0, 8);
  float wd_mult = 1.0f, b1 = 0.9f, b2 = 0.95f;
  unsigned grid = gpu_grid1d(g, n);
  char name[128];
  for (int step = 1; step <= 3; step++) {
    float hp[7] = {1e-2f, b1, b2, 1e-8f, 0.1f, 1 - powf(b1, (float)step), 1 - powf(b2, (float)step)};
    gpu_put(g, dhp, hp, sizeof hp);
    for (int c = 0; c < 2; c++) {
      CUdeviceptr *ap = c ? &part : &none, *am = c ? &slot : &none;
      void *a[] = {&st[c][0], &none, &dg, &st[c][1], &st[c][2], &n, &dhp, &none, &wd_mult, ap, am};
      gpu_launch(g, "adamw_update", grid, 1, 1, 256, 0, a);
    }
    gpu_sync(g);
    gpu_get(g, host, st[1][0], 4 * (size_t)n);
    float mx = 0;
    for (long i = 0; i < n; i++) mx = fmaxf(mx, fabsf(host[i]));
    uint32_t want[2] = {0, 0}, got[2];
    memcpy(&want[0], &mx, 4);
    gpu_get(g, got, slot, 8);
    snprintf(name, sizeof name, "adamw_update fused amax of the fp32 master, step %d: max|w| and ticket", step);
    gpu_check_bitwise(g, name, got, want, 8);
  }
  static const char *const what[3] = {"master", "m", "v"};
  for (int j = 0; j < 3; j++) {
    void *a = down_raw(g, st[0][j], 4 * (size_t)n), *b = down_raw(g, st[1][j], 4 * (size_t)n);
    snprintf(name, sizeof name, "adamw_update with the fused amax = without (3 steps): %s", what[j]);
    gpu_check_bitwise(g, name, a, b, 4 * (size_t)n);
    free(a), free(b);
  }
  for (int c = 0; c < 2; c++)
    for (int j = 0; j < 3; j++) gpu_free(g, st[c][j]);
  gpu_free(g, dg), gpu_free(g, dhp), gpu_free(g, part), gpu_free(g, slot);
  free(w), free(gr), free(host);
}

/* The multi-tensor kernels (the compiler's FUSE_SUMSQ_MULTI / FUSE_ADAMW_MULTI groups) against
 * the per-tensor ones: tensors of several chunks, of exactly one, of a few elements; adamw_multi
 * bitwise equal to adamw_update per tensor over 3 steps (master, bf16 param, m, v);
 * norm_squared_multi over fp32 and bf16 rows against the double sum, bitwise the same twice. */
#define MT_N 4
static void test_optimizer_multi(Gpu *g, Rng *r) {
  static const long sizes[MT_N] = {3 * STEPC_ADAMW_CHUNK + 4465, STEPC_ADAMW_CHUNK, 7, 40000};
  static const float wdm[MT_N] = {1.0f, 0.0f, 1.0f, 0.5f};
  CUdeviceptr buf[2][MT_N][5], grad[MT_N]; /* [per-tensor, multi][tensor][master, param, m, v, -] */
  long total = 0;
  for (int k = 0; k < MT_N; k++) {
    long n = sizes[k];
    float *w = malloc(4 * (size_t)n), *gr = malloc(4 * (size_t)n);
    for (long i = 0; i < n; i++) w[i] = (float)rng_uniform(r), gr[i] = (float)(0.1 * rng_uniform(r));
    grad[k] = gpu_dup(g, gr, 4 * (size_t)n);
    for (int s = 0; s < 2; s++) {
      buf[s][k][0] = gpu_dup(g, w, 4 * (size_t)n);
      buf[s][k][1] = gpu_alloc(g, 2 * (size_t)n);
      float *z = calloc((size_t)n, 4);
      buf[s][k][2] = gpu_dup(g, z, 4 * (size_t)n), buf[s][k][3] = gpu_dup(g, z, 4 * (size_t)n);
      free(z);
    }
    free(w), free(gr);
  }
  unsigned long long rows[MT_N * STEPC_ADAMW_ROW];
  for (int k = 0; k < MT_N; k++) {
    unsigned long long *q = rows + k * STEPC_ADAMW_ROW;
    uint32_t bits;
    memcpy(&bits, &wdm[k], 4);
    q[0] = buf[1][k][0], q[1] = buf[1][k][1], q[2] = grad[k], q[3] = buf[1][k][2], q[4] = buf[1][k][3];
    q[5] = (unsigned long long)sizes[k], q[6] = (unsigned long long)total, q[7] = bits;
    total += (sizes[k] + STEPC_ADAMW_CHUNK - 1) / STEPC_ADAMW_CHUNK;
  }
  CUdeviceptr table = gpu_dup(g, rows, sizeof rows), dhp = gpu_alloc(g, 4 * 7);
  float gs = 0.75f, b1 = 0.9f, b2 = 0.95f;
  CUdeviceptr dgs = gpu_dup(g, &gs, 4);
  int nrows = MT_N;
  long chunk = STEPC_ADAMW_CHUNK;
  for (int step = 1; step <= 3; step++) {
    float hp[7] = {1e-3f, b1, b2, 1e-8f, 0.1f, 1 - powf(b1, (float)step), 1 - powf(b2, (float)step)};
    gpu_put(g, dhp, hp, sizeof hp);
    for (int k = 0; k < MT_N; k++) {
      long n = sizes[k];
      float wm = wdm[k];
      CUdeviceptr none = 0;
      void *a[] = {&buf[0][k][0], &buf[0][k][1], &grad[k], &buf[0][k][2], &buf[0][k][3], &n, &dhp, &dgs, &wm,
                   &none, &none};
      gpu_launch(g, "adamw_update", gpu_grid1d(g, n), 1, 1, 256, 0, a);
    }
    void *a[] = {&table, &nrows, &chunk, &dhp, &dgs};
    gpu_launch(g, "adamw_multi", (unsigned)total, 1, 1, STEPC_MULTI_THREADS, 0, a);
  }
  static const char *const what[4] = {"master", "bf16 param", "m", "v"};
  for (int k = 0; k < MT_N; k++)
    for (int j = 0; j < 4; j++) {
      size_t bytes = (size_t)sizes[k] * (j == 1 ? 2 : 4);
      void *a = down_raw(g, buf[0][k][j], bytes), *b = down_raw(g, buf[1][k][j], bytes);
      char name[96];
      snprintf(name, sizeof name, "adamw_multi = adamw_update per tensor: tensor %d (n %ld) %s", k, sizes[k], what[j]);
      gpu_check_bitwise(g, name, a, b, bytes);
      free(a), free(b);
    }
  gpu_free(g, table), gpu_free(g, dhp), gpu_free(g, dgs);

  /* the norm over the grads (fp32) and one bf16 tensor */
  long nb = 2 * STEPC_SUMSQ_CHUNK + 3;
  double *bd;
  CUdeviceptr bt = up_bf16(g, r, nb, 0.01, &bd);
  unsigned long long srow[(MT_N + 1) * STEPC_SUMSQ_ROW];
  long stotal = 0;
  double ss = 0;
  for (int k = 0; k <= MT_N; k++) {
    long n = k < MT_N ? sizes[k] : nb;
    unsigned long long *q = srow + k * STEPC_SUMSQ_ROW;
    q[0] = k < MT_N ? grad[k] : bt, q[1] = (unsigned long long)n, q[2] = (unsigned long long)stotal;
    q[3] = k < MT_N ? STEPC_MULTI_F32 : STEPC_MULTI_BF16;
    stotal += (n + STEPC_SUMSQ_CHUNK - 1) / STEPC_SUMSQ_CHUNK;
    double *d = k < MT_N ? down_f32(g, grad[k], n) : NULL;
    for (long i = 0; i < n; i++) ss += k < MT_N ? d[i] * d[i] : bd[i] * bd[i];
    free(d);
  }
  CUdeviceptr stable = gpu_dup(g, srow, sizeof srow), partial = gpu_alloc(g, 4 * (size_t)stotal);
  CUdeviceptr norm = gpu_alloc(g, 4), scale = gpu_alloc(g, 4);
  int srows = MT_N + 1, count = (int)stotal;
  long schunk = STEPC_SUMSQ_CHUNK;
  float max_norm = 1.0f;
  void *first = NULL;
  for (int rep = 0; rep < 2; rep++) {
    void *a[] = {&partial, &stable, &srows, &schunk};
    gpu_launch(g, "norm_squared_multi", (unsigned)stotal, 1, 1, STEPC_MULTI_THREADS, 0, a);
    first = finalize_norm(g, "norm_squared_multi + finalize deterministic", norm, scale, partial, count, max_norm, first);
  }
  free(first);
  double want = sqrt(ss), *gn = down_f32(g, norm, 1);
  gpu_check(g, "norm_squared_multi global norm (fp32 and bf16 rows)", gn, &want, 1, 0, 1e-5);
  free(gn), free(bd);
  gpu_free(g, stable), gpu_free(g, partial), gpu_free(g, norm), gpu_free(g, scale), gpu_free(g, bt);
  for (int k = 0; k < MT_N; k++) {
    gpu_free(g, grad[k]);
    for (int s = 0; s < 2; s++)
      for (int j = 0; j < 4; j++) gpu_free(g, buf[s][k][j]);
  }
}

/* The MoE grouped GEMMs on the tensor cores (kernels/moe.cuh, *_tc) against fp64: uneven experts
 * (empty, one row, tile edges), widths whose last k step and last column tile are partial, more k
 * steps than pipeline stages; the weight gradient as bf16 and added into an fp32 main gradient.
 * Then their speed at the Moonlight shape (64 experts, 24576 routed rows, d 2048, expert ffn 1408,
 * SwiGLU fc1 2816 wide), with a bitwise run-to-run check. */
/* GROUPED_LINEAR (mode 0), its DGRAD (1) and WGRAD (2) by the ops' references: out = y (N, Nout),
 * dx (N, K) or dW (E, Nout, K) from a = x or dy and b = W or x. */
static void grouped_ref(int mode, double *out, const double *a, const double *b, const int *seg, int E, int N, int Nout,
                        int K) {
  static const OpKind kind[3] = {OP_GROUPED_LINEAR, OP_GROUPED_LINEAR_DGRAD, OP_GROUPED_LINEAR_WGRAD};
  RefT in[3] = {ref_f(a, N, mode ? Nout : K, 0, 0), mode == 2 ? ref_f(b, N, K, 0, 0) : ref_f(b, E, Nout, K, 0),
                ref_i(seg, E, 2, 0, 0)};
  RefT o = mode == 0 ? ref_f(out, N, Nout, 0, 0) : mode == 1 ? ref_f(out, N, K, 0, 0) : ref_f(out, E, Nout, K, 0);
  ref_op(kind[mode], NULL, in, 3, &o, 1, 0);
}

typedef struct {
  CUdeviceptr y, x, w, dy, dx, dw, seg;
  CUdeviceptr acc;  /* mode 3: the fp32 main gradient the wgrad adds into (store 0) or stores into (1) */
  CUdeviceptr norm; /* mode 3: the tiles' sums of squares (the wgrad-norm fusion), or 0 */
  int N, Nout, K, E, mode, store;
  int ws; /* by the warp-specialised kernels (*_ws), through the tensor maps below */
  CUdeviceptr fwd_a, fwd_b, dgrad_a, dgrad_b, wgrad_dy, wgrad_x;
} GroupedRun;

/* The *_ws kernels' tensor maps (kernels/moe.cuh): x and dy in boxes of 64 x 128 rows, W in 64 x 256 x 1
 * (forward) and 64 x 64 x 1 (dgrad); dy and x in 64 x 64 (wgrad). */
static void grouped_maps(Gpu *g, GroupedRun *q) {
  uint64_t x[2] = {(uint64_t)q->K, (uint64_t)q->N}, dy[2] = {(uint64_t)q->Nout, (uint64_t)q->N},
           w[3] = {(uint64_t)q->K, (uint64_t)q->Nout, (uint64_t)q->E};
  q->fwd_a = gpu_tmap(g, q->x, 2, 2, x, (const uint32_t[]){64, 128});
  q->fwd_b = gpu_tmap(g, q->w, 2, 3, w, (const uint32_t[]){64, 256, 1});
  q->dgrad_a = gpu_tmap(g, q->dy, 2, 2, dy, (const uint32_t[]){64, 128});
  q->dgrad_b = gpu_tmap(g, q->w, 2, 3, w, (const uint32_t[]){64, 64, 1});
  q->wgrad_dy = gpu_tmap(g, q->dy, 2, 2, dy, (const uint32_t[]){64, 64});
  q->wgrad_x = gpu_tmap(g, q->x, 2, 2, x, (const uint32_t[]){64, 64});
}
static void grouped_maps_free(Gpu *g, GroupedRun *q) {
  gpu_free(g, q->fwd_a), gpu_free(g, q->fwd_b), gpu_free(g, q->dgrad_a), gpu_free(g, q->dgrad_b);
  gpu_free(g, q->wgrad_dy), gpu_free(g, q->wgrad_x);
}

static void grouped_launch(Gpu *g, void *ctx) {
  GroupedRun *q = ctx;
  unsigned rows = (unsigned)((q->N + STEPC_MOE_TC_BM - 1) / STEPC_MOE_TC_BM + q->E), smem = stepc_moe_tc_smem();
  CUdeviceptr none = 0;
  if (q->ws && q->mode < 2) {
    int f = q->mode == 0, row_tiles = (int)rows;
    void *a[] = {f ? &q->y : &q->dx, f ? &q->fwd_a : &q->dgrad_a, f ? &q->fwd_b : &q->dgrad_b, &q->seg, &q->Nout, &q->K, &q->E,
                 &row_tiles};
    /* persistent: as many blocks as SMs (on the CPU, 3: a block takes several tiles) */
    gpu_launch(g, f ? "grouped_linear_forward_ws" : "grouped_linear_dgrad_ws",
               stepc_moe_ws_grid(g->emulated ? 3 : g->sm_count, f ? q->Nout : q->K, row_tiles), 1, 1, STEPC_MOE_WS_THREADS,
               stepc_moe_ws_smem(), a);
  } else if (q->ws) {
    CUdeviceptr *dw = q->mode == 3 ? &none : &q->dw, *acc = q->mode == 3 ? &q->acc : &none;
    CUdeviceptr *norm = q->mode == 3 ? &q->norm : &none;
    void *a[] = {dw, acc, &q->wgrad_dy, &q->wgrad_x, &q->seg, &q->Nout, &q->K, &q->E, &q->store, norm};
    gpu_launch(g, "grouped_linear_wgrad_ws",
               stepc_moe_ws_grid(g->emulated ? 3 : g->sm_count, q->K,
                                 (long)(q->Nout + STEPC_MOE_TC_BM - 1) / STEPC_MOE_TC_BM * q->E),
               1, 1, STEPC_MOE_WS_THREADS, stepc_moe_ws_smem(), a);
  } else if (q->mode == 0) {
    void *a[] = {&q->y, &q->x, &q->w, &q->seg, &q->Nout, &q->K, &q->E};
    gpu_launch(g, "grouped_linear_forward_tc", (unsigned)((q->Nout + STEPC_MOE_TC_BN - 1) / STEPC_MOE_TC_BN), rows, 1,
               STEPC_MOE_TC_THREADS, smem, a);
  } else if (q->mode == 1) {
    void *a[] = {&q->dx, &q->dy, &q->w, &q->seg, &q->Nout, &q->K, &q->E};
    gpu_launch(g, "grouped_linear_dgrad_tc", (unsigned)((q->K + STEPC_MOE_TC_BN - 1) / STEPC_MOE_TC_BN), rows, 1,
               STEPC_MOE_TC_THREADS, smem, a);
  } else {
    CUdeviceptr *dw = q->mode == 3 ? &none : &q->dw, *acc = q->mode == 3 ? &q->acc : &none;
    CUdeviceptr *norm = q->mode == 3 ? &q->norm : &none;
    void *a[] = {dw, acc, &q->dy, &q->x, &q->seg, &q->Nout, &q->K, &q->store, norm};
    gpu_launch(g, "grouped_linear_wgrad_tc", (unsigned)((q->K + STEPC_MOE_TC_BN - 1) / STEPC_MOE_TC_BN),
               (unsigned)((q->Nout + STEPC_MOE_TC_BM - 1) / STEPC_MOE_TC_BM), (unsigned)q->E, STEPC_MOE_TC_THREADS, smem, a);
  }
}

static void test_grouped_gemm(Gpu *g, Rng *r) {
  enum { E = 8 };
  int counts[E] = {0, 1, 127, 128, 129, 300, 513, 37}, seg[2 * E], N = 0, Nout = 776, K = 520;
  for (int e = 0; e < E; e++) seg[2 * e] = N, seg[2 * e + 1] = counts[e], N += counts[e];
  double *x, *w, *dy, *acc0;
  GroupedRun q = {.N = N, .Nout = Nout, .K = K, .E = E};
  q.x = up_bf16(g, r, (long)N * K, 1, &x), q.w = up_bf16(g, r, (long)E * Nout * K, 1, &w);
  q.dy = up_bf16(g, r, (long)N * Nout, 1, &dy), q.seg = gpu_dup(g, seg, sizeof seg);
  q.y = gpu_alloc(g, 2 * (size_t)N * Nout), q.dx = gpu_alloc(g, 2 * (size_t)N * K), q.dw = gpu_alloc(g, 2 * (size_t)E * Nout * K);
  grouped_maps(g, &q);
  long nw = (long)E * Nout * K, most = nw > (long)N * Nout ? nw : (long)N * Nout;
  double *want = calloc((size_t)(most > (long)N * K ? most : (long)N * K), sizeof *want);
  static const char *name[] = {"grouped_linear_forward_tc (8 uneven experts, K 520, 776 wide)",
                               "grouped_linear_dgrad_tc (8 uneven experts, 520 wide)", "grouped_linear_wgrad_tc (bf16 dW)"};
  for (int mode = 0; mode < 3; mode++) {
    q.mode = mode;
    grouped_launch(g, &q);
    long n = mode == 0 ? (long)N * Nout : mode == 1 ? (long)N * K : nw;
    grouped_ref(mode, want, mode == 0 ? x : dy, mode == 2 ? x : w, seg, E, N, Nout, K);
    double *got = down_bf16(g, mode == 0 ? q.y : mode == 1 ? q.dx : q.dw, n);
    gpu_check(g, name[mode], got, want, n, 1e-2, RT_BF16);
    { /* the warp-specialised kernel: the same products in the same order, so the same bits */
      static const char *wsname[] = {"grouped_linear_forward_ws (TMA, warp-specialised) = grouped_linear_forward_tc",
                                     "grouped_linear_dgrad_ws (TMA, warp-specialised) = grouped_linear_dgrad_tc",
                                     "grouped_linear_wgrad_ws (TMA, warp-specialised; bf16 dW) = grouped_linear_wgrad_tc"};
      q.ws = 1;
      grouped_launch(g, &q);
      q.ws = 0;
      double *ws = down_bf16(g, mode == 0 ? q.y : mode == 1 ? q.dx : q.dw, n);
      gpu_check_bitwise(g, wsname[mode], ws, got, sizeof *got * (size_t)n);
      free(ws);
    }
    free(got);
  }
  /* the weight gradient added into an fp32 main gradient that already holds values */
  uint16_t *h = malloc(2 * (size_t)nw);
  acc0 = malloc(sizeof *acc0 * (size_t)nw);
  rand_bf16(r, h, acc0, nw, 4);
  free(h);
  CUdeviceptr acc = up_f32(g, acc0, nw);
  CUdeviceptr none = 0;
  int add = 0;
  void *a[] = {&none, &acc, &q.dy, &q.x, &q.seg, &Nout, &K, &add, &none};
  int eE = E;
  gpu_launch(g, "grouped_linear_wgrad_tc", (unsigned)((K + STEPC_MOE_TC_BN - 1) / STEPC_MOE_TC_BN),
             (unsigned)((Nout + STEPC_MOE_TC_BM - 1) / STEPC_MOE_TC_BM), (unsigned)eE, STEPC_MOE_TC_THREADS, stepc_moe_tc_smem(), a);
  grouped_ref(2, want, dy, x, seg, E, N, Nout, K);
  for (long i = 0; i < nw; i++) want[i] += acc0[i];
  double *got = down_f32(g, acc, nw);
  gpu_check(g, "grouped_linear_wgrad_tc (added into fp32)", got, want, nw, 1e-3, 1e-5);
  { /* the warp-specialised one adds the same bits */
    void *tc = down_raw(g, acc, 4 * (size_t)nw);
    float *a0 = malloc(4 * (size_t)nw);
    for (long i = 0; i < nw; i++) a0[i] = (float)acc0[i];
    gpu_put(g, acc, a0, 4 * (size_t)nw);
    GroupedRun qa = q;
    qa.mode = 3, qa.acc = acc, qa.store = 0, qa.norm = 0, qa.ws = 1;
    grouped_launch(g, &qa);
    void *wsr = down_raw(g, acc, 4 * (size_t)nw);
    gpu_check_bitwise(g, "grouped_linear_wgrad_ws (added into fp32) = grouped_linear_wgrad_tc", wsr, tc, 4 * (size_t)nw);
    free(tc), free(wsr), free(a0);
  }
  /* stored (the wgrad-store fusion): over whatever the gradient held, the bits of adding into zeros */
  float *z = calloc((size_t)nw, sizeof *z);
  gpu_put(g, acc, z, 4 * (size_t)nw);
  q.mode = 3, q.acc = acc, q.store = 0;
  grouped_launch(g, &q);
  void *added = down_raw(g, acc, 4 * (size_t)nw);
  for (long i = 0; i < nw; i++) z[i] = (float)(i % 7) - 3.0f; /* stale values, -0 among them */
  gpu_put(g, acc, z, 4 * (size_t)nw);
  q.store = 1;
  grouped_launch(g, &q);
  void *stored = down_raw(g, acc, 4 * (size_t)nw);
  gpu_check_bitwise(g, "grouped_linear_wgrad_tc stored = added into zeros", stored, added, 4 * (size_t)nw);
  /* the norm partials (the wgrad-norm fusion): the same gradient's bits, and one sum of squares per
   * output tile whose total is the gradient's, bitwise the same on a second run */
  long ntile = (long)((K + STEPC_MOE_TC_BN - 1) / STEPC_MOE_TC_BN) * ((Nout + STEPC_MOE_TC_BM - 1) / STEPC_MOE_TC_BM) * E;
  q.norm = gpu_alloc(g, 4 * (size_t)ntile);
  grouped_launch(g, &q);
  void *normed = down_raw(g, acc, 4 * (size_t)nw), *part1 = down_raw(g, q.norm, 4 * (size_t)ntile);
  gpu_check_bitwise(g, "grouped_linear_wgrad_tc stored with its norm partials = stored", normed, stored, 4 * (size_t)nw);
  grouped_launch(g, &q);
  void *part2 = down_raw(g, q.norm, 4 * (size_t)ntile);
  gpu_check_bitwise(g, "grouped_linear_wgrad_tc norm partials run to run", part1, part2, 4 * (size_t)ntile);
  double sq = 0.0, psum = 0.0;
  for (long i = 0; i < nw; i++) sq += (double)((float *)stored)[i] * ((float *)stored)[i];
  for (long i = 0; i < ntile; i++) psum += ((float *)part1)[i];
  gpu_check(g, "grouped_linear_wgrad_tc norm partials sum to the gradient's sum of squares", &psum, &sq, 1, 0, 1e-5);
  { /* the warp-specialised one: stored (over stale values) with its partials, the same gradient bits; its
     * partials (another order of the tile's sum) sum to the same sum of squares, bitwise run to run */
    for (long i = 0; i < nw; i++) z[i] = (float)(i % 5) - 2.0f;
    gpu_put(g, acc, z, 4 * (size_t)nw);
    gpu_memset(g, q.norm, 0xff, 4 * (size_t)ntile);
    q.ws = 1;
    grouped_launch(g, &q);
    void *wsg = down_raw(g, acc, 4 * (size_t)nw), *wp1 = down_raw(g, q.norm, 4 * (size_t)ntile);
    grouped_launch(g, &q);
    void *wp2 = down_raw(g, q.norm, 4 * (size_t)ntile);
    q.ws = 0;
    gpu_check_bitwise(g, "grouped_linear_wgrad_ws stored with norm partials = grouped_linear_wgrad_tc's", wsg, stored,
                      4 * (size_t)nw);
    gpu_check_bitwise(g, "grouped_linear_wgrad_ws norm partials run to run", wp1, wp2, 4 * (size_t)ntile);
    double wsum = 0.0;
    for (long i = 0; i < ntile; i++) wsum += ((float *)wp1)[i];
    gpu_check(g, "grouped_linear_wgrad_ws norm partials sum to the gradient's sum of squares", &wsum, &sq, 1, 0, 1e-5);
    free(wsg), free(wp1), free(wp2);
  }
  gpu_free(g, q.norm), q.norm = 0;
  free(normed), free(part1), free(part2);
  free(z), free(added), free(stored);
  free(got), free(acc0), free(x), free(w), free(dy), free(want);
  grouped_maps_free(g, &q);
  gpu_free(g, acc), gpu_free(g, q.x), gpu_free(g, q.w), gpu_free(g, q.dy), gpu_free(g, q.seg), gpu_free(g, q.y), gpu_free(g, q.dx),
      gpu_free(g, q.dw);

  /* speed at the Moonlight shape: routed rows split unevenly over 64 experts (1/2x..3/2x the mean);
   * not where the kernels are emulated (minutes of CPU for timings that mean nothing) */
  if (g->emulated) return;
  enum { EM = 64 };
  int sm[2 * EM], NM = 0;
  for (int e = 0; e < EM; e++) sm[2 * e] = NM, sm[2 * e + 1] = 384 + (int)(rng_uniform(r) * 192), NM += sm[2 * e + 1];
  static const int shapes[2][2] = {{2816, 2048}, {2048, 1408}}; /* fc1 (Nout, K), fc2 */
  for (int s = 0; s < 2; s++) {
    GroupedRun m = {.N = NM, .Nout = shapes[s][0], .K = shapes[s][1], .E = EM};
    double *hx, *hw, *hdy;
    m.x = up_bf16(g, r, (long)NM * m.K, 1, &hx), m.w = up_bf16(g, r, (long)EM * m.Nout * m.K, 1, &hw);
    m.dy = up_bf16(g, r, (long)NM * m.Nout, 1, &hdy), m.seg = gpu_dup(g, sm, sizeof sm);
    m.y = gpu_alloc(g, 2 * (size_t)NM * m.Nout), m.dx = gpu_alloc(g, 2 * (size_t)NM * m.K);
    m.dw = gpu_alloc(g, 2 * (size_t)EM * m.Nout * m.K);
    grouped_maps(g, &m);
    double flop = 2.0 * NM * m.Nout * m.K;
    m.acc = gpu_alloc(g, 4 * (size_t)EM * m.Nout * m.K);
    m.norm = gpu_alloc(g, 4 * (size_t)EM * ((m.Nout + STEPC_MOE_TC_BM - 1) / STEPC_MOE_TC_BM) *
                              ((m.K + STEPC_MOE_TC_BN - 1) / STEPC_MOE_TC_BN));
    CUdeviceptr norm = m.norm;
    static const char *what[] = {"forward", "dgrad", "wgrad", "wgrad added into fp32", "wgrad stored into fp32",
                                 "wgrad stored into fp32 + norm partials", "forward (TMA, warp-specialised)",
                                 "dgrad (TMA, warp-specialised)", "wgrad (TMA, warp-specialised)",
                                 "wgrad added into fp32 (TMA, warp-specialised)",
                                 "wgrad stored into fp32 + norm partials (TMA, warp-specialised)"};
    for (int mode = 0; mode < 11; mode++) {
      static const int kind[11] = {0, 1, 2, 3, 3, 3, 0, 1, 2, 3, 3};
      m.mode = kind[mode], m.store = mode == 4 || mode == 5 || mode == 10, m.norm = mode == 5 || mode == 10 ? norm : 0;
      m.ws = mode >= 6;
      double ms = gpu_time_ms(g, grouped_launch, &m, 3, 10);
      printf("INFO grouped %s %s: %d rows, %d x %d: %.3f ms, %.0f TFLOP/s\n", s ? "fc2" : "fc1", what[mode], NM,
             m.Nout, m.K, ms, flop / ms / 1e9);
    }
    m.store = 0, m.norm = 0, m.ws = 0;
    grouped_maps_free(g, &m);
    gpu_free(g, m.acc), gpu_free(g, norm);
    size_t bytes = 2 * (size_t)EM * m.Nout * m.K;
    void *first = down_raw(g, m.dw, bytes);
    m.mode = 2;
    grouped_launch(g, &m);
    void *again = down_raw(g, m.dw, bytes);
    gpu_check_bitwise(g, s ? "grouped_linear_wgrad_tc run to run (fc2 shape)" : "grouped_linear_wgrad_tc run to run (fc1 shape)",
                      first, again, bytes);
    free(first), free(again), free(hx), free(hw), free(hdy);
    gpu_free(g, m.x), gpu_free(g, m.w), gpu_free(g, m.dy), gpu_free(g, m.seg), gpu_free(g, m.y), gpu_free(g, m.dx), gpu_free(g, m.dw);
  }
}

/* Whether the device runs every kernel a group of tests launches; else one SKIP line. */
static int have(Gpu *g, const char *group, const char *const *kernels) {
  for (int i = 0; kernels[i]; i++)
    if (!gpu_has_kernel(g, kernels[i])) {
      printf("SKIP %s: this device has no %s\n", group, kernels[i]);
      return 0;
    }
  return 1;
}

void test_basic(Gpu *g) {
  static const char *const ce[] = {"cross_entropy_forward_backward", "loss_reduce", NULL};
  static const char *const ce_cluster[] = {"cross_entropy_cluster", NULL};
  Rng r = {0x5eed};
  test_embedding(g, &r);
  test_norms(g, &r, 300, 1024);
  test_norms(g, &r, 90, 4104);
  test_norms(g, &r, 5, 66560);
  test_norm_backward_fused(g, &r);
  test_rope(g, &r);
  test_rope_qkv(g, &r);
  test_softmax_transpose(g, &r);
  test_activations(g, &r);
  test_dropout(g, &r);
  test_elementwise(g, &r);
  if (have(g, "cross entropy", ce)) test_cross_entropy(g, &r);
  if (have(g, "cross entropy in clusters", ce_cluster)) test_cross_entropy_cluster(g, &r);
  test_optimizer(g, &r);
  test_adamw_amax(g, &r);
  test_optimizer_multi(g, &r);
  test_grouped_gemm(g, &r);
  test_router_linear(g, &r);
  test_moe_dispatch(g, &r);
  test_head_split(g, &r);
  gpu_sync(g);
}
