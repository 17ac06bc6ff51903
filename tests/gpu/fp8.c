/* fp8.c — GPU tests of the fp8 casts (kernels/fp8.cuh), exact, by enumeration:
 *
 *  - the scale: amax over the tensor (bf16 inputs: the largest |x| exactly), scale = fp8_max / amax
 *    in fp32 round-to-nearest, scale_inv = 1 / scale in fp32 round-to-nearest — bitwise;
 *  - every quantized byte: the element scaled in fp32 (v = x * scale, one rounding, as the kernel
 *    computes it) against the nearest of all 256 codes of the format decoded from their bit fields
 *    (ties to the even code, |v| above the largest finite value saturating to it: cvt.rn.satfinite)
 *    — bitwise; the enumeration shares nothing with the device's conversion instruction;
 *  - the column-wise copy is the transpose of the row-wise one, bitwise; casting twice gives the
 *    same bytes (the grid's split of the amax does not reach the result).
 * Shapes: rows and columns not multiples of the 64 x 64 tile; an all-zero tensor (scale 1); values
 * spread over 2^-24 .. 2^8 so that subnormal codes and saturation both occur in E4M3 and E5M2.
 *
 * Delayed scaling (ir/ops/fp8.h; Transformer Engine's DelayedScaling): the same cast with the scale
 * read from a state (a stored 0 is the initial 1; a scale below fp8_max / amax, so that codes
 * saturate) and the tensor's amax folded into the state's current entry with fmaxf, above and below
 * what the entry held — bitwise; and fp8_scale_update against a host reference written here from
 * TE's amax_and_scale_update (delayed_scaling.cu): histories of 1, 4 and 1024 (TE's own default),
 * both amax algorithms, margins 0 and 2, both formats, columns whose current amax is 0, infinite,
 * tiny (the scale overflows to the fp32 maximum) or ordinary — every entry and scale bitwise. A
 * delayed cast is one launch: its blocks fold their tiles' maxima into the entry (atomicMax).
 *
 * The fused amax (compiler/passes/fuse.c fuse_amax, kernels/common.cuh amax_fold): every producer
 * kernel that folds its output's max|y| into an amax slot — the four norm forwards, the one-pass
 * norm backwards (with and without the residual addend), the gated activations both ways — leaves
 * exactly the host's max|y| of the bytes it stored (bitwise) and its ticket back at 0, on a first run
 * and on a second one over the first's slot (nothing re-zeroes it); and the cast that reads that slot
 * as its one partial writes the bytes, transpose and scale_inv of the two-pass cast, bitwise. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "host_bits.h"
#include "kernels/launch.h"

/* The value of fp8 code c (E4M3: bias 7, no infinities, S.1111.111 NaN; E5M2: bias 15, IEEE-like). */
static double fp8_decode(unsigned c, int e5m2) {
  int s = c >> 7, e = e5m2 ? (c >> 2) & 31 : (c >> 3) & 15, m = e5m2 ? c & 3 : c & 7;
  int mb = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
  double v;
  if (e5m2 && e == 31) return NAN;
  if (!e5m2 && e == 15 && m == 7) return NAN;
  if (e == 0)
    v = ldexp((double)m, 1 - bias - mb);
  else
    v = ldexp((double)((1 << mb) + m), e - bias - mb);
  return s ? -v : v;
}

/* The code cvt.rn.satfinite gives v: the nearest finite code, ties to the even one (mantissa bit 0). */
static unsigned fp8_nearest(float v, int e5m2) {
  double fmax = e5m2 ? 57344.0 : 448.0;
  if (v > fmax) v = (float)fmax;
  if (v < -fmax) v = (float)-fmax;
  unsigned best = 0;
  double bd = INFINITY;
  for (unsigned c = 0; c < 256; c++) {
    double d = fp8_decode(c, e5m2);
    if (isnan(d) || (d == 0 && (c >> 7) != (signbit(v) ? 1u : 0u))) continue; /* keep -0 / +0 apart */
    double err = fabs(d - (double)v);
    if (err < bd || (err == bd && (c & 1) == 0 && (best & 1))) best = c, bd = err;
  }
  return best;
}

typedef struct {
  long M, K;
  int fmt, zero;
} CastCase;

static void run_cast(Gpu *g, const CastCase *cc, Rng *r) {
  long M = cc->M, K = cc->K, n = M * K;
  uint16_t *h = malloc(2 * (size_t)n);
  for (long i = 0; i < n; i++) {
    double u = rng_uniform(r), mag = ldexp(1.0, (int)floor((rng_uniform(r) + 1) * 16) - 24);
    h[i] = cc->zero ? 0 : host_f32_to_bf16((float)(u * mag));
  }
  float amax = 0;
  for (long i = 0; i < n; i++)
    amax = fmaxf(amax, fabsf(host_bf16_to_f32(h[i])));
  float fmax = cc->fmt ? 57344.0f : 448.0f, scale = amax == 0 ? 1.0f : fmax / amax, sinv = 1.0f / scale;
  CUdeviceptr x = gpu_dup(g, h, 2 * (size_t)n), q = gpu_alloc(g, (size_t)n), qT = gpu_alloc(g, (size_t)n);
  CUdeviceptr s = gpu_alloc(g, 4), part = gpu_alloc(g, 4 * 264), none = 0;
  unsigned char *hq = malloc((size_t)n), *hqT = malloc((size_t)n), *again = malloc((size_t)n);
  int np = (int)((n + 2047) / 2048 < 264 ? (n + 2047) / 2048 : 264);
  int Mi = (int)M, Ki = (int)K, fmt = cc->fmt;
  for (int pass = 0; pass < 2; pass++) {
    int npp = pass ? 7 : np; /* another split of the amax: the same bytes */
    void *a1[] = {&part, &x, &n};
    gpu_launch(g, "fp8_amax_partial", (unsigned)npp, 1, 1, 256, 0, a1);
    void *a2[] = {&q, &qT, &s, &x, &part, &npp, &Mi, &Ki, &fmt, &none, &none};
    gpu_launch(g, "fp8_cast_transpose", (unsigned)((K + 63) / 64), (unsigned)((M + 63) / 64), 1, 256, 0, a2);
    gpu_sync(g);
    gpu_get(g, pass ? again : hq, q, (size_t)n);
  }
  gpu_get(g, hqT, qT, (size_t)n);
  float got_sinv;
  gpu_get(g, &got_sinv, s, 4);
  char name[96];
  snprintf(name, sizeof name, "fp8 %s cast %ldx%ld%s scale_inv", cc->fmt ? "E5M2" : "E4M3", M, K,
           cc->zero ? " (zeros)" : "");
  gpu_check_bitwise(g, name, &got_sinv, &sinv, 4);
  long bad = 0, first = -1, sat = 0, sub = 0;
  for (long i = 0; i < n; i++) {
    float v = host_bf16_to_f32(h[i]) * scale;
    unsigned want = fp8_nearest(v, cc->fmt);
    if (hq[i] != want && bad++ == 0) first = i;
    double d = fabs(fp8_decode(want, cc->fmt));
    sat += d == fmax;
    sub += d > 0 && d < (cc->fmt ? ldexp(1, -14) : ldexp(1, -6));
  }
  char detail[160];
  snprintf(detail, sizeof detail,
           "%ld of %ld codes differ (first at %ld: got 0x%02x); %ld at max, %ld subnormal", bad, n, first,
           first >= 0 ? hq[first] : 0, sat, sub);
  snprintf(name, sizeof name, "fp8 %s cast %ldx%ld%s codes", cc->fmt ? "E5M2" : "E4M3", M, K,
           cc->zero ? " (zeros)" : "");
  gpu_check_true(g, name, bad == 0, detail);
  long tbad = 0;
  for (long m = 0; m < M; m++)
    for (long k = 0; k < K; k++)
      tbad += hqT[k * M + m] != hq[m * K + k];
  snprintf(detail, sizeof detail, "%ld of %ld bytes differ", tbad, n);
  snprintf(name, sizeof name, "fp8 %s cast %ldx%ld transpose", cc->fmt ? "E5M2" : "E4M3", M, K);
  gpu_check_true(g, name, tbad == 0, detail);
  snprintf(name, sizeof name, "fp8 %s cast %ldx%ld another amax split", cc->fmt ? "E5M2" : "E4M3", M, K);
  gpu_check_bitwise(g, name, hq, again, (size_t)n);
  gpu_free(g, x), gpu_free(g, q), gpu_free(g, qT), gpu_free(g, s), gpu_free(g, part);
  free(h), free(hq), free(hqT), free(again);
}

