// fp8.cuh — current (per-tensor) scaling casts to fp8, as Transformer Engine's Float8CurrentScaling:
// amax = max |x| over the tensor, scale = fp8_max / amax, q = fp8(x * scale) rounded to nearest
// even and saturated to +-fp8_max, scale_inv = 1 / scale (what the fp8 GEMMs multiply back).
//
// Delayed scaling (Transformer Engine's DelayedScaling, ir/ops/fp8.h) casts with the scale its
// state holds (dscale: 0 there stands for the initial 1) instead, and folds the tensor's amax into
// the state's current amax entry (damax, fmaxf); fp8_scale_update then rolls the histories and
// recomputes the scales (TE's amax_and_scale_update).
//
// A current-scaling cast is two launches: fp8_amax_partial writes one block maximum per block (max
// is exact and order-free, so the result does not depend on the grid), then fp8_cast_transpose
// reduces those partials again in every block, derives the scale, and writes the row-wise copy
// q (M, K), the column-wise copy qT (K, M) that Hopper's fp8 tensor cores need for the other two
// GEMMs of a linear (they take only K-contiguous operands), or both, from one read of x. Where the
// kernel that produced x folded max|x| into an amax slot itself (common.cuh amax_fold: the norms and
// the gated activations, both directions), the cast is the second launch alone, reading that slot as
// its one partial. A delayed cast is always one launch: its scale is known before it starts, and
// each block folds its tile's maximum into the state's amax entry. M and K are multiples of 16 (the
// fp8 GEMMs' own requirement); x is 16-byte aligned, bf16 or (the _f32 kernels) fp32.
#pragma once

#include "common.cuh"

#define STEPC_FP8_E4M3_MAX 448.0f
#define STEPC_FP8_E5M2_MAX 57344.0f

// Two fp32 to two fp8 in one 16-bit word (lo in bits 0..7): cvt.rn.satfinite (sm_89+) rounds to
// nearest even and clamps finite values to +-max; NaN stays NaN.
__device__ __forceinline__ unsigned short fp8x2_from_f32(float lo, float hi, int e5m2) {
#ifdef STEPC_SIMT
  return (unsigned short)(simt_cvt_fp8(lo, e5m2) | simt_cvt_fp8(hi, e5m2) << 8);
#else
  unsigned short r;
  if (e5m2)
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
#endif
}

// Transformer Engine's compute_scale_from_amax (epsilon 0, no power-of-two rounding): 1 for a zero,
// infinite or NaN amax; the fp32 maximum where the quotient overflows.
__device__ __forceinline__ float fp8_scale_from_amax(float amax, float fmax) {
  if (amax == 0.0f || isinf(amax) || isnan(amax)) return 1.0f;
  float s = __fdiv_rn(fmax, amax);
  if (isinf(s)) s = 3.402823466e38f;
  return s;
}

// A delayed state's stored scale: 0 is the initial scale 1 (ir/ops/fp8.h fp8_delayed_scale).
__device__ __forceinline__ float fp8_delayed_scale(float stored) { return stored == 0.0f ? 1.0f : stored; }

// Eight consecutive elements of a cast's input, loaded at once: bf16 (one 16-byte word) or fp32
// (two; model.fp8_param casts the fp32 master weights, ir/ops/fp8.c) — the cast's one difference
// between the two sources: every element becomes an fp32 value first, exactly.
template <typename T>
struct Fp8In;
template <>
struct Fp8In<bf16> {
  uint4 u;
  __device__ __forceinline__ void load(const bf16* p) { u = *(const uint4*)p; }
  __device__ __forceinline__ void get(float* v) const { unpack8(u, v); }
  __device__ __forceinline__ static float one(bf16 x) { return bf16_to_f32(x); }
};
template <>
struct Fp8In<float> {
  float4 a, b;
  __device__ __forceinline__ void load(const float* p) { a = ((const float4*)p)[0], b = ((const float4*)p)[1]; }
  __device__ __forceinline__ void get(float* v) const {
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  }
  __device__ __forceinline__ static float one(float x) { return x; }
};

