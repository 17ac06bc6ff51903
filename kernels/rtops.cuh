// rtops.cuh — the kernels the graph executor (runtime/cuda/) needs beyond the fused building blocks
// of the other files: the QKV split/concat of stepc's [all Q | all K | all V] layout, learned
// position add, the optimizer's per-step scalars computed on the device (so a captured graph
// advances them), parameter initialisation matching the CPU executor's, and a plain (slow but
// general) causal attention for head sizes / sequence lengths the flash kernels do not take.
#pragma once
#include "common.cuh"

// q (N, H*D), k, v (N, G*D) <- qkv (N, (H+2G)*D). D % 8 == 0. Launch: any 1-D grid.
extern "C" __global__ void split_qkv(bf16* q, bf16* k, bf16* v,  // (N, H*D), (N, G*D) x2
                                     const bf16* qkv,            // (N, (H+2G)*D)
                                     long N, int H, int G, int D) {
  long qn = (long)H * D / 8, kn = (long)G * D / 8, w = qn + 2 * kn;  // in 8-element vectors
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < N * w; i += (long)gridDim.x * blockDim.x) {
    long r = i / w, c = i % w;
    uint4 x = ((const uint4*)qkv)[i];
    if (c < qn) ((uint4*)q)[r * qn + c] = x;
    else if (c < qn + kn) ((uint4*)k)[r * kn + c - qn] = x;
    else ((uint4*)v)[r * kn + c - qn - kn] = x;
  }
}

// The gradient of split_qkv. Launch: any 1-D grid.
extern "C" __global__ void concat_qkv(bf16* qkv,                              // (N, (H+2G)*D)
                                      const bf16* q, const bf16* k, const bf16* v,
                                      long N, int H, int G, int D) {
  long qn = (long)H * D / 8, kn = (long)G * D / 8, w = qn + 2 * kn;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < N * w; i += (long)gridDim.x * blockDim.x) {
    long r = i / w, c = i % w;
    uint4 x;
    if (c < qn) x = ((const uint4*)q)[r * qn + c];
    else if (c < qn + kn) x = ((const uint4*)k)[r * kn + c - qn];
    else x = ((const uint4*)v)[r * kn + c - qn - kn];
    ((uint4*)qkv)[i] = x;
  }
}

// out[n] = x[n] + P[n % T] (learned absolute positions). Launch: any 1-D grid.
// rank non-null (sequence parallelism, POS_ADD i[0]): x holds rows [rank T, (rank + 1) T) of each
// sequence, which add those rows of P.
extern "C" __global__ void pos_add(bf16* out,        // (N, C)
                                   const bf16* x,    // (N, C)
                                   const bf16* P,    // (>= T, C)
                                   long N, int T, int C, const int* rank) {
  const long off = rank ? (long)*rank * T : 0;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < N * C; i += (long)gridDim.x * blockDim.x) {
    long n = i / C;
    int c = (int)(i % C);
    out[i] = f32_to_bf16(bf16_to_f32(x[i]) + bf16_to_f32(P[(off + n % T) * C + c]));
  }
}

// step += 1; lr = schedule(step), in double as the CPU executor's optim_lr_at. Launch: <<<1, 1>>>.
// style: 0 constant, 1 linear, 2 cosine decay to min_lr at `decay`; linear warm-up first.
extern "C" __global__ void lr_schedule(int* step, float* lr, double lr0, double min_lr, long warmup, long decay,
                                       int style) {
  int s = *step + 1;
  *step = s;
  double r;
  if (warmup > 0 && s <= warmup) r = lr0 * (double)s / (double)warmup;
  else if (style == 0) r = lr0;
  else if (s > decay) r = min_lr;
  else {
    double ratio = decay > warmup ? (double)(s - warmup) / (double)(decay - warmup) : 1.0;
    double coeff = style == 1 ? 1.0 - ratio : 0.5 * (cos(3.14159265358979323846 * ratio) + 1.0);
    r = min_lr + coeff * (lr0 - min_lr);
  }
  *lr = (float)r;
}

