// moe.cuh — the MoE layer's kernels (ir/ops/moe_router.c, moe_dispatch.c, moe_experts.c) and the
// MLA per-head split/concat (ir/ops/mla.c). Storage bf16 (int32 routing), math fp32.
//
// Nothing here reads a count on the host: the dispatch writes the per-expert segments into device
// memory and the grouped GEMMs read them, skipping the rows past an expert's count, so a step
// stays capturable in one CUDA graph. Every sum runs in a fixed order (no float atomics), so a
// replay, a recompute and an eager run give the same bits.
#pragma once
#include "activation.cuh"
#include "common.cuh"
#include "mma.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

// ---- MLA: HEAD_SPLIT / HEAD_CONCAT ----
// joined (ntok, H, a+b) <-> p1 (ntok, H, a), p2 (ntok, H2, b); H2 is H or 1 (a part shared by the
// heads: concat broadcasts it, split sums it over the heads in head order). Launch: grid-stride.
// Where H2 = H and a, b and the pointers allow 16-byte copies (Mamba's in_proj splits, MLA's
// per-head parts), 8 columns a thread and one 32-bit division per 16 bytes (head_copy16); the
// general path one element a thread.
__device__ __forceinline__ bool head_copy16_ok(int a, int b, const void* x, const void* y, const void* z) {
  return a % 8 == 0 && b % 8 == 0 && (((unsigned long long)x | (unsigned long long)y | (unsigned long long)z) & 15) == 0;
}

// split (concat false): p1/p2 from joined; concat: joined from p1/p2 (p2 null: zeros). n8 < 2^31.
__device__ __forceinline__ void head_copy16(bool concat, uint4* joined, uint4* p1, uint4* p2, unsigned n8, unsigned a8,
                                            unsigned b8) {
  unsigned w8 = a8 + b8;
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += gridDim.x * blockDim.x) {
    unsigned th = i / w8, c = i - th * w8;
    if (concat)
      joined[i] = c < a8 ? p1[th * a8 + c] : p2 ? p2[th * b8 + c - a8] : make_uint4(0, 0, 0, 0);
    else if (c < a8)
      p1[th * a8 + c] = joined[i];
    else
      p2[th * b8 + c - a8] = joined[i];
  }
}

extern "C" __global__ void mla_head_split(bf16* p1, bf16* p2, const bf16* joined, long ntok, int H, int a, int b,
                                          int H2) {
  int w = a + b;
  long n1 = ntok * H * a, n2 = ntok * H2 * b;
  if (H2 == H && head_copy16_ok(a, b, p1, p2, joined) && (n1 + n2) / 8 < (1L << 31)) {
    head_copy16(false, (uint4*)joined, (uint4*)p1, (uint4*)p2, (unsigned)((n1 + n2) / 8), a / 8, b / 8);
    return;
  }
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n1 + n2; i += (long)gridDim.x * blockDim.x) {
    if (i < n1) {
      long t = i / ((long)H * a);
      int h = (int)(i / a % H), c = (int)(i % a);
      p1[i] = joined[(t * H + h) * w + c];
      continue;
    }
    long j = i - n1, t = j / ((long)H2 * b);
    int h2 = (int)(j / b % H2), c = (int)(j % b);
    if (H2 == H) {
      p2[j] = joined[(t * H + h2) * w + a + c];
      continue;
    }
    float s = 0.0f;
    for (int h = 0; h < H; h++) s += bf16_to_f32(joined[(t * H + h) * w + a + c]);
    p2[j] = f32_to_bf16(s);
  }
}

// p2 null: the b columns are zero (padding).
extern "C" __global__ void mla_head_concat(bf16* joined, const bf16* p1, const bf16* p2, long ntok, int H, int a,
                                           int b, int H2) {
  int w = a + b;
  long n = ntok * H * w;
  if (H2 == H && head_copy16_ok(a, b, joined, p1, p2) && n / 8 < (1L << 31)) {
    head_copy16(true, (uint4*)joined, (uint4*)p1, (uint4*)p2, (unsigned)(n / 8), a / 8, b / 8);
    return;
  }
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
    long t = i / ((long)H * w);
    int h = (int)(i / w % H), c = (int)(i % w);
    bf16 v = 0;
    if (c < a) v = p1[(t * H + h) * a + c];
    else if (p2) v = p2[(t * H2 + (H2 == H ? h : 0)) * b + (c - a)];
    joined[i] = v;
  }
}

// ---- the router ----
// A linear whose weight stays fp32 (Megatron keeps the router's in fp32), on the bf16 tensor cores:
// each fp32 weight is split into three bf16 parts, w = hi + mid + lo exactly (hi = bf16(w), mid =
// bf16(w - hi), lo = w - hi - mid, which has at most 8 significant bits left), and the product is
// the sum of the three bf16 products, each exact (bf16 x bf16 has 16 significant bits), accumulated
// in fp32 — an fp32 product of the bf16 input with the fp32 weight, at the tensor cores' rate (the
// SIMT kernels before ran at ~7 TFLOP/s: 0.4 ms a call at Nemotron's 8192 x 128 x 2688). A block of
// 128 threads (4 warps) owns 64 rows x 64 output columns over K chunks of 32, a warp 16 rows x 64;
// per chunk the parts are added hi, mid, lo, the chunks in order: a fixed order, deterministic.
// Where the widths allow 16-byte loads, the next chunk is loaded into registers while this one
// computes (without it the 84 chunks of Nemotron's forward ran one global-load latency each).
#define ROUTER_TILE 64
#define ROUTER_THREADS 128 // as kernels/launch.h STEPC_ROUTER_THREADS
#define ROUTER_KC 32
#define ROUTER_PITCH 40  // bf16 row pitch of the 32-wide tiles (80 bytes: ldmatrix rows 16-byte aligned)
#define ROUTER_NPITCH 72 // bf16 row pitch of the 64-wide tiles

// The three bf16 parts of w (see above).
__device__ __forceinline__ void router_split3(float w, bf16* hi, bf16* mid, bf16* lo) {
  bf16 h = f32_to_bf16(w);
  float r = w - bf16_to_f32(h);
  bf16 m = f32_to_bf16(r);
  *hi = h, *mid = m, *lo = f32_to_bf16(r - bf16_to_f32(m));
}

// The scalar path (any widths): rows x cols of W (E x C fp32) from (e0, c0) as its three bf16
// parts, tiles of row pitch `pitch`, and 64 x 32 of src (row stride ld, rows r0.., columns c0..)
// into s (pitch ROUTER_PITCH); zero past the ends.
__device__ __forceinline__ void router_weight_tile(bf16* const* parts, int pitch, const float* W, int E, int C, int e0,
                                                   int c0, int rows, int cols) {
  for (int i = threadIdx.x; i < rows * cols; i += blockDim.x) {
    int e = i / cols, c = i % cols, o = e * pitch + c;
    float w = e0 + e < E && c0 + c < C ? W[(long)(e0 + e) * C + c0 + c] : 0.0f;
    router_split3(w, &parts[0][o], &parts[1][o], &parts[2][o]);
  }
}
__device__ __forceinline__ void router_rows_tile(bf16* s, const bf16* src, long ld, long r0, long R, int c0, int K) {
  for (int i = threadIdx.x; i < ROUTER_TILE * ROUTER_KC; i += blockDim.x) {
    int r = i / ROUTER_KC, c = i % ROUTER_KC;
    s[r * ROUTER_PITCH + c] = r0 + r < R && c0 + c < K ? src[(r0 + r) * ld + c0 + c] : (bf16)0;
  }
}

// The vector path (K and ld multiples of 8, C of 4, 16-byte aligned): one chunk's operands staged in
// registers, the 64 x 32 bf16 rows tile (2 x 16 bytes a thread of 128) and the weight's 2048-float
// tile (4 x 16 bytes), so that the next chunk's loads are in flight while the tensor cores work on
// this one.
struct RouterStage {
  uint4 x[2];
  float4 w[4];
};
__device__ __forceinline__ bool router_vec_ok(const bf16* src, long ld, int K, const float* W, int C) {
  return K % 8 == 0 && ld % 8 == 0 && C % 4 == 0 && (((unsigned long long)src | (unsigned long long)W) & 15) == 0;
}
__device__ __forceinline__ void router_fetch(RouterStage& st, const bf16* src, long ld, long r0, long R, int c0, int K,
                                             const float* W, int E, int C, int e0, int wc0, int cols) {
#pragma unroll
  for (int j = 0; j < 2; j++) {
    int i = threadIdx.x + j * ROUTER_THREADS, r = i / (ROUTER_KC / 8), c = (i % (ROUTER_KC / 8)) * 8;
    st.x[j] = r0 + r < R && c0 + c < K ? *(const uint4*)(src + (r0 + r) * ld + c0 + c) : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int j = 0; j < 4; j++) {
    int i = threadIdx.x + j * ROUTER_THREADS, e = i / (cols / 4), c = (i % (cols / 4)) * 4;
    st.w[j] = e0 + e < E && wc0 + c < C ? *(const float4*)(W + (long)(e0 + e) * C + wc0 + c)
                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}
__device__ __forceinline__ void router_put(const RouterStage& st, bf16* xs, bf16* const* parts, int pitch, int cols) {
#pragma unroll
  for (int j = 0; j < 2; j++) {
    int i = threadIdx.x + j * ROUTER_THREADS;
    *(uint4*)(xs + (i / (ROUTER_KC / 8)) * ROUTER_PITCH + (i % (ROUTER_KC / 8)) * 8) = st.x[j];
  }
#pragma unroll
  for (int j = 0; j < 4; j++) {
    int i = threadIdx.x + j * ROUTER_THREADS, o = (i / (cols / 4)) * pitch + (i % (cols / 4)) * 4;
    float v[4] = {st.w[j].x, st.w[j].y, st.w[j].z, st.w[j].w};
#pragma unroll
    for (int q = 0; q < 4; q++) router_split3(v[q], &parts[0][o + q], &parts[1][o + q], &parts[2][o + q]);
  }
}

// The 64 x 16-row fragments of a warp (c[8][4]: rows g, g + 8 of its 16, columns 8 j + 2 q ..) into
// out (row stride ld) as bf16, inside R x Ncols.
__device__ __forceinline__ void router_store(bf16* out, long ld, const float (*c)[4], long r0, long R, int n0,
                                             int Ncols) {
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int j = 0; j < 8; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      long r = r0 + warp * 16 + lane / 4 + 8 * (e / 2);
      int n = n0 + 8 * j + 2 * (lane % 4) + e % 2;
      if (r < R && n < Ncols) out[r * ld + n] = f32_to_bf16(c[j][e]);
    }
}

