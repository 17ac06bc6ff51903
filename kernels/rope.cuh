// rope.cuh — rotary position embedding, rotate-half convention (Llama, Megatron, GPT-NeoX):
// for i < D/2 with angle a = t * base^(-2i/D),
//   y[i]       = x[i] cos a - x[i + D/2] sin a
//   y[i + D/2] = x[i + D/2] cos a + x[i] sin a
// Backward is the inverse rotation (a -> -a). Angles in fp32 as PyTorch computes its frequency
// table (inv_freq = 1 / base^(2i/D), then t * inv_freq); cos/sin are not rounded to bf16.
// `factor` > 0 scales inv_freq as Llama 3 does (ir/ops/rope.c states the rule; Megatron's
// _apply_scaling, Hugging Face's rope_type "llama3"), in fp32 in PyTorch's operation order; 0 leaves
// it unscaled (the same instructions as before scaling existed).
//
// Every kernel here computes the angle with rope_angle and the rotation with rope_rotate (explicit
// roundings, no contraction left to the compiler), so the QKV kernels below write exactly the bits
// of split_qkv + rope_forward (and rope_backward + concat_qkv): the compiler may fuse either way
// (compiler/passes/fuse.c) and a recompute replay equals its forward.
#pragma once
#include "common.cuh"

// ops.h's ROPE_LLAMA3_*: low_freq_factor 1, high_freq_factor 4, original context 8192.
#define STEPC_ROPE_LLAMA3_LOW 1.0f
#define STEPC_ROPE_LLAMA3_HIGH 4.0f
#define STEPC_ROPE_LLAMA3_ORIG 8192.0f

// Llama 3's scaling of one frequency w, explicit roundings in PyTorch's order:
// wavelen = 2pi / w; w / F above O / L; w below O / Hf; between, with
// s = (O / wavelen - L) / (Hf - L): (1 - s) * w / F + s * w.
__device__ __forceinline__ float rope_llama3(float w, float factor) {
  float wavelen = __fdiv_rn(6.2831853071795864769f, w);
  if (wavelen > STEPC_ROPE_LLAMA3_ORIG / STEPC_ROPE_LLAMA3_LOW) return __fdiv_rn(w, factor);
  if (wavelen < STEPC_ROPE_LLAMA3_ORIG / STEPC_ROPE_LLAMA3_HIGH) return w;
  float s = __fdiv_rn(__fsub_rn(__fdiv_rn(STEPC_ROPE_LLAMA3_ORIG, wavelen), STEPC_ROPE_LLAMA3_LOW),
                      STEPC_ROPE_LLAMA3_HIGH - STEPC_ROPE_LLAMA3_LOW);
  return __fadd_rn(__fdiv_rn(__fmul_rn(__fsub_rn(1.0f, s), w), factor), __fmul_rn(s, w));
}

__device__ __forceinline__ void rope_angle(int t, int k, int D, float base, float factor, float sign, float* c,
                                           float* s) {
  float inv_freq = 1.0f / powf(base, (float)(2 * k) / (float)D);
  if (factor > 0.0f) inv_freq = rope_llama3(inv_freq, factor);
  sincosf((float)t * inv_freq, s, c);
  *s *= sign;
}

__device__ __forceinline__ void rope_rotate(float x1, float x2, float c, float s, float* y1, float* y2) {
  *y1 = __fmaf_rn(x1, c, -__fmul_rn(x2, s));
  *y2 = __fmaf_rn(x2, c, __fmul_rn(x1, s));
}

// Works in place (out == inp): each thread reads its pair before writing it.
__device__ __forceinline__ void rope_apply(bf16* out, const bf16* inp, int B, int T, int H, int D,
                                           float base, float factor, float sign) {
  int half = D / 2;
  long total = (long)B * T * H * half;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
    int k = (int)(i % half);
    long row = i / half;  // (b, t, h) flattened
    int t = (int)((row / H) % T);
    float s, c, y1, y2;
    rope_angle(t, k, D, base, factor, sign, &c, &s);
    long p = row * D + k;
    rope_rotate(bf16_to_f32(inp[p]), bf16_to_f32(inp[p + half]), c, s, &y1, &y2);
    out[p] = f32_to_bf16(y1);
    out[p + half] = f32_to_bf16(y2);
  }
}

// Launch (both): any 1-D grid, grid-stride over B*T*H*D/2 pairs. Q and K are separate calls
// (H = heads for Q, kv heads for K).
extern "C" __global__ void rope_forward(bf16* out,        // (B, T, H, D)
                                        const bf16* inp,  // (B, T, H, D)
                                        int B, int T, int H, int D, float base, float factor) {
  rope_apply(out, inp, B, T, H, D, base, factor, 1.0f);
}