// The 7 AdamW hyper-parameters adamw_update reads, from the device step counter and lr:
// {lr, b1, b2, eps, 1 (weight decay, scaled per tensor by wd_mult), 1-b1^t, 1-b2^t}. <<<1, 1>>>.
extern "C" __global__ void adamw_hparams(float* hp, const int* step, const float* lr, float b1, float b2, float eps) {
  double t = (double)*step;
  hp[0] = *lr;
  hp[1] = b1;
  hp[2] = b2;
  hp[3] = eps;
  hp[4] = 1.0f;
  hp[5] = (float)(1.0 - pow((double)b1, t));
  hp[6] = (float)(1.0 - pow((double)b2, t));
}

// splitmix64 finalizer, as ops_mix64 in ir/ops/ops.h.
__device__ __forceinline__ unsigned long long rt_mix64(unsigned long long x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// value[i] = std * N(0,1) by Box-Muller over the counter RNG keyed by the parameter's key, exactly
// the CPU executor's normal_at (runtime/cpu/exec.c), in double; written as fp32 (master, or an fp32
// param) and/or bf16 (the compute copy) — any pointer may be null. The key is ops_init_key(seed,
// name) (ir/ops/ops.h), made here from the seed in device memory and the name's hash, so that the
// launch program holds no seed. Launch: any 1-D grid.
__device__ __forceinline__ float init_normal_at(unsigned long long key, unsigned long long i, double std) {
  unsigned long long a = rt_mix64(key ^ rt_mix64(2ull * i));
  unsigned long long b = rt_mix64(key ^ rt_mix64(2ull * i + 1ull));
  double u1 = ((double)(a >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  double u2 = (double)(b >> 11) * (1.0 / 9007199254740992.0);
  return (float)(std * (sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2)));
}

extern "C" __global__ void init_normal(float* f32, bf16* b16, long n, const unsigned long long* seed,
                                       unsigned long long name_hash, double std) {
  const unsigned long long key = rt_mix64(rt_mix64(*seed) ^ name_hash);
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
    float v = init_normal_at(key, (unsigned long long)i, std);
    if (f32) f32[i] = v;
    if (b16) b16[i] = f32_to_bf16(v);
  }
}

// init_normal of a tensor-parallel shard (ir.h Tensor.tp_*, ir/ir.c tensor_tp_full_index): element i
// of the shard draws the value of its place in the one-rank tensor, so a TP run starts from exactly
// the one-rank weights. The shard is (outer, dim, inner) around its split dimension; that dimension
// is nseg (1 to 5) segments of the one-rank tensor (seg0..seg4 elements each), each split
// evenly over tp / rep_k ranks (rep0..rep4: the ranks holding each part, Tensor.tp_rep; 1 split over
// every rank; full: the one-rank dim, the segments' sum); *rank is this rank's index in the group
// (the launch scratch's rank slot). Launch: any 1-D grid.
extern "C" __global__ void init_normal_tp(float* f32, bf16* b16, long n, const unsigned long long* seed,
                                          unsigned long long name_hash, double std, long inner, long dim, long full,
                                          int tp, int nseg, long seg0, long seg1, long seg2, long seg3, long seg4,
                                          int rep0, int rep1, int rep2, int rep3, int rep4, const int* rank) {
  const unsigned long long key = rt_mix64(rt_mix64(*seed) ^ name_hash);
  const long r = *rank, segs[5] = {seg0, seg1, seg2, seg3, seg4};
  const int reps[5] = {rep0, rep1, rep2, rep3, rep4};
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
    long in = i % inner, x = (i / inner) % dim, o = i / (inner * dim), base = 0, fx = x;
    for (int k = 0; k < nseg && k < 5; k++) {
      const int rep = reps[k] > 1 ? reps[k] : 1;
      long part = segs[k] * rep / tp;
      if (x < part || k == nseg - 1) {
        fx = base + (r / rep) * part + x;
        break;
      }
      x -= part, base += segs[k];
    }
    long full_i = (o * full + fx) * inner + in;
    float v = init_normal_at(key, (unsigned long long)full_i, std);
    if (f32) f32[i] = v;
    if (b16) b16[i] = f32_to_bf16(v);
  }
}