// out (N, E) = inp (N, C) W^T, W (E, C) fp32. Launch: block 128, grid (ceil(N / 64), ceil(E / 64)).
extern "C" __global__ void __launch_bounds__(ROUTER_THREADS) router_linear_forward(bf16* out, const bf16* inp,
                                                                       const float* weight, int N, int E, int C) {
  STEPC_DYNAMIC_SMEM(bf16, router_smem);  // stepc_router_fwd_smem: Xs, then the weight's three parts
  bf16 *Xs = router_smem, *Ws[3] = {Xs + ROUTER_TILE * ROUTER_PITCH, Xs + 2 * ROUTER_TILE * ROUTER_PITCH,
                                    Xs + 3 * ROUTER_TILE * ROUTER_PITCH};
  long n0 = (long)blockIdx.x * ROUTER_TILE;
  int e0 = blockIdx.y * ROUTER_TILE, warp = threadIdx.x / 32;
  float acc[1][8][4];
  acc_zero<8>(acc[0]);
  const bool vec = router_vec_ok(inp, C, C, weight, C);
  RouterStage st;
  if (vec) router_fetch(st, inp, C, n0, N, 0, C, weight, E, C, e0, 0, ROUTER_KC);
  for (int c0 = 0; c0 < C; c0 += ROUTER_KC) {
    if (vec)
      router_put(st, Xs, Ws, ROUTER_PITCH, ROUTER_KC);
    else
      router_rows_tile(Xs, inp, C, n0, N, c0, C), router_weight_tile(Ws, ROUTER_PITCH, weight, E, C, e0, c0, ROUTER_TILE, ROUTER_KC);
    __syncthreads();
    if (vec && c0 + ROUTER_KC < C) router_fetch(st, inp, C, n0, N, c0 + ROUTER_KC, C, weight, E, C, e0, c0 + ROUTER_KC, ROUTER_KC);
    for (int p = 0; p < 3; p++)
      warp_mma_nt_m<1, ROUTER_KC / 16, 8>(acc, Xs + warp * 16 * ROUTER_PITCH, ROUTER_PITCH, Ws[p], ROUTER_PITCH);
    __syncthreads();
  }
  router_store(out, E, acc[0], n0, N, e0, E);
}

// dinp (N, C) = dout (N, E) W, W (E, C) fp32, over chunks of 32 experts. Launch: block 128, grid
// (ceil(C / 64), ceil(N / 64)).
extern "C" __global__ void __launch_bounds__(ROUTER_THREADS) router_linear_dgrad(bf16* dinp, const bf16* dout,
                                                                     const float* weight, int N, int E, int C) {
  STEPC_DYNAMIC_SMEM(bf16, router_smem);  // stepc_router_dgrad_smem: Ds, then the weight's three parts
  bf16 *Ds = router_smem, *Ws[3] = {Ds + ROUTER_TILE * ROUTER_PITCH, Ds + ROUTER_TILE * ROUTER_PITCH + ROUTER_KC * ROUTER_NPITCH,
                                    Ds + ROUTER_TILE * ROUTER_PITCH + 2 * ROUTER_KC * ROUTER_NPITCH};
  int c0 = blockIdx.x * ROUTER_TILE, warp = threadIdx.x / 32;
  long n0 = (long)blockIdx.y * ROUTER_TILE;
  float acc[1][8][4];
  acc_zero<8>(acc[0]);
  const bool vec = router_vec_ok(dout, E, E, weight, C);
  RouterStage st;
  if (vec) router_fetch(st, dout, E, n0, N, 0, E, weight, E, C, 0, c0, ROUTER_TILE);
  for (int k0 = 0; k0 < E; k0 += ROUTER_KC) {
    if (vec)
      router_put(st, Ds, Ws, ROUTER_NPITCH, ROUTER_TILE);
    else
      router_rows_tile(Ds, dout, E, n0, N, k0, E), router_weight_tile(Ws, ROUTER_NPITCH, weight, E, C, k0, c0, ROUTER_KC, ROUTER_TILE);
    __syncthreads();
    if (vec && k0 + ROUTER_KC < E) router_fetch(st, dout, E, n0, N, k0 + ROUTER_KC, E, weight, E, C, k0 + ROUTER_KC, c0, ROUTER_TILE);
    unsigned a[1][ROUTER_KC / 16][4];
    warp_load_afrag<1, ROUTER_KC / 16>(a, Ds + warp * 16 * ROUTER_PITCH, ROUTER_PITCH);
    for (int p = 0; p < 3; p++) warp_mma_rr_m<1, ROUTER_KC / 16, 8>(acc, a, Ws[p], ROUTER_NPITCH);
    __syncthreads();
  }
  router_store(dinp, C, acc[0], n0, N, c0, C);
}

// ROUTER_TOPK: k passes of argmax (ties to the lower expert), then mode 0 softmax over the k
// selected logits, mode 1 the scores as they are. A warp per token: lane l holds experts l, l + 32,
// ... (E <= 32 MOE_TOPK_PER_LANE), each pass a warp argmax; the softmax in lane 0 in j order.
// Launch: block 256, grid-stride over tokens (a warp each).
#define MOE_TOPK_PER_LANE 16
extern "C" __global__ void router_topk_forward(bf16* probs, int* idx, const bf16* x, int N, int E, int k,
                                               int mode) {
  int lane = threadIdx.x % 32;
  long w = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32, nw = (long)gridDim.x * blockDim.x / 32;
  for (long r = w; r < N; r += nw) {
    const bf16* xr = x + r * E;
    float v[MOE_TOPK_PER_LANE];
    unsigned taken = 0; /* bit i: expert lane + 32 i is selected */
#pragma unroll
    for (int i = 0; i < MOE_TOPK_PER_LANE; i++) v[i] = lane + 32 * i < E ? bf16_to_f32(xr[lane + 32 * i]) : 0.0f;
    float p[32];  // k <= 32 (the dispatch checks)
    for (int j = 0; j < k; j++) {
      int best = -1;
      float bv = 0.0f;
#pragma unroll
      for (int i = 0; i < MOE_TOPK_PER_LANE; i++) {
        int e = lane + 32 * i;
        if (e < E && !(taken >> i & 1) && (best < 0 || v[i] > bv)) best = e, bv = v[i];
      }
      for (int o = 16; o > 0; o >>= 1) { /* the larger value, the lower expert on a tie */
        int ob = __shfl_xor_sync(STEPC_FULL_MASK, best, o);
        float ov = __shfl_xor_sync(STEPC_FULL_MASK, bv, o);
        if (ob >= 0 && (best < 0 || ov > bv || (ov == bv && ob < best))) best = ob, bv = ov;
      }
      if (best % 32 == lane) taken |= 1u << (best / 32);
      p[j] = bv;
      if (lane == 0) idx[r * k + j] = best;
    }
    if (lane != 0) continue;
    if (mode == 0) {
      float s = 0.0f, m = p[0];
      for (int j = 0; j < k; j++) s += (p[j] = expf(p[j] - m));
      for (int j = 0; j < k; j++) p[j] /= s;
    }
    for (int j = 0; j < k; j++) probs[r * k + j] = f32_to_bf16(p[j]);
  }
}

// dx (N, E): zero outside the selected experts; mode 0 the softmax backward over the k. A warp per
// token (each element written once, coalesced); the dot in lane 0 in j order. Launch as the forward.
extern "C" __global__ void router_topk_backward(bf16* dx, const bf16* dprobs, const bf16* probs, const int* idx,
                                                int N, int E, int k, int mode) {
  int lane = threadIdx.x % 32;
  long w = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32, nw = (long)gridDim.x * blockDim.x / 32;
  for (long r = w; r < N; r += nw) {
    float dot = 0.0f;
    if (mode == 0 && lane == 0)
      for (int j = 0; j < k; j++) dot += bf16_to_f32(probs[r * k + j]) * bf16_to_f32(dprobs[r * k + j]);
    dot = __shfl_sync(STEPC_FULL_MASK, dot, 0);
    for (int e = lane; e < E; e += 32) {
      bf16 out = 0;
      for (int j = 0; j < k; j++)
        if (idx[r * k + j] == e) {
          float p = bf16_to_f32(probs[r * k + j]), d = bf16_to_f32(dprobs[r * k + j]);
          out = f32_to_bf16(mode == 0 ? p * (d - dot) : d);
        }
      dx[r * E + e] = out;
    }
  }
}

// Softmax over the last dim of any (rows, E) (the router's scores for the aux loss), one warp per
// row. Launch: block 256, grid ceil(rows / 8).
extern "C" __global__ void softmax_rows_forward(bf16* out, const bf16* inp, long rows, int E) {
  int lane = threadIdx.x % 32;
  long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (r >= rows) return;
  const bf16* x = inp + r * E;
  float m = STEPC_NEG_INF, s = 0.0f;
  for (int e = lane; e < E; e += 32) m = fmaxf(m, bf16_to_f32(x[e]));
  m = warp_max(m);
  for (int e = lane; e < E; e += 32) s += expf(bf16_to_f32(x[e]) - m);
  s = warp_sum(s);
  for (int e = lane; e < E; e += 32) out[r * E + e] = f32_to_bf16(expf(bf16_to_f32(x[e]) - m) / s);
}

// dinp = p (dout - sum dout p), any softmax (causal ones too: p is zero where masked).
extern "C" __global__ void softmax_rows_backward(bf16* dinp, const bf16* dout, const bf16* probs, long rows,
                                                 int E) {
  int lane = threadIdx.x % 32;
  long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (r >= rows) return;
  float dot = 0.0f;
  for (int e = lane; e < E; e += 32) dot += bf16_to_f32(dout[r * E + e]) * bf16_to_f32(probs[r * E + e]);
  dot = warp_sum(dot);
  for (int e = lane; e < E; e += 32) {
    float p = bf16_to_f32(probs[r * E + e]);
    dinp[r * E + e] = f32_to_bf16(p * (bf16_to_f32(dout[r * E + e]) - dot));
  }
}

// Tokens per expert of the routing map idx (n = T*k assignments) into shared `tpe` (E ints):
// integer adds, so the order does not matter. Ends with a barrier.
__device__ __forceinline__ void moe_count(int* tpe, const int* idx, long n, int E) {
  for (int e = threadIdx.x; e < E; e += blockDim.x) tpe[e] = 0;
  __syncthreads();
  for (long a = threadIdx.x; a < n; a += blockDim.x) atomicAdd(&tpe[idx[a]], 1);
  __syncthreads();
}

// MOE_AUX_LOSS: loss = coeff E / (k T^2) sum_e tpe_e sum_t scores[t, e]. One block of 1024 threads
// (smem 8 E + 4096 + 128 bytes): the first P = 1024 - 1024 % E threads read the scores in order,
// thread i summing column i % E over rows i / E, i / E + P / E, ... (coalesced); each column's
// P / E partials are then added in order, and the E products in order: a fixed order, deterministic.
// Needs E <= 1024. Under sequence parallelism (ir/ops/moe_router.c i[2]) the counts are the TP
// group's (counts, fp32, all-reduced by the launch before: moe_expert_counts) and the normalisation
// Tn the group's tokens; otherwise counts is null (counted here) and Tn = T.
extern "C" __global__ void moe_aux_loss_forward(float* loss, const bf16* scores, const int* idx, int T, int E,
                                                int k, float coeff, const float* counts, int Tn) {
  STEPC_DYNAMIC_SMEM(int, moe_smem);
  int* tpe = moe_smem;
  float *part = (float*)(moe_smem + E), *col = part + 1024;
  moe_count(tpe, idx, (long)T * k, E);
  if (counts) {
    for (int e = threadIdx.x; e < E; e += blockDim.x) tpe[e] = (int)counts[e];
    __syncthreads();
  }
  int P = (int)blockDim.x / E * E, g = threadIdx.x / E, ng = P / E, e = threadIdx.x % E;
  if ((int)threadIdx.x < P) {
    float c = 0.0f;
    for (long t = g; t < T; t += ng) c += bf16_to_f32(scores[t * E + e]);
    part[threadIdx.x] = c;
  }
  __syncthreads();
  if ((int)threadIdx.x < E) {
    float c = 0.0f;
    for (int q = 0; q < ng; q++) c += part[q * E + threadIdx.x];
    col[threadIdx.x] = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int x = 0; x < E; x++) total += col[x] * (float)tpe[x];
    *loss = coeff * (float)E / ((float)k * (float)Tn * (float)Tn) * total;
  }
}

