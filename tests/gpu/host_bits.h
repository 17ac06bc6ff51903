/* host_bits.h — the device's bit-level conventions on the host, for the GPU tests' exact checks:
 * bf16 rounding (cvt.rn.bf16.f32) and the Philox4x32-10 dropout mask of kernels/common.cuh. These
 * are not ops (the CPU executor draws its dropout masks from another generator, ir/ops/dropout.c):
 * tests/unit/test_host_bits.c checks them against the Random123 known-answer vectors and
 * round-to-nearest-even by hand. */
#ifndef STEPC_TESTS_GPU_HOST_BITS_H
#define STEPC_TESTS_GPU_HOST_BITS_H

#include <stdint.h>

/* Philox4x32-10 and the dropout keep decision of kernels/common.cuh, bit-exact. */
void host_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
int host_dropout_keep(uint64_t seed, uint32_t op_id, uint64_t i, float p);

/* Host bf16 (round to nearest even), as cvt.rn.bf16.f32 for finite values. */
uint16_t host_f32_to_bf16(float f);
float host_bf16_to_f32(uint16_t h);

#endif
