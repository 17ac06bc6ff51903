/* test_host_bits.c — the device's bit-level conventions the GPU tests reproduce on the host
 * (tests/gpu/host_bits.c) are right: the Philox generator reproduces the Random123 known-answer
 * vectors and keeps 1 - p, the host bf16 rounding is round-to-nearest-even. Runs in CI without a
 * GPU. (The ops' own references, which the GPU tests compare kernels against, are checked against
 * finite differences by test_op_grad.c.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gpu/host_bits.c"

static int failures;
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                     \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static void test_philox(void) {
  /* Random123 kat_vectors, philox4x32_10. */
  uint32_t out[4];
  uint32_t c0[4] = {0, 0, 0, 0}, k0[2] = {0, 0};
  host_philox4x32_10(c0, k0, out);
  CHECK(out[0] == 0x6627e8d5u && out[1] == 0xe169c58du && out[2] == 0xbc57ac4cu && out[3] == 0x9b00dbd8u);
  uint32_t c1[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, k1[2] = {0xffffffffu, 0xffffffffu};
  host_philox4x32_10(c1, k1, out);
  CHECK(out[0] == 0x408f276du && out[1] == 0x41c83b0eu && out[2] == 0xa20bc7c6u && out[3] == 0x6d5451fdu);
  uint32_t c2[4] = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, k2[2] = {0xa4093822u, 0x299f31d0u};
  host_philox4x32_10(c2, k2, out);
  CHECK(out[0] == 0xd16cfe09u && out[1] == 0x94fdccebu && out[2] == 0x5001e420u && out[3] == 0x24126ea1u);
  /* The keep rate is 1 - p. */
  long kept = 0, n = 200000;
  for (long i = 0; i < n; i++) kept += host_dropout_keep(1234, 7, (uint64_t)i, 0.1f);
  CHECK(fabs((double)kept / n - 0.9) < 0.005);
  CHECK(host_dropout_keep(1, 1, 5, 0.0f) == 1);
}

static void test_bf16(void) {
  CHECK(host_f32_to_bf16(1.0f) == 0x3f80);
  CHECK(host_bf16_to_f32(0x3f80) == 1.0f);
  CHECK(host_f32_to_bf16(1.0f + 1.0f / 256) == 0x3f80);             /* tie: to even */
  CHECK(host_f32_to_bf16(1.0f + 3.0f / 256) == 0x3f82);             /* tie: to even, upward */
  CHECK(host_f32_to_bf16(1.0f + 1.5f / 256) == 0x3f81);             /* above the tie */
  CHECK(host_f32_to_bf16(-2.0f) == 0xc000);
}

int main(void) {
  test_philox();
  test_bf16();
  if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