// dscores[t, e] = coeff E / (k T^2) dloss tpe_e. Every block counts for itself (smem 4 E bytes).
// Launch: block 1024, any grid.
extern "C" __global__ void moe_aux_loss_backward(bf16* dscores, const float* dloss, const int* idx, int T, int E,
                                                 int k, float coeff, const float* counts, int Tn) {
  STEPC_DYNAMIC_SMEM(int, moe_smem);
  moe_count(moe_smem, idx, (long)T * k, E);
  if (counts) {
    for (int e = threadIdx.x; e < E; e += blockDim.x) moe_smem[e] = (int)counts[e];
    __syncthreads();
  }
  float scale = coeff * (float)E / ((float)k * (float)Tn * (float)Tn) * *dloss;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < (long)T * E; i += (long)gridDim.x * blockDim.x)
    dscores[i] = f32_to_bf16(scale * (float)moe_smem[i % E]);
}

// counts (E) fp32 := the tokens routed to each expert (idx (n)), the aux loss's counts before their
// all-reduce over the TP group. Launch: <<<1, 1024>>>, smem 4 E bytes.
extern "C" __global__ void moe_expert_counts(float* counts, const int* idx, long n, int E) {
  STEPC_DYNAMIC_SMEM(int, moe_smem);
  moe_count(moe_smem, idx, n, E);
  for (int e = threadIdx.x; e < E; e += blockDim.x) counts[e] = (float)moe_smem[e];
}

// ---- the token dispatcher ----
// MOE_DISPATCH with drop policy position: row_of (n), seg (E, 2) {first row, rows}, tpe (E).
// The order inside an expert is by assignment index (token order). One block of 1024 threads; warp
// w owns the w-th of 32 contiguous segments of the assignments. Pass 1: each warp counts its
// segment per expert (32 at a time: __match_any_sync groups a step's lanes by expert, the group's
// first lane adds its size to the warp's row of wcnt, which no other warp touches); then per expert
// an exclusive scan of the warps' counts in warp order turns wcnt into each warp's base. Pass 2:
// each warp walks its segment again, a lane's rank = its warp's running base + the lanes of its
// group before it. No barrier inside the walks (the block's barriers: 4), and each walk loads
// MOE_DISPATCH_UNROLL steps' experts at once (one load latency per 8 steps, not per step).
// Integer-only, so deterministic. Block 1024, smem 34 E ints.
#define MOE_DISPATCH_UNROLL 8
// A local expert range (the allgather dispatcher under expert parallelism): rank non-null, the E
// experts from expert *rank E (local x = idx - *rank E, rank the device's EP-rank slot);
// assignments to other experts get row -1. rank null: all experts (the one-rank dispatch).
__device__ __forceinline__ int moe_local_expert(const int* idx, long a, long end, int first, int E) {
  int x = a < end ? idx[a] - first : -1;
  return x >= 0 && x < E ? x : -1;
}

extern "C" __global__ void moe_dispatch(int* row_of, int* seg, int* tpe, const int* idx, long n, int E, int cap,
                                        int pad, const int* rank) {
  STEPC_DYNAMIC_SMEM(int, moe_smem);
  const int first = rank ? *rank * E : 0;
  int *cnt = moe_smem, *off = cnt + E, *wcnt = off + E;  // wcnt (32 warps, E): counts, then bases
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  const long per = (n + nw - 1) / nw, a0 = warp * per, a1 = min(n, a0 + per);
  const unsigned below = (1u << lane) - 1u;
  for (int i = threadIdx.x; i < 32 * E; i += blockDim.x) wcnt[i] = 0;
  __syncthreads();
  for (long s = a0; s < a1; s += 32 * MOE_DISPATCH_UNROLL) {
    int xs[MOE_DISPATCH_UNROLL];
#pragma unroll
    for (int u = 0; u < MOE_DISPATCH_UNROLL; u++) xs[u] = moe_local_expert(idx, s + 32 * u + lane, a1, first, E);
#pragma unroll
    for (int u = 0; u < MOE_DISPATCH_UNROLL; u++) {
      unsigned same = __match_any_sync(STEPC_FULL_MASK, xs[u]);
      if (xs[u] >= 0 && !(same & below)) wcnt[warp * E + xs[u]] += __popc(same);
      __syncwarp();
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int total = 0;
    for (int w = 0; w < nw; w++) {
      int c = wcnt[w * E + e];
      wcnt[w * E + e] = total, total += c;
    }
    cnt[e] = total;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int o = 0;
    for (int e = 0; e < E; e++) off[e] = cap ? e * cap : o, o += cnt[e];
  }
  __syncthreads();
  for (long s = a0; s < a1; s += 32 * MOE_DISPATCH_UNROLL) {
    int xs[MOE_DISPATCH_UNROLL];
#pragma unroll
    for (int u = 0; u < MOE_DISPATCH_UNROLL; u++) xs[u] = moe_local_expert(idx, s + 32 * u + lane, a1, first, E);
#pragma unroll
    for (int u = 0; u < MOE_DISPATCH_UNROLL; u++) {
      long a = s + 32 * u + lane;
      int x = xs[u];
      unsigned same = __match_any_sync(STEPC_FULL_MASK, x);
      int before = __popc(same & below);
      if (x >= 0) {
        int r = wcnt[warp * E + x] + before;
        row_of[a] = !cap || r < cap ? off[x] + r : -1;
      } else if (a < a1)
        row_of[a] = -1;  // another rank's expert
      __syncwarp();
      if (x >= 0 && before == 0) wcnt[warp * E + x] += __popc(same);
      __syncwarp();
    }
  }
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    tpe[e] = cnt[e];
    seg[2 * e] = off[e];
    seg[2 * e + 1] = !cap ? cnt[e] : pad ? cap : min(cnt[e], cap);
  }
}

// MOE_PERMUTE and MOE_UNPERMUTE_BWD: row row_of[t, j] of xp gets token t's row of x and, with
// probs (the permute), pp that row's probability; rows no assignment lands on are left as they
// are (the caller zeroes them where capacity leaves any). A block per assignment row with 16-byte
// copies when C % 8 == 0, else one thread per (assignment, column). Launch: grid-stride, any grid.
extern "C" __global__ void moe_scatter_rows(bf16* xp, bf16* pp, const bf16* x, const bf16* probs, const int* row_of,
                                            long n, int k, int C) {
  if (C % 8 == 0) { /* a block per assignment at a time, 16-byte copies (no per-element division) */
    int C8 = C / 8;
    for (long a = blockIdx.x; a < n; a += gridDim.x) {
      int r = row_of[a];
      if (r < 0) continue;
      const uint4* src = (const uint4*)(x + a / k * C);
      uint4* dst = (uint4*)(xp + (long)r * C);
      for (int c = threadIdx.x; c < C8; c += blockDim.x) dst[c] = src[c];
      if (probs && threadIdx.x == 0) pp[r] = probs[a];
    }
    return;
  }
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n * C; i += (long)gridDim.x * blockDim.x) {
    long a = i / C;
    int c = (int)(i % C), r = row_of[a];
    if (r < 0) continue;
    xp[(long)r * C + c] = x[a / k * C + c];
    if (probs && c == 0) pp[r] = probs[a];
  }
}

// MOE_UNPERMUTE and MOE_PERMUTE_BWD: dx[t] = sum over j of dxp[row_of[t, j]] (in j order, dropped
// assignments add nothing) and, with dpp (the permute's backward), dprobs[t, j] = dpp[row]. A block
// per token when C % 8 == 0 (8 columns a thread), else one thread per (token, column).
extern "C" __global__ void moe_gather_rows(bf16* dx, bf16* dprobs, const bf16* dxp, const bf16* dpp,
                                           const int* row_of, long T, int k, int C) {
  if (C % 8 == 0) { /* a block per token at a time, 8 columns a thread: the same sums, in j order */
    int C8 = C / 8;
    for (long t = blockIdx.x; t < T; t += gridDim.x) {
      const int* ro = row_of + t * k;
      for (int c = threadIdx.x; c < C8; c += blockDim.x) {
        float s[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        for (int j = 0; j < k; j++) {
          int r = ro[j];
          if (r < 0) continue;
          float v[8];
          load8(dxp + (long)r * C + 8 * c, v);
#pragma unroll
          for (int q = 0; q < 8; q++) s[q] += v[q];
        }
        store8(dx + t * C + 8 * c, s);
      }
      if (dpp && threadIdx.x == 0)
        for (int j = 0; j < k; j++) dprobs[t * k + j] = ro[j] >= 0 ? dpp[ro[j]] : (bf16)0;
    }
    return;
  }
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < T * C; i += (long)gridDim.x * blockDim.x) {
    long t = i / C;
    int c = (int)(i % C);
    float s = 0.0f;
    for (int j = 0; j < k; j++) {
      int r = row_of[t * k + j];
      if (r >= 0) s += bf16_to_f32(dxp[(long)r * C + c]);
      if (dpp && c == 0) dprobs[t * k + j] = r >= 0 ? dpp[r] : (bf16)0;
    }
    dx[i] = f32_to_bf16(s);
  }
}

// ---- the grouped expert GEMMs ----
// 64x64 output tiles, 256 threads each owning 4x4, 16-deep K steps through shared memory, fp32
// accumulation in index order. grid (ceil(cols/64), ceil(N/64), E): block (x, y, e) computes the
// rows [seg[e][0] + 64 y, ...) of expert e and returns at once when they start past its count, so
// the grid is the static bound and the counts are applied on the device.
#define MOE_TILE 64
#define MOE_KT 16

// acc (4x4 of this thread) += the 16-deep products of two staged tiles, in k order.
__device__ __forceinline__ void moe_tile_fma(float (*acc)[4], const float (*As)[MOE_TILE + 1],
                                             const float (*Bs)[MOE_TILE + 1]) {
  int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  for (int kk = 0; kk < MOE_KT; kk++)
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 4; j++) acc[i][j] += As[kk][ty * 4 + i] * Bs[kk][tx * 4 + j];
}

// Expert blockIdx.z's rows of C (rows, cols) = A (rows, Kd) . op(W_e), W (E, Nout, K): forward
// (b_nt: cols Nout, Kd K, W_e^T) or dgrad (cols K, Kd Nout, W_e).
__device__ __forceinline__ void moe_group_tile(bf16* Cm, const bf16* A, const bf16* W, const int* seg, int Nout,
                                               int K, int b_nt) {
  __shared__ float As[MOE_KT][MOE_TILE + 1], Bs[MOE_KT][MOE_TILE + 1];
  int e = blockIdx.z, rows0 = seg[2 * e], nrows = seg[2 * e + 1];
  if ((int)blockIdx.y * MOE_TILE >= nrows) return;  // past this expert's count
  const bf16* B = W + (long)e * Nout * K;
  int cols = b_nt ? Nout : K, Kd = b_nt ? K : Nout;
  int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  int r0 = blockIdx.y * MOE_TILE, c0 = blockIdx.x * MOE_TILE;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < Kd; k0 += MOE_KT) {
    for (int i = threadIdx.x; i < MOE_KT * MOE_TILE; i += blockDim.x) {
      int kk = i % MOE_KT, m = i / MOE_KT;
      int r = r0 + m, q = k0 + kk, c = c0 + m;
      As[kk][m] = r < nrows && q < Kd ? bf16_to_f32(A[(long)(rows0 + r) * Kd + q]) : 0.0f;
      Bs[kk][m] = c < cols && q < Kd ? bf16_to_f32(b_nt ? B[(long)c * Kd + q] : B[(long)q * cols + c]) : 0.0f;
    }
    __syncthreads();
    moe_tile_fma(acc, As, Bs);
    __syncthreads();
  }
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) {
      int r = r0 + ty * 4 + i, c = c0 + tx * 4 + j;
      if (r < nrows && c < cols) Cm[(long)(rows0 + r) * cols + c] = f32_to_bf16(acc[i][j]);
    }
}

