/* test_kernel_ref.c — the fp64 references that the GPU tests compare against (tests/gpu/ref.c)
 * are themselves right: every backward matches central finite differences of its forward, the
 * Philox generator reproduces the Random123 known-answer vectors, the host bf16 rounding is
 * round-to-nearest-even. Runs in CI without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gpu/ref.c"

static int failures;
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                     \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static unsigned long long rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* in [-1, 1) */
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

typedef struct {
  int N, C, T, H, Hkv, D, B, F, V;
  double scale, base, factor;
  const double *w, *b;
  const int *tokens;
} Ctx;

typedef void (*FwdFn)(const Ctx *, const double *x, double *y);
typedef void (*BwdFn)(const Ctx *, const double *x, const double *dy, double *dx);

/* L(x) = <dy, f(x)>; checks dL/dx_i = bwd(dy)_i on up to 40 coordinates. */
static void fd_check(const char *name, FwdFn f, BwdFn g, const Ctx *c, int nx, int ny) {
  double *x = malloc(sizeof *x * nx), *dx = calloc(nx, sizeof *dx), *dy = malloc(sizeof *dy * ny),
         *y = malloc(sizeof *y * ny);
  for (int i = 0; i < nx; i++) x[i] = urand();
  for (int i = 0; i < ny; i++) dy[i] = urand();
  g(c, x, dy, dx);
  double worst = 0;
  for (int k = 0; k < 40 && k < nx; k++) {
    int i = (int)((k * 7919L) % nx);
    double save = x[i], h = 1e-5, lp = 0, lm = 0;
    x[i] = save + h;
    f(c, x, y);
    for (int j = 0; j < ny; j++) lp += dy[j] * y[j];
    x[i] = save - h;
    f(c, x, y);
    for (int j = 0; j < ny; j++) lm += dy[j] * y[j];
    x[i] = save;
    double fd = (lp - lm) / (2 * h), err = fabs(fd - dx[i]) / (1e-6 + fabs(fd));
    if (err > worst) worst = err;
  }
  if (worst > 1e-5) fprintf(stderr, "%s: finite-difference mismatch, worst relative error %.3g\n", name, worst);
  CHECK(worst <= 1e-5);
  free(x), free(dx), free(dy), free(y);
}