/* The delayed cast of a (M, K) bf16 tensor: the scale from the state's slot (stored: 0 = 1), the
 * amax folded into the current entry, which held `held` before. */
static void run_cast_delayed(Gpu *g, long M, long K, int fmt, float stored, float held, Rng *r) {
  long n = M * K;
  uint16_t *h = malloc(2 * (size_t)n);
  for (long i = 0; i < n; i++)
    h[i] = host_f32_to_bf16((float)(rng_uniform(r) * ldexp(1.0, (int)floor((rng_uniform(r) + 1) * 6) - 6)));
  float amax = 0;
  for (long i = 0; i < n; i++)
    amax = fmaxf(amax, fabsf(host_bf16_to_f32(h[i])));
  float scale = stored == 0.0f ? 1.0f : stored, sinv = 1.0f / scale, want_amax = fmaxf(held, amax);
  float st[2] = {stored, held};
  CUdeviceptr x = gpu_dup(g, h, 2 * (size_t)n), q = gpu_alloc(g, (size_t)n), qT = gpu_alloc(g, (size_t)n);
  CUdeviceptr s = gpu_alloc(g, 4), part = gpu_alloc(g, 4 * 264), sd = gpu_dup(g, st, sizeof st), sa = sd + 4;
  int np = 0, Mi = (int)M, Ki = (int)K; /* one launch: no amax pass, no partials */
  CUdeviceptr none = 0;
  void *a2[] = {&q, &qT, &s, &x, &none, &np, &Mi, &Ki, &fmt, &sd, &sa};
  gpu_launch(g, "fp8_cast_transpose", (unsigned)((K + 63) / 64), (unsigned)((M + 63) / 64), 1, 256, 0, a2);
  gpu_sync(g);
  unsigned char *hq = malloc((size_t)n), *hqT = malloc((size_t)n);
  float got[2], got_sinv;
  gpu_get(g, hq, q, (size_t)n);
  gpu_get(g, hqT, qT, (size_t)n);
  gpu_get(g, got, sd, sizeof got);
  gpu_get(g, &got_sinv, s, 4);
  char name[128], detail[160];
  snprintf(name, sizeof name, "fp8 delayed %s cast %ldx%ld scale %g, held amax %g: scale_inv",
           fmt ? "E5M2" : "E4M3", M, K, (double)scale, (double)held);
  gpu_check_bitwise(g, name, &got_sinv, &sinv, 4);
  snprintf(name, sizeof name, "fp8 delayed %s cast %ldx%ld: state (scale untouched, amax folded)",
           fmt ? "E5M2" : "E4M3", M, K);
  float want[2] = {stored, want_amax};
  gpu_check_bitwise(g, name, got, want, sizeof want);
  long bad = 0, sat = 0, tbad = 0;
  for (long i = 0; i < n; i++) {
    unsigned c = fp8_nearest(host_bf16_to_f32(h[i]) * scale, fmt);
    bad += hq[i] != c;
    sat += fabs(fp8_decode(c, fmt)) == (fmt ? 57344.0 : 448.0);
    tbad += hqT[(i % K) * M + i / K] != hq[i];
  }
  snprintf(detail, sizeof detail, "%ld of %ld codes differ, %ld transposed bytes differ; %ld at max", bad, n,
           tbad, sat);
  snprintf(name, sizeof name, "fp8 delayed %s cast %ldx%ld scale %g: codes", fmt ? "E5M2" : "E4M3", M, K,
           (double)scale);
  gpu_check_true(g, name, bad == 0 && tbad == 0, detail);
  gpu_free(g, x), gpu_free(g, q), gpu_free(g, qT), gpu_free(g, s), gpu_free(g, part), gpu_free(g, sd);
  free(h), free(hq), free(hqT);
}

/* The host reference of one column's update: TE's amax_and_scale_update (kernel_bulk) on a state
 * (1 + len, n), written from its definition: roll where the current amax is not 0, the amax used
 * the current one or the window's max, the scale top / amax or the previous one, FLT_MAX on
 * overflow. */
static void ref_scale_update(float *st, int n, int len, int algo, float top, int j) {
  float *h = st + n + j, last = h[0], hist[1024], amax = 0;
  if (last != 0.0f) {
    for (int i = 0; i < len; i++)
      hist[i] = i < len - 1 ? h[(long)(i + 1) * n] : last;
    for (int i = 0; i < len; i++)
      amax = fmaxf(amax, hist[i]), h[(long)i * n] = i > 0 ? hist[i] : 0.0f;
  }
  if (algo == 0) amax = last;
  float prev = st[j] == 0.0f ? 1.0f : st[j], scale = isfinite(amax) && amax > 0 ? top / amax : prev;
  st[j] = isinf(scale) ? FLT_MAX : scale;
}