// Ones in fp32 and/or bf16 (either pointer may be null): a norm's weight. Launch: any 1-D grid.
extern "C" __global__ void init_ones(float* f32, bf16* b16, long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
    if (f32) f32[i] = 1.0f;
    if (b16) b16[i] = f32_to_bf16(1.0f);
  }
}

// ---- plain causal attention (any D <= 128, any T), one warp per row ----
// Same math as FLASH_ATTN's CPU reference: fp32 scores of bf16 inputs, natural-log LSE.
#define RT_ATTN_MAXV 4  // ceil(D / 32) values per lane

// Element c of a head row, zero past D (a lane's last value when D is not a multiple of 32: zeros
// add nothing to the dot products, and attn_st leaves them unwritten).
__device__ __forceinline__ float attn_ld(const bf16* row, int c, int D) { return c < D ? bf16_to_f32(row[c]) : 0.0f; }
__device__ __forceinline__ void attn_st(bf16* row, int c, int D, float v) {
  if (c < D) row[c] = f32_to_bf16(v);
}

// rows (b, h, i): O (B,T,H,D), LSE (B,H,T). Launch: block 128, grid ceil(B*H*T / 4).
extern "C" __global__ void attn_plain_forward(bf16* O, float* LSE, const bf16* Q, const bf16* K, const bf16* V,
                                              int B, int T, int H, int G, int D, float scale) {
  int lane = threadIdx.x % 32;
  long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (r >= (long)B * H * T) return;
  int i = (int)(r % T), h = (int)((r / T) % H);
  long b = r / ((long)T * H);
  int g = h / (H / G), nv = (D + 31) / 32;
  const bf16* q = Q + ((b * T + i) * H + h) * D;
  float qv[RT_ATTN_MAXV], acc[RT_ATTN_MAXV];
  for (int k = 0; k < nv; k++) qv[k] = attn_ld(q, lane + 32 * k, D), acc[k] = 0.0f;
  float m = STEPC_NEG_INF, l = 0.0f;
  for (int j = 0; j <= i; j++) {
    const bf16 *kr = K + ((b * T + j) * G + g) * D, *vr = V + ((b * T + j) * G + g) * D;
    float s = 0.0f;
    for (int k = 0; k < nv; k++) s += qv[k] * attn_ld(kr, lane + 32 * k, D);
    s = warp_sum(s) * scale;
    float nm = fmaxf(m, s), c = expf(m - nm), p = expf(s - nm);
    l = l * c + p;
    for (int k = 0; k < nv; k++) acc[k] = acc[k] * c + p * attn_ld(vr, lane + 32 * k, D);
    m = nm;
  }
  bf16* o = O + ((b * T + i) * H + h) * D;
  for (int k = 0; k < nv; k++) attn_st(o, lane + 32 * k, D, acc[k] / l);
  if (lane == 0) LSE[r] = m + logf(l);
}

