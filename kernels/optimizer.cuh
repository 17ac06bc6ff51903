// optimizer.cuh — global gradient-norm clipping and AdamW on fp32 master weights.
//
// Per-step values (learning rate, bias corrections, clip factor) live in device memory so the
// whole optimizer can sit inside a captured CUDA graph; the host rewrites them between replays.
#pragma once
#include "common.cuh"

// Stage 1 of the global norm: partial[b] = sum of x^2 over the elements that block b visits.
// Each thread walks a fixed grid-stride set and the block tree is fixed, so for a given gridDim
// the result is bitwise reproducible. Give each tensor its own slice of one partials buffer
// (partial = partials + tensor_index * G) and reduce them all in stage 2.
// Launch: gridDim.x = G (fixed for the run), blockDim.x = 256.
extern "C" __global__ void norm_squared_partial(float* partial,  // (G)
                                                const float* x,  // (n)
                                                long n) {
  __shared__ float red[32];
  float s = 0.0f;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
    s += x[i] * x[i];
  s = block_sum(s, red);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// Stage 2: norm = sqrt(sum of all partials); scale = min(1, max_norm / (norm + 1e-6)) as in
// Megatron's clip_grad_norm (max_norm <= 0 disables clipping: scale = 1). AdamW reads `scale`.
// Launch: one block, blockDim.x = 1024.
extern "C" __global__ void global_norm_finalize(float* norm,           // (1)
                                                float* scale,          // (1)
                                                const float* partial,  // (count)
                                                int count, float max_norm) {
  __shared__ float red[32];
  float s = 0.0f;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = block_sum(s, red);
  if (threadIdx.x == 0) {
    float nrm = sqrtf(s);
    float c = max_norm / (nrm + 1e-6f);
    *norm = nrm;
    *scale = (max_norm > 0.0f && c < 1.0f) ? c : 1.0f;
  }
}

// The per-step AdamW hyperparameters, in device memory (7 floats):
//   hp[0] lr, hp[1] beta1, hp[2] beta2, hp[3] eps, hp[4] weight_decay,
//   hp[5] 1 - beta1^t, hp[6] 1 - beta2^t (bias corrections for step t >= 1).
// Follows torch.optim.AdamW (decoupled decay applied before the Adam step):
//   g = grad * grad_scale; m = lerp(m, g, 1 - b1); v = b2 v + (1 - b2) g^2
//   w = w * (1 - lr * wd * wd_mult); w -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
// and writes the bf16 compute copy of w (param null: an fp32 parameter, master is the parameter
// itself). wd_mult is 0 for tensors excluded from decay (norms,
// biases). Launch: any 1-D grid, grid-stride.
extern "C" __global__ void adamw_update(float* master,            // (n)
                                        bf16* param,              // (n)
                                        const float* grad,        // (n)
                                        float* m,                 // (n)
                                        float* v,                 // (n)
                                        long n,
                                        const float* hp,          // (7)
                                        const float* grad_scale,  // (1) or null for 1
                                        float wd_mult) {
  float lr = hp[0], b1 = hp[1], b2 = hp[2], eps = hp[3], wd = hp[4] * wd_mult;
  float step = lr / hp[5], bc2_sqrt = sqrtf(hp[6]);
  float gs = grad_scale ? *grad_scale : 1.0f;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
    float g = grad[i] * gs;
    float mi = m[i] + (1.0f - b1) * (g - m[i]);
    float vi = b2 * v[i] + (1.0f - b2) * g * g;
    float w = master[i] * (1.0f - lr * wd);
    w -= step * mi / (sqrtf(vi) / bc2_sqrt + eps);
    m[i] = mi;
    v[i] = vi;
    master[i] = w;
    if (param) param[i] = f32_to_bf16(w);
  }
}
