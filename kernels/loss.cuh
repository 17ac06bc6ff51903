// loss.cuh — cross-entropy fused with its softmax and gradient, and the deterministic mean.
#pragma once
#include "common.cuh"
#include "mma.cuh"  // smem_addr

// For row n with target y: loss[n] = logsumexp(logits[n][:V]) - logits[n][y], and the logits row
// is overwritten with its gradient dloss * (softmax - onehot(y)) (0 in the padding columns
// [V, Vp)). A target outside [0, V) (-100) masks its token: loss 0, gradient 0. dloss / *den is
// the weight of each kept token's loss in the objective: dloss the loss gradient (1 / micro-batches
// under gradient accumulation), *den the step's loss denominator (kept tokens of the global batch /
// (micro-batches * ranks): ir/ops/loss.c), a device value so that a captured graph serves every
// step's masks. Vp % 8 == 0.
// Launch: gridDim.x = N (one block per row), blockDim.x = 512.
extern "C" __global__ void cross_entropy_forward_backward(float* losses,      // (N)
                                                          bf16* logits,       // (N, Vp) in: logits, out: dlogits
                                                          const int* targets, // (N)
                                                          int N, int V, int Vp, float dloss,
                                                          const float* den) {  // (1)
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
  float inv = 1.0f / S, coef = valid ? dloss / *den : 0.0f;
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

// Thread-block clusters (sm_90): the blocks of one cluster see each other's shared memory.
#define STEPC_CE_CLUSTER 8  // blocks per logits row (as kernels/launch.h)
#define STEPC_CE_VEC 8      // 16-byte vectors of the row a thread keeps in registers

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// Every thread of every block of the cluster: what each wrote to shared memory before the arrive
// is visible to the others after the wait.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
// The float at `p` (a __shared__ variable) in the shared memory of cluster block `rank`.
__device__ __forceinline__ float cluster_load(const float* p, unsigned rank) {
  unsigned a;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(smem_addr(p)), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(a) : "memory");
  return v;
}

#define STEPC_CE_L2E 1.4426950408889634f
// The exponentials a thread keeps are exp(x - max) 2^STEPC_CE_EXP_SHIFT in fp16: in (0, 2^15], so
// every one above 2^-9 of the max's stays a normal fp16 (relative error 2^-11) and the smaller are
// off by at most 2^-40 of the max's.
#define STEPC_CE_EXP_SHIFT 15
#define STEPC_CE_NEG_INF2 0xff80ff80u  // two bf16 -inf