static void rms_f(const Ctx *c, const double *x, double *y) {
  double *r = malloc(sizeof *r * c->N);
  ref_norm_forward(y, NULL, r, x, c->w, NULL, c->N, c->C, 1e-5);
  free(r);
}
static void rms_g(const Ctx *c, const double *x, const double *dy, double *dx) {
  double *dw = calloc(c->C, sizeof *dw);
  ref_norm_backward(dx, dw, NULL, dy, x, c->w, c->N, c->C, 1e-5, 0);
  free(dw);
}
static void ln_f(const Ctx *c, const double *x, double *y) {
  double *r = malloc(sizeof *r * c->N * 2);
  ref_norm_forward(y, r, r + c->N, x, c->w, c->b, c->N, c->C, 1e-5);
  free(r);
}
static void ln_g(const Ctx *c, const double *x, const double *dy, double *dx) {
  double *dw = calloc(c->C * 2, sizeof *dw);
  ref_norm_backward(dx, dw, dw + c->C, dy, x, c->w, c->N, c->C, 1e-5, 1);
  free(dw);
}
/* LayerNorm as a function of (weight, bias) = x[0..2C), input fixed in c->b. */
static void lnw_f(const Ctx *c, const double *wb, double *y) {
  double *r = malloc(sizeof *r * c->N * 2);
  ref_norm_forward(y, r, r + c->N, c->b, wb, wb + c->C, c->N, c->C, 1e-5);
  free(r);
}
static void lnw_g(const Ctx *c, const double *wb, const double *dy, double *dwb) {
  double *dx = malloc(sizeof *dx * c->N * c->C);
  ref_norm_backward(dx, dwb, dwb + c->C, dy, c->b, wb, c->N, c->C, 1e-5, 1);
  free(dx);
}
static void rope_f(const Ctx *c, const double *x, double *y) { ref_rope(y, x, c->B, c->T, c->H, c->D, c->base, c->factor, 1); }
static void rope_g(const Ctx *c, const double *x, const double *dy, double *dx) {
  (void)x;
  ref_rope(dx, dy, c->B, c->T, c->H, c->D, c->base, c->factor, -1);
}
static void sm_f(const Ctx *c, const double *x, double *y) { ref_softmax_causal_forward(y, x, c->N, c->T, c->scale); }
static void sm_g(const Ctx *c, const double *x, const double *dy, double *dx) {
  double *p = malloc(sizeof *p * c->N * c->T * c->T);
  ref_softmax_causal_forward(p, x, c->N, c->T, c->scale);
  ref_softmax_causal_backward(dx, dy, p, c->N, c->T, c->scale);
  free(p);
}
static void swi_f(const Ctx *c, const double *x, double *y) { ref_swiglu_forward(y, x, c->N, c->F); }
static void swi_g(const Ctx *c, const double *x, const double *dy, double *dx) { ref_swiglu_backward(dx, dy, x, c->N, c->F); }
static void gelu_f(const Ctx *c, const double *x, double *y) {
  for (int i = 0; i < c->N; i++) y[i] = ref_gelu(x[i]);
}
static void gelu_g(const Ctx *c, const double *x, const double *dy, double *dx) {
  for (int i = 0; i < c->N; i++) dx[i] = dy[i] * ref_gelu_grad(x[i]);
}
/* Attention of x = [Q | K | V]. */
static void att_f(const Ctx *c, const double *x, double *y) {
  long nq = (long)c->B * c->T * c->H * c->D, nk = (long)c->B * c->T * c->Hkv * c->D;
  double *lse = malloc(sizeof *lse * c->B * c->H * c->T);
  ref_attention_forward(y, lse, x, x + nq, x + nq + nk, c->B, c->T, c->H, c->Hkv, c->D, c->scale);
  free(lse);
}
static void att_g(const Ctx *c, const double *x, const double *dy, double *dx) {
  long nq = (long)c->B * c->T * c->H * c->D, nk = (long)c->B * c->T * c->Hkv * c->D;
  ref_attention_backward(dx, dx + nq, dx + nq + nk, dy, x, x + nq, x + nq + nk, c->B, c->T, c->H, c->Hkv, c->D,
                         c->scale);
}
/* Cross-entropy: y = losses; the loss weight dloss is folded into dy. */
static void ce_f(const Ctx *c, const double *x, double *y) {
  double *d = malloc(sizeof *d * c->N * (c->V + 8));
  ref_cross_entropy(y, d, x, c->tokens, c->N, c->V, c->V + 8, 1.0);
  free(d);
}
static void ce_g(const Ctx *c, const double *x, const double *dy, double *dx) {
  double *l = malloc(sizeof *l * c->N);
  ref_cross_entropy(l, dx, x, c->tokens, c->N, c->V, c->V + 8, 1.0);
  for (int n = 0; n < c->N; n++)
    for (int j = 0; j < c->V + 8; j++) dx[(long)n * (c->V + 8) + j] *= dy[n];
  free(l);
}

