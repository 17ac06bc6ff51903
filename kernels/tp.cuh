// tp.cuh — tensor parallelism's own kernels (ir/ops/tp.c, and the vocab-parallel forms of
// ir/ops/embedding.c and ir/ops/loss.c): the rank's vocabulary rows, the vocab-parallel cross
// entropy in three passes around the collectives that join the ranks' row statistics, and a
// row-parallel linear's bias added once after its reduction. *rank is this rank's index in its TP
// group, read from the launch scratch's rank slot (the launch program is the same on every rank).
#pragma once
#include "common.cuh"

// local[i] := token i's row in this rank's vocabulary shard [rank Vl, (rank + 1) Vl), or -1 where
// another rank holds it; a token outside [0, Vall) reads global row 0 (ir/ops/embedding.c). The
// embedding kernels then give a zero row / no gradient for -1. Launch: any 1-D grid.
extern "C" __global__ void tp_vocab_local(int* local, const int* tokens, int N, int Vl, int Vall, const int* rank) {
  const int off = *rank * Vl;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x) {
    int v = tokens[i];
    if (v < 0 || v >= Vall) v = 0;
    v -= off;
    local[i] = v >= 0 && v < Vl ? v : -1;
  }
}

// The vocab-parallel cross entropy (ir/ops/loss.c, i[0] = 1) over this rank's logits (N, V), the
// vocabulary columns [rank V, (rank + 1) V) of Vall. stats is (3, N) fp32: row maxima, sums of
// exp(x - max), target logits. Pass 1 (this kernel): the rank's row maxima and, where the rank
// holds the row's target (kept: in [0, Vall)), its logit, else 0; then the maxima are all-reduced
// (max) over the group. Launch: gridDim.x = N, blockDim.x = 512; V % 8 == 0.
extern "C" __global__ void ce_vp_stats(float* stats, const bf16* logits, const int* targets, int N, int V, int Vall,
                                       const int* rank) {
  __shared__ float red[32];
  long n = blockIdx.x;
  if (n >= N) return;
  const bf16* row = logits + n * V;
  float m = STEPC_NEG_INF;
  for (int j = threadIdx.x * 8; j < V; j += blockDim.x * 8) {
    float v[8];
    load8(row + j, v);
#pragma unroll
    for (int k = 0; k < 8; k++) m = fmaxf(m, v[k]);
  }
  float M = block_max(m, red);
  if (threadIdx.x == 0) {
    int y = targets[n], t = y - *rank * V;
    stats[n] = M;
    stats[2L * N + n] = y >= 0 && y < Vall && t >= 0 && t < V ? bf16_to_f32(row[t]) : 0.0f;
  }
}

// Pass 2: the rank's sums of exp(x - M) with M the group's row maximum; then the sums and the
// target logits (adjacent in stats) are all-reduced (sum). Launch as ce_vp_stats.
extern "C" __global__ void ce_vp_sumexp(float* stats, const bf16* logits, int N, int V) {
  __shared__ float red[32];
  long n = blockIdx.x;
  if (n >= N) return;
  const bf16* row = logits + n * V;
  const float M = stats[n];
  float s = 0.0f;
  for (int j = threadIdx.x * 8; j < V; j += blockDim.x * 8) {
    float v[8];
    load8(row + j, v);
#pragma unroll
    for (int k = 0; k < 8; k++) s += expf(v[k] - M);
  }
  float S = block_sum(s, red);
  if (threadIdx.x == 0) stats[(long)N + n] = S;
}

// Pass 3, every rank alike: lse = M + log S; the row's loss lse - target logit into losses (0 for a
// masked target), and the logits overwritten with their gradient (softmax - onehot at the target
// if this rank holds it) dloss / *den (0 for a masked row), as cross_entropy_forward_backward.
// Launch as ce_vp_stats.
extern "C" __global__ void ce_vp_finish(float* losses, bf16* logits, const int* targets, const float* stats, int N,
                                        int V, int Vall, const int* rank, float dloss, const float* den) {
  long n = blockIdx.x;
  if (n >= N) return;
  bf16* row = logits + n * V;
  const float lse = stats[n] + logf(stats[(long)N + n]);
  const int y = targets[n], t = y - *rank * V;
  const bool valid = y >= 0 && y < Vall;
  const float coef = valid ? dloss / *den : 0.0f;
  for (int j = threadIdx.x * 8; j < V; j += blockDim.x * 8) {
    float v[8];
    load8(row + j, v);
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = coef * (expf(v[k] - lse) - (j + k == t ? 1.0f : 0.0f));
    store8(row + j, v);
  }
  if (threadIdx.x == 0) losses[n] = valid ? lse - stats[2L * N + n] : 0.0f;
}

// out (N, C) := x + b on every row (BIAS_ADD: a row-parallel linear's bias, once, after the
// reduction), in fp32, rounded to bf16. out may be x. Launch: any 1-D grid.
extern "C" __global__ void bias_add_rows(bf16* out, const bf16* x, const bf16* b, long N, int C) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < N * C; i += (long)gridDim.x * blockDim.x)
    out[i] = f32_to_bf16(bf16_to_f32(x[i]) + bf16_to_f32(b[i % C]));
}

// Replicated shard rows' fp32 gradient (ir/ops/tp.c TP_REP_PACK / TP_REP_UNPACK): g's rows
// [row0 + k part, + part) for k < nrep are this rank's part of nrep one-rank segments of S rows,
// at rows [k S + (*rank / rep) part, + part) of buf (nrep S rows); a row is `inner` elements.
// pack 1: buf := zeros but for those rows, copied from g, whose rows are then zeroed (each element
// of g read and zeroed by the one thread that copies it); pack 0: g's rows := buf's. Launch: any
// 1-D grid.
extern "C" __global__ void tp_rep_rows(float* g, float* buf, long part, long inner, long row0, int nrep, long S,
                                       int rep, int pack, const int* rank) {
  const long at = (long)(*rank / rep) * part, n = (long)nrep * (pack ? S : part) * inner;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
    const long c = i % inner, r = (i / inner) % (pack ? S : part), k = i / (inner * (pack ? S : part));
    const long rb = pack ? r - at : r;  // the row within the rank's part
    if (rb < 0 || rb >= part) {
      buf[i] = 0.0f;  // pack only: another rank's rows
      continue;
    }
    float* gi = g + (row0 + k * part + rb) * inner + c;
    float* bi = buf + (k * S + at + rb) * inner + c;
    if (pack) {
      *bi = *gi;
      *gi = 0.0f;
    } else {
      *gi = *bi;
    }
  }
}
