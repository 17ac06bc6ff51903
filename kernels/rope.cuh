// rope.cuh — rotary position embedding, rotate-half convention (Llama, Megatron, GPT-NeoX):
// for i < D/2 with angle a = t * base^(-2i/D),
//   y[i]       = x[i] cos a - x[i + D/2] sin a
//   y[i + D/2] = x[i + D/2] cos a + x[i] sin a
// Backward is the inverse rotation (a -> -a). Angles in fp32 as PyTorch computes its frequency
// table (inv_freq = 1 / base^(2i/D), then t * inv_freq); cos/sin are not rounded to bf16.
// Works in place (out == inp): each thread reads its pair before writing it.
#pragma once
#include "common.cuh"

__device__ __forceinline__ void rope_apply(bf16* out, const bf16* inp, int B, int T, int H, int D,
                                           float base, float sign) {
  int half = D / 2;
  long total = (long)B * T * H * half;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
    int k = (int)(i % half);
    long row = i / half;  // (b, t, h) flattened
    int t = (int)((row / H) % T);
    float inv_freq = 1.0f / powf(base, (float)(2 * k) / (float)D);
    float s, c;
    sincosf((float)t * inv_freq, &s, &c);
    s *= sign;
    long p = row * D + k;
    float x1 = bf16_to_f32(inp[p]), x2 = bf16_to_f32(inp[p + half]);
    out[p] = f32_to_bf16(x1 * c - x2 * s);
    out[p + half] = f32_to_bf16(x2 * c + x1 * s);
  }
}

// Launch (both): any 1-D grid, grid-stride over B*T*H*D/2 pairs. Q and K are separate calls
// (H = heads for Q, kv heads for K).
extern "C" __global__ void rope_forward(bf16* out,        // (B, T, H, D)
                                        const bf16* inp,  // (B, T, H, D)
                                        int B, int T, int H, int D, float base) {
  rope_apply(out, inp, B, T, H, D, base, 1.0f);
}

extern "C" __global__ void rope_backward(bf16* dinp,        // (B, T, H, D)
                                         const bf16* dout,  // (B, T, H, D)
                                         int B, int T, int H, int D, float base) {
  rope_apply(dinp, dout, B, T, H, D, base, -1.0f);
}
