/* fp8_rounding.c — stepc's fp8 formats (ir/ops/fp8.h) against a reference nobody here wrote: CUDA's
 * host conversions from cuda_fp8.h (__nv_cvt_float_to_fp8 with __NV_SATFINITE, the device's
 * cvt.rn.satfinite; __nv_cvt_fp8_to_halfraw), compiled by the host C++ compiler
 * (fp8_cuda_ref.cpp). Both formats: all 256 bytes decode to the same values; every float of a few
 * million (random bit patterns, random values around every binade of the formats, their exact
 * grid points and midpoints, 0, subnormals, ties, +-max, beyond max, +-inf, NaN) encodes to the
 * same byte, and fp8_round gives the value that byte holds. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ops/fp8.h"

unsigned char nv_fp8_encode(float x, int fmt);
float nv_fp8_decode(unsigned char b, int fmt);

static int failures;
static long checked;

static uint64_t rng_state = 0x853c49e6748fea9bull;
static uint32_t next_u32(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng_state >> 33) ^ (uint32_t)(rng_state >> 11);
}

static int same_value(double a, double b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  return a == b && signbit(a) == signbit(b);
}

static void check(float x, int fmt) {
  unsigned char want = nv_fp8_encode(x, fmt);
  uint8_t got = fp8_encode(x, fmt);
  double r = fp8_round(x, fmt), wv = nv_fp8_decode(want, fmt);
  checked++;
  if (got != want || !same_value(r, wv)) {
    if (failures++ < 20)
      fprintf(stderr, "%s: x = %a (%.9g): stepc byte 0x%02x value %a, CUDA byte 0x%02x value %a\n",
              fmt ? "E5M2" : "E4M3", (double)x, (double)x, got, r, want, wv);
  }
}

static void check_bits(uint32_t u, int fmt) {
  float x;
  memcpy(&x, &u, 4);
  check(x, fmt);
}

int main(void) {
  for (int fmt = 0; fmt < 2; fmt++) {
    const char *name = fmt ? "E5M2" : "E4M3";
    /* every byte decodes as CUDA decodes it */
    for (int b = 0; b < 256; b++) {
      double mine = fp8_decode((uint8_t)b, fmt), theirs = nv_fp8_decode((unsigned char)b, fmt);
      if (!same_value(mine, theirs) && failures++ < 20)
        fprintf(stderr, "%s: byte 0x%02x decodes to %a, CUDA %a\n", name, b, mine, theirs);
      /* and a finite value re-encodes to its own byte (CUDA's NaN is 0x7f whatever the sign) */
      if (!isnan(mine) && !isinf(mine)) check((float)mine, fmt);
    }
    /* edge cases */
    const float edges[] = {0.0f,     -0.0f,      INFINITY,        -INFINITY,
                           NAN,      -NAN,       448.0f,          -448.0f,
                           464.0f,   464.00003f, 463.99997f,      480.0f,
                           57344.0f, -57344.0f,  61440.0f,        61439.996f,
                           65536.0f, 1e30f,      -1e30f,          3.4028235e38f,
                           0x1p-9f,  0x1p-10f,   0x1.000002p-10f, 0x1.8p-10f,
                           0x1p-16f, 0x1p-17f,   0x1.000002p-17f, 0x1p-6f,
                           0x1p-14f, 0x1p-149f,  -0x1p-149f,      0x1.2p0f,
                           0x1.1p0f, 0x1.3p0f,   0x1.28p0f,       0x1.38p0f,
                           1.0f,     -1.0f};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
      check(edges[i], fmt);
    /* every grid point, the midpoints between neighbours (ties) and a float either side of each */
    for (int b = 0; b < 127; b++) {
      double lo = fp8_decode((uint8_t)b, fmt), hi = fp8_decode((uint8_t)(b + 1), fmt);
      if (isnan(hi) || isinf(hi)) continue;
      float mid = (float)((lo + hi) / 2);
      float pts[] = {mid, nextafterf(mid, 0), nextafterf(mid, INFINITY), (float)lo, (float)hi};
      for (size_t i = 0; i < sizeof pts / sizeof *pts; i++)
        check(pts[i], fmt), check(-pts[i], fmt);
    }
    /* random bit patterns: every exponent, NaNs and infinities among them */
    for (int i = 0; i < 1000000; i++)
      check_bits(next_u32(), fmt);
    /* random floats in the formats' range: exponent uniform over [emin - 4, emax + 2] */
    for (int i = 0; i < 1000000; i++) {
      uint32_t u = next_u32();
      int e = (int)(u % 40) - (fmt ? 20 : 12);
      float x = ldexpf(1.0f + (float)(next_u32() >> 8) * 0x1p-24f, e);
      check(u & 0x80000000u ? -x : x, fmt);
    }
  }
  printf("fp8 rounding: %ld floats and 2 x 256 bytes checked against cuda_fp8.h, %d mismatches\n", checked,
         failures);
  return failures ? 1 : 0;
}
