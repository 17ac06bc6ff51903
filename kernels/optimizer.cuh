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
// biases). adamw_update (one tensor) and adamw_multi (a table of them) run the same element
// update, adamw_element, so a step gives the same bits whichever launches it.
struct AdamwStep {
  float lr, b1, b2, eps, wd, step, bc2_sqrt, gs;
};

__device__ __forceinline__ AdamwStep adamw_step(const float* hp, const float* grad_scale, float wd_mult) {
  AdamwStep a;
  a.lr = hp[0], a.b1 = hp[1], a.b2 = hp[2], a.eps = hp[3], a.wd = hp[4] * wd_mult;
  a.step = a.lr / hp[5], a.bc2_sqrt = sqrtf(hp[6]);
  a.gs = grad_scale ? *grad_scale : 1.0f;
  return a;
}

// One element in registers: m, v and w (the master) updated in place from the raw gradient g.
__device__ __forceinline__ void adamw_value(const AdamwStep& a, float grad, float& m, float& v, float& w) {
  float g = grad * a.gs;
  float mi = m + (1.0f - a.b1) * (g - m);
  float vi = a.b2 * v + (1.0f - a.b2) * g * g;
  float wi = w * (1.0f - a.lr * a.wd);
  wi -= a.step * mi / (sqrtf(vi) / a.bc2_sqrt + a.eps);
  m = mi, v = vi, w = wi;
}

// Returns the updated master value.
__device__ __forceinline__ float adamw_element(const AdamwStep& a, float* master, bf16* param, const float* grad,
                                               float* m, float* v, long i) {
  float mi = m[i], vi = v[i], w = master[i];
  adamw_value(a, grad[i], mi, vi, w);
  m[i] = mi;
  v[i] = vi;
  master[i] = w;
  if (param) param[i] = f32_to_bf16(w);
  return w;
}

// Four elements at i (a multiple of 4; every array 16-byte aligned there, param 8-byte), as four
// adamw_element calls but with 16-byte loads and stores. Returns the updated master values.
__device__ __forceinline__ float4 adamw_vec4(const AdamwStep& a, float* master, bf16* param, const float* grad,
                                             float* m, float* v, long i) {
  float4 g = *(const float4*)(grad + i), m4 = *(float4*)(m + i), v4 = *(float4*)(v + i), w = *(float4*)(master + i);
  adamw_value(a, g.x, m4.x, v4.x, w.x);
  adamw_value(a, g.y, m4.y, v4.y, w.y);
  adamw_value(a, g.z, m4.z, v4.z, w.z);
  adamw_value(a, g.w, m4.w, v4.w, w.w);
  *(float4*)(m + i) = m4;
  *(float4*)(v + i) = v4;
  *(float4*)(master + i) = w;
  if (param) {
    ushort4 p;
    p.x = f32_to_bf16(w.x), p.y = f32_to_bf16(w.y), p.z = f32_to_bf16(w.z), p.w = f32_to_bf16(w.w);
    *(ushort4*)(param + i) = p;
  }
  return w;
}

// Whether adamw_vec4 may run on these arrays (param null: none to write).
__device__ __forceinline__ bool adamw_vec_ok(const float* master, const bf16* param, const float* grad, const float* m,
                                             const float* v) {
  return (((unsigned long long)master | (unsigned long long)grad | (unsigned long long)m | (unsigned long long)v) &
          15) == 0 &&
         ((unsigned long long)param & 7) == 0;
}

// Launch: any 1-D grid, grid-stride, four elements a thread where adamw_vec_ok (the tail and
// unaligned arrays one by one). amax (or null; param null: an fp32 parameter, model.fp8_param's
// master): the fused fp8 amax of the updated master, which the step's cast of it into the fp8
// weight reads instead of its amax pass (common.cuh amax_fold, amax_part (gridDim.x); fmaxf over
// |w|, NaN left out as fp8_amax_partial_f32 leaves it out).
extern "C" __global__ void adamw_update(float* master,            // (n)
                                        bf16* param,              // (n)
                                        const float* grad,        // (n)
                                        float* m,                 // (n)
                                        float* v,                 // (n)
                                        long n,
                                        const float* hp,          // (7)
                                        const float* grad_scale,  // (1) or null for 1
                                        float wd_mult,
                                        float* amax_part,         // (gridDim.x) or null
                                        unsigned* amax) {         // [2] or null
  AdamwStep a = adamw_step(hp, grad_scale, wd_mult);
  float mx = 0.0f;
  long t0 = blockIdx.x * (long)blockDim.x + threadIdx.x, stride = (long)gridDim.x * blockDim.x;
  long nv = adamw_vec_ok(master, param, grad, m, v) ? n / 4 : 0;
  for (long j = t0; j < nv; j += stride) {
    float4 w = adamw_vec4(a, master, param, grad, m, v, 4 * j);
    if (amax) mx = fmaxf(fmaxf(mx, fmaxf(fabsf(w.x), fabsf(w.y))), fmaxf(fabsf(w.z), fabsf(w.w)));
  }
  for (long i = 4 * nv + t0; i < n; i += stride) {
    float w = adamw_element(a, master, param, grad, m, v, i);
    if (amax) mx = fmaxf(mx, fabsf(w));
  }
  __shared__ float red[32];
  if (amax) amax_fold(mx, red, amax_part, amax);
}