// GROUPED_LINEAR: y (N, Nout) = x (N, K) W_e^T. Rows outside every segment are not written (the
// caller zeroes y when capacity leaves slots empty). grid (ceil(Nout/64), ceil(N/64), E), block 256.
extern "C" __global__ void grouped_linear_forward(bf16* y, const bf16* x, const bf16* W, const int* seg, int Nout,
                                                  int K) {
  moe_group_tile(y, x, W, seg, Nout, K, 1);
}

// GROUPED_LINEAR_DGRAD: dx (N, K) = dy (N, Nout) W_e. grid (ceil(K/64), ceil(N/64), E).
extern "C" __global__ void grouped_linear_dgrad(bf16* dx, const bf16* dy, const bf16* W, const int* seg, int Nout,
                                                int K) {
  moe_group_tile(dx, dy, W, seg, Nout, K, 0);
}

// With norm (the compiler's fuse_wgrad_norm: the kernel is the main gradient's last writer before
// the optimizer), the sum of squares of the values a block wrote to the fp32 main gradient goes to
// norm[b], b the block's linear index in the grid: the gradient's global-norm partials, each summed
// in the block's fixed order, so that the optimizer's norm reads nothing of the gradient.
__device__ __forceinline__ void moe_tile_norm(float* norm, float s) {
  __shared__ float red[32];
  s = block_sum(s, red);
  if (threadIdx.x == 0) norm[blockIdx.x + gridDim.x * (blockIdx.y + (long)gridDim.y * blockIdx.z)] = s;
}

// GROUPED_LINEAR_WGRAD: dW_e (Nout, K) = sum over the expert's rows r of dy[r]^T x[r], rows in
// order. grid (ceil(K/64), ceil(Nout/64), E), block 256. Writes bf16 dW, or adds into the fp32
// main gradient acc when dw is null — or, with store = 1, writes it there as 0 + dW would be (a
// step's first and only writer of that gradient: the compiler's wgrad-store fusion); norm as
// moe_tile_norm.
extern "C" __global__ void grouped_linear_wgrad(bf16* dw, float* acc_f32, const bf16* dy, const bf16* x,
                                                const int* seg, int Nout, int K, int store, float* norm) {
  __shared__ float Ds[MOE_KT][MOE_TILE + 1], Xs[MOE_KT][MOE_TILE + 1];
  int e = blockIdx.z, rows0 = seg[2 * e], nrows = seg[2 * e + 1];
  int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  int o0 = blockIdx.y * MOE_TILE, q0 = blockIdx.x * MOE_TILE;
  float acc[4][4] = {};
  for (int r0 = 0; r0 < nrows; r0 += MOE_KT) {
    for (int i = threadIdx.x; i < MOE_KT * MOE_TILE; i += blockDim.x) {
      int rr = i / MOE_TILE, m = i % MOE_TILE, r = r0 + rr;
      long row = (long)rows0 + r;
      Ds[rr][m] = r < nrows && o0 + m < Nout ? bf16_to_f32(dy[row * Nout + o0 + m]) : 0.0f;
      Xs[rr][m] = r < nrows && q0 + m < K ? bf16_to_f32(x[row * K + q0 + m]) : 0.0f;
    }
    __syncthreads();
    moe_tile_fma(acc, Ds, Xs);
    __syncthreads();
  }
  float sq = 0.0f;
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) {
      int o = o0 + ty * 4 + i, q = q0 + tx * 4 + j;
      if (o >= Nout || q >= K) continue;
      long at = ((long)e * Nout + o) * K + q;
      if (dw) dw[at] = f32_to_bf16(acc[i][j]);
      else {
        float v = (store ? 0.0f : acc_f32[at]) + acc[i][j];
        acc_f32[at] = v, sq += v * v;
      }
    }
  if (norm) moe_tile_norm(norm, sq);
}

// ---- the same three products on the tensor cores (mma.sync m16n8k16 bf16, fp32 accumulation) ----
// when every width is a multiple of 8 (16-byte copies): a 256-thread block owns a 128 x 256 tile of
// one expert's output, 8 warps of 64 x 64 (2 along m, 4 along n), over k steps of 64 in a 3-stage
// cp.async pipeline in dynamic shared memory (165,888 bytes: kernels/launch.h), each operand in its
// global layout (ldmatrix.trans reads the ones whose k is not contiguous); rows and columns past
// the operands' ends are zero-filled by the copies themselves. Each output element is one thread's
// sum in a fixed k order: deterministic.
//   forward  y = x W_e^T   A = x (m rows of k),  B^T = W_e (n rows of k)
//   dgrad    dx = dy W_e   A = dy (m rows of k), B = W_e (k rows of n)
//   wgrad    dW_e = dy^T x A^T = dy (k rows of m), B = x (k rows of n), k = the expert's rows
// Forward and dgrad run on a grid of ceil(N/128) + E row tiles (the static bound of the sum over
// experts of ceil(rows/128)); a block finds its expert and tile from the segments, on the device.
// The tile sizes must match kernels/launch.h (STEPC_MOE_TC_*).
#define MOE_TC_BM 128
#define MOE_TC_BN 256
#define MOE_TC_BK 64
#define MOE_TC_STAGES 3
#define MOE_TC_THREADS 256
#define MOE_TC_LDK (MOE_TC_BK + 8)   /* (rows x k) tiles: 144-byte rows, conflict-free ldmatrix */
#define MOE_TC_LDAT (MOE_TC_BM + 8)  /* (k x m) tiles: 272-byte rows */
#define MOE_TC_LDBT (MOE_TC_BN + 8)  /* (k x n) tiles: 528-byte rows */
#define MOE_TC_SA (MOE_TC_BM * MOE_TC_LDK) /* >= MOE_TC_BK * MOE_TC_LDAT */
#define MOE_TC_SB (MOE_TC_BN * MOE_TC_LDK) /* >= MOE_TC_BK * MOE_TC_LDBT */

// (R rows x 64 k) from g[r * ld + k] into s (row stride MOE_TC_LDK), zero outside (rlim, klim);
// klim is a multiple of 8.
template <int R>
__device__ __forceinline__ void moe_tc_load_rk(bf16* s, const bf16* g, long ld, int r0, int rlim, int k0, int klim) {
#pragma unroll
  for (int i = 0; i < R * MOE_TC_BK / 8 / MOE_TC_THREADS; i++) {
    int c = threadIdx.x + i * MOE_TC_THREADS, r = c / (MOE_TC_BK / 8), k = (c % (MOE_TC_BK / 8)) * 8;
    bool in = r0 + r < rlim && k0 + k < klim;
    cp_async16_zfill(s + r * MOE_TC_LDK + k, in ? g + (long)(r0 + r) * ld + k0 + k : g, in);
  }
}

// (64 k x C cols) from g[k * ld + c] into s (row stride lds), zero outside (klim, clim); clim is a
// multiple of 8.
template <int C>
__device__ __forceinline__ void moe_tc_load_kr(bf16* s, int lds, const bf16* g, long ld, int k0, int klim, int c0, int clim) {
#pragma unroll
  for (int i = 0; i < MOE_TC_BK * C / 8 / MOE_TC_THREADS; i++) {
    int c = threadIdx.x + i * MOE_TC_THREADS, k = c / (C / 8), col = (c % (C / 8)) * 8;
    bool in = k0 + k < klim && c0 + col < clim;
    cp_async16_zfill(s + k * lds + col, in ? g + (long)(k0 + k) * ld + c0 + col : g, in);
  }
}

// Stage st of the pipeline: k step kt of both operands (MODE as moe_tc_tile).
template <int MODE>
__device__ __forceinline__ void moe_tc_stage(bf16* sm, int st, int kt, const bf16* A, long lda, int mlim, const bf16* B, long ldb,
                                             int nlim, int klim, int m0, int n0) {
  bf16 *as = sm + st * (MOE_TC_SA + MOE_TC_SB), *bs = as + MOE_TC_SA;
  int k0 = kt * MOE_TC_BK;
  if (MODE == 2) moe_tc_load_kr<MOE_TC_BM>(as, MOE_TC_LDAT, A, lda, k0, klim, m0, mlim);
  else moe_tc_load_rk<MOE_TC_BM>(as, A, lda, m0, mlim, k0, klim);
  if (MODE == 0) moe_tc_load_rk<MOE_TC_BN>(bs, B, ldb, n0, nlim, k0, klim);
  else moe_tc_load_kr<MOE_TC_BN>(bs, MOE_TC_LDBT, B, ldb, k0, klim, n0, nlim);
}

// c = the (m0, n0) 128 x 256 tile of the product (MODE 0 forward, 1 dgrad, 2 wgrad, as above):
// m < mlim, n < nlim, k < klim. This warp's 64 x 64 part: c[m tile][n tile][fragment].
template <int MODE>
__device__ __forceinline__ void moe_tc_tile(float (*c)[8][4], const bf16* A, long lda, int mlim, const bf16* B, long ldb,
                                            int nlim, int klim, int m0, int n0) {
  bf16* sm = (bf16*)stepc_smem;
  int warp = threadIdx.x / STEPC_WARP, wm = warp % 2, wn = warp / 2;
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 8; j++) c[i][j][0] = c[i][j][1] = c[i][j][2] = c[i][j][3] = 0.0f;
  int nk = (klim + MOE_TC_BK - 1) / MOE_TC_BK;
  for (int s = 0; s < MOE_TC_STAGES - 1; s++) {
    if (s < nk) moe_tc_stage<MODE>(sm, s, s, A, lda, mlim, B, ldb, nlim, klim, m0, n0);
    cp_async_commit();
  }
  for (int kt = 0; kt < nk; kt++) {
    cp_async_wait<MOE_TC_STAGES - 2>(); /* step kt has landed (one group per step, empty ones too) */
    __syncthreads();                    /* ... for every thread, and step kt - 1's stage is free */
    int next = kt + MOE_TC_STAGES - 1;
    if (next < nk) moe_tc_stage<MODE>(sm, next % MOE_TC_STAGES, next, A, lda, mlim, B, ldb, nlim, klim, m0, n0);
    cp_async_commit();
    const bf16 *as = sm + (kt % MOE_TC_STAGES) * (MOE_TC_SA + MOE_TC_SB), *bs = as + MOE_TC_SA;
#pragma unroll
    for (int ks = 0; ks < MOE_TC_BK / 16; ks++) { /* one 16-wide k slice at a time: A fragments stay few */
      if (MODE == 0) {
        warp_mma_nt_m<4, 1, 8>(c, as + wm * 64 * MOE_TC_LDK + ks * 16, MOE_TC_LDK, bs + wn * 64 * MOE_TC_LDK + ks * 16, MOE_TC_LDK);
      } else {
        unsigned a[4][1][4];
        if (MODE == 1) warp_load_afrag<4, 1>(a, as + wm * 64 * MOE_TC_LDK + ks * 16, MOE_TC_LDK);
        else warp_load_afrag_trans<4, 1>(a, as + ks * 16 * MOE_TC_LDAT + wm * 64, MOE_TC_LDAT);
        warp_mma_rr_m<4, 1, 8>(c, a, bs + ks * 16 * MOE_TC_LDBT + wn * 64, MOE_TC_LDBT);
      }
    }
  }
}