static void run_scale_update(Gpu *g, int n, int len, int algo, int fmt, int margin, Rng *r) {
  size_t bytes = sizeof(float) * (size_t)(1 + len) * (size_t)n;
  float *st = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes);
  for (int j = 0; j < n; j++) {
    st[j] = j % 5 == 0 ? 0.0f : (float)ldexp(1.0 + rng_uniform(r) / 2, j % 9); /* 0: never updated */
    for (int i = 1; i <= len; i++)
      st[(long)i * n + j] = i > 1 && j % 3 == 0 ? 0.0f : (float)ldexp(1.5 + rng_uniform(r), (j + i) % 7 - 3);
    /* the current amax: 0 (no roll), infinite, tiny (scale overflow), or ordinary */
    float cur = j % 7 == 1 ? 0.0f : j % 7 == 2 ? INFINITY : j % 7 == 3 ? 1e-38f : st[(long)n + j];
    st[(long)n + j] = cur;
  }
  memcpy(want, st, bytes);
  float top = (fmt ? 57344.0f : 448.0f) * (float)ldexp(1.0, -margin);
  for (int j = 0; j < n; j++)
    ref_scale_update(want, n, len, algo, top, j);
  CUdeviceptr d = gpu_dup(g, st, bytes);
  void *args[] = {&d, &n, &len, &algo, &top};
  gpu_launch(g, "fp8_scale_update", (unsigned)((n + 127) / 128), 1, 1, 128, 0, args);
  gpu_sync(g);
  gpu_get(g, got, d, bytes);
  char name[128];
  snprintf(name, sizeof name, "fp8_scale_update %s history %d %s margin %d, %d columns",
           fmt ? "E5M2" : "E4M3", len, algo ? "max" : "most_recent", margin, n);
  gpu_check_bitwise(g, name, got, want, bytes);
  gpu_free(g, d);
  free(st), free(want), free(got);
}

/* n random bf16 of magnitude up to 2^e (a few at 2^(e + 2): the maximum sits anywhere), on the device. */
static CUdeviceptr up_rand(Gpu *g, Rng *r, long n, int e) {
  uint16_t *h = malloc(2 * (size_t)n);
  for (long i = 0; i < n; i++)
    h[i] = host_f32_to_bf16((float)(rng_uniform(r) * ldexp(1.0, i % 997 == 13 ? e + 2 : e)));
  CUdeviceptr d = gpu_dup(g, h, 2 * (size_t)n);
  free(h);
  return d;
}

/* Producer `kernel` (args ending in &part, &slot: the fused amax) writes out (M, K) bf16: run twice
 * over one slot zeroed once, each time its value against the host's max|out| of the stored bytes
 * and its ticket against 0; then the cast of out reading the slot against the two-pass cast. */
static void check_fold(Gpu *g, const char *kernel, const char *what, unsigned grid, unsigned block,
                       unsigned smem, void **args, CUdeviceptr out, long M, long K, CUdeviceptr slot) {
  long n = M * K;
  uint16_t *h = malloc(2 * (size_t)n);
  char name[160];
  gpu_memset(g, slot, 0, 8);
  for (int run = 0; run < 2; run++) {
    gpu_launch(g, kernel, grid, 1, 1, block, smem, args);
    gpu_sync(g);
    gpu_get(g, h, out, 2 * (size_t)n);
    float amax = 0;
    for (long i = 0; i < n; i++)
      amax = fmaxf(amax, fabsf(host_bf16_to_f32(h[i])));
    uint32_t got[2], want[2];
    memcpy(&want[0], &amax, 4);
    want[1] = 0;
    gpu_get(g, got, slot, 8);
    snprintf(name, sizeof name, "fused amax %s %s, run %d: max|y| and ticket", kernel, what, run + 1);
    gpu_check_bitwise(g, name, got, want, 8);
  }
  /* the cast, in both formats: two passes, then the slot as its one partial */
  CUdeviceptr q[2], qT[2], s[2], part = gpu_alloc(g, 4 * 264), none = 0;
  int Mi = (int)M, Ki = (int)K, one = 1, np = (int)((n + 2047) / 2048 < 264 ? (n + 2047) / 2048 : 264);
  for (int fmt = 0; fmt < 2; fmt++) {
    for (int f = 0; f < 2; f++) {
      q[f] = gpu_alloc(g, (size_t)n), qT[f] = gpu_alloc(g, (size_t)n), s[f] = gpu_alloc(g, 4);
      void *a1[] = {&part, &out, &n};
      if (!f) gpu_launch(g, "fp8_amax_partial", (unsigned)np, 1, 1, 256, 0, a1);
      void *a2[] = {&q[f], &qT[f], &s[f], &out, f ? &slot : &part, f ? &one : &np, &Mi,
                    &Ki,   &fmt,   &none, &none};
      gpu_launch(g, "fp8_cast_transpose", (unsigned)((K + 63) / 64), (unsigned)((M + 63) / 64), 1, 256, 0,
                 a2);
    }
    gpu_sync(g);
    unsigned char *b[2][2];
    float sv[2];
    for (int f = 0; f < 2; f++) {
      b[f][0] = malloc((size_t)n), b[f][1] = malloc((size_t)n);
      gpu_get(g, b[f][0], q[f], (size_t)n), gpu_get(g, b[f][1], qT[f], (size_t)n),
          gpu_get(g, &sv[f], s[f], 4);
    }
    snprintf(name, sizeof name, "fused amax %s %s: %s cast == two-pass cast (q, qT, scale_inv)", kernel, what,
             fmt ? "E5M2" : "E4M3");
    int same = !memcmp(b[0][0], b[1][0], (size_t)n) && !memcmp(b[0][1], b[1][1], (size_t)n) &&
               !memcmp(sv, sv + 1, 4);
    gpu_check_true(g, name, same, same ? NULL : "the bytes differ");
    for (int f = 0; f < 2; f++) {
      gpu_free(g, q[f]), gpu_free(g, qT[f]), gpu_free(g, s[f]);
      free(b[f][0]), free(b[f][1]);
    }
  }
  gpu_free(g, part);
  free(h);
}