template <typename T>
__device__ __forceinline__ float fp8_amax8(float m, const Fp8In<T>& in) {
  float v[8];
  in.get(v);
#pragma unroll
  for (int k = 0; k < 8; k++) m = fmaxf(m, fabsf(v[k]));
  return m;
}

// partial[blockIdx.x] = max |x[i]| over the block's grid-stride share of n elements. Four 16-byte
// loads a thread in flight before any is used (2 blocks an SM would otherwise keep ~1 MB in flight,
// a third of what HBM needs); max is exact and order-free, so the split does not reach the result.
template <typename T>
__device__ __forceinline__ void fp8_amax_partial_body(float* partial, const T* x, long n) {
  __shared__ float red[32];
  float m = 0.0f;
  long tid = (long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long)gridDim.x * blockDim.x;
  long n8 = n / 8;
  for (long i0 = tid; i0 < n8; i0 += 4 * stride) {
    Fp8In<T> u[4];
#pragma unroll
    for (int j = 0; j < 4; j++)
      if (i0 + j * stride < n8) u[j].load(x + 8 * (i0 + j * stride));
#pragma unroll
    for (int j = 0; j < 4; j++) {
      if (i0 + j * stride >= n8) break;
      m = fp8_amax8(m, u[j]);
    }
  }
  for (long i = 8 * n8 + tid; i < n; i += stride) m = fmaxf(m, fabsf(Fp8In<T>::one(x[i])));
  m = block_max(m, red);
  if (threadIdx.x == 0) partial[blockIdx.x] = m;
}

extern "C" __global__ void fp8_amax_partial(float* partial, const bf16* x, long n) {
  fp8_amax_partial_body(partial, x, n);
}
extern "C" __global__ void fp8_amax_partial_f32(float* partial, const float* x, long n) {
  fp8_amax_partial_body(partial, x, n);
}

#define STEPC_FP8_TILE 64

// One 64 x 64 tile of x (M, K) at (m0, k0), loaded: two vectors of 8 elements a thread (blockDim 256,
// 64 rows x 8 vectors), all in flight before any store (the stores go through byte pointers, which
// the compiler must assume alias x).
template <typename T>
__device__ __forceinline__ void fp8_tile_load(Fp8In<T>* in, const T* x, int m0, int k0, int M, int K) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    int v = threadIdx.x + h * 256, r = v / 8, c = (v % 8) * 8, gm = m0 + r, gk = k0 + c;
    if (gm < M && gk < K) in[h].load(x + (long)gm * K + gk);
  }
}

// The loaded tile's max |x|, over the block (every thread gets it).
template <typename T>
__device__ __forceinline__ float fp8_tile_amax(const Fp8In<T>* in, int m0, int k0, int M, int K, float* red) {
  float m = 0.0f;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    int v = threadIdx.x + h * 256, gm = m0 + v / 8, gk = k0 + (v % 8) * 8;
    if (gm < M && gk < K) m = fp8_amax8(m, in[h]);
  }
  return block_max(m, red);
}

