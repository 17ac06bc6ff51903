/* harness_host.c — the host half of harness.h, shared by the GPU's harness (harness.c) and the
 * CPU's (tests/simt/harness_simt.c): deterministic data, the median of timings and the checks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "host_bits.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double gpu_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

double rng_uniform(Rng *r) {
  r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(r->s >> 11) / 4503599627370496.0 - 1.0;
}

void rand_bf16(Rng *r, uint16_t *h, double *d, long n, double amp) {
  for (long i = 0; i < n; i++) {
    h[i] = host_f32_to_bf16((float)(amp * rng_uniform(r)));
    if (d) d[i] = host_bf16_to_f32(h[i]);
  }
}

void bf16_to_double(const uint16_t *h, double *d, long n) {
  for (long i = 0; i < n; i++)
    d[i] = host_bf16_to_f32(h[i]);
}

void float_to_double(const float *f, double *d, long n) {
  for (long i = 0; i < n; i++)
    d[i] = f[i];
}

int gpu_check(Gpu *g, const char *name, const double *got, const double *ref, long n, double atol,
              double rtol) {
  double max_err = 0, max_ref = 0, worst_ratio = 0;
  long bad = 0, worst = 0;
  for (long i = 0; i < n; i++) {
    double e = fabs(got[i] - ref[i]), lim = atol + rtol * fabs(ref[i]);
    if (fabs(ref[i]) > max_ref) max_ref = fabs(ref[i]);
    if (e > max_err) max_err = e;
    if (!(e <= lim)) { /* NaN fails too */
      bad++;
      if (!(e / lim <= worst_ratio)) worst_ratio = e / lim, worst = i;
    }
  }
  g->checks++;
  if (bad) g->failed++;
  printf("%s %-48s n=%-9ld max_err=%.3e max_ref=%.3e atol=%.1e rtol=%.1e", bad ? "FAIL" : "PASS", name, n,
         max_err, max_ref, atol, rtol);
  if (bad) printf("  %ld bad, worst [%ld] got %.6g want %.6g", bad, worst, got[worst], ref[worst]);
  printf("\n");
  fflush(stdout);
  return !bad;
}

int gpu_check_bitwise(Gpu *g, const char *name, const void *a, const void *b, size_t bytes) {
  const unsigned char *x = a, *y = b;
  size_t diff = 0;
  for (size_t i = 0; i < bytes; i++)
    diff += x[i] != y[i];
  g->checks++;
  if (diff) g->failed++;
  printf("%s %-48s %zu bytes, %zu differ\n", diff ? "FAIL" : "PASS", name, bytes, diff);
  fflush(stdout);
  return !diff;
}

int gpu_check_true(Gpu *g, const char *name, int ok, const char *detail) {
  g->checks++;
  if (!ok) g->failed++;
  printf("%s %-48s %s\n", ok ? "PASS" : "FAIL", name, detail ? detail : "");
  fflush(stdout);
  return ok;
}
