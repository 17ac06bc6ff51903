// norm.cuh — RMSNorm and LayerNorm, forward (saving mean / rstd) and backward, plus the residual
// add fused in front of a norm. One warp per row; C must be a multiple of 8.
//
// Weight and bias gradients are sums over rows. To stay deterministic without float atomics they
// are two kernels: norm_backward_weight_partial writes per-row-group partial sums into a scratch
// (G, 2C), colsum_accumulate then adds the G partials in a fixed order into the fp32 grads.
#pragma once
#include "common.cuh"

// Shared body of the four forward kernels. `mean_out` null means RMSNorm (no centring).
// With `res_b` non-null the input is x = bf16(inp + res_b), written to `res_out` first: the norm
// then reads exactly the rounded values that the residual stream keeps, so backward agrees.
__device__ __forceinline__ void norm_forward_row(bf16* out, float* mean_out, float* rstd_out, bf16* res_out,
                                                 const bf16* inp, const bf16* res_b, const bf16* weight,
                                                 const bf16* bias, int N, int C, float eps) {
  int lane = threadIdx.x % STEPC_WARP;
  long row = (long)blockIdx.x * (blockDim.x / STEPC_WARP) + threadIdx.x / STEPC_WARP;
  if (row >= N) return;
  const bf16* x = inp + row * C;
  if (res_b) {
    for (int c = lane * 8; c < C; c += STEPC_WARP * 8) {
      float a[8], b[8];
      load8(x + c, a);
      load8(res_b + row * C + c, b);
      for (int k = 0; k < 8; k++) a[k] += b[k];
      store8(res_out + row * C + c, a);
    }
    __syncwarp();
    x = res_out + row * C;
  }
  float mean = 0.0f;
  if (mean_out) {
    float s = 0.0f;
    for (int c = lane * 8; c < C; c += STEPC_WARP * 8) {
      float v[8];
      load8(x + c, v);
      for (int k = 0; k < 8; k++) s += v[k];
    }
    mean = warp_sum(s) / C;
  }
  float ss = 0.0f;
  for (int c = lane * 8; c < C; c += STEPC_WARP * 8) {
    float v[8];
    load8(x + c, v);
    for (int k = 0; k < 8; k++) ss += (v[k] - mean) * (v[k] - mean);
  }
  float rstd = rsqrtf(warp_sum(ss) / C + eps);
  for (int c = lane * 8; c < C; c += STEPC_WARP * 8) {
    float v[8], w[8], b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    load8(x + c, v);
    load8(weight + c, w);
    if (bias) load8(bias + c, b);
    for (int k = 0; k < 8; k++) v[k] = (v[k] - mean) * rstd * w[k] + b[k];
    store8(out + row * C + c, v);
  }
  if (lane == 0) {
    rstd_out[row] = rstd;
    if (mean_out) mean_out[row] = mean;
  }
}

// Launch for all forward kernels: blockDim.x = 32 * rows_per_block, gridDim.x = ceil(N / rows_per_block).
extern "C" __global__ void rmsnorm_forward(bf16* out,           // (N, C)
                                           float* rstd,         // (N)
                                           const bf16* inp,     // (N, C)
                                           const bf16* weight,  // (C)
                                           int N, int C, float eps) {
  norm_forward_row(out, 0, rstd, 0, inp, 0, weight, 0, N, C, eps);
}

extern "C" __global__ void layernorm_forward(bf16* out,           // (N, C)
                                             float* mean,         // (N)
                                             float* rstd,         // (N)
                                             const bf16* inp,     // (N, C)
                                             const bf16* weight,  // (C)
                                             const bf16* bias,    // (C) or null
                                             int N, int C, float eps) {
  norm_forward_row(out, mean, rstd, 0, inp, 0, weight, bias, N, C, eps);
}

// residual = a + b; out = rmsnorm(residual). The backward of the add is the identity.
extern "C" __global__ void residual_rmsnorm_forward(bf16* residual,     // (N, C)
                                                    bf16* out,          // (N, C)
                                                    float* rstd,        // (N)
                                                    const bf16* a,      // (N, C)
                                                    const bf16* b,      // (N, C)
                                                    const bf16* weight, // (C)
                                                    int N, int C, float eps) {
  norm_forward_row(out, 0, rstd, residual, a, b, weight, 0, N, C, eps);
}

extern "C" __global__ void residual_layernorm_forward(bf16* residual,     // (N, C)
                                                      bf16* out,          // (N, C)
                                                      float* mean,        // (N)
                                                      float* rstd,        // (N)
                                                      const bf16* a,      // (N, C)
                                                      const bf16* b,      // (N, C)
                                                      const bf16* weight, // (C)
                                                      const bf16* bias,   // (C) or null
                                                      int N, int C, float eps) {
  norm_forward_row(out, mean, rstd, residual, a, b, weight, bias, N, C, eps);
}

// dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * weight, xhat = (x - mean) * rstd;
// RMSNorm drops the mean(g) term and uses mean = 0. accumulate != 0 adds into dinp (the residual
// stream's gradient) instead of overwriting it.
__device__ __forceinline__ void norm_backward_row(bf16* dinp, const bf16* dout, const bf16* inp,
                                                  const bf16* weight, const float* mean_in,
                                                  const float* rstd_in, int N, int C, int accumulate) {
  int lane = threadIdx.x % STEPC_WARP;
  long row = (long)blockIdx.x * (blockDim.x / STEPC_WARP) + threadIdx.x / STEPC_WARP;
  if (row >= N) return;
  float mean = mean_in ? mean_in[row] : 0.0f, rstd = rstd_in[row];
  const bf16 *x = inp + row * C, *dy = dout + row * C;
  float sg = 0.0f, sgx = 0.0f;
  for (int c = lane * 8; c < C; c += STEPC_WARP * 8) {
    float v[8], d[8], w[8];
    load8(x + c, v);
    load8(dy + c, d);
    load8(weight + c, w);
    for (int k = 0; k < 8; k++) {
      float g = d[k] * w[k];
      sg += g;
      sgx += g * (v[k] - mean) * rstd;
    }
  }
  sg = mean_in ? warp_sum(sg) / C : 0.0f;
  sgx = warp_sum(sgx) / C;
  for (int c = lane * 8; c < C; c += STEPC_WARP * 8) {
    float v[8], d[8], w[8], o[8];
    load8(x + c, v);
    load8(dy + c, d);
    load8(weight + c, w);
    if (accumulate) load8(dinp + row * C + c, o);
    for (int k = 0; k < 8; k++) {
      float r = rstd * (d[k] * w[k] - sg - (v[k] - mean) * rstd * sgx);
      o[k] = accumulate ? o[k] + r : r;
    }
    store8(dinp + row * C + c, o);
  }
}

// Launch: as the forward kernels.
extern "C" __global__ void rmsnorm_backward_input(bf16* dinp,          // (N, C)
                                                  const bf16* dout,    // (N, C)
                                                  const bf16* inp,     // (N, C)
                                                  const bf16* weight,  // (C)
                                                  const float* rstd,   // (N)
                                                  int N, int C, int accumulate) {
  norm_backward_row(dinp, dout, inp, weight, 0, rstd, N, C, accumulate);
}

extern "C" __global__ void layernorm_backward_input(bf16* dinp,          // (N, C)
                                                    const bf16* dout,    // (N, C)
                                                    const bf16* inp,     // (N, C)
                                                    const bf16* weight,  // (C)
                                                    const float* mean,   // (N)
                                                    const float* rstd,   // (N)
                                                    int N, int C, int accumulate) {
  norm_backward_row(dinp, dout, inp, weight, mean, rstd, N, C, accumulate);
}

// partial[g][c] = sum over the rows of group g of dout * xhat (the weight gradient) and
// partial[g][C + c] = sum of dout (the bias gradient; unused for RMSNorm). Group g holds rows
// [g * R, (g + 1) * R), R = ceil(N / G); each thread walks its rows in order.
// Launch: gridDim.y = G row groups, gridDim.x * blockDim.x >= C / 2 (two channels per thread).
extern "C" __global__ void norm_backward_weight_partial(float* partial,      // (G, 2C)
                                                        const bf16* dout,   // (N, C)
                                                        const bf16* inp,    // (N, C)
                                                        const float* mean,  // (N) or null (RMSNorm)
                                                        const float* rstd,  // (N)
                                                        int N, int C) {
  int c = (blockIdx.x * blockDim.x + threadIdx.x) * 2;
  if (c >= C) return;
  int G = gridDim.y, g = blockIdx.y;
  long R = (N + G - 1) / G, r0 = g * R, r1 = r0 + R < N ? r0 + R : N;
  float dw0 = 0.0f, dw1 = 0.0f, db0 = 0.0f, db1 = 0.0f;
  for (long r = r0; r < r1; r++) {
    unsigned d = *(const unsigned*)(dout + r * C + c), x = *(const unsigned*)(inp + r * C + c);
    float m = mean ? mean[r] : 0.0f, s = rstd[r];
    float d0 = bf16x2_lo(d), d1 = bf16x2_hi(d);
    dw0 += d0 * (bf16x2_lo(x) - m) * s;
    dw1 += d1 * (bf16x2_hi(x) - m) * s;
    db0 += d0;
    db1 += d1;
  }
  float* p = partial + (long)g * 2 * C;
  p[c] = dw0;
  p[c + 1] = dw1;
  p[C + c] = db0;
  p[C + c + 1] = db1;
}

// partial[g][c] = sum over rows of group g of dout (the gradient of a linear layer's bias).
// Launch: as norm_backward_weight_partial.
extern "C" __global__ void bias_backward_partial(float* partial,     // (G, C)
                                                 const bf16* dout,   // (N, C)
                                                 int N, int C) {
  int c = (blockIdx.x * blockDim.x + threadIdx.x) * 2;
  if (c >= C) return;
  int G = gridDim.y, g = blockIdx.y;
  long R = (N + G - 1) / G, r0 = g * R, r1 = r0 + R < N ? r0 + R : N;
  float s0 = 0.0f, s1 = 0.0f;
  for (long r = r0; r < r1; r++) {
    unsigned d = *(const unsigned*)(dout + r * C + c);
    s0 += bf16x2_lo(d);
    s1 += bf16x2_hi(d);
  }
  partial[(long)g * C + c] = s0;
  partial[(long)g * C + c + 1] = s1;
}

// out[c] += sum over g = 0..G-1, in that order, of partial[g * ld + c].
// Launch: any 1-D grid covering C threads.
extern "C" __global__ void colsum_accumulate(float* out,            // (C) accumulated
                                             const float* partial,  // (G, ld), first C columns read
                                             int G, int C, int ld) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int g = 0; g < G; g++) s += partial[(long)g * ld + c];
  out[c] += s;
}