// dQ rows (b, h, i), and Dsum = dO . O per row (read by attn_plain_backward_kv, so this runs
// first). Launch: as the forward.
extern "C" __global__ void attn_plain_backward_q(bf16* dQ, float* Dsum, const bf16* Q, const bf16* K, const bf16* V,
                                                 const bf16* O, const bf16* dO, const float* LSE, int B, int T,
                                                 int H, int G, int D, float scale) {
  int lane = threadIdx.x % 32;
  long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (r >= (long)B * H * T) return;
  int i = (int)(r % T), h = (int)((r / T) % H);
  long b = r / ((long)T * H);
  int g = h / (H / G), nv = (D + 31) / 32;
  long qo = ((b * T + i) * H + h) * D;
  float qv[RT_ATTN_MAXV], dov[RT_ATTN_MAXV], acc[RT_ATTN_MAXV];
  float delta = 0.0f;
  for (int k = 0; k < nv; k++) {
    qv[k] = attn_ld(Q + qo, lane + 32 * k, D);
    dov[k] = attn_ld(dO + qo, lane + 32 * k, D);
    delta += dov[k] * attn_ld(O + qo, lane + 32 * k, D);
    acc[k] = 0.0f;
  }
  delta = warp_sum(delta);
  float lse = LSE[r];
  for (int j = 0; j <= i; j++) {
    const bf16 *kr = K + ((b * T + j) * G + g) * D, *vr = V + ((b * T + j) * G + g) * D;
    float s = 0.0f, dp = 0.0f;
    for (int k = 0; k < nv; k++) {
      s += qv[k] * attn_ld(kr, lane + 32 * k, D);
      dp += dov[k] * attn_ld(vr, lane + 32 * k, D);
    }
    s = warp_sum(s) * scale;
    dp = warp_sum(dp);
    float ds = expf(s - lse) * (dp - delta);
    for (int k = 0; k < nv; k++) acc[k] += ds * attn_ld(kr, lane + 32 * k, D);
  }
  for (int k = 0; k < nv; k++) attn_st(dQ + qo, lane + 32 * k, D, acc[k] * scale);
  if (lane == 0) Dsum[r] = delta;
}

// dK, dV rows (b, j, g), summed over the group's heads and queries i >= j in order.
// Launch: block 128, grid ceil(B*T*G / 4).
extern "C" __global__ void attn_plain_backward_kv(bf16* dK, bf16* dV, const bf16* Q, const bf16* K, const bf16* V,
                                                  const bf16* dO, const float* LSE, const float* Dsum, int B, int T,
                                                  int H, int G, int D, float scale) {
  int lane = threadIdx.x % 32;
  long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (r >= (long)B * T * G) return;
  int g = (int)(r % G), j = (int)((r / G) % T);
  long b = r / ((long)G * T);
  int rep = H / G, nv = (D + 31) / 32;
  float kv[RT_ATTN_MAXV], vv[RT_ATTN_MAXV], dk[RT_ATTN_MAXV], dv[RT_ATTN_MAXV];
  for (int k = 0; k < nv; k++) {
    kv[k] = attn_ld(K + r * D, lane + 32 * k, D);
    vv[k] = attn_ld(V + r * D, lane + 32 * k, D);
    dk[k] = dv[k] = 0.0f;
  }
  for (int h = g * rep; h < (g + 1) * rep; h++)
    for (int i = j; i < T; i++) {
      long qo = ((b * T + i) * H + h) * D, row = (b * H + h) * T + i;
      float s = 0.0f, dp = 0.0f;
      for (int k = 0; k < nv; k++) {
        s += attn_ld(Q + qo, lane + 32 * k, D) * kv[k];
        dp += attn_ld(dO + qo, lane + 32 * k, D) * vv[k];
      }
      s = warp_sum(s) * scale;
      dp = warp_sum(dp);
      float p = expf(s - LSE[row]), ds = p * (dp - Dsum[row]);
      for (int k = 0; k < nv; k++) {
        dk[k] += ds * attn_ld(Q + qo, lane + 32 * k, D);
        dv[k] += p * attn_ld(dO + qo, lane + 32 * k, D);
      }
    }
  for (int k = 0; k < nv; k++) {
    attn_st(dK + r * D, lane + 32 * k, D, dk[k] * scale);
    attn_st(dV + r * D, lane + 32 * k, D, dv[k]);
  }
}
