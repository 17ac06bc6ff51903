// softmax.cuh — the unfused attention pieces: scale + causal mask + softmax forward (saving the
// probabilities) and its backward, and the (B,T,H,D) <-> (B,H,T,D) transposes that let cuBLAS run
// QK^T and PV as strided-batched GEMMs. Scores and probabilities are bf16, math fp32.
#pragma once
#include "common.cuh"

// probs[r][j] = exp(scale * scores[r][j] - m) / sum for j <= i, 0 for j > i, where row r = (bh, i).
// Launch: gridDim.x = BH * T (one block per row), blockDim.x = 256 (any multiple of 32 <= 1024).
extern "C" __global__ void softmax_causal_forward(bf16* probs,         // (BH, T, T)
                                                  const bf16* scores,  // (BH, T, T)
                                                  int BH, int T, float scale) {
  __shared__ float red[32];
  long r = blockIdx.x;
  if (r >= (long)BH * T) return;
  int i = (int)(r % T);
  const bf16* s = scores + r * T;
  bf16* p = probs + r * T;
  float m = STEPC_NEG_INF;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) m = fmaxf(m, scale * bf16_to_f32(s[j]));
  m = block_max(m, red);
  float sum = 0.0f;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) sum += expf(scale * bf16_to_f32(s[j]) - m);
  float inv = 1.0f / block_sum(sum, red);
  for (int j = threadIdx.x; j < T; j += blockDim.x)
    p[j] = f32_to_bf16(j <= i ? expf(scale * bf16_to_f32(s[j]) - m) * inv : 0.0f);
}

// dscores[r][j] = scale * p_j * (dp_j - sum_k p_k dp_k) for j <= i, 0 above the diagonal.
// dscores may alias dprobs. Launch: as softmax_causal_forward.
extern "C" __global__ void softmax_causal_backward(bf16* dscores,       // (BH, T, T)
                                                   const bf16* dprobs,  // (BH, T, T)
                                                   const bf16* probs,   // (BH, T, T)
                                                   int BH, int T, float scale) {
  __shared__ float red[32];
  long r = blockIdx.x;
  if (r >= (long)BH * T) return;
  int i = (int)(r % T);
  const bf16 *dp = dprobs + r * T, *p = probs + r * T;
  float dot = 0.0f;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) dot += bf16_to_f32(p[j]) * bf16_to_f32(dp[j]);
  dot = block_sum(dot, red);
  bf16* ds = dscores + r * T;
  for (int j = threadIdx.x; j < T; j += blockDim.x) {
    float v = j <= i ? scale * bf16_to_f32(p[j]) * (bf16_to_f32(dp[j]) - dot) : 0.0f;
    ds[j] = f32_to_bf16(v);
  }
}

// The unfused backend's CAUSAL_MASK op on its own (ir/ops/attention.c): out[r][j] = fill for
// j > i, else inp[r][j], row r = (bh, i) of (BH, T, T); fill is -inf (the forward mask) or 0 (its
// backward, which is its own gradient). out may alias inp. Launch: any 1-D grid, grid-stride over
// the rows * T elements.
extern "C" __global__ void causal_mask_fill(bf16* out,        // (rows, T)
                                            const bf16* inp,  // (rows, T)
                                            long rows, int T, int fill_zero) {
  long n = rows * T;
  bf16 fill = fill_zero ? (bf16)0 : (bf16)0xff80u;  // bf16 -inf: sign, all-ones exponent, zero mantissa
  for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < n; e += (long)gridDim.x * blockDim.x) {
    int j = (int)(e % T), i = (int)((e / T) % T);
    out[e] = j > i ? fill : inp[e];
  }
}

// out[b][h][t] = inp[b][t][h] (rows of D). Launch: any 1-D grid, one thread per 8 elements.
extern "C" __global__ void transpose_bthd_to_bhtd(bf16* out,        // (B, H, T, D)
                                                  const bf16* inp,  // (B, T, H, D)
                                                  int B, int T, int H, int D) {
  long total = (long)B * T * H * (D / 8);
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
    int d = (int)(i % (D / 8)) * 8;
    long row = i / (D / 8);  // (b, t, h) of the input
    int h = (int)(row % H);
    long bt = row / H;
    int t = (int)(bt % T);
    long b = bt / T;
    *(uint4*)(out + (((b * H + h) * T) + t) * D + d) = *(const uint4*)(inp + row * D + d);
  }
}

// out[b][t][h] = inp[b][h][t]. Launch: as transpose_bthd_to_bhtd.
extern "C" __global__ void transpose_bhtd_to_bthd(bf16* out,        // (B, T, H, D)
                                                  const bf16* inp,  // (B, H, T, D)
                                                  int B, int T, int H, int D) {
  long total = (long)B * T * H * (D / 8);
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
    int d = (int)(i % (D / 8)) * 8;
    long row = i / (D / 8);  // (b, t, h) of the output
    int h = (int)(row % H);
    long bt = row / H;
    int t = (int)(bt % T);
    long b = bt / T;
    *(uint4*)(out + row * D + d) = *(const uint4*)(inp + (((b * H + h) * T) + t) * D + d);
  }
}
