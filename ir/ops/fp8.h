/* fp8.h — the two fp8 formats of Hopper's tensor cores (OCP 8-bit floating point: E4M3, max 448,
 * no infinities; E5M2, max 57344) and Transformer Engine's current (per-tensor) scaling, as the
 * fp8 ops of ir/ops/fp8.c compute them, and its delayed scaling's state.
 *
 * Rounding is the hardware's cvt.rn.satfinite: round to nearest, ties to even, subnormals kept
 * (E4M3's smallest 2^-9, E5M2's 2^-16), a finite value or an infinity beyond the largest finite
 * one saturates to it with its sign, NaN stays NaN. tests/unit/fp8_rounding.c checks every bit of
 * it against CUDA's own host conversions (cuda_fp8.h). */
#ifndef STEPC_FP8_H
#define STEPC_FP8_H

#include <stdint.h>

/* An fp8 op's format attribute (FP8_QUANT a.i[0], LINEAR_FP8 a.i[0] and a.i[1]). */
enum { FP8_E4M3 = 0, FP8_E5M2 = 1 };

/* The largest finite value of format fmt: 448 (E4M3) or 57344 (E5M2). */
float fp8_max(int fmt);
/* x rounded to format fmt's grid (RNE, satfinite), as a double: the value the fp8 byte holds. */
double fp8_round(double x, int fmt);
/* The byte that holds fp8_round(x) (sign, exponent, mantissa; NaN 0x7f), and back. */
uint8_t fp8_encode(double x, int fmt);
double fp8_decode(uint8_t b, int fmt);
/* Transformer Engine's current scaling of a tensor whose largest magnitude is amax, in fp32 as
 * kernels/fp8.cuh computes it (compute_scale_from_amax with epsilon 0, no power-of-two rounding):
 * scale = fp8_max / amax, 1 when amax is 0, not finite or NaN, the fp32 maximum where the quotient
 * overflows. The quantized tensor is fp8_round(x * scale); the dequantizing factor its op saves is
 * 1 / scale. */
float fp8_scale(float amax, int fmt);

/* Transformer Engine's delayed scaling (DelayedScaling; Megatron's fp8_recipe = "delayed"). The
 * state of the n fp8 tensors of one kind (the linears' inputs, their weights, their output
 * gradients) is one fp32 tensor (1 + len, n), len = fp8_amax_history_len; column j is tensor j:
 *   row 0         its scale; 0 stands for TE's initial scale 1 (persistent tensors start zeroed)
 *   rows 1..len   its amax history, TE's amax_history[0..len): row 1 the current entry, into
 *                 which every cast of the tensor since the last update folds max |x| (TE's casts
 *                 atomicMax into amax_history[0]), rows 2.. the older ones
 * A cast multiplies by fp8_delayed_scale(row 0) and records its amax; it never reads row 1. The
 * update (FP8_SCALE_UPDATE, TE's amax_and_scale_update) then rolls and rescales every column. */
enum { FP8_AMAX_MOST_RECENT = 0, FP8_AMAX_MAX = 1 };
static inline float fp8_delayed_scale(float stored) { return stored == 0.0f ? 1.0f : stored; }
/* fp8_max(fmt) / 2^margin in fp32, as TE's fp8_dtype_max(dtype) * std::pow(2.f, -margin). */
float fp8_scaled_max(int fmt, int margin);

#endif