// The loaded tile cast into q (M, K) and/or qT (K, M) (either may be null): row r's elements times
// row_scale[r] where row_scale is given (a grouped cast's rows, each its expert's scale; a negative
// entry: a row of no expert, cast as 0), else times scale.
template <typename T>
__device__ __forceinline__ void fp8_tile_store(unsigned char* q, unsigned char* qT, const Fp8In<T>* in, int m0,
                                               int k0, int M, int K, int fmt, float scale,
                                               const float* row_scale) {
  __shared__ unsigned char tile[STEPC_FP8_TILE][STEPC_FP8_TILE + 8];
#pragma unroll
  for (int h2 = 0; h2 < 2; h2++) {
    int v = threadIdx.x + h2 * 256, r = v / 8, c = (v % 8) * 8, gm = m0 + r, gk = k0 + c;
    if (gm >= M || gk >= K) continue;
    float f[8], s = row_scale ? row_scale[r] : scale;
    in[h2].get(f);
    if (s < 0.0f) { /* no expert's row: 0, whatever x holds there */
      s = 0.0f;
#pragma unroll
      for (int k = 0; k < 8; k++) f[k] = 0.0f;
    }
    unsigned w[2];
#pragma unroll
    for (int h = 0; h < 2; h++)
      w[h] = (unsigned)fp8x2_from_f32(f[4 * h] * s, f[4 * h + 1] * s, fmt) |
             ((unsigned)fp8x2_from_f32(f[4 * h + 2] * s, f[4 * h + 3] * s, fmt) << 16);
    if (q) *(uint2*)(q + (long)gm * K + gk) = make_uint2(w[0], w[1]);
    *(uint2*)&tile[r][c] = make_uint2(w[0], w[1]);
  }
  if (!qT) return;
  __syncthreads();
  // the transpose: 64 columns x 8 runs of 8 rows
  for (int v = threadIdx.x; v < STEPC_FP8_TILE * 8; v += blockDim.x) {
    int c = v / 8, r = (v % 8) * 8, gk = k0 + c, gm = m0 + r;
    if (gm >= M || gk >= K) continue;
    unsigned w0 = 0, w1 = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      w0 |= (unsigned)tile[r + j][c] << (8 * j);
      w1 |= (unsigned)tile[r + 4 + j][c] << (8 * j);
    }
    *(uint2*)(qT + (long)gk * M + gm) = make_uint2(w0, w1);
  }
}

// One 64 x 64 tile of x (M, K) per block (grid (ceil(K/64), ceil(M/64)), exactly 256 threads): q (M, K)
// and/or qT (K, M) (either may be null), and scale_inv[0] (from block (0, 0)). fmt 0 = E4M3,
// 1 = E5M2. nparts partial maxima from fp8_amax_partial (or 1: the producer's amax slot). dscale
// non-null: delayed scaling, the scale *dscale, partial unread, and every block folds its tile's
// max |x| into *damax with atomicMax on the float's bits (amaxes are +0 or more, and order like their
// bits; NaN left out by fmaxf as above): the fmaxf of the entry and the tensor's amax, whatever the
// blocks' order. damax null in an evaluation, which records nothing. x bf16 (fp8_cast_transpose) or
// fp32 (fp8_cast_transpose_f32, the fp8 primary weights' cast of their masters).
template <typename T>
__device__ __forceinline__ void fp8_cast_transpose_body(unsigned char* q, unsigned char* qT, float* scale_inv,
                                                        const T* x, const float* partial, int nparts, int M,
                                                        int K, int fmt, const float* dscale, float* damax) {
  __shared__ float red[32];
  int m0 = blockIdx.y * STEPC_FP8_TILE, k0 = blockIdx.x * STEPC_FP8_TILE;
  Fp8In<T> in[2]; // in flight while the amax partials are reduced
  fp8_tile_load(in, x, m0, k0, M, K);
  float m = 0.0f, scale;
  if (dscale) {
    if (damax) {
      m = fp8_tile_amax(in, m0, k0, M, K, red);
      if (threadIdx.x == 0) atomicMax((unsigned*)damax, __float_as_uint(m));
    }
    scale = fp8_delayed_scale(*dscale);
  } else {
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) m = fmaxf(m, partial[i]);
    scale = fp8_scale_from_amax(block_max(m, red), fmt ? STEPC_FP8_E5M2_MAX : STEPC_FP8_E4M3_MAX);
  }
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) scale_inv[0] = __frcp_rn(scale);
  fp8_tile_store(q, qT, in, m0, k0, M, K, fmt, scale, (const float*)0);
}