// The accumulator layout (mma.cuh): c[mt][nt] = rows g, g + 8 of m-tile mt, columns 2q, 2q + 1 of
// n-tile nt. STORE2(row, col, v, v') for each pair of columns (col, col + 1) inside (mlim, nlim);
// nlim is a multiple of 8, so a pair is inside or outside whole.
#define MOE_TC_EPILOGUE(c, m0, n0, mlim, nlim, STORE2)                                                \
  do {                                                                                               \
    int lane_ = threadIdx.x % STEPC_WARP, w_ = threadIdx.x / STEPC_WARP;                             \
    _Pragma("unroll") for (int mt = 0; mt < 4; mt++)                                                 \
    _Pragma("unroll") for (int nt = 0; nt < 8; nt++)                                                 \
    _Pragma("unroll") for (int h = 0; h < 2; h++) {                                                  \
      int row = (m0) + (w_ % 2) * 64 + mt * 16 + lane_ / 4 + h * 8;                                  \
      int col = (n0) + (w_ / 2) * 64 + nt * 8 + (lane_ % 4) * 2;                                     \
      if (row < (mlim) && col < (nlim)) STORE2(row, col, c[mt][nt][2 * h], c[mt][nt][2 * h + 1]);    \
    }                                                                                                \
  } while (0)

// Row tile t of the flattened (expert, tile) list: the expert e, its first row, its rows and the
// tile's first row m0 among them; false past the last expert's tiles.
__device__ __forceinline__ bool moe_tc_row_tile(const int* seg, int E, int t, int* e, int* rows0, int* nrows, int* m0) {
  for (int x = 0; x < E; x++) {
    int n = seg[2 * x + 1], tiles = (n + MOE_TC_BM - 1) / MOE_TC_BM;
    if (t < tiles) {
      *e = x, *rows0 = seg[2 * x], *nrows = n, *m0 = t * MOE_TC_BM;
      return true;
    }
    t -= tiles;
  }
  return false;
}

// ---- Hopper (sm_90a): the same three products with wgmma ----
// Two warpgroups, each a 64 x 256 half of the 128 x 256 tile (one m64n256k16 per 16-wide k slice,
// both operands read by the tensor cores from shared memory), over k steps of 64 in a 4-stage
// cp.async pipeline (two steps' copies and two steps' products in flight; 4 x 48 KiB + 1 KiB for
// alignment: kernels/launch.h). Operand tiles in the 128-byte swizzled layouts of the wgmma descriptors: a (rows x 64 k) tile whose k is contiguous
// ("K-major": x, dy, W_e as B^T in forward) is rows of 128 bytes; a tile whose rows or columns
// are contiguous ("MN-major": W_e as B in dgrad, dy as A^T and x as B in wgrad) is blocks of 64
// columns, each 64 k rows of 128 bytes. Within every 1024-byte group of 8 rows, 16-byte chunk c of
// row r sits at chunk c ^ (r % 8). The fp32 main-gradient epilogue goes through shared memory so
// that its read-modify-write is whole 512-byte rows per warp.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MOE_WG_BK 64
#define MOE_WG_STAGES 4
#define MOE_WG_A_BYTES (MOE_TC_BM * MOE_WG_BK * 2)
#define MOE_WG_STAGE_BYTES (MOE_WG_A_BYTES + MOE_TC_BN * MOE_WG_BK * 2)
#define MOE_WG_LDS 260 /* the fp32 staging tile's row stride (floats) */
#define MOE_WG_MN_LBO 8192 /* MN-major: bytes from one 64-column block to the next */
#define MOE_WG_MN_SBO 1024 /* MN-major: bytes from one group of 8 k rows to the next */

// (R rows x 64 k) from g[r * ld + k], K-major at saddr; zero outside (rlim, klim), klim % 8 == 0.
template <int R>
__device__ __forceinline__ void wg_load_k(unsigned s, const bf16* g, long ld, int r0, int rlim, int k0, int klim) {
#pragma unroll
  for (int i = 0; i < R * 8 / MOE_TC_THREADS; i++) {
    int c = threadIdx.x + i * MOE_TC_THREADS, r = c / 8, ch = c % 8;
    bool in = r0 + r < rlim && k0 + ch * 8 < klim;
    cp_async16_zfill_s(s + r * 128 + ((ch ^ (r & 7)) << 4), in ? g + (long)(r0 + r) * ld + k0 + ch * 8 : g, in);
  }
}

// (64 k x C columns) from g[k * ld + c], MN-major at saddr; zero outside (klim, clim), clim % 8 == 0.
template <int C>
__device__ __forceinline__ void wg_load_mn(unsigned s, const bf16* g, long ld, int k0, int klim, int c0, int clim) {
#pragma unroll
  for (int i = 0; i < MOE_WG_BK * C / 8 / MOE_TC_THREADS; i++) {
    int c = threadIdx.x + i * MOE_TC_THREADS, k = c / (C / 8), c8 = c % (C / 8), ch = c8 % 8;
    bool in = k0 + k < klim && c0 + c8 * 8 < clim;
    cp_async16_zfill_s(s + (c8 / 8) * (MOE_WG_BK * 128) + k * 128 + ((ch ^ (k & 7)) << 4),
                       in ? g + (long)(k0 + k) * ld + c0 + c8 * 8 : g, in);
  }
}

template <int MODE>
__device__ __forceinline__ void wg_stage(unsigned base, int st, int kt, const bf16* A, long lda, int mlim, const bf16* B, long ldb,
                                         int nlim, int klim, int m0, int n0) {
  unsigned sa = base + st * MOE_WG_STAGE_BYTES, sb = sa + MOE_WG_A_BYTES;
  int k0 = kt * MOE_WG_BK;
  if (MODE == 2) wg_load_mn<MOE_TC_BM>(sa, A, lda, k0, klim, m0, mlim);
  else wg_load_k<MOE_TC_BM>(sa, A, lda, m0, mlim, k0, klim);
  if (MODE == 0) wg_load_k<MOE_TC_BN>(sb, B, ldb, n0, nlim, k0, klim);
  else wg_load_mn<MOE_TC_BN>(sb, B, ldb, k0, klim, n0, nlim);
}

// d = this warpgroup's 64 x 256 half of the (m0, n0) tile (MODE as moe_tc_tile). Accumulator
// layout: d[4i + h] is row 16 w + lane / 4 + 8 (h / 2), column 8 i + 2 (lane % 4) + h % 2 of the
// half, w the warp within its warpgroup.
template <int MODE>
__device__ __forceinline__ void moe_wg_tile(float* d, const bf16* A, long lda, int mlim, const bf16* B, long ldb, int nlim,
                                            int klim, int m0, int n0) {
  unsigned base = wg_smem_base();
  int wg = threadIdx.x / 128;
#pragma unroll
  for (int i = 0; i < 128; i++) d[i] = 0.0f;
  int nk = (klim + MOE_WG_BK - 1) / MOE_WG_BK;
  /* Steps in flight: the products of step kt - 1 and kt (one group kept running while the next is
   * issued), the copies of kt + 1 and kt + 2; so a stage is refilled two steps after its products
   * were issued, once every warpgroup has waited for them. */
  for (int s = 0; s < MOE_WG_STAGES - 2; s++) {
    if (s < nk) wg_stage<MODE>(base, s, s, A, lda, mlim, B, ldb, nlim, klim, m0, n0);
    cp_async_commit();
  }
  for (int kt = 0; kt < nk; kt++) {
    cp_async_wait<MOE_WG_STAGES - 3>();
    fence_proxy_async(); /* the copies are visible to the tensor cores' (async proxy) reads */
    __syncthreads();     /* every thread's copies of step kt; every warpgroup's products of kt - 2 are done */
    int next = kt + MOE_WG_STAGES - 2;
    if (next < nk) wg_stage<MODE>(base, next % MOE_WG_STAGES, next, A, lda, mlim, B, ldb, nlim, klim, m0, n0);
    cp_async_commit();
    unsigned sa = base + (kt % MOE_WG_STAGES) * MOE_WG_STAGE_BYTES, sb = sa + MOE_WG_A_BYTES;
    sa += wg * 64 * 128; /* this warpgroup's 64 rows (K-major) or 64-column block (MN-major) */
    wg_pin(d);
    wg_fence();
#pragma unroll
    for (int ks = 0; ks < MOE_WG_BK / 16; ks++) {
      unsigned long long da = MODE == 2 ? wg_desc(sa + ks * 2048, MOE_WG_MN_LBO, MOE_WG_MN_SBO) : wg_desc(sa + ks * 32, 16, 1024);
      unsigned long long db = MODE == 0 ? wg_desc(sb + ks * 32, 16, 1024) : wg_desc(sb + ks * 2048, MOE_WG_MN_LBO, MOE_WG_MN_SBO);
      wgmma_m64n256k16<MODE == 2, MODE != 0>(d, da, db);
    }
    wg_commit();
    wg_wait<1>(); /* step kt - 1's products are done, kt's run on */
    wg_pin(d);
  }
  wg_wait_all();
  wg_pin(d);
}

// STORE2(row, col, v, v') for each pair of columns of this thread's accumulators inside (mlim, nlim);
// the accumulators are the 64-row half `half` of the tile (MOE_WG_EPILOGUE: the warpgroup's index).
#define MOE_WG_EPILOGUE(d, m0, n0, mlim, nlim, STORE2) MOE_WG_EPILOGUE_HALF(d, threadIdx.x / 128, m0, n0, mlim, nlim, STORE2)
#define MOE_WG_EPILOGUE_HALF(d, half, m0, n0, mlim, nlim, STORE2)                                       \
  do {                                                                                                 \
    int lane_ = threadIdx.x % STEPC_WARP, r_ = (m0) + (half) * 64 + (threadIdx.x % 128) / 32 * 16 + lane_ / 4; \
    _Pragma("unroll") for (int i = 0; i < 32; i++)                                                     \
    _Pragma("unroll") for (int h = 0; h < 2; h++) {                                                    \
      int row = r_ + 8 * h, col = (n0) + 8 * i + 2 * (lane_ % 4);                                      \
      if (row < (mlim) && col < (nlim)) STORE2(row, col, d[4 * i + 2 * h], d[4 * i + 2 * h + 1]);     \
    }                                                                                                  \
  } while (0)

template <int MODE>
__device__ __forceinline__ void moe_wg_rows(bf16* out, const bf16* in, const bf16* W, const int* seg, int Nout, int K, int E) {
  int e, rows0, nrows, m0;
  if (!moe_tc_row_tile(seg, E, blockIdx.y, &e, &rows0, &nrows, &m0)) return;
  int kin = MODE == 0 ? K : Nout, cols = MODE == 0 ? Nout : K, n0 = blockIdx.x * MOE_TC_BN;
  float d[128];
  moe_wg_tile<MODE>(d, in + (long)rows0 * kin, kin, nrows, W + (long)e * Nout * K, K, cols, kin, m0, n0);
  bf16* o = out + (long)rows0 * cols;
#define ST(r, q, v0, v1) *(unsigned*)(o + (long)(r) * cols + (q)) = pack_bf16x2(v0, v1)
  MOE_WG_EPILOGUE(d, m0, n0, nrows, cols, ST);
#undef ST
}

