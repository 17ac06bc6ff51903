/* attention.c — flash attention on the GPU: forward (O, LSE) and deterministic backward
 * (dQ, dK, dV) against the fp64 reference for head dims 64 and 128, causal, GQA and MHA;
 * bitwise determinism; and the timing at the bench shapes M and L8 (docs/benchmarks.md),
 * counted causal: forward 2*b*h*s^2*d FLOPs, forward+backward 3.5 times that.
 *
 * Tolerances: P is rounded to bf16 before P V (and dS before dS K, dS^T Q), as in
 * FlashAttention-2, so each term carries ~2^-9 relative error; sums of such terms stay within a
 * few 2^-9 of the output's scale. A structural bug (a wrong mask, tile or head) is off by O(scale).
 * So: |got - ref| <= 1e-2 * max|ref| + 2^-7 |ref| for O, dQ, dK, dV; LSE (fp32) within 2e-4. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/launch.h"
#include "host_bits.h"
#include "op_ref.h"

typedef struct {
  int B, T, H, Hkv, D;
  float scale;
  CUdeviceptr q, k, v, o, lse, dout, dsum, dq, dk, dv;
} Attn;

static void attn_alloc(Gpu *g, Attn *a, const uint16_t *q, const uint16_t *k, const uint16_t *v, const uint16_t *dout) {
  size_t nq = (size_t)a->B * a->T * a->H * a->D, nk = (size_t)a->B * a->T * a->Hkv * a->D,
         ns = (size_t)a->B * a->H * a->T;
  a->q = gpu_dup(g, q, 2 * nq), a->k = gpu_dup(g, k, 2 * nk), a->v = gpu_dup(g, v, 2 * nk);
  a->dout = gpu_dup(g, dout, 2 * nq);
  a->o = gpu_alloc(g, 2 * nq), a->dq = gpu_alloc(g, 2 * nq), a->dk = gpu_alloc(g, 2 * nk), a->dv = gpu_alloc(g, 2 * nk);
  a->lse = gpu_alloc(g, 4 * ns), a->dsum = gpu_alloc(g, 4 * ns);
}

static void attn_free(Gpu *g, Attn *a) {
  CUdeviceptr p[] = {a->q, a->k, a->v, a->o, a->lse, a->dout, a->dsum, a->dq, a->dk, a->dv};
  for (size_t i = 0; i < sizeof p / sizeof *p; i++) gpu_free(g, p[i]);
}

static void attn_forward(Gpu *g, void *ctx) {
  Attn *a = ctx;
  void *args[] = {&a->o, &a->lse, &a->q, &a->k, &a->v, &a->B, &a->T, &a->H, &a->Hkv, &a->scale};
  int wg = stepc_flash_wg(g->cc_major);
  gpu_launch(g, a->D == 64 ? "flash_attention_forward_d64" : "flash_attention_forward_d128",
             (unsigned)(a->T / stepc_flash_fwd_rows(wg)), (unsigned)a->H, (unsigned)a->B, STEPC_FLASH_THREADS,
             stepc_flash_fwd_smem(a->D, wg), args);
}

static void attn_backward(Gpu *g, void *ctx) {
  Attn *a = ctx;
  int wg = stepc_flash_wg(g->cc_major);
  long rows = (long)a->B * a->T * a->H;
  void *pre[] = {&a->dsum, &a->dout, &a->o, &a->B, &a->T, &a->H, &a->D};
  gpu_launch(g, "flash_attention_backward_preprocess", (unsigned)((rows * 32 + STEPC_FLASH_PRE_THREADS - 1) / STEPC_FLASH_PRE_THREADS),
             1, 1, STEPC_FLASH_PRE_THREADS, 0, pre);
  void *kv[] = {&a->dk, &a->dv, &a->q, &a->k, &a->v, &a->dout, &a->lse, &a->dsum, &a->B, &a->T, &a->H, &a->Hkv, &a->scale};
  gpu_launch(g, a->D == 64 ? "flash_attention_backward_dkdv_d64" : "flash_attention_backward_dkdv_d128",
             (unsigned)(a->T / STEPC_FLASH_DKDV_KEYS), (unsigned)a->Hkv, (unsigned)a->B, STEPC_FLASH_THREADS,
             stepc_flash_dkdv_smem(a->D, wg), kv);
  void *q[] = {&a->dq, &a->q, &a->k, &a->v, &a->dout, &a->lse, &a->dsum, &a->B, &a->T, &a->H, &a->Hkv, &a->scale};
  gpu_launch(g, a->D == 64 ? "flash_attention_backward_dq_d64" : "flash_attention_backward_dq_d128",
             (unsigned)(a->T / stepc_flash_dq_rows(wg)), (unsigned)a->H, (unsigned)a->B, STEPC_FLASH_THREADS,
             stepc_flash_dq_smem(a->D, wg), q);
}

static void attn_both(Gpu *g, void *ctx) {
  attn_forward(g, ctx);
  attn_backward(g, ctx);
}

static double *get_bf16(Gpu *g, CUdeviceptr p, long n) {
  uint16_t *h = malloc(2 * (size_t)n);
  double *d = malloc(sizeof *d * (size_t)n);
  gpu_get(g, h, p, 2 * (size_t)n);
  bf16_to_double(h, d, n);
  free(h);
  return d;
}

static void check_scaled(Gpu *g, const char *name, const double *got, const double *ref, long n, double frac) {
  double m = 0;
  for (long i = 0; i < n; i++) m = fmax(m, fabs(ref[i]));
  gpu_check(g, name, got, ref, n, frac * m, 1.0 / 128);
}

static void *snapshot(Gpu *g, CUdeviceptr p, size_t bytes) {
  void *h = malloc(bytes);
  gpu_get(g, h, p, bytes);
  return h;
}

static void test_flash_config(Gpu *g, Rng *r, int B, int T, int H, int Hkv, int D) {
  Attn a = {.B = B, .T = T, .H = H, .Hkv = Hkv, .D = D, .scale = (float)(1.0 / sqrt(D))};
  long nq = (long)B * T * H * D, nk = (long)B * T * Hkv * D, ns = (long)B * H * T;
  uint16_t *hq = malloc(2 * nq), *hk = malloc(2 * nk), *hv = malloc(2 * nk), *hd = malloc(2 * nq);
  double *q = malloc(8 * nq), *k = malloc(8 * nk), *v = malloc(8 * nk), *dout = malloc(8 * nq);
  rand_bf16(r, hq, q, nq, 2), rand_bf16(r, hk, k, nk, 2), rand_bf16(r, hv, v, nk, 1), rand_bf16(r, hd, dout, nq, 1);
  attn_alloc(g, &a, hq, hk, hv, hd);
  attn_both(g, &a);
  gpu_sync(g);

  double *O = malloc(8 * nq), *L = malloc(8 * ns), *dQ = malloc(8 * nq), *dK = malloc(8 * nk), *dV = malloc(8 * nk);
  ref_attention(O, L, dQ, dK, dV, q, k, v, dout, B, T, H, Hkv, D, D, a.scale);
  char name[128];
  double *got = get_bf16(g, a.o, nq);
  snprintf(name, sizeof name, "flash fwd O   d%d B%d T%d H%d/%d", D, B, T, H, Hkv);
  check_scaled(g, name, got, O, nq, 1e-2);
  free(got);
  float *lf = malloc(4 * ns);
  gpu_get(g, lf, a.lse, 4 * ns);
  got = malloc(8 * ns);
  float_to_double(lf, got, ns);
  snprintf(name, sizeof name, "flash fwd LSE d%d B%d T%d H%d/%d", D, B, T, H, Hkv);
  gpu_check(g, name, got, L, ns, 2e-4, 1e-5);
  free(got), free(lf);
  struct {
    const char *what;
    CUdeviceptr p;
    const double *ref;
    long n;
  } grads[] = {{"dQ", a.dq, dQ, nq}, {"dK", a.dk, dK, nk}, {"dV", a.dv, dV, nk}};
  for (int i = 0; i < 3; i++) {
    got = get_bf16(g, grads[i].p, grads[i].n);
    snprintf(name, sizeof name, "flash bwd %s  d%d B%d T%d H%d/%d", grads[i].what, D, B, T, H, Hkv);
    check_scaled(g, name, got, grads[i].ref, grads[i].n, 1e-2);
    free(got);
  }

  /* Determinism: a second forward + backward reproduces every output bit for bit. */
  void *o1 = snapshot(g, a.o, 2 * nq), *l1 = snapshot(g, a.lse, 4 * ns), *q1 = snapshot(g, a.dq, 2 * nq),
       *k1 = snapshot(g, a.dk, 2 * nk), *v1 = snapshot(g, a.dv, 2 * nk);
  attn_both(g, &a);
  void *o2 = snapshot(g, a.o, 2 * nq), *l2 = snapshot(g, a.lse, 4 * ns), *q2 = snapshot(g, a.dq, 2 * nq),
       *k2 = snapshot(g, a.dk, 2 * nk), *v2 = snapshot(g, a.dv, 2 * nk);
  int same = !memcmp(o1, o2, 2 * nq) && !memcmp(l1, l2, 4 * ns) && !memcmp(q1, q2, 2 * nq) &&
             !memcmp(k1, k2, 2 * nk) && !memcmp(v1, v2, 2 * nk);
  snprintf(name, sizeof name, "flash deterministic d%d (O, LSE, dQ, dK, dV)", D);
  gpu_check_true(g, name, same, same ? "bitwise equal" : "outputs differ between runs");
  void *bufs[] = {o1, l1, q1, k1, v1, o2, l2, q2, k2, v2, hq, hk, hv, hd, q, k, v, dout, O, L, dQ, dK, dV};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
  attn_free(g, &a);
}