extern "C" __global__ void fp8_cast_transpose(unsigned char* q, unsigned char* qT, float* scale_inv,
                                              const bf16* x, const float* partial, int nparts, int M, int K,
                                              int fmt, const float* dscale, float* damax) {
  fp8_cast_transpose_body(q, qT, scale_inv, x, partial, nparts, M, K, fmt, dscale, damax);
}
extern "C" __global__ void fp8_cast_transpose_f32(unsigned char* q, unsigned char* qT, float* scale_inv,
                                                  const float* x, const float* partial, int nparts, int M,
                                                  int K, int fmt, const float* dscale, float* damax) {
  fp8_cast_transpose_body(q, qT, scale_inv, x, partial, nparts, M, K, fmt, dscale, damax);
}

// ---- grouped casts: the routed experts' (ir/ops/fp8.c FP8_QUANT_GROUPED), each expert's tensor cast
// with its own scale. Three launches: fp8_amax_partial_grouped (grid (P, E): P partial maxima of each
// expert's elements), fp8_scale_grouped (one thread an expert: its scale and scale_inv, from its
// partials or, delayed, from its state column, its amax folded there), fp8_cast_transpose_grouped.
// Weights: w (E, M, K), expert e's (M, K) block cast alone into q (E, M, K) and qT (E, K, M) (grid
// (ceil(K/64), ceil(M/64), E)). Rows: x (R, K) with the segments seg (E, 2) int32 (rows [seg[2e],
// seg[2e] + seg[2e + 1]) are expert e's), each row cast with its expert's scale into q (R, K) and
// qT (K, R), the rows of no segment 0 (grid (ceil(K/64), ceil(R/64), 1)). M, K multiples of 16.

#define STEPC_FP8_GROUP_EMAX 512 // experts a rows cast finds a row's among (as kernels/launch.h)

// Expert e's elements of a grouped cast's input: [*lo, *lo + the count).
__device__ __forceinline__ long fp8_group_span(const int* seg, int e, long each, int K, long* lo) {
  if (!seg) return *lo = (long)e * each, each;
  *lo = (long)seg[2 * e] * K;
  return (long)seg[2 * e + 1] * K;
}

// partial[e * gridDim.x + blockIdx.x] = max |x| over the block's share of expert e's (blockIdx.y)
// elements: `each` a weight's (seg null), or its rows' of width K.
template <typename T>
__device__ __forceinline__ void fp8_amax_partial_grouped_body(float* partial, const T* x, const int* seg, long each,
                                                              int K) {
  long lo, n = fp8_group_span(seg, blockIdx.y, each, K, &lo);
  fp8_amax_partial_body(partial + (long)blockIdx.y * gridDim.x, x + lo, n);
}
extern "C" __global__ void fp8_amax_partial_grouped(float* partial, const bf16* x, const int* seg, long each, int K) {
  fp8_amax_partial_grouped_body(partial, x, seg, each, K);
}
extern "C" __global__ void fp8_amax_partial_grouped_f32(float* partial, const float* x, const int* seg, long each,
                                                        int K) {
  fp8_amax_partial_grouped_body(partial, x, seg, each, K);
}

// scale[e] and scale_inv[e] of each of E experts: current scaling from the max of its P partials
// (partial[e * P ..]); delayed (dscale non-null) the state's scale dscale[e], the max of the partials
// folded into damax[e] (fmaxf; damax null in an evaluation, which records nothing; P 0 when it does
// not record, the partials unread).
extern "C" __global__ void fp8_scale_grouped(float* scale, float* scale_inv, const float* partial, int P, int E,
                                             int fmt, const float* dscale, float* damax) {
  int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= E) return;
  float m = 0.0f, s;
  for (int p = 0; p < P; p++) m = fmaxf(m, partial[(long)e * P + p]);
  if (dscale) {
    s = fp8_delayed_scale(dscale[e]);
    if (damax) damax[e] = fmaxf(damax[e], m);
  } else {
    s = fp8_scale_from_amax(m, fmt ? STEPC_FP8_E5M2_MAX : STEPC_FP8_E4M3_MAX);
  }
  scale[e] = s;
  scale_inv[e] = __frcp_rn(s);
}