static void run_fused_amax(Gpu *g, Rng *r, int C) {
  int N = 304, rows = stepc_norm_fwd_rows(C), G = 37;
  float eps = 1e-5f;
  long n = (long)N * C;
  CUdeviceptr x = up_rand(g, r, n, 3), x2 = up_rand(g, r, n, 3), w = up_rand(g, r, C, 0),
              bias = up_rand(g, r, C, 0);
  CUdeviceptr dy = up_rand(g, r, n, -2), add = up_rand(g, r, n, -4), out = gpu_alloc(g, 2 * n),
              res = gpu_alloc(g, 2 * n), mean = gpu_alloc(g, 4 * N), rstd = gpu_alloc(g, 4 * N),
              partial = gpu_alloc(g, 4 * (size_t)G * 2 * C), part = gpu_alloc(g, 4 * 4096),
              slot = gpu_alloc(g, 8), none = 0;
  unsigned grid = (unsigned)((N + rows - 1) / rows), block = stepc_norm_fwd_threads(C);
  char at[32], with[48];
  snprintf(at, sizeof at, "(C=%d)", C), snprintf(with, sizeof with, "with addend (C=%d)", C);
  void *f1[] = {&out, &rstd, &x, &w, &N, &C, &eps, &part, &slot};
  check_fold(g, "rmsnorm_forward", at, grid, block, 0, f1, out, N, C, slot);
  void *f2[] = {&out, &mean, &rstd, &x, &w, &bias, &N, &C, &eps, &part, &slot};
  check_fold(g, "layernorm_forward", at, grid, block, 0, f2, out, N, C, slot);
  void *f3[] = {&res, &out, &rstd, &x, &x2, &w, &N, &C, &eps, &part, &slot};
  check_fold(g, "residual_rmsnorm_forward", at, grid, block, 0, f3, out, N, C, slot);
  void *f4[] = {&res, &out, &mean, &rstd, &x, &x2, &w, &bias, &N, &C, &eps, &part, &slot};
  check_fold(g, "residual_layernorm_forward", at, grid, block, 0, f4, out, N, C, slot);
  /* the one-pass backwards on those statistics (of res), without and with the residual addend */
  for (int ln = 0; ln < 2; ln++)
    for (int a = 0; a < 2; a++) {
      int W = stepc_norm_bwd_warps(C, ln ? 2 : 1);
      unsigned smem = stepc_norm_bwd_smem(C, ln ? 2 : 1, W);
      CUdeviceptr *e = a ? &add : &none;
      void *b1[] = {&out, &partial, &dy, e, &res, &w, &rstd, &N, &C, &part, &slot};
      void *b2[] = {&out, &partial, &dy, e, &res, &w, &mean, &rstd, &N, &C, &part, &slot};
      check_fold(g, ln ? "layernorm_backward" : "rmsnorm_backward", a ? with : at, (unsigned)G,
                 32 * (unsigned)W, smem, ln ? b2 : b1, out, N, C, slot);
    }
  /* the gated activations (once): rows [gate | up] of x (N, 2F), F = C / 2 */
  int F = C / 2, glu = C == 1024;
  CUdeviceptr dg = up_rand(g, r, (long)N * F, 0);
  unsigned gg = gpu_grid1d(g, (long)N * F / 8);
  for (int ge = 0; glu && ge < 2; ge++) {
    void *a1[] = {&out, &x, &N, &F, &part, &slot};
    check_fold(g, ge ? "geglu_forward" : "swiglu_forward", "", gg, 256, 0, a1, out, N, F, slot);
    void *a2[] = {&res, &dg, &x, &N, &F, &part, &slot};
    check_fold(g, ge ? "geglu_backward" : "swiglu_backward", "", gg, 256, 0, a2, res, N, 2 * F, slot);
  }
  /* the fused RoPE backward's dqkv (linear_qkv's output gradient): B 2, T 152, H 4, G 2, D 64, with
   * Llama 3's RoPE scaling; dq, dk, dv from x, x2, add */
  if (glu) {
    long Nl = N;
    int T = 152, H = 4, Gq = 2, D = 64;
    float base = 500000.0f, factor = 32.0f;
    void *a3[] = {&out, &x, &x2, &add, &Nl, &T, &H, &Gq, &D, &base, &factor, &part, &slot};
    check_fold(g, "rope_concat_qkv", "", (unsigned)N, 128, 0, a3, out, N, (H + 2 * Gq) * D, slot);
  }
  CUdeviceptr bufs[] = {x, x2, w, bias, dy, add, out, res, mean, rstd, partial, part, slot, dg};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
    gpu_free(g, bufs[i]);
}

/* The cast of an fp32 tensor (fp8_amax_partial_f32 + fp8_cast_transpose_f32: model.fp8_param's cast
 * of the master weights, ir/ops/fp8.c): amax, scale_inv and every code against the host on the fp32
 * values, bitwise, and the transpose. The relation to the bf16 cast of a bf16 param (the step without
 * fp8_param, whose param is bf16(master)): on the master rounded to bf16 (every value representable in
 * both) the two kernels give the same bytes and scale_inv, bitwise; on the master itself, whose
 * largest element 1 + 2^-8 + 2^-10 rounds to 1 + 2^-7 in bf16, the amaxes and so the scale_invs
 * differ. */