__device__ __forceinline__ float ex2_fast(float x) {  // 2^x, 2 ulp; results below 2^-126 are 0
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ unsigned bf16x2_max(unsigned a, unsigned b) {  // exact, lane by lane
  unsigned r;
  asm("max.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ unsigned pack_f16x2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ void unpack_f16x2(unsigned w, float& lo, float& hi) {
  asm("{ .reg .f16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h; }" : "=f"(lo), "=f"(hi) : "r"(w));
}

// Columns c and c + 1 (a 32-bit word of bf16) with those from V on set to -inf: they add nothing
// to the max or the sum, and their gradient comes out 0.
__device__ __forceinline__ unsigned ce_mask2(unsigned w, int c, int V) {
  if (c >= V) w = (w & 0xffff0000u) | 0xff80u;
  if (c + 1 >= V) w = (w & 0xffffu) | 0xff800000u;
  return w;
}
__device__ __forceinline__ uint4 ce_mask8(uint4 u, int c, int V) {
  u.x = ce_mask2(u.x, c, V), u.y = ce_mask2(u.y, c + 2, V), u.z = ce_mask2(u.z, c + 4, V), u.w = ce_mask2(u.w, c + 6, V);
  return u;
}

// Eight bf16 logits x to their exp(x - M) 2^15 = 2^(x log2(e) + shift) in fp16, each added to s
// (in column order) in fp32.
__device__ __forceinline__ unsigned ce_exp2(unsigned w, float shift, float& s) {
  float lo = ex2_fast(__fmaf_rn(bf16x2_lo(w), STEPC_CE_L2E, shift)), hi = ex2_fast(__fmaf_rn(bf16x2_hi(w), STEPC_CE_L2E, shift));
  s += lo, s += hi;
  return pack_f16x2(lo, hi);
}
__device__ __forceinline__ uint4 ce_exp8(uint4 u, float shift, float& s) {
  u.x = ce_exp2(u.x, shift, s), u.y = ce_exp2(u.y, shift, s), u.z = ce_exp2(u.z, shift, s), u.w = ce_exp2(u.w, shift, s);
  return u;
}
// Eight fp16 exponentials times scale, in fp32.
__device__ __forceinline__ void ce_grad8(uint4 u, float scale, float* g) {
  unpack_f16x2(u.x, g[0], g[1]), unpack_f16x2(u.y, g[2], g[3]), unpack_f16x2(u.z, g[4], g[5]), unpack_f16x2(u.w, g[6], g[7]);
#pragma unroll
  for (int e = 0; e < 8; e++) g[e] *= scale;
}

// cross_entropy_forward_backward in one read of the row: a cluster of STEPC_CE_CLUSTER blocks
// splits each row into equal runs of 16-byte vectors, every thread keeps up to STEPC_CE_VEC of
// them in registers. The row's max (packed bf16 max, exact) and then its sum of exp(x - max) are
// reduced over the block (a fixed tree) and over the cluster (the blocks' values in rank order,
// through distributed shared memory), so every block sees the same bits and the result is
// deterministic. One exponential per logit: the sum pass replaces each bf16 logit in the registers
// by its exp(x - max) 2^15 in fp16, and the gradient is that times coef / sum (the target's minus
// coef), written from the registers. Exponentials are ex2.approx of x log2(e) - max log2(e) + 15.
// Same semantics as cross_entropy_forward_backward. Launch: gridDim.x = N * STEPC_CE_CLUSTER
// (row = blockIdx.x / STEPC_CE_CLUSTER), blockDim.x a multiple of 32 with
// blockDim.x * STEPC_CE_VEC >= ceil(Vp / 8 / STEPC_CE_CLUSTER) (kernels/launch.h stepc_ce_threads).
extern "C" __global__ void __cluster_dims__(STEPC_CE_CLUSTER, 1, 1) __launch_bounds__(1024)
    cross_entropy_cluster(float* losses,       // (N)
                          bf16* logits,        // (N, Vp) in: logits, out: dlogits
                          const int* targets,  // (N)
                          int N, int V, int Vp, float dloss,
                          const float* den) {  // (1)
  __shared__ float red[32];
  __shared__ float part[2];  // this block's max, then its sum, read by the whole cluster
  unsigned rank = cluster_rank();
  long n = blockIdx.x / STEPC_CE_CLUSTER;
  bool live = n < N;  // every block reaches the cluster barriers, live or not
  bf16* row = logits + (live ? n : 0) * Vp;
  int nv = Vp / 8, cw = (nv + STEPC_CE_CLUSTER - 1) / STEPC_CE_CLUSTER, v0 = (int)rank * cw;
  int v1 = !live ? v0 : v0 + cw < nv ? v0 + cw : nv;
  int y = live ? targets[n] : -1;
  bool valid = y >= 0 && y < V;
  // the target's logit, read before any block of the cluster writes the row (after two barriers)
  float xy = rank == 0 && threadIdx.x == 0 && valid ? bf16_to_f32(row[y]) : 0.0f;
  // this thread's vectors: first + k blockDim.x for k < count
  int first = v0 + threadIdx.x, count = first < v1 ? (v1 - first + blockDim.x - 1) / blockDim.x : 0;
  uint4* vec = (uint4*)row + first;
  uint4 r[STEPC_CE_VEC];
  unsigned mx = STEPC_CE_NEG_INF2;
#pragma unroll
  for (int k = 0; k < STEPC_CE_VEC; k++)
    if (k < count) r[k] = vec[k * blockDim.x];
#pragma unroll
  for (int k = 0; k < STEPC_CE_VEC; k++) {
    if (k >= count) continue;
    int c = (first + k * blockDim.x) * 8;
    if (c + 8 > V) r[k] = ce_mask8(r[k], c, V);
    mx = bf16x2_max(mx, bf16x2_max(bf16x2_max(r[k].x, r[k].y), bf16x2_max(r[k].z, r[k].w)));
  }
  float m = block_max(fmaxf(bf16x2_lo(mx), bf16x2_hi(mx)), red);
  if (threadIdx.x == 0) part[0] = m;
  cluster_arrive();
  cluster_wait();
  float M = STEPC_NEG_INF;
  for (unsigned q = 0; q < STEPC_CE_CLUSTER; q++) M = fmaxf(M, cluster_load(&part[0], q));
  float shift = (float)STEPC_CE_EXP_SHIFT - M * STEPC_CE_L2E, s = 0.0f;
#pragma unroll
  for (int k = 0; k < STEPC_CE_VEC; k++)
    if (k < count) r[k] = ce_exp8(r[k], shift, s);
  s = block_sum(s, red);
  if (threadIdx.x == 0) part[1] = s;
  cluster_arrive();
  cluster_wait();
  float S = 0.0f;  // the row's sum of exp(x - M), times 2^15
  for (unsigned q = 0; q < STEPC_CE_CLUSTER; q++) S += cluster_load(&part[1], q);
  cluster_arrive();  // done reading the others' shared memory; the wait below keeps ours alive
  float coef = valid ? dloss / *den : 0.0f, scale = coef / S;
  int ky = valid && y / 8 >= first && (y / 8 - first) % blockDim.x == 0 ? (y / 8 - first) / blockDim.x : -1;  // y's vector
#pragma unroll
  for (int k = 0; k < STEPC_CE_VEC; k++) {
    if (k >= count) continue;
    float g[8];
    ce_grad8(r[k], scale, g);
    if (k == ky)
#pragma unroll
      for (int e = 0; e < 8; e++)
        if (e == y % 8) g[e] -= coef;
    vec[k * blockDim.x] = pack8(g);
  }
  if (live && rank == 0 && threadIdx.x == 0) losses[n] = valid ? logf(ldexpf(S, -STEPC_CE_EXP_SHIFT)) + M - xy : 0.0f;
  cluster_wait();
}

// out = sum(losses) / *den, summed in a fixed order (*den the step's loss denominator, as above).
// Launch: one block, blockDim.x = 1024.
extern "C" __global__ void loss_reduce(float* out,           // (1)
                                       const float* losses,  // (N)
                                       int N, const float* den) {  // (1)
  __shared__ float red[32];
  float s = 0.0f;
  for (int i = threadIdx.x; i < N; i += blockDim.x) s += losses[i];
  s = block_sum(s, red);
  if (threadIdx.x == 0) *out = s / *den;
}