// The cast with the experts' scales (fp8_scale_grouped's): weights (seg null) expert blockIdx.z's
// block of M x K; rows (seg non-null, E experts) every row's expert looked up in the block's copy of
// seg.
template <typename T>
__device__ __forceinline__ void fp8_cast_transpose_grouped_body(unsigned char* q, unsigned char* qT, const T* x,
                                                                const float* scale, const int* seg, int E, int M,
                                                                int K, int fmt) {
  __shared__ int sseg[2 * STEPC_FP8_GROUP_EMAX];
  __shared__ float row_scale[STEPC_FP8_TILE];
  int m0 = blockIdx.y * STEPC_FP8_TILE, k0 = blockIdx.x * STEPC_FP8_TILE;
  long off = (long)blockIdx.z * M * K;
  Fp8In<T> in[2];
  fp8_tile_load(in, x + off, m0, k0, M, K);
  if (!seg) {
    fp8_tile_store(q ? q + off : q, qT ? qT + off : qT, in, m0, k0, M, K, fmt, scale[blockIdx.z], (const float*)0);
    return;
  }
  for (int i = threadIdx.x; i < 2 * E; i += blockDim.x) sseg[i] = seg[i];
  __syncthreads();
  if (threadIdx.x < STEPC_FP8_TILE) {
    int r = m0 + threadIdx.x;
    float s = -1.0f;
    for (int e = 0; e < E; e++)
      if (r >= sseg[2 * e] && r - sseg[2 * e] < sseg[2 * e + 1]) s = scale[e];
    row_scale[threadIdx.x] = s;
  }
  __syncthreads();
  fp8_tile_store(q, qT, in, m0, k0, M, K, fmt, 0.0f, row_scale);
}
extern "C" __global__ void fp8_cast_transpose_grouped(unsigned char* q, unsigned char* qT, const bf16* x,
                                                      const float* scale, const int* seg, int E, int M, int K,
                                                      int fmt) {
  fp8_cast_transpose_grouped_body(q, qT, x, scale, seg, E, M, K, fmt);
}
extern "C" __global__ void fp8_cast_transpose_grouped_f32(unsigned char* q, unsigned char* qT, const float* x,
                                                          const float* scale, const int* seg, int E, int M, int K,
                                                          int fmt) {
  fp8_cast_transpose_grouped_body(q, qT, x, scale, seg, E, M, K, fmt);
}

// Transformer Engine's amax_and_scale_update (delayed_scaling.cu) on the state st (1 + len, n), one
// thread per column (ir/ops/fp8.c FP8_SCALE_UPDATE): where the current amax (row 1) is not 0 the
// history rolls in place, entry i taking entry i + 1 and the last the current amax, the current
// entry becoming 0; amax is the current one (algo 0, most_recent) or the max over the rolled
// window (algo 1, 0 when it did not roll); scale = top / amax (top = fp8_max / 2^margin) when amax
// is finite and > 0, else the previous scale; the fp32 maximum where that overflows. fmaxf is
// exact and order-free, so the column's loop gives TE's block reduction's value.
extern "C" __global__ void fp8_scale_update(float* st, int n, int len, int algo, float top) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  float* h = st + n + j;
  float last = h[0], amax = 0.0f;
  if (last != 0.0f)
    for (int i = 0; i < len; i++) {
      float a = i < len - 1 ? h[(long)(i + 1) * n] : last;
      amax = fmaxf(amax, a);
      h[(long)i * n] = i > 0 ? a : 0.0f;
    }
  if (algo == 0) amax = last;
  float scale = isfinite(amax) && amax > 0.0f ? __fdiv_rn(top, amax) : fp8_delayed_scale(st[j]);
  st[j] = isinf(scale) ? 3.402823466e38f : scale;
}