void test_attention(Gpu *g) {
  Rng r = {0xa77e};
  test_flash_config(g, &r, 2, 384, 4, 2, 64);  /* GQA 2, three query tiles */
  test_flash_config(g, &r, 1, 256, 8, 2, 128); /* GQA 4 */
  test_flash_config(g, &r, 1, 128, 2, 2, 64);  /* MHA, one tile */
  test_flash_config(g, &r, 1, 384, 4, 4, 128); /* MHA */
}

/* O rows (b, h, i) against fp64 at bench size, where the full reference would take minutes. */
static void spot_check(Gpu *g, const Attn *a, const uint16_t *qh, const uint16_t *kh, const uint16_t *vh,
                       const char *label) {
  long nq = (long)a->B * a->T * a->H * a->D;
  uint16_t *ho = malloc(2 * nq);
  gpu_get(g, ho, a->o, 2 * nq);
  int rows = 24, D = a->D;
  double *got = malloc(8 * rows * D), *want = malloc(8 * rows * D), *s = malloc(8 * (size_t)a->T);
  for (int k = 0; k < rows; k++) {
    int b = k % a->B, h = (k * 7) % a->H, i = k == 0 ? 0 : (int)((long)a->T * k / rows + (k % 5));
    if (k == rows - 1) i = a->T - 1;
    int hk = h / (a->H / a->Hkv);
    const uint16_t *q = qh + (((long)b * a->T + i) * a->H + h) * D;
    double m = -INFINITY, sum = 0;
    for (int j = 0; j <= i; j++) {
      const uint16_t *kk = kh + (((long)b * a->T + j) * a->Hkv + hk) * D;
      double dot = 0;
      for (int d = 0; d < D; d++) dot += (double)host_bf16_to_f32(q[d]) * host_bf16_to_f32(kk[d]);
      s[j] = dot * a->scale;
      m = fmax(m, s[j]);
    }
    for (int j = 0; j <= i; j++) s[j] = exp(s[j] - m), sum += s[j];
    for (int d = 0; d < D; d++) {
      double o = 0;
      for (int j = 0; j <= i; j++) o += s[j] * host_bf16_to_f32(vh[(((long)b * a->T + j) * a->Hkv + hk) * D + d]);
      want[k * D + d] = o / sum;
      got[k * D + d] = host_bf16_to_f32(ho[(((long)b * a->T + i) * a->H + h) * D + d]);
    }
  }
  char name[96];
  snprintf(name, sizeof name, "flash fwd O spot rows at %s", label);
  check_scaled(g, name, got, want, (long)rows * D, 1e-2);
  free(ho), free(got), free(want), free(s);
}

