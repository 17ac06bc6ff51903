// elementwise.cuh — residual add, dtype casts and the gradient-accumulation helpers.
// All take a flat element count n (any value) and launch on any 1-D grid, grid-stride.
#pragma once
#include "common.cuh"

#define STEPC_GRID_STRIDE(i, n) \
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < (n); i += (long)gridDim.x * blockDim.x)

extern "C" __global__ void residual_add(bf16* out,       // (n)
                                        const bf16* a,   // (n)
                                        const bf16* b,   // (n)
                                        long n) {
  STEPC_GRID_STRIDE(i, n) out[i] = f32_to_bf16(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
}

// The bf16 compute copy of fp32 master weights (also used for any fp32 -> bf16 conversion).
extern "C" __global__ void cast_f32_to_bf16(bf16* out,         // (n)
                                            const float* inp,  // (n)
                                            long n) {
  STEPC_GRID_STRIDE(i, n) out[i] = f32_to_bf16(inp[i]);
}

extern "C" __global__ void cast_bf16_to_f32(float* out,       // (n)
                                            const bf16* inp,  // (n)
                                            long n) {
  STEPC_GRID_STRIDE(i, n) out[i] = bf16_to_f32(inp[i]);
}

// main_grad += grad: folding a micro-batch's bf16 gradient into the fp32 main gradient.
extern "C" __global__ void grad_accumulate_bf16(float* acc,       // (n)
                                                const bf16* grad, // (n)
                                                long n) {
  STEPC_GRID_STRIDE(i, n) acc[i] += bf16_to_f32(grad[i]);
}

extern "C" __global__ void grad_accumulate_f32(float* acc,        // (n)
                                               const float* grad, // (n)
                                               long n) {
  STEPC_GRID_STRIDE(i, n) acc[i] += grad[i];
}

// x *= *scale; the scale is a device scalar (e.g. the clip factor or 1 / micro-batches) so a
// captured graph needs no host round trip.
extern "C" __global__ void scale_f32(float* x,            // (n)
                                     const float* scale,  // (1) device scalar
                                     long n) {
  float s = *scale;
  STEPC_GRID_STRIDE(i, n) x[i] *= s;
}

// Zeroing gradients inside a graph without a memset node.
extern "C" __global__ void fill_f32(float* x,  // (n)
                                    float value, long n) {
  STEPC_GRID_STRIDE(i, n) x[i] = value;
}