static void run_cast_f32(Gpu *g, long M, long K, int fmt, Rng *r) {
  long n = M * K;
  float *h = malloc(4 * (size_t)n), *hb = malloc(4 * (size_t)n);
  uint16_t *b = malloc(2 * (size_t)n);
  for (long i = 0; i < n; i++)
    h[i] = (float)((rng_uniform(r) - 0.5) * ldexp(1.0, (int)floor(rng_uniform(r) * 12) - 12));
  h[n / 3] = 1.0f + 0x1p-8f + 0x1p-10f; /* the largest |x|, not a bf16 value */
  for (long i = 0; i < n; i++)
    b[i] = host_f32_to_bf16(h[i]), hb[i] = host_bf16_to_f32(b[i]);
  float fmax = fmt ? 57344.0f : 448.0f, amax = 0;
  for (long i = 0; i < n; i++)
    amax = fmaxf(amax, fabsf(h[i]));
  float scale = fmax / amax, sinv = 1.0f / scale;
  CUdeviceptr x = gpu_dup(g, h, 4 * (size_t)n), xb = gpu_dup(g, hb, 4 * (size_t)n),
              x16 = gpu_dup(g, b, 2 * (size_t)n);
  CUdeviceptr q = gpu_alloc(g, (size_t)n), qT = gpu_alloc(g, (size_t)n), s = gpu_alloc(g, 4);
  CUdeviceptr part = gpu_alloc(g, 4 * 264), none = 0;
  unsigned char *hq[3], *hqT = malloc((size_t)n);
  float got_sinv[3];
  int np = (int)((n + 2047) / 2048 < 264 ? (n + 2047) / 2048 : 264), Mi = (int)M, Ki = (int)K;
  const char *amax_k[3] = {"fp8_amax_partial_f32", "fp8_amax_partial_f32", "fp8_amax_partial"},
             *cast_k[3] = {"fp8_cast_transpose_f32", "fp8_cast_transpose_f32", "fp8_cast_transpose"};
  CUdeviceptr src[3] = {x, xb, x16};
  for (int v = 0; v < 3; v++) { /* the master, bf16(master) in fp32, bf16(master) as bf16 */
    hq[v] = malloc((size_t)n);
    void *a1[] = {&part, &src[v], &n};
    gpu_launch(g, amax_k[v], (unsigned)np, 1, 1, 256, 0, a1);
    void *a2[] = {&q, &qT, &s, &src[v], &part, &np, &Mi, &Ki, &fmt, &none, &none};
    gpu_launch(g, cast_k[v], (unsigned)((K + 63) / 64), (unsigned)((M + 63) / 64), 1, 256, 0, a2);
    gpu_sync(g);
    gpu_get(g, hq[v], q, (size_t)n);
    gpu_get(g, &got_sinv[v], s, 4);
    if (v == 0) gpu_get(g, hqT, qT, (size_t)n);
  }
  char name[128], detail[160];
  const char *f = fmt ? "E5M2" : "E4M3";
  snprintf(name, sizeof name, "fp8 %s cast of fp32 %ldx%ld scale_inv", f, M, K);
  gpu_check_bitwise(g, name, &got_sinv[0], &sinv, 4);
  long bad = 0, tbad = 0;
  for (long i = 0; i < n; i++)
    bad += hq[0][i] != fp8_nearest(h[i] * scale, fmt);
  for (long m = 0; m < M; m++)
    for (long k = 0; k < K; k++)
      tbad += hqT[k * M + m] != hq[0][m * K + k];
  snprintf(detail, sizeof detail, "%ld of %ld codes differ, %ld transposed bytes", bad, n, tbad);
  snprintf(name, sizeof name, "fp8 %s cast of fp32 %ldx%ld codes and transpose", f, M, K);
  gpu_check_true(g, name, bad == 0 && tbad == 0, detail);
  snprintf(name, sizeof name, "fp8 %s cast of bf16-valued fp32 = the bf16 cast, codes", f);
  gpu_check_bitwise(g, name, hq[1], hq[2], (size_t)n);
  snprintf(name, sizeof name, "fp8 %s cast of bf16-valued fp32 = the bf16 cast, scale_inv", f);
  gpu_check_bitwise(g, name, &got_sinv[1], &got_sinv[2], 4);
  snprintf(detail, sizeof detail, "scale_inv %a (master) and %a (its bf16 rounding)", got_sinv[0],
           got_sinv[2]);
  snprintf(name, sizeof name, "fp8 %s cast of the master differs from its bf16 rounding's", f);
  gpu_check_true(g, name, got_sinv[0] != got_sinv[2], detail);
  gpu_free(g, x), gpu_free(g, xb), gpu_free(g, x16), gpu_free(g, q), gpu_free(g, qT), gpu_free(g, s);
  gpu_free(g, part);
  for (int v = 0; v < 3; v++)
    free(hq[v]);
  free(h), free(hb), free(b), free(hqT);
}

/* An fp8 tensor-core product against fp64: |got - want| within the store's rounding (store_rel |want|:
 * 2^-8 x 2 for bf16, 2^-23 x 2 for fp32) plus the accumulation's error. The fp8 wgmma products keep about 14 bits while they accumulate
 * (DeepSeek-V3 sec. 3.3.2 measured that on the H800; Transformer Engine promotes into fp32 every 128 k
 * for dgrad and wgrad, and leaves fprop so), so a sum that cancels loses its relative accuracy: the
 * bound is K/32 chained accumulations of 2^-14 of the partial sums, about 2^-10 of mag = sum_k |a b| sa sb
 * (the H100 measured 2^-12.3 at worst in session 18; fp32 accumulation, tests/simt, gives ~2^-24). */
static void check_fp8_product(Gpu *g, const char *name, const double *got, const double *want, const double *mag,
                              long n, double store_rel) {
  long bad = 0, worst = -1;
  double worst_ratio = 0, max_err = 0;
  for (long i = 0; i < n; i++) {
    double e = fabs(got[i] - want[i]), lim = store_rel * fabs(want[i]) + ldexp(mag[i], -10) + 1e-6;
    if (e > max_err) max_err = e;
    if (!(e <= lim)) bad++;
    if (!(e / lim <= worst_ratio)) worst_ratio = e / lim, worst = i;
  }
  char detail[200];
  snprintf(detail, sizeof detail, "max_err %.3e; worst at %ld: err / bound %.3f (got %.6g want %.6g, sum |ab| %.4g); %ld bad",
           max_err, worst, worst_ratio, worst >= 0 ? got[worst] : 0.0, worst >= 0 ? want[worst] : 0.0,
           worst >= 0 ? mag[worst] : 0.0, bad);
  gpu_check_true(g, name, bad == 0, detail);
}

/* grouped_fp8_tn_ws (kernels/moe.cuh): the fp8 grouped product c[r] = a[r] b_e^T sa[e] sb[e] against fp64
 * over the codes' exact values, on uneven experts (empty, one row, tile edges), a width whose last
 * 128-wide k step is partial and a partial column tile; formats E4M3 x E4M3 (forward) and E5M2 x E4M3
 * (hybrid dgrad). Bitwise run to run. */