static void bench_shape(Gpu *g, const char *label, int B, int T, int H, int Hkv, int D) {
  Rng r = {0xbe9c};
  Attn a = {.B = B, .T = T, .H = H, .Hkv = Hkv, .D = D, .scale = (float)(1.0 / sqrt(D))};
  long nq = (long)B * T * H * D, nk = (long)B * T * Hkv * D;
  uint16_t *hq = malloc(2 * nq), *hk = malloc(2 * nk), *hv = malloc(2 * nk), *hd = malloc(2 * nq);
  rand_bf16(&r, hq, NULL, nq, 2), rand_bf16(&r, hk, NULL, nk, 2), rand_bf16(&r, hv, NULL, nk, 1);
  rand_bf16(&r, hd, NULL, nq, 1);
  attn_alloc(g, &a, hq, hk, hv, hd);
  attn_forward(g, &a);
  gpu_sync(g);
  spot_check(g, &a, hq, hk, hv, label);
  double tf = gpu_time_ms(g, attn_forward, &a, 3, 10);
  double tb = gpu_time_ms(g, attn_backward, &a, 3, 10);
  double tfb = gpu_time_ms(g, attn_both, &a, 2, 10);
  double flops = 2.0 * B * H * (double)T * T * D; /* causal forward, as docs/benchmarks.md */
  printf("BENCH %-34s fwd %8.3f ms %6.1f TFLOP/s | bwd %8.3f ms | fwd+bwd %8.3f ms %6.1f TFLOP/s\n", label, tf,
         flops / tf * 1e-9, tb, tfb, 3.5 * flops / tfb * 1e-9);
  fflush(stdout);
  attn_free(g, &a);
  free(hq), free(hk), free(hv), free(hd);
}

