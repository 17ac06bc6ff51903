// activation.cuh — SwiGLU (Llama MLP), GeGLU (gated GELU) and GELU (GPT-3 MLP), forward and
// backward. GELU is the exact erf form, in GeGLU too: Megatron's default is
// torch.nn.functional.gelu without the tanh approximation. Math fp32, storage bf16.
#pragma once
#include "common.cuh"

__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }

__device__ __forceinline__ float gelu_f(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

__device__ __forceinline__ float gelu_grad_f(float x) {
  return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) + x * 0.39894228040143268f * expf(-0.5f * x * x);
}

// The gated activations over rows [gate (F) | up (F)], as Megatron's fused fc1 lays them out
// (torch.chunk(x, 2, -1)): out = act(gate) * up with act silu (SwiGLU) or the erf GELU (GeGLU).
// F must be a multiple of 8. Launch: any 1-D grid, grid-stride. Both directions return max |out| over
// the thread's stored values when `fold` (the fused fp8 amax, common.cuh amax_fold), else 0.
__device__ __forceinline__ float glu_forward(bf16* out, const bf16* inp, int N, int F, bool gelu, bool fold) {
  long total = (long)N * (F / 8);
  float m = 0.0f;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
    long n = i / (F / 8);
    int f = (int)(i % (F / 8)) * 8;
    float g[8], u[8];
    load8(inp + n * 2 * F + f, g);
    load8(inp + n * 2 * F + F + f, u);
    for (int k = 0; k < 8; k++) g[k] = (gelu ? gelu_f(g[k]) : silu_f(g[k])) * u[k];
    uint4 y = pack8(g);
    *(uint4*)(out + n * F + f) = y;
    if (fold) m = amax8(m, y);
  }
  return m;
}

// dgate = dout * up * act'(gate), dup = dout * act(gate); silu'(x) = s (1 + x (1 - s)).
__device__ __forceinline__ float glu_backward(bf16* dinp, const bf16* dout, const bf16* inp, int N, int F, bool gelu,
                                              bool fold) {
  long total = (long)N * (F / 8);
  float m = 0.0f;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
    long n = i / (F / 8);
    int f = (int)(i % (F / 8)) * 8;
    float g[8], u[8], d[8], dg[8], du[8];
    load8(inp + n * 2 * F + f, g);
    load8(inp + n * 2 * F + F + f, u);
    load8(dout + n * F + f, d);
    for (int k = 0; k < 8; k++) {
      if (gelu) {
        du[k] = d[k] * gelu_f(g[k]);
        dg[k] = d[k] * u[k] * gelu_grad_f(g[k]);
      } else {
        float s = 1.0f / (1.0f + expf(-g[k]));
        du[k] = d[k] * g[k] * s;
        dg[k] = d[k] * u[k] * s * (1.0f + g[k] * (1.0f - s));
      }
    }
    uint4 yg = pack8(dg), yu = pack8(du);
    *(uint4*)(dinp + n * 2 * F + f) = yg;
    *(uint4*)(dinp + n * 2 * F + F + f) = yu;
    if (fold) m = amax8(amax8(m, yg), yu);
  }
  return m;
}

// The gated kernels' fused fp8 amax of their output (amax null: none; part, amax as amax_fold's).
__device__ __forceinline__ void glu_amax(float m, float* part, unsigned* amax) {
  __shared__ float red[32];
  if (amax) amax_fold(m, red, part, amax);
}

extern "C" __global__ void swiglu_forward(bf16* out,        // (N, F)
                                          const bf16* inp,  // (N, 2F)
                                          int N, int F,
                                          float* amax_part,  // (gridDim.x) or null
                                          unsigned* amax) {  // [2] or null: common.cuh amax_fold
  glu_amax(glu_forward(out, inp, N, F, false, amax), amax_part, amax);
}

extern "C" __global__ void swiglu_backward(bf16* dinp,        // (N, 2F)
                                           const bf16* dout,  // (N, F)
                                           const bf16* inp,   // (N, 2F)
                                           int N, int F,
                                           float* amax_part,  // (gridDim.x) or null
                                           unsigned* amax) {  // [2] or null: of dinp
  glu_amax(glu_backward(dinp, dout, inp, N, F, false, amax), amax_part, amax);
}

extern "C" __global__ void geglu_forward(bf16* out,        // (N, F)
                                         const bf16* inp,  // (N, 2F)
                                         int N, int F,
                                         float* amax_part,  // (gridDim.x) or null
                                         unsigned* amax) {  // [2] or null: common.cuh amax_fold
  glu_amax(glu_forward(out, inp, N, F, true, amax), amax_part, amax);
}

extern "C" __global__ void geglu_backward(bf16* dinp,        // (N, 2F)
                                          const bf16* dout,  // (N, F)
                                          const bf16* inp,   // (N, 2F)
                                          int N, int F,
                                          float* amax_part,  // (gridDim.x) or null
                                          unsigned* amax) {  // [2] or null: of dinp
  glu_amax(glu_backward(dinp, dout, inp, N, F, true, amax), amax_part, amax);
}

// Launch (GELU both ways): any 1-D grid, grid-stride; n any size.
extern "C" __global__ void gelu_forward(bf16* out,        // (n)
                                        const bf16* inp,  // (n)
                                        long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
    out[i] = f32_to_bf16(gelu_f(bf16_to_f32(inp[i])));
}

extern "C" __global__ void gelu_backward(bf16* dinp,        // (n)
                                         const bf16* dout,  // (n)
                                         const bf16* inp,   // (n)
                                         long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
    dinp[i] = f32_to_bf16(bf16_to_f32(dout[i]) * gelu_grad_f(bf16_to_f32(inp[i])));
}

// RELU_ACT (ir/ops/activation.c): relu(x), or with squared = 1 Megatron's squared_relu, relu(x)^2;
// the gradient reads the activation's input. Math fp32, storage bf16. Launch: any 1-D grid.
extern "C" __global__ void relu_forward(bf16* out,        // (n)
                                        const bf16* inp,  // (n)
                                        long n, int squared) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
    float r = fmaxf(bf16_to_f32(inp[i]), 0.0f);
    out[i] = f32_to_bf16(squared ? __fmul_rn(r, r) : r);
  }
}

extern "C" __global__ void relu_backward(bf16* dinp,        // (n)
                                         const bf16* dout,  // (n)
                                         const bf16* inp,   // (n)
                                         long n, int squared) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
    float x = bf16_to_f32(inp[i]), dy = bf16_to_f32(dout[i]);
    dinp[i] = f32_to_bf16(x > 0.0f ? (squared ? __fmul_rn(dy, __fmul_rn(2.0f, x)) : dy) : 0.0f);
  }
}