static void run_grouped_fp8(Gpu *g, int fa, int fb, Rng *r) {
  enum { E = 8 };
  /* on the CPU 264 wide (still a partial second column tile): the emulated fp8 products are slow */
  int counts[E] = {0, 1, 127, 128, 129, 300, 513, 37}, seg[2 * E], N = 0, Nout = g->emulated ? 264 : 776, K = 528;
  for (int e = 0; e < E; e++) seg[2 * e] = N, seg[2 * e + 1] = counts[e], N += counts[e];
  long na = (long)N * K, nb = (long)E * Nout * K;
  unsigned char *a = malloc((size_t)na), *b = malloc((size_t)nb);
  float sa[E], sb[E];
  for (long i = 0; i < na; i++) a[i] = (unsigned char)fp8_nearest((float)(rng_uniform(r) * (fa ? 6.0 : 3.0)), fa);
  for (long i = 0; i < nb; i++) b[i] = (unsigned char)fp8_nearest((float)(rng_uniform(r) * 2.0), fb);
  for (int e = 0; e < E; e++) sa[e] = (float)(1.0 + 0.5 * rng_uniform(r)), sb[e] = (float)(0.01 * (1.5 + rng_uniform(r)));
  double *want = calloc((size_t)N * Nout, sizeof *want), *mag = calloc((size_t)N * Nout, sizeof *mag), dec_a[256],
         dec_b[256];
  for (int c = 0; c < 256; c++) dec_a[c] = fp8_decode((unsigned)c, fa), dec_b[c] = fp8_decode((unsigned)c, fb);
  for (int e = 0; e < E; e++)
    for (int i = seg[2 * e]; i < seg[2 * e] + seg[2 * e + 1]; i++)
      for (int n = 0; n < Nout; n++) {
        double acc = 0.0, m = 0.0;
        for (int k = 0; k < K; k++) {
          double p = dec_a[a[(long)i * K + k]] * dec_b[b[((long)e * Nout + n) * K + k]];
          acc += p, m += fabs(p);
        }
        want[(long)i * Nout + n] = acc * sa[e] * sb[e], mag[(long)i * Nout + n] = m * sa[e] * sb[e];
      }
  CUdeviceptr da = gpu_dup(g, a, (size_t)na), db = gpu_dup(g, b, (size_t)nb), dsa = gpu_dup(g, sa, sizeof sa),
              dsb = gpu_dup(g, sb, sizeof sb), dseg = gpu_dup(g, seg, sizeof seg), dc = gpu_alloc(g, 2 * (size_t)N * Nout);
  uint64_t adim[2] = {(uint64_t)K, (uint64_t)N}, bdim[3] = {(uint64_t)K, (uint64_t)Nout, E};
  CUdeviceptr ta = gpu_tmap(g, da, 1, 2, adim, (const uint32_t[]){128, 128}),
              tb = gpu_tmap(g, db, 1, 3, bdim, (const uint32_t[]){128, 256, 1});
  int row_tiles = (N + STEPC_MOE_TC_BM - 1) / STEPC_MOE_TC_BM + E, e8 = E;
  void *args[] = {&dc, &ta, &tb, &dsa, &dsb, &dseg, &Nout, &K, &e8, &row_tiles, &fa, &fb};
  unsigned grid = stepc_moe_ws_grid(g->emulated ? 3 : g->sm_count, Nout, row_tiles);
  gpu_launch(g, "grouped_fp8_tn_ws", grid, 1, 1, STEPC_MOE_WS_THREADS, stepc_moe_ws_smem(), args);
  uint16_t *h = malloc(2 * (size_t)N * Nout), *h2 = malloc(2 * (size_t)N * Nout);
  gpu_get(g, h, dc, 2 * (size_t)N * Nout);
  double *got = malloc(sizeof *got * (size_t)N * Nout);
  bf16_to_double(h, got, (long)N * Nout);
  char name[128];
  snprintf(name, sizeof name, "grouped_fp8_tn_ws %s x %s (8 uneven experts, K 528, %d wide)", fa ? "E5M2" : "E4M3",
           fb ? "E5M2" : "E4M3", Nout);
  check_fp8_product(g, name, got, want, mag, (long)N * Nout, 1.0 / 128);
  gpu_launch(g, "grouped_fp8_tn_ws", grid, 1, 1, STEPC_MOE_WS_THREADS, stepc_moe_ws_smem(), args);
  gpu_get(g, h2, dc, 2 * (size_t)N * Nout);
  gpu_check_bitwise(g, "grouped_fp8_tn_ws run to run", h, h2, 2 * (size_t)N * Nout);
  free(a), free(b), free(want), free(mag), free(h), free(h2), free(got);
  gpu_free(g, da), gpu_free(g, db), gpu_free(g, dsa), gpu_free(g, dsb), gpu_free(g, dseg), gpu_free(g, dc);
  gpu_free(g, ta), gpu_free(g, tb);
}

/* grouped_fp8_wgrad_ws: dW_e = dy_e^T x_e sa[e] sb[e] from the fp8 transposes a = dy^T (Nout, R), b = x^T
 * (K, R), against fp64 over the codes' values: uneven experts (empty, one row, rows past a 128-wide k step:
 * the next expert's bytes zeroed in the tile), partial tiles; into bf16, and stored into fp32 with the
 * tiles' norm partials (their sum the gradient's squares). E5M2 dy x E4M3 x, Megatron's hybrid. */