void bench_attention(Gpu *g) {
  bench_shape(g, "M: b2 h32/8 s4096 d64", 2, 4096, 32, 8, 64);
  bench_shape(g, "L8: b1 h32/8 s8192 d128", 1, 8192, 32, 8, 128);
  bench_shape(g, "S: b16 h12/12 s1024 d64", 16, 1024, 12, 12, 64);
}

/* Tile-size tuning: with STEPC_FLASH_VARIANTS set in the environment, gpu_kernels compiles the
 * kernels with tests/gpu/flash_variants.cuh appended (extra instantiations of flash.cuh's tile
 * templates, never in a shipped cubin) and times each against the production kernel at the bench shapes; outputs are
 * compared with the production kernel's (0 where only the launch shape differs, bf16 rounding
 * where the key-tile size changes the summation order). Update this table with the kernels. On
 * Hopper the production kernels are the wgmma ones, so the mma.sync rows (the production kernels
 * elsewhere) show the two instruction sets side by side. */
typedef struct {
  const char *name;
  int kind, D, tile, threads; /* kind 0 fwd (tile = rows), 1 dkdv (tile = keys), 2 dq (tile = rows) */
  unsigned smem;
  int wg; /* in sm_90a cubins only (the wgmma kernels) */
} Variant;

static double max_rel_diff(Gpu *g, CUdeviceptr a, CUdeviceptr b, long n) {
  double *x = get_bf16(g, a, n), *y = get_bf16(g, b, n), m = 0, d = 0;
  for (long i = 0; i < n; i++) m = fmax(m, fabs(y[i])), d = fmax(d, fabs(x[i] - y[i]));
  free(x), free(y);
  return d / m;
}

typedef struct {
  Attn *a;
  const Variant *v;
  CUdeviceptr o1, o2;
} VarCtx;

static void var_launch(Gpu *g, void *ctx) {
  VarCtx *c = ctx;
  Attn *a = c->a;
  const Variant *v = c->v;
  unsigned gx = (unsigned)(a->T / v->tile);
  if (v->kind == 0) {
    void *args[] = {&c->o1, &a->lse, &a->q, &a->k, &a->v, &a->B, &a->T, &a->H, &a->Hkv, &a->scale};
    gpu_launch(g, v->name, gx, (unsigned)a->H, (unsigned)a->B, (unsigned)v->threads, v->smem, args);
  } else if (v->kind == 1) {
    void *kv[] = {&c->o1, &c->o2, &a->q, &a->k, &a->v, &a->dout, &a->lse, &a->dsum, &a->B, &a->T, &a->H, &a->Hkv, &a->scale};
    gpu_launch(g, v->name, gx, (unsigned)a->Hkv, (unsigned)a->B, (unsigned)v->threads, v->smem, kv);
  } else {
    void *q[] = {&c->o1, &a->q, &a->k, &a->v, &a->dout, &a->lse, &a->dsum, &a->B, &a->T, &a->H, &a->Hkv, &a->scale};
    gpu_launch(g, v->name, gx, (unsigned)a->H, (unsigned)a->B, (unsigned)v->threads, v->smem, q);
  }
}