__device__ __forceinline__ void moe_wg_wgrad(bf16* dw, float* acc_f32, const bf16* dy, const bf16* x, const int* seg, int Nout, int K,
                                             int store, float* norm) {
  int e = blockIdx.z, rows0 = seg[2 * e], nrows = seg[2 * e + 1], m0 = blockIdx.y * MOE_TC_BM, n0 = blockIdx.x * MOE_TC_BN;
  float d[128];
  moe_wg_tile<2>(d, dy + (long)rows0 * Nout, Nout, Nout, x + (long)rows0 * K, K, K, nrows, m0, n0);
  long base = (long)e * Nout * K;
  if (dw) {
#define ST(r, q, v0, v1) *(unsigned*)(dw + base + (long)(r) * K + (q)) = pack_bf16x2(v0, v1)
    MOE_WG_EPILOGUE(d, m0, n0, Nout, K, ST);
#undef ST
    return;
  }
  /* the tile through shared memory (the pipeline's, free now), then each warp adds whole rows */
  cp_async_wait<0>();
  __syncthreads();
  float* t = (float*)(stepc_smem + (wg_smem_base() - smem_addr(stepc_smem)));
#define ST(r, q, v0, v1) *(float2*)(t + ((r) - m0) * MOE_WG_LDS + (q) - n0) = make_float2(v0, v1)
  MOE_WG_EPILOGUE(d, m0, n0, m0 + MOE_TC_BM, n0 + MOE_TC_BN, ST);
#undef ST
  __syncthreads();
  int lane = threadIdx.x % STEPC_WARP, warp = threadIdx.x / STEPC_WARP;
  float sq = 0.0f;
#pragma unroll
  for (int half = 0; half < 2; half++) { /* 8 rows at a time: 16 reads in flight per thread */
    float4 old[8][2];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
      for (int j = 0; j < 2; j++) {
        int row = m0 + warp * 16 + half * 8 + i, col = n0 + j * 128 + lane * 4;
        old[i][j] = !store && row < Nout && col < K ? *(const float4*)(acc_f32 + base + (long)row * K + col)
                                                    : make_float4(0, 0, 0, 0);
      }
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
      for (int j = 0; j < 2; j++) {
        int r = warp * 16 + half * 8 + i, c = j * 128 + lane * 4, row = m0 + r, col = n0 + c;
        if (row >= Nout || col >= K) continue;
        float4 v = *(const float4*)(t + r * MOE_WG_LDS + c);
        float4 u = make_float4(old[i][j].x + v.x, old[i][j].y + v.y, old[i][j].z + v.z, old[i][j].w + v.w);
        *(float4*)(acc_f32 + base + (long)row * K + col) = u;
        sq += u.x * u.x + u.y * u.y + u.z * u.z + u.w * u.w;
      }
  }
  if (norm) moe_tile_norm(norm, sq);
}
#endif

// The row-tiled products: forward (MODE 0) out = in W_e^T, in (N, K), out (N, Nout); dgrad (MODE 1)
// out = in W_e, in (N, Nout), out (N, K). grid (ceil(out width / 256), ceil(N/128) + E).
template <int MODE>
__device__ __forceinline__ void moe_tc_rows(bf16* out, const bf16* in, const bf16* W, const int* seg, int Nout, int K, int E) {
  int e, rows0, nrows, m0;
  if (!moe_tc_row_tile(seg, E, blockIdx.y, &e, &rows0, &nrows, &m0)) return;
  int kin = MODE == 0 ? K : Nout, cols = MODE == 0 ? Nout : K, n0 = blockIdx.x * MOE_TC_BN;
  float c[4][8][4];
  moe_tc_tile<MODE>(c, in + (long)rows0 * kin, kin, nrows, W + (long)e * Nout * K, K, cols, kin, m0, n0);
  bf16* o = out + (long)rows0 * cols;
#define ST(r, q, v0, v1) *(unsigned*)(o + (long)(r) * cols + (q)) = pack_bf16x2(v0, v1)
  MOE_TC_EPILOGUE(c, m0, n0, nrows, cols, ST);
#undef ST
}

// GROUPED_LINEAR: y = x W_e^T over each expert's rows.
extern "C" __global__ void __launch_bounds__(MOE_TC_THREADS, 1)
    grouped_linear_forward_tc(bf16* y, const bf16* x, const bf16* W, const int* seg, int Nout, int K, int E) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  moe_wg_rows<0>(y, x, W, seg, Nout, K, E);
#else
  moe_tc_rows<0>(y, x, W, seg, Nout, K, E);
#endif
}

// GROUPED_LINEAR_DGRAD: dx = dy W_e over each expert's rows.
extern "C" __global__ void __launch_bounds__(MOE_TC_THREADS, 1)
    grouped_linear_dgrad_tc(bf16* dx, const bf16* dy, const bf16* W, const int* seg, int Nout, int K, int E) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  moe_wg_rows<1>(dx, dy, W, seg, Nout, K, E);
#else
  moe_tc_rows<1>(dx, dy, W, seg, Nout, K, E);
#endif
}

// The wgrad tile with mma.sync (as moe_wg_wgrad with wgmma).
__device__ __forceinline__ void moe_tc_wgrad(bf16* dw, float* acc_f32, const bf16* dy, const bf16* x, const int* seg, int Nout,
                                             int K, int store, float* norm) {
  int e = blockIdx.z, rows0 = seg[2 * e], nrows = seg[2 * e + 1], m0 = blockIdx.y * MOE_TC_BM, n0 = blockIdx.x * MOE_TC_BN;
  float c[4][8][4];
  moe_tc_tile<2>(c, dy + (long)rows0 * Nout, Nout, Nout, x + (long)rows0 * K, K, K, nrows, m0, n0);
  long base = (long)e * Nout * K;
  int lane = threadIdx.x % STEPC_WARP, w = threadIdx.x / STEPC_WARP;
  if (dw) {
#define ST(r, q, v0, v1) *(unsigned*)(dw + base + (long)(r) * K + (q)) = pack_bf16x2(v0, v1)
    MOE_TC_EPILOGUE(c, m0, n0, Nout, K, ST);
#undef ST
    return;
  }
  /* added into the fp32 main gradient: each m tile's 16 old pairs are read before any is written,
   * so the reads are in flight together (one round trip per m tile, not per pair) */
  float sq = 0.0f;
#pragma unroll
  for (int mt = 0; mt < 4; mt++) {
    float2 old[8][2];
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        int row = m0 + (w % 2) * 64 + mt * 16 + lane / 4 + h * 8, col = n0 + (w / 2) * 64 + nt * 8 + (lane % 4) * 2;
        old[nt][h] = !store && row < Nout && col < K ? *(const float2*)(acc_f32 + base + (long)row * K + col)
                                                     : make_float2(0.0f, 0.0f);
      }
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        int row = m0 + (w % 2) * 64 + mt * 16 + lane / 4 + h * 8, col = n0 + (w / 2) * 64 + nt * 8 + (lane % 4) * 2;
        if (row < Nout && col < K) {
          float2 u = make_float2(old[nt][h].x + c[mt][nt][2 * h], old[nt][h].y + c[mt][nt][2 * h + 1]);
          *(float2*)(acc_f32 + base + (long)row * K + col) = u;
          sq += u.x * u.x + u.y * u.y;
        }
      }
  }
  if (norm) moe_tile_norm(norm, sq);
}

// GROUPED_LINEAR_WGRAD: dW_e = dy_e^T x_e, into bf16 dw, or added into the fp32 main gradient (or
// stored there as 0 + dW_e with store = 1; the tiles' norm partials with norm, as
// grouped_linear_wgrad). grid (ceil(K/256), ceil(Nout/128), E).
extern "C" __global__ void __launch_bounds__(MOE_TC_THREADS, 1)
    grouped_linear_wgrad_tc(bf16* dw, float* acc_f32, const bf16* dy, const bf16* x, const int* seg, int Nout, int K,
                            int store, float* norm) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  moe_wg_wgrad(dw, acc_f32, dy, x, seg, Nout, K, store, norm);
#else
  moe_tc_wgrad(dw, acc_f32, dy, x, seg, Nout, K, store, norm);
#endif
}