static void run_grouped_fp8_wgrad(Gpu *g, int fa, int fb, Rng *r) {
  enum { E = 8 };
  int counts[E] = {0, 1, 127, 128, 129, 300, 513, 34}, seg[2 * E], R = 0, Nout = 136, K = 264; /* R = 1232 */
  /* STEPC_TEST_FP8_WGRAD="c0,...,c7[,Nout,K]": other expert rows and widths (a fault's bisection on the GPU;
   * the rows must add up to a multiple of 16) */
  const char *env = getenv("STEPC_TEST_FP8_WGRAD");
  if (env) {
    int v[E + 2], n = 0;
    for (const char *q = env; *q && n < E + 2; q = *q ? q + 1 : q) {
      v[n++] = (int)strtol(q, (char **)&q, 10);
      if (*q && *q != ',') break;
    }
    for (int e = 0; e < E && e < n; e++) counts[e] = v[e];
    if (n == E + 2) Nout = v[E], K = v[E + 1];
  }
  for (int e = 0; e < E; e++) seg[2 * e] = R, seg[2 * e + 1] = counts[e], R += counts[e];
  long na = (long)Nout * R, nb = (long)K * R, nw = (long)E * Nout * K;
  unsigned char *a = malloc((size_t)na), *b = malloc((size_t)nb);
  float sa[E], sb[E];
  for (long i = 0; i < na; i++) a[i] = (unsigned char)fp8_nearest((float)(rng_uniform(r) * 4.0), fa);
  for (long i = 0; i < nb; i++) b[i] = (unsigned char)fp8_nearest((float)(rng_uniform(r) * 2.0), fb);
  for (int e = 0; e < E; e++) sa[e] = (float)(0.01 * (1.5 + rng_uniform(r))), sb[e] = (float)(1.0 + 0.5 * rng_uniform(r));
  double *want = calloc((size_t)nw, sizeof *want), *mag = calloc((size_t)nw, sizeof *mag);
  for (int e = 0; e < E; e++)
    for (int n = 0; n < Nout; n++)
      for (int k = 0; k < K; k++) {
        double acc = 0.0, m = 0.0;
        for (int i = seg[2 * e]; i < seg[2 * e] + seg[2 * e + 1]; i++) {
          double p = fp8_decode(a[(long)n * R + i], fa) * fp8_decode(b[(long)k * R + i], fb);
          acc += p, m += fabs(p);
        }
        want[((long)e * Nout + n) * K + k] = acc * sa[e] * sb[e], mag[((long)e * Nout + n) * K + k] = m * sa[e] * sb[e];
      }
  CUdeviceptr da = gpu_dup(g, a, (size_t)na), db = gpu_dup(g, b, (size_t)nb), dsa = gpu_dup(g, sa, sizeof sa),
              dsb = gpu_dup(g, sb, sizeof sb), dseg = gpu_dup(g, seg, sizeof seg), dw = gpu_alloc(g, 2 * (size_t)nw),
              acc = gpu_alloc(g, 4 * (size_t)nw), none = 0;
  int MT = (Nout + STEPC_MOE_TC_BM - 1) / STEPC_MOE_TC_BM, ntile = (K + STEPC_MOE_TC_BN - 1) / STEPC_MOE_TC_BN * MT * E;
  CUdeviceptr norm = gpu_alloc(g, 4 * (size_t)ntile);
  uint64_t adim[2] = {(uint64_t)R, (uint64_t)Nout}, bdim[2] = {(uint64_t)R, (uint64_t)K};
  CUdeviceptr ta = gpu_tmap(g, da, 1, 2, adim, (const uint32_t[]){128, 128}),
              tb = gpu_tmap(g, db, 1, 2, bdim, (const uint32_t[]){128, 256});
  unsigned grid = stepc_moe_ws_grid(g->emulated ? 3 : g->sm_count, K, (long)MT * E);
  int e8 = E, zero = 0, one = 1;
  void *bf[] = {&dw, &none, &ta, &tb, &dsa, &dsb, &dseg, &Nout, &K, &e8, &zero, &none, &fa, &fb};
  gpu_launch(g, "grouped_fp8_wgrad_ws", grid, 1, 1, STEPC_MOE_WS_THREADS, stepc_moe_ws_smem(), bf);
  uint16_t *h = malloc(2 * (size_t)nw);
  gpu_get(g, h, dw, 2 * (size_t)nw);
  double *got = malloc(sizeof *got * (size_t)nw);
  bf16_to_double(h, got, nw);
  char name[128];
  snprintf(name, sizeof name, "grouped_fp8_wgrad_ws %s x %s (8 uneven experts, bf16 dW)", fa ? "E5M2" : "E4M3",
           fb ? "E5M2" : "E4M3");
  check_fp8_product(g, name, got, want, mag, nw, 1.0 / 128);
  gpu_memset(g, acc, 0x7f, 4 * (size_t)nw); /* stale values: stored over, not added to */
  void *st[] = {&none, &acc, &ta, &tb, &dsa, &dsb, &dseg, &Nout, &K, &e8, &one, &norm, &fa, &fb};
  gpu_launch(g, "grouped_fp8_wgrad_ws", grid, 1, 1, STEPC_MOE_WS_THREADS, stepc_moe_ws_smem(), st);
  float *f = malloc(4 * (size_t)nw), *part = malloc(4 * (size_t)ntile);
  gpu_get(g, f, acc, 4 * (size_t)nw), gpu_get(g, part, norm, 4 * (size_t)ntile);
  double sq = 0.0, psum = 0.0;
  for (long i = 0; i < nw; i++) got[i] = f[i], sq += (double)f[i] * f[i];
  for (int i = 0; i < ntile; i++) psum += part[i];
  check_fp8_product(g, "grouped_fp8_wgrad_ws stored into fp32", got, want, mag, nw, ldexp(1.0, -22));
  gpu_check(g, "grouped_fp8_wgrad_ws norm partials sum to the gradient's sum of squares", &psum, &sq, 1, 0, 1e-5);
  free(a), free(b), free(want), free(mag), free(h), free(got), free(f), free(part);
  gpu_free(g, da), gpu_free(g, db), gpu_free(g, dsa), gpu_free(g, dsb), gpu_free(g, dseg), gpu_free(g, dw), gpu_free(g, acc);
  gpu_free(g, norm), gpu_free(g, ta), gpu_free(g, tb);
}

/* The grouped casts (FP8_QUANT_GROUPED: fp8_amax_partial_grouped, fp8_scale_grouped,
 * fp8_cast_transpose_grouped) against the host, bitwise: each expert's scale_inv, every code and the
 * transpose. Weights (rows = 0): E blocks of (M, K), one all zeros (scale 1), magnitudes apart by
 * 2^6 an expert. Rows (rows = 1): x (M, K) in uneven segments (an empty one, gaps between them filled
 * with NaN and 1e30, which must come out 0) with each expert's own magnitude. Delayed (stored != NULL):
 * the scales the states hold (0 = 1) and each expert's amax folded into its entry, which held
 * held[e]; the partials unread when damax is null (an evaluation: entries left as they were). */