static unsigned vsm_fwd(int D, int br, int bc) { return (unsigned)((br + 4 * bc) * (D + 8) * 2); }
static unsigned vsm_dkdv(int D, int bc, int bq) { return (unsigned)((2 * bc + 4 * bq) * (D + 8) * 2 + 16 * bq); }
static unsigned vsm_dq(int D, int br, int bk) { return (unsigned)((2 * br + 4 * bk) * (D + 8) * 2); }
/* the wgmma kernels: 64 rows or keys per block */
static unsigned wsm_fwd(int D, int bc) { return stepc_flash_wg_tiles_smem(D, 64, bc); }
static unsigned wsm_dkdv(int D, int bq) { return stepc_flash_wg_tiles_smem(D, 128, bq) + 16 * bq; }
static unsigned wsm_dq(int D, int bk) { return stepc_flash_wg_tiles_smem(D, 128, bk); }

static void bench_variants_shape(Gpu *g, const char *label, int B, int T, int H, int Hkv, int D) {
  int wg = stepc_flash_wg(g->cc_major);
  Variant vs[] = {
      {"flash_fwd_v64_4_2_64_r", 0, 64, 128, 128, vsm_fwd(64, 128, 64), 0},
      {"flash_fwd_v64_4_2_64_s", 0, 64, 128, 128, vsm_fwd(64, 128, 64), 0},
      {"flash_fwd_v64_4_2_128_r", 0, 64, 128, 128, vsm_fwd(64, 128, 128), 0},
      {"flash_fwd_v64_8_1_64_r", 0, 64, 128, 256, vsm_fwd(64, 128, 64), 0},
      {"flash_fwd_v128_4_2_64_s", 0, 128, 128, 128, vsm_fwd(128, 128, 64), 0},
      {"flash_fwd_v128_4_2_32_s", 0, 128, 128, 128, vsm_fwd(128, 128, 32), 0},
      {"flash_fwd_v128_8_1_64_r", 0, 128, 128, 256, vsm_fwd(128, 128, 64), 0},
      {"flash_fwd_v128_4_1_64_r", 0, 128, 64, 128, vsm_fwd(128, 64, 64), 0},
      {"flash_dkdv_v64_4_1_64", 1, 64, 64, 128, vsm_dkdv(64, 64, 64), 0},
      {"flash_dkdv_v64_4_2_32", 1, 64, 128, 128, vsm_dkdv(64, 128, 32), 0},
      {"flash_dkdv_v64_4_2_16", 1, 64, 128, 128, vsm_dkdv(64, 128, 16), 0},
      {"flash_dkdv_v64_8_1_64", 1, 64, 128, 256, vsm_dkdv(64, 128, 64), 0},
      {"flash_dkdv_v128_4_1_64", 1, 128, 64, 128, vsm_dkdv(128, 64, 64), 0},
      {"flash_dkdv_v128_4_1_32", 1, 128, 64, 128, vsm_dkdv(128, 64, 32), 0},
      {"flash_dkdv_v128_8_1_32", 1, 128, 128, 256, vsm_dkdv(128, 128, 32), 0},
      {"flash_dq_v64_4_2_32", 2, 64, 128, 128, vsm_dq(64, 128, 32), 0},
      {"flash_dq_v64_4_1_64", 2, 64, 64, 128, vsm_dq(64, 64, 64), 0},
      {"flash_dq_v64_4_2_64", 2, 64, 128, 128, vsm_dq(64, 128, 64), 0},
      {"flash_dq_v128_4_2_32", 2, 128, 128, 128, vsm_dq(128, 128, 32), 0},
      {"flash_dq_v128_4_1_32", 2, 128, 64, 128, vsm_dq(128, 64, 32), 0},
      {"flash_dq_v128_4_1_64", 2, 128, 64, 128, vsm_dq(128, 64, 64), 0},
      /* Hopper only (sm_90a cubins): the production wgmma kernels (the reference), then variants */
      {"flash_attention_forward_d64", 0, 64, 64, 128, stepc_flash_fwd_smem(64, 1), 1},
      {"flash_attention_forward_d128", 0, 128, 64, 128, stepc_flash_fwd_smem(128, 1), 1},
      {"flash_attention_backward_dkdv_d64", 1, 64, 64, 128, stepc_flash_dkdv_smem(64, 1), 1},
      {"flash_attention_backward_dkdv_d128", 1, 128, 64, 128, stepc_flash_dkdv_smem(128, 1), 1},
      {"flash_attention_backward_dq_d64", 2, 64, 64, 128, stepc_flash_dq_smem(64, 1), 1},
      {"flash_attention_backward_dq_d128", 2, 128, 64, 128, stepc_flash_dq_smem(128, 1), 1},
      {"flash_wg_fwd_v64_128", 0, 64, 64, 128, wsm_fwd(64, 128), 1},
      {"flash_wg_fwd_v64_32", 0, 64, 64, 128, wsm_fwd(64, 32), 1},
      {"flash_wg_dkdv_v64_32", 1, 64, 64, 128, wsm_dkdv(64, 32), 1},
      {"flash_wg_dq_v64_32", 2, 64, 64, 128, wsm_dq(64, 32), 1},
      {"flash_wg_fwd_v128_128", 0, 128, 64, 128, wsm_fwd(128, 128), 1},
      {"flash_wg_fwd_v128_32", 0, 128, 64, 128, wsm_fwd(128, 32), 1},
      {"flash_wg_dkdv_v64_64", 1, 64, 64, 128, wsm_dkdv(64, 64), 1},
      {"flash_wg_dkdv_v128_32", 1, 128, 64, 128, wsm_dkdv(128, 32), 1},
      {"flash_wg_dq_v64_128", 2, 64, 64, 128, wsm_dq(64, 128), 1},
      {"flash_wg_dq_v128_32", 2, 128, 64, 128, wsm_dq(128, 32), 1},
  };
  Rng r = {0xbe9d};
  Attn a = {.B = B, .T = T, .H = H, .Hkv = Hkv, .D = D, .scale = (float)(1.0 / sqrt(D))};
  long nq = (long)B * T * H * D, nk = (long)B * T * Hkv * D;
  uint16_t *hq = malloc(2 * nq), *hk = malloc(2 * nk), *hv = malloc(2 * nk), *hd = malloc(2 * nq);
  rand_bf16(&r, hq, NULL, nq, 2), rand_bf16(&r, hk, NULL, nk, 2), rand_bf16(&r, hv, NULL, nk, 1);
  rand_bf16(&r, hd, NULL, nq, 1);
  attn_alloc(g, &a, hq, hk, hv, hd);
  attn_both(g, &a); /* production O, LSE, Dsum, dQ, dK, dV as the reference */
  gpu_sync(g);
  CUdeviceptr o1 = gpu_alloc(g, 2 * nq), o2 = gpu_alloc(g, 2 * nq);
  double flops = 2.0 * B * H * (double)T * T * D;
  for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) {
    if (vs[i].D != D || (vs[i].wg && !wg)) continue;
    VarCtx c = {&a, &vs[i], o1, o2};
    CUdeviceptr lse_keep = a.lse;
    if (vs[i].kind == 0) a.lse = gpu_alloc(g, 4 * (size_t)B * H * T);
    var_launch(g, &c);
    gpu_sync(g);
    double ms = gpu_time_ms(g, var_launch, &c, 2, 10);
    double err = vs[i].kind == 0   ? max_rel_diff(g, o1, a.o, nq)
                 : vs[i].kind == 1 ? fmax(max_rel_diff(g, o1, a.dk, nk), max_rel_diff(g, o2, a.dv, nk))
                                   : max_rel_diff(g, o1, a.dq, nq);
    if (vs[i].kind == 0) gpu_free(g, a.lse), a.lse = lse_keep;
    /* fwd: 2 products; dkdv: 4; dq: 3 (per causal tile pair, each 2*16*16*D-like) */
    double mult = vs[i].kind == 0 ? 1.0 : vs[i].kind == 1 ? 2.0 : 1.5;
    printf("VAR %-8s %-36s %8.3f ms %6.1f TFLOP/s(done)  maxdiff/max %.2e\n", label, vs[i].name, ms,
           mult * flops / ms * 1e-9, err);
    fflush(stdout);
  }
  gpu_free(g, o1), gpu_free(g, o2);
  attn_free(g, &a);
  free(hq), free(hk), free(hv), free(hd);
}

void bench_attention_variants(Gpu *g) {
  bench_variants_shape(g, "M", 2, 4096, 32, 8, 64);
  bench_variants_shape(g, "L8", 1, 8192, 32, 8, 128);
  bench_variants_shape(g, "S", 16, 1024, 12, 12, 64);
}