static void test_gradients(void) {
  double w[48], b[48], xin[5 * 48];
  for (int i = 0; i < 48; i++) w[i] = 1 + 0.5 * urand(), b[i] = urand();
  for (int i = 0; i < 5 * 48; i++) xin[i] = urand();
  Ctx c = {.N = 5, .C = 48, .w = w, .b = b};
  fd_check("rmsnorm", rms_f, rms_g, &c, 5 * 48, 5 * 48);
  fd_check("layernorm", ln_f, ln_g, &c, 5 * 48, 5 * 48);
  Ctx cw = {.N = 5, .C = 48, .b = xin};
  fd_check("layernorm weight/bias", lnw_f, lnw_g, &cw, 2 * 48, 5 * 48);
  Ctx cr = {.B = 2, .T = 5, .H = 3, .D = 8, .base = 10000};
  fd_check("rope", rope_f, rope_g, &cr, 2 * 5 * 3 * 8, 2 * 5 * 3 * 8);
  Ctx cs = {.N = 3, .T = 7, .scale = 0.7};
  fd_check("softmax_causal", sm_f, sm_g, &cs, 3 * 49, 3 * 49);
  Ctx cg = {.N = 4, .F = 8};
  fd_check("swiglu", swi_f, swi_g, &cg, 4 * 16, 4 * 8);
  Ctx ce = {.N = 64};
  fd_check("gelu", gelu_f, gelu_g, &ce, 64, 64);
  Ctx ca = {.B = 2, .T = 6, .H = 4, .Hkv = 2, .D = 4, .scale = 0.5};
  long nq = 2 * 6 * 4 * 4, nk = 2 * 6 * 2 * 4;
  fd_check("attention (GQA, causal)", att_f, att_g, &ca, (int)(nq + 2 * nk), (int)nq);
  int targets[4] = {3, 0, -1, 9};
  Ctx cx = {.N = 4, .V = 10, .tokens = targets};
  fd_check("cross_entropy", ce_f, ce_g, &cx, 4 * 18, 4);
}

static void test_attention_lse(void) {
  /* One query row attends only to itself: O = V, LSE = scale * q.k. */
  double Q[4] = {1, 2, 3, 4}, K[4] = {0.5, 0.5, 0.5, 0.5}, V[4] = {7, 8, 9, 10}, O[4], L[1];
  ref_attention_forward(O, L, Q, K, V, 1, 1, 1, 1, 4, 0.5);
  CHECK(fabs(L[0] - 2.5) < 1e-12 && O[0] == 7 && O[3] == 10);
}

static void test_philox(void) {
  /* Random123 kat_vectors, philox4x32_10. */
  uint32_t out[4];
  uint32_t c0[4] = {0, 0, 0, 0}, k0[2] = {0, 0};
  ref_philox4x32_10(c0, k0, out);
  CHECK(out[0] == 0x6627e8d5u && out[1] == 0xe169c58du && out[2] == 0xbc57ac4cu && out[3] == 0x9b00dbd8u);
  uint32_t c1[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, k1[2] = {0xffffffffu, 0xffffffffu};
  ref_philox4x32_10(c1, k1, out);
  CHECK(out[0] == 0x408f276du && out[1] == 0x41c83b0eu && out[2] == 0xa20bc7c6u && out[3] == 0x6d5451fdu);
  uint32_t c2[4] = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, k2[2] = {0xa4093822u, 0x299f31d0u};
  ref_philox4x32_10(c2, k2, out);
  CHECK(out[0] == 0xd16cfe09u && out[1] == 0x94fdccebu && out[2] == 0x5001e420u && out[3] == 0x24126ea1u);
  /* The keep rate is 1 - p. */
  long kept = 0, n = 200000;
  for (long i = 0; i < n; i++) kept += ref_dropout_keep(1234, 7, (uint64_t)i, 0.1f);
  CHECK(fabs((double)kept / n - 0.9) < 0.005);
  CHECK(ref_dropout_keep(1, 1, 5, 0.0f) == 1);
}

static void test_bf16(void) {
  CHECK(ref_f32_to_bf16(1.0f) == 0x3f80);
  CHECK(ref_bf16_to_f32(0x3f80) == 1.0f);
  CHECK(ref_f32_to_bf16(1.0f + 1.0f / 256) == 0x3f80);             /* tie: to even */
  CHECK(ref_f32_to_bf16(1.0f + 3.0f / 256) == 0x3f82);             /* tie: to even, upward */
  CHECK(ref_f32_to_bf16(1.0f + 1.5f / 256) == 0x3f81);             /* above the tie */
  CHECK(ref_f32_to_bf16(-2.0f) == 0xc000);
}

int main(void) {
  test_gradients();
  test_attention_lse();
  test_philox();
  test_bf16();
  if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
