// dropout.cuh — dropout with a counter-based mask (Philox4x32-10, see common.cuh).
// Element i of op `op_id` is kept iff (word >> 8) >= floor(p * 2^24), word = (i & 3)-th output of
// philox({i>>2 lo, i>>2 hi, op_id, 0}, {seed lo, seed hi}); kept values are scaled by 1/(1-p).
// Nothing is stored: backward regenerates the mask from (seed, op_id, i), so a replay (recompute,
// graph replay) reproduces it bit for bit. The seed is read from device memory so that a captured
// CUDA graph picks up a new per-step seed without re-capture.
#pragma once
#include "common.cuh"

__device__ __forceinline__ float dropout_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

// Element k of a Philox group: x kept and scaled, or 0. The one mask expression (the generated
// elementwise kernels, templates/, call it too, so their masks are these bits).
__device__ __forceinline__ float dropout_keep(unsigned w, unsigned thr, float scale, float x) {
  return (w >> 8) >= thr ? x * scale : 0.0f;
}

// out = res + dropout(inp) when res is non-null, else dropout(inp). One thread per group of 4.
__device__ __forceinline__ void dropout_apply(bf16* out, const bf16* res, const bf16* inp, long n, float p,
                                              unsigned long long seed, unsigned op_id) {
  unsigned thr = dropout_threshold(p);
  float scale = dropout_scale(p);
  long groups = (n + 3) / 4;
  for (long g = blockIdx.x * (long)blockDim.x + threadIdx.x; g < groups; g += (long)gridDim.x * blockDim.x) {
    philox4 r = dropout_bits(seed, op_id, (unsigned long long)g);
    unsigned w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
      long i = g * 4 + k;
      if (i >= n) break;
      float v = dropout_keep(w[k], thr, scale, bf16_to_f32(inp[i]));
      if (res) v += bf16_to_f32(res[i]);
      out[i] = f32_to_bf16(v);
    }
  }
}

// Launch (all three): any 1-D grid, grid-stride over ceil(n / 4) groups.
extern "C" __global__ void dropout_forward(bf16* out,                      // (n)
                                           const bf16* inp,                // (n)
                                           long n, float p,
                                           const unsigned long long* seed, // (1) device scalar
                                           unsigned op_id) {
  dropout_apply(out, 0, inp, n, p, *seed, op_id);
}

// dinp = dout * mask / (1 - p), the mask regenerated.
extern "C" __global__ void dropout_backward(bf16* dinp,                     // (n)
                                            const bf16* dout,               // (n)
                                            long n, float p,
                                            const unsigned long long* seed, // (1) device scalar
                                            unsigned op_id) {
  dropout_apply(dinp, 0, dout, n, p, *seed, op_id);
}

// out = residual + dropout(inp): Megatron's bias-dropout-add without the bias. Its backward is
// the identity for `residual` and dropout_backward for `inp`.
extern "C" __global__ void dropout_residual_forward(bf16* out,                      // (n)
                                                    const bf16* residual,           // (n)
                                                    const bf16* inp,                // (n)
                                                    long n, float p,
                                                    const unsigned long long* seed, // (1)
                                                    unsigned op_id) {
  dropout_apply(out, residual, inp, n, p, *seed, op_id);
}

// A tensor-parallel slice (ir/ops/dropout.c i[1]: this rank's heads under TP, its sequence rows under
// SP): element i of x (outer, rows, inner) draws the Philox bits of its place (o, rank rows + l, r) in
// the one-rank tensor (outer, rows tp, inner), so the ranks' masks together are the one-rank step's
// mask on the GPU. Forward and backward alike (out = inp * mask / (1 - p)). One thread an element.
// Launch: any 1-D grid.
extern "C" __global__ void dropout_slice(bf16* out, const bf16* inp, long n, float p, const unsigned long long* seed,
                                         unsigned op_id, long rows, long inner, int tp, const int* rank) {
  const unsigned thr = dropout_threshold(p);
  const float scale = dropout_scale(p);
  const unsigned long long s = *seed;
  const long off = (long)*rank * rows;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
    long r = i % inner, l = (i / inner) % rows, o = i / (inner * rows);
    unsigned long long f = (unsigned long long)((o * rows * tp + off + l) * inner + r);
    philox4 b = dropout_bits(s, op_id, f >> 2);
    unsigned w = (f & 3) == 0 ? b.x : (f & 3) == 1 ? b.y : (f & 3) == 2 ? b.z : b.w;
    out[i] = f32_to_bf16(dropout_keep(w, thr, scale, bf16_to_f32(inp[i])));
  }
}