extern "C" __global__ void rope_backward(bf16* dinp,        // (B, T, H, D)
                                         const bf16* dout,  // (B, T, H, D)
                                         int B, int T, int H, int D, float base, float factor) {
  rope_apply(dinp, dout, B, T, H, D, base, factor, -1.0f);
}

#define STEPC_ROPE_MAX_HALF 256  // D <= 512 for the QKV kernels (as kernels/launch.h)

// One token row of the fused QKV layout [H heads of Q | G of K | G of V] (each head D wide):
// `sign` +1 reads the projection `fused` and writes rotated Q, rotated K and V into `q`, `k`, `v`;
// -1 reads the gradients `q`, `k`, `v` and writes the projection's gradient into `fused` with the
// inverse rotation. The row's D/2 angles are computed once into shared memory (the same
// rope_angle values rope_apply computes per element); then every thread moves 16-byte vectors:
// a unit is 8 rotation pairs (x[j..j+8) with x[j+D/2..j+D/2+8)) of one Q or K head, or 8 plain
// values of V. D % 16 == 0. Returns max |fused| over the thread's stored values when `fold` (the
// backward's fused fp8 amax, common.cuh amax_fold), else 0.
__device__ __forceinline__ float rope_qkv_rows(bf16* fused, bf16* q, bf16* k, bf16* v, long N, int T, int H, int G,
                                               int D, float base, float factor, float sign, bool fold) {
  __shared__ float cs[STEPC_ROPE_MAX_HALF], sn[STEPC_ROPE_MAX_HALF];
  int half = D / 2, hv = half / 8, W = (H + 2 * G) * D;
  int urot = (H + G) * hv, units = urot + G * D / 8;
  float m = 0.0f;
  for (long n = blockIdx.x; n < N; n += gridDim.x) {
    int t = (int)(n % T);
    __syncthreads();  // the previous row's angles are no longer read
    for (int j = threadIdx.x; j < half; j += blockDim.x) rope_angle(t, j, D, base, factor, sign, &cs[j], &sn[j]);
    __syncthreads();
    bf16* row = fused + n * W;
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
      if (u >= urot) {  // V: a copy
        long e = (long)(u - urot) * 8;
        uint4* pv = (uint4*)(v + n * G * D + e);
        uint4* pf = (uint4*)(row + (long)(H + G) * D + e);
        if (sign > 0) *pv = *pf;
        else *pf = *pv;
        if (fold) m = amax8(m, *pv);
        continue;
      }
      int head = u / hv, j = (u % hv) * 8;
      bf16* x = head < H ? q + (n * H + head) * D : k + (n * G + head - H) * D;
      bf16* f = row + (long)head * D;
      const bf16* src = sign > 0 ? f : x;
      bf16* dst = sign > 0 ? x : f;
      float a[8], b[8];
      load8(src + j, a);
      load8(src + j + half, b);
#pragma unroll
      for (int e = 0; e < 8; e++) rope_rotate(a[e], b[e], cs[j + e], sn[j + e], &a[e], &b[e]);
      uint4 ya = pack8(a), yb = pack8(b);
      *(uint4*)(dst + j) = ya;
      *(uint4*)(dst + j + half) = yb;
      if (fold) m = amax8(amax8(m, ya), yb);
    }
  }
  return m;
}

// q (N, H, D), k (N, G, D), v (N, G, D) <- qkv (N, (H+2G)*D): split_qkv then rope_forward on q
// and k, in one pass. N = B*T tokens, token n at position n % T. Launch: grid N (or fewer: a
// block loops over rows), any block size (kernels/launch.h: 128).
extern "C" __global__ void rope_split_qkv(bf16* q, bf16* k, bf16* v,  // (N, H, D), (N, G, D) x2
                                          const bf16* qkv,            // (N, (H+2G)*D)
                                          long N, int T, int H, int G, int D, float base, float factor) {
  rope_qkv_rows((bf16*)qkv, q, k, v, N, T, H, G, D, base, factor, 1.0f, false);
}

// dqkv (N, (H+2G)*D) <- dq, dk, dv: rope_backward on dq and dk then concat_qkv, in one pass.
// Launch: as rope_split_qkv. amax (or null): the fused fp8 amax of dqkv (linear_qkv's output
// gradient; common.cuh amax_fold, amax_part (gridDim.x)).
extern "C" __global__ void rope_concat_qkv(bf16* dqkv,                                  // (N, (H+2G)*D)
                                           const bf16* dq, const bf16* dk, const bf16* dv,  // (N, H, D), (N, G, D) x2
                                           long N, int T, int H, int G, int D, float base, float factor,
                                           float* amax_part,  // (gridDim.x) or null
                                           unsigned* amax) {  // [2] or null
  float m = rope_qkv_rows(dqkv, (bf16*)dq, (bf16*)dk, (bf16*)dv, N, T, H, G, D, base, factor, -1.0f, amax);
  __shared__ float red[32];
  if (amax) amax_fold(m, red, amax_part, amax);
}
