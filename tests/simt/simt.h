/* simt.h — what a kernel file (kernels/, .cuh) needs to compile as C++ on the CPU and run under simt.cc's
 * scheduler: each CUDA thread of a block a coroutine, __syncthreads and the warp collectives
 * (shuffles, mma.sync) points where the coroutines meet. Included (with STEPC_SIMT defined) before
 * kernels/common.cuh by the one translation unit that compiles the kernels for the CPU
 * (simt_kernels.cc). The kernel text stays the device's: where it must differ (inline PTX, the
 * dynamic shared memory declaration) kernels/common.cuh and the kernel file say so under
 * #ifdef STEPC_SIMT, calling the simt_* functions below.
 *
 * Semantics (checked, a violation ends the program with a message naming the kernel and block):
 *  - a block's threads run one at a time, each until it reaches a barrier or returns; memory is
 *    sequentially consistent, so a race the barriers do not order shows up as a wrong result, not
 *    as nondeterminism;
 *  - __syncthreads releases when every thread of the block that has not returned waits at it (a
 *    returned thread counts as arrived, as on sm_70 and later);
 *  - a warp collective (shuffle, __syncwarp, mma) releases when all 32 lanes of the warp wait at
 *    one; a lane that returned or waits at __syncthreads meanwhile is an error (a full-mask
 *    collective over a partial warp is undefined on the device);
 *  - a thread waiting on an mbarrier phase yields until it completes; a named barrier (bar.sync id,
 *    count) releases when `count` threads wait at it; a round in which every waiting thread still
 *    waits and nothing arrived is a deadlock;
 *  - dynamic shared memory is filled with 0xff bytes (NaN as floats) at each block's start, so a
 *    read of what the block never wrote shows. */
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
/* sm_90a's paths (wgmma) compile: simt.cc runs their products */
#define __CUDA_ARCH_FEAT_SM90_ALL 1
/* one instance per process, and blocks run one at a time: one per block */
#define __shared__ static

struct simt_dim3 {
  unsigned x, y, z;
};

struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) ushort4 {
  unsigned short x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(8) float2 {
  float x, y;
};

inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }

/* The scheduler's state a kernel reads (simt.cc). */
struct SimtThread {
  simt_dim3 tid;
};
extern SimtThread *simt_cur;
extern simt_dim3 simt_block_idx, simt_block_dim, simt_grid_dim;
#define threadIdx (simt_cur->tid)
#define blockIdx simt_block_idx
#define blockDim simt_block_dim
#define gridDim simt_grid_dim

void simt_syncthreads();
/* bar.sync id, count: a named barrier (1..15) that releases when `count` threads (whole warps) wait at it. */
void simt_bar_sync(int id, int count);
void simt_syncwarp();
/* A warp collective: this lane's 8 bytes in, lane `src`'s out (every lane of the warp calls it). */
uint64_t simt_warp_exchange(uint64_t mine, int src);
/* A warp collective: this lane's 8 bytes in, every lane's out (all[lane]). */
void simt_warp_gather(uint64_t mine, uint64_t *all);
/* mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: D = A B + C over the warp's fragments. */
void simt_mma_m16n8k8_tf32(float *c, const unsigned *a, unsigned b0, unsigned b1);
void *simt_dynamic_smem();

#define STEPC_DYNAMIC_SMEM(T, name) T *name = (T *)simt_dynamic_smem() /* 16-byte aligned */
/* kernels/mma.cuh's dynamic shared memory as bytes */
#define stepc_smem ((unsigned char *)simt_dynamic_smem())

/* Shared-memory addresses (cvta.to.shared): offsets into the block's dynamic shared memory, which
 * is 1024-byte aligned here so that the 128-byte swizzle sees the device's address bits. */
unsigned simt_smem_addr(const void *p);
/* ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16 at this lane's row address. */
void simt_ldmatrix_x4(unsigned *r, unsigned saddr, bool trans);
/* mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 */
void simt_mma_m16n8k16_bf16(float *c, const unsigned *a, unsigned b0, unsigned b1);
/* cp.async.cg.shared.global of 16 bytes (zero-filled when !full), done at once. */
void simt_cp_async16(unsigned saddr, const void *gmem, bool full);
/* wgmma.mma_async m64nNk16 f32.bf16.bf16 of this thread's warpgroup (done at once: the kernel waits
 * before it reads d): A from the descriptor da (a == nullptr; tnspA: MN-major) or from this
 * thread's registers a[4] (mma.m16n8k16's A fragment of its warp's 16 rows), B from the descriptor
 * db (tnspB: MN-major); d = acc ? d + A B : A B. */
void simt_wgmma(float *d, int n, unsigned long long da, const unsigned *a, unsigned long long db, int tnspA,
                int tnspB, int acc);
/* wgmma.mma_async m64nNk32 f32 of fp8 operands (fa / fb: 0 E4M3, 1 E5M2), both K-major from their
 * descriptors (128-byte rows of 128 k); d += A B. */
void simt_wgmma_fp8(float *d, int n, unsigned long long da, unsigned long long db, int fa, int fb);

/* Shared-memory barriers (mbarrier, at 8-byte aligned shared addresses): init with the arrivals a
 * phase takes; an arrival, with bytes the phase must also receive from the tensor memory accelerator
 * (expect_tx; 0 none); a wait until the phase of that parity has completed: the thread yields
 * until then (simt.cc ends the program when every waiting thread waits on phases nothing completes). */
