// loss.cuh — cross-entropy fused with its softmax and gradient, and the deterministic mean.
#pragma once
#include "common.cuh"

// For row n with target y: loss[n] = logsumexp(logits[n][:V]) - logits[n][y], and the logits row
// is overwritten with its gradient dloss * (softmax - onehot(y)) (0 in the padding columns
// [V, Vp)). A target outside [0, V) marks an ignored token: loss 0, gradient 0. dloss is the
// weight of each token's loss in the objective (1 / tokens for the mean, further divided by the
// number of micro-batches under gradient accumulation). Vp % 8 == 0.
// Launch: gridDim.x = N (one block per row), blockDim.x = 512.
extern "C" __global__ void cross_entropy_forward_backward(float* losses,      // (N)
                                                          bf16* logits,       // (N, Vp) in: logits, out: dlogits
                                                          const int* targets, // (N)
                                                          int N, int V, int Vp, float dloss) {
  __shared__ float red[32];
  long n = blockIdx.x;
  if (n >= N) return;
  bf16* row = logits + n * Vp;
  int y = targets[n];
  bool valid = y >= 0 && y < V;
  float xy = valid ? bf16_to_f32(row[y]) : 0.0f;  // read before any thread overwrites the row
  float m = STEPC_NEG_INF, s = 0.0f;               // this thread's online max and sum
  for (int j = threadIdx.x * 8; j < V; j += blockDim.x * 8) {
    float v[8];
    load8(row + j, v);
    for (int k = 0; k < 8; k++) {
      if (j + k >= V) break;
      float nm = fmaxf(m, v[k]);
      s = s * expf(m - nm) + expf(v[k] - nm);
      m = nm;
    }
  }
  float M = block_max(m, red);
  float S = block_sum(m == STEPC_NEG_INF ? 0.0f : s * expf(m - M), red);
  float inv = 1.0f / S, coef = valid ? dloss : 0.0f;
  for (int j = threadIdx.x * 8; j < Vp; j += blockDim.x * 8) {
    float v[8];
    load8(row + j, v);
    for (int k = 0; k < 8; k++) {
      int c = j + k;
      v[k] = c < V ? coef * (expf(v[k] - M) * inv - (c == y ? 1.0f : 0.0f)) : 0.0f;
    }
    store8(row + j, v);
  }
  if (threadIdx.x == 0) losses[n] = valid ? logf(S) + M - xy : 0.0f;
}

// out = scale * sum(losses), summed in a fixed order (scale = 1 / tokens for the mean).
// Launch: one block, blockDim.x = 1024.
extern "C" __global__ void loss_reduce(float* out,           // (1)
                                       const float* losses,  // (N)
                                       int N, float scale) {
  __shared__ float red[32];
  float s = 0.0f;
  for (int i = threadIdx.x; i < N; i += blockDim.x) s += losses[i];
  s = block_sum(s, red);
  if (threadIdx.x == 0) *out = s * scale;
}
