// common.cuh — what every kernel file shares: the bf16 storage type, conversions, reductions and
// the Philox4x32-10 counter-based RNG.
//
// No headers: nvrtc compiles this text as is (the code generator inlines every kernels/*.cuh into
// one kernels.cu, so an artifact needs no include path), and the same text builds under nvcc.
// bf16 is raw storage (unsigned short); all arithmetic is fp32. Conversions use the sm_80+
// cvt.rn.bf16 instructions: round to nearest even, NaN preserved.
//
// STEPC_SIMT: the text compiled as C++ for the CPU by tests/simt (simt.h comes first); where the
// device's text cannot run there (inline PTX, the dynamic shared memory declaration) the CPU's
// equivalent stands under #ifdef STEPC_SIMT.
#pragma once

// A kernel's dynamic shared memory, as an array `name` of T, 16-byte aligned.
#ifndef STEPC_SIMT
#define STEPC_DYNAMIC_SMEM(T, name) extern __shared__ __align__(16) T name[]
#endif

typedef unsigned short bf16;

#define STEPC_WARP 32
#define STEPC_FULL_MASK 0xffffffffu
#define STEPC_NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float bf16_to_f32(bf16 h) { return __uint_as_float(((unsigned)h) << 16); }

__device__ __forceinline__ bf16 f32_to_bf16(float f) {
#ifdef STEPC_SIMT
  return simt_cvt_rn_bf16(f);
#else
  unsigned short r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
#endif
}

// Two floats into one 32-bit word: lo in bits 0..15, hi in 16..31 (the order mma.sync reads).
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
#ifdef STEPC_SIMT
  return (unsigned)simt_cvt_rn_bf16(lo) | (unsigned)simt_cvt_rn_bf16(hi) << 16;
#else
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#endif
}

// A named barrier (1..15; 0 is __syncthreads'): `count` threads, whole warps, meet at it.
__device__ __forceinline__ void bar_sync_named(int id, int count) {
#ifdef STEPC_SIMT
  simt_bar_sync(id, count);
#else
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
#endif
}

__device__ __forceinline__ float bf16x2_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16x2_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

// Eight bf16 in one 16-byte word, widened to fp32.
__device__ __forceinline__ void unpack8(uint4 u, float* v) {
  const unsigned* w = (const unsigned*)&u;
#pragma unroll
  for (int k = 0; k < 4; k++) {
    v[2 * k] = bf16x2_lo(w[k]);
    v[2 * k + 1] = bf16x2_hi(w[k]);
  }
}

// Eight consecutive bf16 as one 16-byte access (p 16-byte aligned), widened to fp32.
__device__ __forceinline__ void load8(const bf16* p, float* v) { unpack8(*(const uint4*)p, v); }

// Eight fp32 rounded to bf16, packed into one 16-byte word.
__device__ __forceinline__ uint4 pack8(const float* v) {
  uint4 u;
  unsigned* w = (unsigned*)&u;
#pragma unroll
  for (int k = 0; k < 4; k++) w[k] = pack_bf16x2(v[2 * k], v[2 * k + 1]);
  return u;
}

__device__ __forceinline__ void store8(bf16* p, const float* v) { *(uint4*)p = pack8(v); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(STEPC_FULL_MASK, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(STEPC_FULL_MASK, v, o));
  return v;
}

// Sum over the block, result in every thread. The tree has a fixed shape for a given blockDim,
// so the result is bitwise reproducible. `shared` holds 32 floats; callers that reduce twice in a
// row must __syncthreads() in between (done here on entry).
__device__ __forceinline__ float block_sum(float v, float* shared) {
  int lane = threadIdx.x % STEPC_WARP, warp = threadIdx.x / STEPC_WARP;
  int nwarps = (blockDim.x + STEPC_WARP - 1) / STEPC_WARP;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* shared) {
  int lane = threadIdx.x % STEPC_WARP, warp = threadIdx.x / STEPC_WARP;
  int nwarps = (blockDim.x + STEPC_WARP - 1) / STEPC_WARP;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : STEPC_NEG_INF;
  return warp_max(v);
}

// The fused fp8 amax (compiler/passes/fuse.c fuse_amax): a kernel that produces a tensor an fp8
// cast reads folds max|y| of the bf16 values it stores (m, this thread's; +0 or more, NaN left out
// by fmaxf as fp8_amax_partial leaves it out) into amax[0] as the float's bits, for the cast to read
// instead of running its amax pass. Each block writes its maximum to part[blockIdx.x] (a 1-D grid);
// the last block to take a ticket (amax[1]) reduces the parts, stores the result and resets the
// ticket to 0, so nothing needs zeroing between launches (the allocation starts zeroed). Max is
// exact and order-free: the bits equal the two-pass amax's. Called by every thread of the block.
__device__ __forceinline__ void amax_fold(float m, float* red, float* part, unsigned* amax) {
  __shared__ unsigned ticket;
  m = block_max(m, red);
  if (threadIdx.x == 0) {
    part[blockIdx.x] = m;
    __threadfence();
    ticket = atomicAdd(amax + 1, 1u);
  }
  __syncthreads();
  if (ticket != gridDim.x - 1) return;
  __threadfence();
  float r = 0.0f;
  for (unsigned i = threadIdx.x; i < gridDim.x; i += blockDim.x) r = fmaxf(r, __ldcg(part + i));
  r = block_max(r, red);
  if (threadIdx.x == 0) {
    amax[0] = __float_as_uint(r);
    amax[1] = 0u;
  }
}

// max(m, |v|) over eight values packed as bf16 (the rounded values a kernel stores).
__device__ __forceinline__ float amax8(float m, uint4 u) {
  float v[8];
  unpack8(u, v);
#pragma unroll
  for (int k = 0; k < 8; k++) m = fmaxf(m, fabsf(v[k]));
  return m;
}

// ---- Philox4x32-10 (Salmon et al., SC'11; the generator of Random123 and cuRAND) ----
// Counter-based: the output is a pure function of (counter, key), so a mask can be regenerated
// anywhere (backward, recompute, graph replay) without storing it or threading RNG state.
struct philox4 {
  unsigned x, y, z, w;
};

__device__ __forceinline__ philox4 philox4x32_10(philox4 c, unsigned k0, unsigned k1) {
  const unsigned M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
#pragma unroll
  for (int r = 0; r < 10; r++) {
    unsigned hi0 = __umulhi(M0, c.x), lo0 = M0 * c.x;
    unsigned hi1 = __umulhi(M1, c.z), lo1 = M1 * c.z;
    philox4 n = {hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
    c = n;
    k0 += W0;
    k1 += W1;
  }
  return c;
}

// The dropout stream: element i of op `op_id` under `seed` uses word (i & 3) of
// philox(counter = {i>>2 low, i>>2 high, op_id, 0}, key = {seed low, seed high}).
// It is kept iff (word >> 8) >= keep_threshold(p), i.e. with probability 1 - p at 24-bit resolution.
__device__ __forceinline__ philox4 dropout_bits(unsigned long long seed, unsigned op_id,
                                                unsigned long long group) {
  philox4 c = {(unsigned)group, (unsigned)(group >> 32), op_id, 0u};
  return philox4x32_10(c, (unsigned)seed, (unsigned)(seed >> 32));
}

__device__ __forceinline__ unsigned dropout_threshold(float p) { return (unsigned)(p * 16777216.0f); }