// ---- Hopper, warp-specialised: the forward and dgrad products fed by the TMA ----
// The *_tc kernels' tiles, stages and wgmma products, but the copies are the tensor memory
// accelerator's: warpgroup 0's first thread issues a stage's tiles (one copy a tile, 4 for dgrad's
// MN-major W_e) as soon as the consumers release the stage, while warpgroups 1 and 2 (the 64-row
// halves of the 128 x 256 tile) only wait, multiply and store. Each stage has a "full" barrier (one
// arrival, the producer's, plus the stage's bytes) and an "empty" one (an arrival from each of the 256
// consumer threads once their products that read it are done). Persistent: block b takes output tiles
// b, b + grid, ... of the (row tile, column tile) list (row tiles as the *_tc kernels' grid.y, the
// column tiles of one row tile consecutive), the stages running on across tiles, so the producer loads
// the next tile while the consumers store this one. The tensor maps (bf16, 128-byte
// swizzle, zeros outside the tensor):
//   forward: ta = x (N, K), box 64 x 128 rows; tb = W (E, Nout, K), box 64 x 256 x 1
//   dgrad:   ta = dy (N, Nout), box 64 x 128 rows; tb = W (E, Nout, K), box 64 x 64 x 1 (64 k rows of
//            64 columns: four copies a stage, one per 64-column block of the MN-major tile)
// Rows of a tile past its expert's last are the next expert's (or zeros past N): their products are
// never stored; k past the width reads zeros, so a partial last k step adds nothing.
#define MOE_WS_THREADS 384 /* = kernels/launch.h's STEPC_MOE_WS_THREADS, STAGES */
#define MOE_WS_STAGES 4
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Stage s's barriers after the stages at `bars`: full (the producer's arrival and the stage's bytes)
// and empty (the 256 consumer threads' arrivals).
#define FULL(s) (bars + 8u * (unsigned)(s))
#define EMPTY(s) (bars + 8u * (unsigned)(MOE_WS_STAGES + (s)))
__device__ __forceinline__ void moe_ws_bars_init(unsigned bars) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < MOE_WS_STAGES; s++) mbar_init(FULL(s), 1), mbar_init(EMPTY(s), 256);
    mbar_init_fence();
  }
  __syncthreads();
}
// The pipeline's it-th stage use (stage it % STAGES), counted alike by the producer and the consumers:
// moe_ws_fill (the producer) waits until the consumers gave the stage back from use it - STAGES and
// announces the stage's bytes on its full barrier; moe_ws_take (a consumer) waits until they have
// landed; moe_ws_give gives the stage back. fill and take return the stage's shared address.
__device__ __forceinline__ unsigned moe_ws_fill(unsigned base, unsigned bars, int it) {
  int s = it % MOE_WS_STAGES;
  if (it >= MOE_WS_STAGES) mbar_wait(EMPTY(s), (unsigned)(it / MOE_WS_STAGES - 1) & 1u);
  mbar_arrive_tx(FULL(s), MOE_WG_STAGE_BYTES);
  return base + s * MOE_WG_STAGE_BYTES;
}
__device__ __forceinline__ unsigned moe_ws_take(unsigned base, unsigned bars, int it) {
  int s = it % MOE_WS_STAGES;
  mbar_wait(FULL(s), (unsigned)(it / MOE_WS_STAGES) & 1u);
  return base + s * MOE_WG_STAGE_BYTES;
}
__device__ __forceinline__ void moe_ws_give(unsigned bars, int it) { mbar_arrive(EMPTY(it % MOE_WS_STAGES)); }
// An fp8 product's accumulators times the experts' inverse scales.
__device__ __forceinline__ void moe_ws_scale(float* d, float sc) {
#pragma unroll
  for (int i = 0; i < 128; i++) d[i] *= sc;
}
// F8 = 0: bf16 operands; else fp8 ones (MODE 0's layout: both K-major), A in format (F8 - 1) % 2 and B
// in (F8 - 1) / 2 (0 E4M3, 1 E5M2), each stage 128 k of 128-byte rows, and the product scaled by
// sa[e] sb[e] (the experts' inverse scales) before its bf16 store.
template <int MODE, int F8 = 0>
__device__ __forceinline__ void moe_ws_rows(bf16* out, const void* ta, const void* tb, const int* seg, int Nout, int K, int E,
                                            int row_tiles, const float* sa_e = nullptr, const float* sb_e = nullptr) {
  const int BK = F8 ? 128 : MOE_WG_BK; /* k a stage: 128 bytes a row */
  int kin = MODE == 0 ? K : Nout, cols = MODE == 0 ? Nout : K, col_tiles = (cols + MOE_TC_BN - 1) / MOE_TC_BN;
  int nk = (kin + BK - 1) / BK, tiles = col_tiles * row_tiles;
  unsigned base = wg_smem_base(), bars = base + MOE_WS_STAGES * MOE_WG_STAGE_BYTES;
  moe_ws_bars_init(bars);
  int e, rows0, nrows, m0;
  if (threadIdx.x < 128) { /* the producer: every k step of this block's tiles, one stage after another */
    if (threadIdx.x == 0)
      for (int t = blockIdx.x, it = 0; t < tiles && moe_tc_row_tile(seg, E, t / col_tiles, &e, &rows0, &nrows, &m0);
           t += gridDim.x)
        for (int kt = 0, n0 = (t % col_tiles) * MOE_TC_BN; kt < nk; kt++, it++) {
          unsigned sa = moe_ws_fill(base, bars, it), sb = sa + MOE_WG_A_BYTES, full = FULL(it % MOE_WS_STAGES);
          tma_load_2d(sa, ta, full, kt * BK, rows0 + m0);
          if (MODE == 0) tma_load_3d(sb, tb, full, kt * BK, n0, e);
          else
            for (int b = 0; b < MOE_TC_BN / 64; b++) tma_load_3d(sb + b * MOE_WG_MN_LBO, tb, full, n0 + 64 * b, kt * BK, e);
        }
    return;
  }
  int c = threadIdx.x / 128 - 1; /* this consumer's 64-row half */
  for (int t = blockIdx.x, it = 0; t < tiles && moe_tc_row_tile(seg, E, t / col_tiles, &e, &rows0, &nrows, &m0); t += gridDim.x) {
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; i++) d[i] = 0.0f;
    for (int kt = 0; kt < nk; kt++, it++) {
      unsigned stage = moe_ws_take(base, bars, it), sa = stage + c * 64 * 128, sb = stage + MOE_WG_A_BYTES;
      wg_pin(d);
      wg_fence();
#pragma unroll
      for (int ks = 0; ks < 4; ks++) { /* 32-byte k slices: 16 bf16 or 32 fp8 */
        unsigned long long da = wg_desc(sa + ks * 32, 16, 1024);
        unsigned long long db = MODE == 0 ? wg_desc(sb + ks * 32, 16, 1024) : wg_desc(sb + ks * 2048, MOE_WG_MN_LBO, MOE_WG_MN_SBO);
        if (F8) wgmma_fp8_m64n256k32<(F8 - 1) % 2, (F8 - 1) / 2>(d, da, db);
        else wgmma_m64n256k16<0, MODE != 0>(d, da, db);
      }
      wg_commit();
      wg_wait<1>(); /* the previous step's products are done: its stage goes back to the producer */
      wg_pin(d);
      if (kt > 0) moe_ws_give(bars, it - 1);
    }
    wg_wait_all();
    wg_pin(d);
    moe_ws_give(bars, it - 1); /* the tile's last stage: the producer is loading the next tile meanwhile */
    bf16* o = out + (long)rows0 * cols;
    int n0 = (t % col_tiles) * MOE_TC_BN;
    if (F8) moe_ws_scale(d, sa_e[e] * sb_e[e]);
#define ST(r, q, v0, v1) *(unsigned*)(o + (long)(r) * cols + (q)) = pack_bf16x2(v0, v1)
    MOE_WG_EPILOGUE_HALF(d, c, m0, n0, nrows, cols, ST);
#undef ST
  }
}
#endif

// GROUPED_LINEAR on sm_90a, warp-specialised (above): y = x W_e^T over each expert's rows; ta = x's
// tensor map, tb = W's; row_tiles = ceil(N / 128) + E (the *_tc kernels' grid.y). Grid: at most one
// block per SM (fewer when there are fewer tiles), STEPC_MOE_WS_THREADS, stepc_moe_ws_smem() (kernels/launch.h).
extern "C" __global__ void __launch_bounds__(MOE_WS_THREADS, 1)
    grouped_linear_forward_ws(bf16* y, const void* ta, const void* tb, const int* seg, int Nout, int K, int E, int row_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  moe_ws_rows<0>(y, ta, tb, seg, Nout, K, E, row_tiles);
#endif
}

// GROUPED_LINEAR_DGRAD on sm_90a, warp-specialised: dx = dy W_e; ta = dy's tensor map, tb = W's
// (box 64 x 64 x 1); as grouped_linear_forward_ws otherwise.
extern "C" __global__ void __launch_bounds__(MOE_WS_THREADS, 1)
    grouped_linear_dgrad_ws(bf16* dx, const void* ta, const void* tb, const int* seg, int Nout, int K, int E, int row_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  moe_ws_rows<1>(dx, ta, tb, seg, Nout, K, E, row_tiles);
#endif
}

// The fp8 grouped product in Transformer Engine's "TN" layout (both operands K-major: the fp8 tensor
// cores take no transposed operand) on sm_90a, warp-specialised as grouped_linear_forward_ws:
// c[r] = a[r] b_e^T sa[e] sb[e] over each expert's rows r, a (N, K) and b (E, Nout, K) fp8 (fa, fb: 0
// E4M3, 1 E5M2), sa and sb (E) their inverse scales, c (N, Nout) bf16. GROUPED_LINEAR_FP8's product
// (a = x's per-expert cast, b = the experts' weights) and GROUPED_FP8_DGRAD's (a = dy's, b = the
// weights' transposes). ta over a in boxes of 128 x 128 rows, tb over b in 128 x 256 x 1 (bytes: a row
// of a box is 128 fp8); K % 16 == 0. Grid as grouped_linear_forward_ws's.
extern "C" __global__ void __launch_bounds__(MOE_WS_THREADS, 1)
    grouped_fp8_tn_ws(bf16* c, const void* ta, const void* tb, const float* sa, const float* sb, const int* seg, int Nout,
                      int K, int E, int row_tiles, int fa, int fb) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if (fa == 0 && fb == 0) moe_ws_rows<0, 1>(c, ta, tb, seg, Nout, K, E, row_tiles, sa, sb);
  else if (fb == 0) moe_ws_rows<0, 2>(c, ta, tb, seg, Nout, K, E, row_tiles, sa, sb);
  else if (fa == 0) moe_ws_rows<0, 3>(c, ta, tb, seg, Nout, K, E, row_tiles, sa, sb);
  else moe_ws_rows<0, 4>(c, ta, tb, seg, Nout, K, E, row_tiles, sa, sb);
#endif
}