// ---- multi-tensor launches (the compiler's FUSE_SUMSQ_MULTI / FUSE_ADAMW_MULTI groups) ----
// The table is rows of 8-byte words (kernels/launch.h, "Multi-tensor optimizer kernels"): block b
// runs chunk b, which belongs to the last row whose first chunk (word 2 of a norm row, word 6 of an
// AdamW row) is <= b. Row widths here must match STEPC_SUMSQ_ROW and STEPC_ADAMW_ROW there.
__device__ __forceinline__ int multi_row(const long long* table, int rows, int width, int first_word) {
  int lo = 0, hi = rows - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (table[(long)mid * width + first_word] <= (long long)blockIdx.x) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// partial[b] = sum of x^2 over chunk b (chunk elements of one gradient, fp32 or bf16). Each block's
// threads and tree are fixed and the partials lie in the table's order, so global_norm_finalize
// over them gives the same bits every run. Launch: grid = total chunks, blockDim.x = 256.
extern "C" __global__ void norm_squared_multi(float* partial,           // (total chunks)
                                              const long long* table,   // (rows, 4)
                                              int rows, long chunk) {
  __shared__ float red[32];
  const long long* r = table + (long)multi_row(table, rows, 4, 2) * 4;
  if (r[3] == 2) return;  // STEPC_MULTI_DONE (kernels/launch.h): the producer wrote this partial
  long lo = (blockIdx.x - (long)r[2]) * chunk, hi = lo + chunk < (long)r[1] ? lo + chunk : (long)r[1];
  float s = 0.0f;
  if (r[3] == 1) {
    const bf16* x = (const bf16*)r[0];
    for (long i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      float f = bf16_to_f32(x[i]);
      s += f * f;
    }
  } else {
    const float* x = (const float*)r[0];
    long nv = ((unsigned long long)r[0] & 15) == 0 && (lo & 3) == 0 ? (hi - lo) / 4 : 0;  // float4 where aligned
    for (long j = threadIdx.x; j < nv; j += blockDim.x) {
      float4 q = *(const float4*)(x + lo + 4 * j);
      s += q.x * q.x + q.y * q.y + q.z * q.z + q.w * q.w;
    }
    for (long i = lo + 4 * nv + threadIdx.x; i < hi; i += blockDim.x) s += x[i] * x[i];
  }
  s = block_sum(s, red);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// AdamW over chunk b of one tensor of the table, every element as adamw_update's (the same
// adamw_value, only the loads and stores are wider). Launch: grid = total chunks, blockDim.x = 256.
extern "C" __global__ void adamw_multi(const long long* table,   // (rows, 8)
                                       int rows, long chunk,
                                       const float* hp,          // (7)
                                       const float* grad_scale) {  // (1) or null for 1
  const long long* r = table + (long)multi_row(table, rows, 8, 6) * 8;
  AdamwStep a = adamw_step(hp, grad_scale, __uint_as_float((unsigned)(r[7] & 0xffffffffll)));
  long lo = (blockIdx.x - (long)r[6]) * chunk, hi = lo + chunk < (long)r[5] ? lo + chunk : (long)r[5];
  float *master = (float*)r[0], *m = (float*)r[3], *v = (float*)r[4];
  bf16* param = (bf16*)r[1];
  const float* grad = (const float*)r[2];
  // 4 elements a thread where every array allows 16-byte (param 8-byte) accesses; the rest one by one
  bool aligned = r[1] != 0 && adamw_vec_ok(master, param, grad, m, v) && (lo & 3) == 0;
  long nv = aligned ? (hi - lo) / 4 : 0;
  for (long j = threadIdx.x; j < nv; j += blockDim.x) adamw_vec4(a, master, param, grad, m, v, lo + 4 * j);
  for (long i = lo + 4 * nv + threadIdx.x; i < hi; i += blockDim.x) adamw_element(a, master, param, grad, m, v, i);
}