void simt_mbar_init(unsigned bar, unsigned count);
void simt_mbar_arrive(unsigned bar, unsigned expect_tx);
void simt_mbar_wait(unsigned bar, unsigned parity);
/* The tensor memory accelerator's tiled load (cp.async.bulk.tensor.Nd ... mbarrier::complete_tx),
 * done at once: the box at coordinates c[0..rank) of the tensor map `map`  into
 * shared memory at dst, elements outside the tensor zero, in the map's swizzle; then its bytes
 * completed on the barrier. The map is simt_launch.h's SimtTmap. */
void simt_tma_load(unsigned dst, const void *map, unsigned bar, const int *c, int rank);

inline void __syncthreads() { simt_syncthreads(); }
inline void __syncwarp(unsigned = 0xffffffffu) { simt_syncwarp(); }
inline void __threadfence() {}

inline float __uint_as_float(unsigned u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  return u;
}
inline float __int_as_float(int i) { return __uint_as_float((unsigned)i); }
inline int __float_as_int(float f) { return (int)__float_as_uint(f); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }

template <typename T> inline T __ldg(const T *p) { return *p; }
template <typename T> inline T __ldcg(const T *p) { return *p; }
/* atomics: a coroutine is never interrupted between the read and the write */
template <typename T> inline T atomicAdd(T *p, T v) {
  T o = *p;
  *p = o + v;
  return o;
}
template <typename T> inline T atomicMax(T *p, T v) {
  T o = *p;
  *p = o > v ? o : v;
  return o;
}

template <typename T> inline T simt_shfl(T v, int src) {
  static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
  uint64_t in = 0, out;
  memcpy(&in, &v, sizeof v);
  out = simt_warp_exchange(in, src);
  T r;
  memcpy(&r, &out, sizeof r);
  return r;
}
template <typename T> inline T __shfl_sync(unsigned, T v, int src, int width = 32) {
  int lane = (int)(threadIdx.x % 32);
  return simt_shfl(v, (lane / width) * width + src % width);
}
template <typename T> inline T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) {
  int lane = (int)(threadIdx.x % 32), src = lane ^ mask;
  return simt_shfl(v, src / width == lane / width ? src : lane);
}
template <typename T> inline T __shfl_down_sync(unsigned, T v, unsigned d, int width = 32) {
  int lane = (int)(threadIdx.x % 32), src = lane + (int)d;
  return simt_shfl(v, src / width == lane / width ? src : lane);
}
template <typename T> inline T __shfl_up_sync(unsigned, T v, unsigned d, int width = 32) {
  int lane = (int)(threadIdx.x % 32), src = lane - (int)d;
  return simt_shfl(v, src >= 0 && src / width == lane / width ? src : lane);
}

inline unsigned __ballot_sync(unsigned, int pred) {
  uint64_t all[32];
  simt_warp_gather(pred != 0, all);
  unsigned b = 0;
  for (int i = 0; i < 32; i++)
    b |= (unsigned)(all[i] != 0) << i;
  return b;
}
/* the lanes whose value equals this lane's */
template <typename T> inline unsigned __match_any_sync(unsigned, T v) {
  static_assert(sizeof(T) <= 8, "a match compares at most 8 bytes");
  uint64_t mine = 0, all[32];
  memcpy(&mine, &v, sizeof v);
  simt_warp_gather(mine, all);
  unsigned b = 0;
  for (int i = 0; i < 32; i++)
    b |= (unsigned)(all[i] == mine) << i;
  return b;
}
inline int __any_sync(unsigned m, int pred) { return __ballot_sync(m, pred) != 0; }
inline int __all_sync(unsigned m, int pred) { return __ballot_sync(m, pred) == 0xffffffffu; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }

/* cvt.rn.bf16.f32: round to nearest even, NaN kept (quiet). */
inline unsigned short simt_cvt_rn_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
/* cvt.rna.tf32.f32: round to the nearest 10-bit mantissa, ties away from zero (as bits of a float). */
inline unsigned simt_cvt_rna_tf32(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return u; /* inf, NaN */
  return (u + 0x1000u) & 0xffffe000u;
}

/* cvt.rn.satfinite.{e4m3,e5m2}.f32 of one value: round to nearest even; a finite value beyond the
 * format's largest (448, 57344), or an infinity, clamps to it with its sign; NaN is 0x7f. */
inline unsigned char simt_cvt_fp8(float f, int e5m2) {
  const int M = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
  const float top = e5m2 ? 57344.0f : 448.0f;
  if (isnan(f)) return 0x7f;
  unsigned char sign = signbit(f) ? 0x80 : 0;
  float a = fabsf(f);
  int e;
  if (a >= top) a = top;
  frexpf(a, &e); /* a = m 2^e, m in [0.5, 1): the binade's exponent is e - 1 */
  int x = a == 0.0f || e - 1 < 1 - bias ? 1 - bias : e - 1;
  float r = nearbyintf(ldexpf(a, M - x)); /* units of the binade's (or the subnormals') spacing */
  if (ldexpf(r, x - M) > top) r = nearbyintf(ldexpf(top, M - x));
  if (r == 0.0f) return sign;
  if (r >= (float)(2 << M)) r /= 2, x += 1; /* rounded up into the next binade: 2^(M+1) -> 2^M there */
  if (r < (float)(1 << M)) return (unsigned char)(sign | (unsigned)r); /* subnormal (x = 1 - bias) */
  return (unsigned char)(sign | (unsigned)(x + bias) << M | ((unsigned)r - (1u << M)));
}
