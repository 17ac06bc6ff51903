/* host_bits.c — bf16 rounding and the Philox dropout mask on the host (see host_bits.h). */
#include "host_bits.h"

#include <string.h>

void host_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n1 = (uint32_t)p1, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1,
             n3 = (uint32_t)p0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

int host_dropout_keep(uint64_t seed, uint32_t op_id, uint64_t i, float p) {
  uint64_t g = i >> 2;
  uint32_t ctr[4] = {(uint32_t)g, (uint32_t)(g >> 32), op_id, 0},
           key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, out[4];
  host_philox4x32_10(ctr, key, out);
  return (out[i & 3] >> 8) >= (uint32_t)(p * 16777216.0f);
}

uint16_t host_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float host_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
