// loss.cuh — cross-entropy fused with its softmax and gradient, and the deterministic mean.
#pragma once
#include "common.cuh"
#include "mma.cuh"  // smem_addr

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

// One pass over this thread's vectors r[k] (vector v0 + threadIdx.x + k blockDim.x of the row,
// those below v1), columns below V: pass 0 returns their max, pass 1 the sum of
// exp2(x log2(e) - ML), pass 2 writes the gradient coef (p - [c == y]), p = exp2(...) inv, into
// `row` (0 in the padding columns).
__device__ __forceinline__ float ce_thread_pass(const uint4* r, int v0, int v1, int V, int pass, float ML, bf16* row,
                                                float inv, float coef, int y) {
  float acc = pass ? 0.0f : STEPC_NEG_INF;
#pragma unroll
  for (int k = 0; k < STEPC_CE_VEC; k++) {
    int i = v0 + threadIdx.x + k * blockDim.x;
    if (i >= v1) continue;
    float x[8];
    unpack8(r[k], x);
#pragma unroll
    for (int e = 0; e < 8; e++) {
      int c = i * 8 + e;
      float p = c < V && pass ? exp2f(__fmaf_rn(x[e], STEPC_CE_L2E, -ML)) : 0.0f;
      if (pass == 2) x[e] = c < V ? coef * (p * inv - (c == y ? 1.0f : 0.0f)) : 0.0f;
      else if (c < V) acc = pass ? acc + p : fmaxf(acc, x[e]);
    }
    if (pass == 2) store8(row + (long)i * 8, x);
  }
  return acc;
}

// cross_entropy_forward_backward in one read of the row: a cluster of STEPC_CE_CLUSTER blocks
// splits each row into equal runs of 16-byte vectors, every thread keeps up to STEPC_CE_VEC of
// them in registers; the row's max and then its sum of exp(x - max) are reduced over the block (a
// fixed tree) and over the cluster (the blocks' values in rank order, through distributed shared
// memory), so every block sees the same bits and the result is deterministic; then each block
// writes its part of the gradient from the registers. Exponentials are exp2 of (x - max) log2(e).
// Same semantics as cross_entropy_forward_backward. Launch: gridDim.x = N * STEPC_CE_CLUSTER
// (row = blockIdx.x / STEPC_CE_CLUSTER), blockDim.x a multiple of 32 with
// blockDim.x * STEPC_CE_VEC >= ceil(Vp / 8 / STEPC_CE_CLUSTER) (kernels/launch.h stepc_ce_threads).
extern "C" __global__ void __cluster_dims__(STEPC_CE_CLUSTER, 1, 1) __launch_bounds__(1024)
    cross_entropy_cluster(float* losses,       // (N)
                          bf16* logits,        // (N, Vp) in: logits, out: dlogits
                          const int* targets,  // (N)
                          int N, int V, int Vp, float dloss) {
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
  uint4 r[STEPC_CE_VEC];
#pragma unroll
  for (int k = 0; k < STEPC_CE_VEC; k++) {
    int i = v0 + threadIdx.x + k * blockDim.x;
    if (i < v1) r[k] = ((const uint4*)row)[i];
  }
  float m = block_max(ce_thread_pass(r, v0, v1, V, 0, 0.0f, row, 0.0f, 0.0f, y), red);
  if (threadIdx.x == 0) part[0] = m;
  cluster_arrive();
  cluster_wait();
  float M = STEPC_NEG_INF;
  for (unsigned q = 0; q < STEPC_CE_CLUSTER; q++) M = fmaxf(M, cluster_load(&part[0], q));
  float ML = M * STEPC_CE_L2E;
  float s = block_sum(ce_thread_pass(r, v0, v1, V, 1, ML, row, 0.0f, 0.0f, y), red);
  if (threadIdx.x == 0) part[1] = s;
  cluster_arrive();
  cluster_wait();
  float S = 0.0f;
  for (unsigned q = 0; q < STEPC_CE_CLUSTER; q++) S += cluster_load(&part[1], q);
  cluster_arrive();  // done reading the others' shared memory; the wait below keeps ours alive
  ce_thread_pass(r, v0, v1, V, 2, ML, row, 1.0f / S, valid ? dloss : 0.0f, y);
  if (live && rank == 0 && threadIdx.x == 0) losses[n] = valid ? logf(S) + M - xy : 0.0f;
  cluster_wait();
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