static void run_cast_grouped(Gpu *g, int rows, int fmt, const float *stored, const float *held, int record, Rng *r) {
  enum { E = 4 };
  int M = rows ? 208 : 80, K = 48, seg[2 * E] = {0, 70, 70, 0, 72, 100, 180, 20};
  long n = (long)(rows ? 1 : E) * M * K, each = (long)M * K;
  int *owner = malloc(sizeof *owner * (size_t)(rows ? M : E * M)); /* each row's expert, -1 none */
  for (int i = 0; i < (rows ? M : E * M); i++) owner[i] = rows ? -1 : i / M;
  if (rows)
    for (int e = 0; e < E; e++)
      for (int i = seg[2 * e]; i < seg[2 * e] + seg[2 * e + 1]; i++) owner[i] = e;
  uint16_t *h = malloc(2 * (size_t)n);
  for (long i = 0; i < n; i++) {
    int e = owner[i / K];
    double v = rng_uniform(r) * ldexp(1.0, (int)floor(rng_uniform(r) * 8) - 12 + 6 * (e < 0 ? 0 : e));
    h[i] = e < 0 ? host_f32_to_bf16(i % 2 ? NAN : 1e30f) : e == 1 && !rows ? 0 : host_f32_to_bf16((float)v);
  }
  float amax[E] = {0}, scale[E], sinv[E], fmax = fmt ? 57344.0f : 448.0f;
  for (long i = 0; i < n; i++)
    if (owner[i / K] >= 0) amax[owner[i / K]] = fmaxf(amax[owner[i / K]], fabsf(host_bf16_to_f32(h[i])));
  for (int e = 0; e < E; e++) {
    scale[e] = stored ? (stored[e] == 0 ? 1.0f : stored[e]) : amax[e] == 0 ? 1.0f : fmax / amax[e];
    sinv[e] = 1.0f / scale[e];
  }
  enum { P = 5 };
  CUdeviceptr x = gpu_dup(g, h, 2 * (size_t)n), q = gpu_alloc(g, (size_t)n), qT = gpu_alloc(g, (size_t)n),
              ds = gpu_alloc(g, 4 * E), dsinv = gpu_alloc(g, 4 * E), part = gpu_alloc(g, 4 * E * P),
              dseg = rows ? gpu_dup(g, seg, sizeof seg) : 0, st = 0, am = 0, none = 0;
  if (stored) st = gpu_dup(g, stored, 4 * E), am = record ? gpu_dup(g, held, 4 * E) : 0;
  gpu_memset(g, part, 0x7f, 4 * E * P); /* read only where the cast records or scales from them */
  int Ki = K, Mi = M, e4 = E, p = stored && !record ? 0 : P;
  if (p) {
    void *a1[] = {&part, &x, &dseg, &each, &Ki};
    gpu_launch(g, "fp8_amax_partial_grouped", P, E, 1, 256, 0, a1);
  }
  void *a2[] = {&ds, &dsinv, &part, &p, &e4, &fmt, stored ? &st : &none, &am};
  gpu_launch(g, "fp8_scale_grouped", 1, 1, 1, 32, 0, a2);
  void *a3[] = {&q, &qT, &x, &ds, &dseg, &e4, &Mi, &Ki, &fmt};
  gpu_launch(g, "fp8_cast_transpose_grouped", (unsigned)((K + 63) / 64), (unsigned)((M + 63) / 64),
             rows ? 1 : E, 256, 0, a3);
  gpu_sync(g);
  unsigned char *hq = malloc((size_t)n), *hqT = malloc((size_t)n);
  float got_sinv[E], got_am[E];
  gpu_get(g, hq, q, (size_t)n), gpu_get(g, hqT, qT, (size_t)n), gpu_get(g, got_sinv, dsinv, sizeof got_sinv);
  char name[128], detail[160];
  const char *what = rows ? "rows" : "weights", *f = fmt ? "E5M2" : "E4M3", *how = stored ? "delayed" : "current";
  snprintf(name, sizeof name, "fp8 %s grouped %s cast (%s) scale_inv of 4 experts", f, what, how);
  gpu_check_bitwise(g, name, got_sinv, sinv, sizeof sinv);
  long bad = 0, first = -1, tbad = 0;
  for (long i = 0; i < n; i++) {
    int e = owner[i / K];
    unsigned want = e < 0 ? 0 : fp8_nearest(host_bf16_to_f32(h[i]) * scale[e], fmt);
    if (hq[i] != want && bad++ == 0) first = i;
  }
  snprintf(detail, sizeof detail, "%ld of %ld codes differ (first at %ld: got 0x%02x)", bad, n, first,
           first >= 0 ? hq[first] : 0);
  snprintf(name, sizeof name, "fp8 %s grouped %s cast (%s) codes, rows of no expert 0", f, what, how);
  gpu_check_true(g, name, bad == 0, detail);
  for (long b = 0; b < (rows ? 1 : E); b++)
    for (long m = 0; m < M; m++)
      for (long k = 0; k < K; k++)
        tbad += hqT[b * each + k * M + m] != hq[b * each + m * K + k];
  snprintf(detail, sizeof detail, "%ld of %ld bytes differ", tbad, n);
  snprintf(name, sizeof name, "fp8 %s grouped %s cast (%s) transpose", f, what, how);
  gpu_check_true(g, name, tbad == 0, detail);
  if (stored && record) {
    float want_am[E];
    for (int e = 0; e < E; e++) want_am[e] = fmaxf(held[e], amax[e]);
    gpu_get(g, got_am, am, sizeof got_am);
    snprintf(name, sizeof name, "fp8 %s grouped %s cast (delayed) amaxes folded into the states", f, what);
    gpu_check_bitwise(g, name, got_am, want_am, sizeof want_am);
  }
  gpu_free(g, x), gpu_free(g, q), gpu_free(g, qT), gpu_free(g, ds), gpu_free(g, dsinv), gpu_free(g, part);
  if (dseg) gpu_free(g, dseg);
  if (st) gpu_free(g, st);
  if (am) gpu_free(g, am);
  free(h), free(hq), free(hqT), free(owner);
}

void test_fp8(Gpu *g) {
  Rng r = {0x5eedf8};
  static const CastCase cases[] = {
      {208, 336, 0, 0}, {208, 336, 1, 0}, {1024, 2048, 0, 0}, {1024, 2048, 1, 0}, {48, 80, 0, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    run_cast(g, &cases[i], &r);
  run_cast_f32(g, 208, 336, 0, &r);
  run_cast_f32(g, 1024, 2048, 1, &r);
  /* delayed: the initial scale, one that saturates the largest values, amaxes folded up and not */
  run_cast_delayed(g, 208, 336, 0, 0.0f, 0.0f, &r);
  run_cast_delayed(g, 208, 336, 0, 600.0f, 1e6f, &r);
  run_cast_delayed(g, 1024, 2048, 1, 3e4f, 0.25f, &r);
  run_fused_amax(g, &r, 1024);
  run_fused_amax(g, &r, 4096); /* two warps a row (L8's hidden size) */
  static const float stored[4] = {0.0f, 3.0f, 0.5f, 1e-3f}, held[4] = {0.0f, 1e9f, 0.25f, 0.0f};
  for (int rows = 0; rows < 2; rows++) {
    run_cast_grouped(g, rows, 0, NULL, NULL, 1, &r), run_cast_grouped(g, rows, 1, NULL, NULL, 1, &r);
    run_cast_grouped(g, rows, rows, stored, held, 1, &r), run_cast_grouped(g, rows, 0, stored, held, 0, &r);
  }
  if (gpu_has_kernel(g, "grouped_fp8_tn_ws") && g->cc_major >= 9) {
    run_grouped_fp8(g, 0, 0, &r), run_grouped_fp8(g, 1, 0, &r);
    run_grouped_fp8_wgrad(g, 1, 0, &r), run_grouped_fp8_wgrad(g, 0, 0, &r);
  }
  for (int len = 1; len <= 1024; len *= len == 1 ? 4 : 256)
    for (int algo = 0; algo < 2; algo++)
      for (int fmt = 0; fmt < 2; fmt++)
        run_scale_update(g, len == 1024 ? 37 : 300, len, algo, fmt, fmt ? 2 : 0, &r);
}