// ---- Hopper, warp-specialised: the weight gradient fed by the TMA ----
// dW_e (Nout, K) = dy_e^T x_e as grouped_linear_wgrad_tc's products (128 x 256 output tiles, k = the
// expert's rows in steps of 64), persistent and fed as moe_ws_rows: tiles t = (e MT + mt) NT + nt over
// every expert (MT = ceil(Nout / 128), NT = ceil(K / 256)), so tile t's norm partial is the *_tc
// kernel's block t's. Both operands MN-major through maps with boxes of 64 x 64: tdy over dy (N, Nout),
// two copies a stage (the tile's 128 columns of dy), tx over x (N, K), four (its 256 columns of x). A
// last k step past the expert's rows loads the next expert's rows: each consumer warpgroup zeroes
// those rows of its A block and of all four B blocks (a row of a block is 128 contiguous bytes; both
// warpgroups write the same zeros into B) before its products. The epilogue stores from the registers:
// bf16 dW, or fp32 added into acc_f32 (store = 1: written as 0 + dW), and with norm the tile's sum
// of squares of what it wrote (the consumers' warps summed in order after a named barrier).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// F8 = 0: bf16 dy and x, MN-major (above); else fp8 (as moe_ws_rows's F8: A's format (F8 - 1) % 2, B's
// (F8 - 1) / 2) in the "TN" layout: tdy over dy's transpose (Nout, R) in boxes of 128 x 128 rows, tx over
// x's transpose (K, R) in 128 x 256, both K-major (k = the rows r, contiguous), 128 k a stage. The TMA
// takes an inner coordinate only at a 16-byte boundary (else "an illegal instruction"), so an expert's
// steps start at the boundary below its first row: the rows before it (the first step's bytes
// [0, first row % 16)) and past its last (the last step's bytes kl..) are zeroed in every row (in the
// swizzled chunks), and the product is scaled by sa_e[e] sb_e[e].
template <int F8 = 0>
__device__ __forceinline__ void moe_ws_wgrad(bf16* dw, float* acc_f32, const void* tdy, const void* tx, const int* seg, int Nout,
                                             int K, int E, int store, float* norm, const float* sa_e = nullptr,
                                             const float* sb_e = nullptr) {
  const int BK = F8 ? 128 : MOE_WG_BK;
  int MT = (Nout + MOE_TC_BM - 1) / MOE_TC_BM, NT = (K + MOE_TC_BN - 1) / MOE_TC_BN, tiles = E * MT * NT;
  unsigned base = wg_smem_base(), bars = base + MOE_WS_STAGES * MOE_WG_STAGE_BYTES;
  moe_ws_bars_init(bars);
  if (threadIdx.x < 128) { /* the producer */
    if (threadIdx.x == 0)
      for (int t = blockIdx.x, it = 0; t < tiles; t += gridDim.x) {
        int e = t / (MT * NT), m0 = (t % (MT * NT)) / NT * MOE_TC_BM, n0 = t % NT * MOE_TC_BN;
        int rows0 = seg[2 * e], lead = F8 ? rows0 % 16 : 0, nk = (seg[2 * e + 1] + lead + BK - 1) / BK;
        for (int kt = 0; kt < nk; kt++, it++) {
          unsigned sa = moe_ws_fill(base, bars, it), sb = sa + MOE_WG_A_BYTES, full = FULL(it % MOE_WS_STAGES);
          if (F8) { /* k = the rows, the maps' inner coordinate: from the 16-byte boundary below the expert's first */
            tma_load_2d(sa, tdy, full, rows0 - lead + kt * BK, m0);
            tma_load_2d(sb, tx, full, rows0 - lead + kt * BK, n0);
            continue;
          }
          for (int b = 0; b < MOE_TC_BM / 64; b++) tma_load_2d(sa + b * MOE_WG_MN_LBO, tdy, full, m0 + 64 * b, rows0 + kt * BK);
          for (int b = 0; b < MOE_TC_BN / 64; b++) tma_load_2d(sb + b * MOE_WG_MN_LBO, tx, full, n0 + 64 * b, rows0 + kt * BK);
        }
      }
    return;
  }
  __shared__ float red[8];
  int c = threadIdx.x / 128 - 1, ct = threadIdx.x % 128;
  for (int t = blockIdx.x, it = 0; t < tiles; t += gridDim.x) {
    int e = t / (MT * NT), m0 = (t % (MT * NT)) / NT * MOE_TC_BM, n0 = t % NT * MOE_TC_BN;
    int lead = F8 ? seg[2 * e] % 16 : 0, nrows = seg[2 * e + 1], nk = (nrows + lead + BK - 1) / BK;
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; i++) d[i] = 0.0f;
    for (int kt = 0; kt < nk; kt++, it++) {
      int kl = nrows + lead - kt * BK, lo = kt == 0 ? lead : 0; /* the expert's rows: k in [lo, kl) of this step */
      unsigned sa = moe_ws_take(base, bars, it), sb = sa + MOE_WG_A_BYTES;
      if (kl < BK || lo > 0) { /* the step reaches past the expert's rows (fp8: also before them): zeros there */
        unsigned char* sm = stepc_smem + (base - smem_addr(stepc_smem));
        if (F8) { /* bytes [0, lo) and [kl, 128) of this half's 64 rows of A and of B's 256 (chunk q of row i at
                     q ^ (i % 8)): a row's leading chunk first, then its trailing ones */
          int q0 = kl < BK ? kl / 16 : 8, nh = lo > 0, nq = nh + 8 - q0;
          for (int i = ct; i < (64 + MOE_TC_BN) * nq; i += 128) {
            int row = i / nq, j = i % nq, q = j < nh ? 0 : q0 + j - nh, tr = row < 64 ? c * 64 + row : row - 64;
            unsigned char* p = sm + (row < 64 ? sa : sb) - base + tr * 128 + ((q ^ (tr & 7)) << 4);
            for (int b = j < nh ? 0 : q == q0 ? kl % 16 : 0, to = j < nh ? lo : 16; b < to; b++) p[b] = 0;
          }
        } else { /* rows kl.. of this half's A block and of B's four (a row: 128 contiguous bytes) */
          int chunks = (BK - kl) * 8; /* 16-byte chunks a block */
          for (int i = ct; i < 5 * chunks; i += 128) {
            int blk = i / chunks, off = kl * 128 + i % chunks * 16;
            unsigned at = blk == 0 ? sa - base + c * MOE_WG_MN_LBO + off : sb - base + (blk - 1) * MOE_WG_MN_LBO + off;
            *(uint4*)(sm + at) = make_uint4(0, 0, 0, 0);
          }
        }
        fence_proxy_async(); /* the zeros visible to the tensor cores' reads */
        bar_sync_named(1 + c, 128);
      }
      unsigned ha = sa + c * MOE_WG_MN_LBO; /* this half's 64 columns of dy^T (its 64 rows, fp8: also 8 KiB on) */
      wg_pin(d);
      wg_fence();
#pragma unroll
      for (int ks = 0; ks < 4; ks++)
        if (F8)
          wgmma_fp8_m64n256k32<(F8 - 1) % 2, (F8 - 1) / 2>(d, wg_desc(ha + ks * 32, 16, 1024), wg_desc(sb + ks * 32, 16, 1024));
        else
          wgmma_m64n256k16<1, 1>(d, wg_desc(ha + ks * 2048, MOE_WG_MN_LBO, MOE_WG_MN_SBO),
                                 wg_desc(sb + ks * 2048, MOE_WG_MN_LBO, MOE_WG_MN_SBO));
      wg_commit();
      wg_wait<1>();
      wg_pin(d);
      if (kt > 0) moe_ws_give(bars, it - 1);
    }
    wg_wait_all();
    wg_pin(d);
    if (nk > 0) moe_ws_give(bars, it - 1);
    long wbase = (long)e * Nout * K;
    if (F8) moe_ws_scale(d, sa_e[e] * sb_e[e]);
    if (dw) {
#define ST(r, q, v0, v1) *(unsigned*)(dw + wbase + (long)(r) * K + (q)) = pack_bf16x2(v0, v1)
      MOE_WG_EPILOGUE_HALF(d, c, m0, n0, Nout, K, ST);
#undef ST
      continue;
    }
    float sq = 0.0f;
#define ST(r, q, v0, v1)                                                                  \
  do {                                                                                    \
    float2* p_ = (float2*)(acc_f32 + wbase + (long)(r) * K + (q));                        \
    float2 o_ = store ? make_float2(0.0f, 0.0f) : *p_, u_ = make_float2(o_.x + (v0), o_.y + (v1)); \
    *p_ = u_;                                                                             \
    sq += u_.x * u_.x + u_.y * u_.y;                                                      \
  } while (0)
    MOE_WG_EPILOGUE_HALF(d, c, m0, n0, Nout, K, ST);
#undef ST
    if (norm) { /* the 8 consumer warps' sums, in warp order */
      sq = warp_sum(sq);
      if (threadIdx.x % STEPC_WARP == 0) red[threadIdx.x / STEPC_WARP - 4] = sq;
      bar_sync_named(3, 256);
      if (threadIdx.x == 128) {
        float v = 0.0f;
        for (int w = 0; w < 8; w++) v += red[w];
        norm[t] = v;
      }
      bar_sync_named(3, 256); /* red is free for the next tile */
    }
  }
}
#undef FULL
#undef EMPTY
#endif

// GROUPED_LINEAR_WGRAD on sm_90a, warp-specialised (above): as grouped_linear_wgrad_tc, dy and x through
// tensor maps (tdy over dy (N, Nout), tx over x (N, K), boxes 64 x 64). Grid: at most one block per SM
// (stepc_moe_ws_grid over K's column tiles and Nout's row tiles times E), STEPC_MOE_WS_THREADS,
// stepc_moe_ws_smem().
extern "C" __global__ void __launch_bounds__(MOE_WS_THREADS, 1)
    grouped_linear_wgrad_ws(bf16* dw, float* acc_f32, const void* tdy, const void* tx, const int* seg, int Nout, int K, int E,
                            int store, float* norm) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  moe_ws_wgrad(dw, acc_f32, tdy, tx, seg, Nout, K, E, store, norm);
#endif
}

// GROUPED_FP8_WGRAD on sm_90a, warp-specialised: dW_e = (dy_e^T x_e) sa[e] sb[e] from the fp8 transposes
// a = dy^T (Nout, R) and b = x^T (K, R) (formats fa, fb: 0 E4M3, 1 E5M2; R % 16 == 0), into bf16 dw or
// the fp32 acc_f32 (store, norm as grouped_linear_wgrad_ws). ta over a in boxes of 128 x 128 rows, tb over
// b in 128 x 256. Grid as grouped_linear_wgrad_ws's.
extern "C" __global__ void __launch_bounds__(MOE_WS_THREADS, 1)
    grouped_fp8_wgrad_ws(bf16* dw, float* acc_f32, const void* ta, const void* tb, const float* sa, const float* sb,
                         const int* seg, int Nout, int K, int E, int store, float* norm, int fa, int fb) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if (fa == 0 && fb == 0) moe_ws_wgrad<1>(dw, acc_f32, ta, tb, seg, Nout, K, E, store, norm, sa, sb);
  else if (fb == 0) moe_ws_wgrad<2>(dw, acc_f32, ta, tb, seg, Nout, K, E, store, norm, sa, sb);
  else if (fa == 0) moe_ws_wgrad<3>(dw, acc_f32, ta, tb, seg, Nout, K, E, store, norm, sa, sb);
  else moe_ws_wgrad<4>(dw, acc_f32, ta, tb, seg, Nout, K, E, store, norm, sa, sb);
#endif
}

// ---- MOE_ACT: y = act(a) [* b] * p per row; act 0 silu, 1 gelu, 2 relu, 3 squared relu ----
__device__ __forceinline__ float moe_act_f(int act, float v, float* d) {
  switch (act) {
    case 0: {
      float s = 1.0f / (1.0f + expf(-v));
      *d = s * (1.0f + v * (1.0f - s));
      return v * s;
    }
    case 1: *d = gelu_grad_f(v); return gelu_f(v);
    case 2: *d = v > 0.0f ? 1.0f : 0.0f; return v > 0.0f ? v : 0.0f;
    default: *d = v > 0.0f ? 2.0f * v : 0.0f; return v > 0.0f ? v * v : 0.0f;
  }
}

// Whether the activation's rows can move 16 bytes (8 bf16) a load: F a multiple of 8 and every
// pointer 16-byte aligned (uniform over the launch).
__device__ __forceinline__ bool moe_act_vec(int F, const void* a, const void* b, const void* c) {
  return F % 8 == 0 && (((unsigned long long)a | (unsigned long long)b | (unsigned long long)c) & 15) == 0;
}

// h (N, F or 2F), p (N) -> y (N, F), 8 elements a thread at a time where moe_act_vec (the same
// arithmetic per element either way). Launch: grid-stride.
extern "C" __global__ void moe_act_forward(bf16* y, const bf16* h, const bf16* p, int N, int F, int glu, int act) {
  int w = glu ? 2 * F : F;
  long first = blockIdx.x * (long)blockDim.x + threadIdx.x, stride = (long)gridDim.x * blockDim.x;
  if (moe_act_vec(F, y, h, h)) {
    int F8 = F / 8;
    for (long v = first; v < (long)N * F8; v += stride) {
      long r = v / F8;
      int f = (int)(v - r * F8) * 8;
      float a[8], b[8], o[8], pr = bf16_to_f32(p[r]);
      load8(h + r * w + f, a);
      if (glu) load8(h + r * w + F + f, b);
#pragma unroll
      for (int k = 0; k < 8; k++) {
        float d, u = moe_act_f(act, a[k], &d);
        o[k] = u * (glu ? b[k] : 1.0f) * pr;
      }
      store8(y + r * F + f, o);
    }
    return;
  }
  for (long i = first; i < (long)N * F; i += stride) {
    long r = i / F;
    int f = (int)(i % F);
    float d, u = moe_act_f(act, bf16_to_f32(h[r * w + f]), &d);
    float gate = glu ? bf16_to_f32(h[r * w + F + f]) : 1.0f;
    y[i] = f32_to_bf16(u * gate * bf16_to_f32(p[r]));
  }
}

// dh (N, w), dp (N) = sum_f dy act(a) [b]: one warp per row, each lane 8 consecutive elements at a
// time where moe_act_vec (else one), a fixed-shape warp sum. Launch: block 256, grid ceil(N / 8).
extern "C" __global__ void moe_act_backward(bf16* dh, bf16* dp, const bf16* dy, const bf16* h, const bf16* p, int N,
                                            int F, int glu, int act) {
  int lane = threadIdx.x % 32, w = glu ? 2 * F : F;
  long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  if (r >= N) return;
  float pr = bf16_to_f32(p[r]), s = 0.0f;
  if (moe_act_vec(F, dh, dy, h)) {
    for (int f = lane * 8; f < F; f += 256) {
      float a[8], b[8], g[8], da[8], db[8];
      load8(h + r * w + f, a);
      if (glu) load8(h + r * w + F + f, b);
      load8(dy + r * F + f, g);
#pragma unroll
      for (int k = 0; k < 8; k++) {
        float d, u = moe_act_f(act, a[k], &d), gate = glu ? b[k] : 1.0f;
        da[k] = g[k] * pr * gate * d, db[k] = g[k] * pr * u;
        s += g[k] * u * gate;
      }
      store8(dh + r * w + f, da);
      if (glu) store8(dh + r * w + F + f, db);
    }
  } else
    for (int f = lane; f < F; f += 32) {
      float d, u = moe_act_f(act, bf16_to_f32(h[r * w + f]), &d);
      float gate = glu ? bf16_to_f32(h[r * w + F + f]) : 1.0f, g = bf16_to_f32(dy[r * F + f]);
      dh[r * w + f] = f32_to_bf16(g * pr * gate * d);
      if (glu) dh[r * w + F + f] = f32_to_bf16(g * pr * u);
      s += g * u * gate;
    }
  s = warp_sum(s);
  if (lane == 0) dp[r] = f32_to_bf16(s);
}
