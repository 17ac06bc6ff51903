// flash.cuh — causal flash attention with GQA, forward and backward, head dims 64 and 128,
// bf16 in/out, fp32 softmax and accumulation, on mma.sync tensor cores (FlashAttention-2 style).
//
// Layouts: Q, O, dQ, dO (B, T, H, D); K, V, dK, dV (B, T, Hkv, D); LSE, Dsum (B, H, T) fp32.
// Query head h reads kv head h / (H / Hkv). LSE is the natural-log log-sum-exp of each row's
// scaled scores, the only softmax statistic forward keeps.
//
// Backward is deterministic: no atomics. dK/dV and dQ are two kernels, each owning its output
// tile and recomputing P; a kv block loops over all H/Hkv query heads of its group itself, so
// the GQA sum has a fixed order. The price is recomputing QK^T and dO V^T once more than
// FlashAttention-2 (7 tile products per tile pair instead of 5).
//
// Launch geometry and dynamic shared memory: kernels/launch.h. T must be a multiple of 128.
#pragma once
#include "mma.cuh"

#define STEPC_LOG2E 1.4426950408889634f
#define STEPC_LN2 0.6931471805599453f

// ---- forward: a block of NW warps owns 16*NW query rows; K/V tiles of 64 keys, double-buffered.
template <int D, int NW>
__device__ __forceinline__ void flash_forward(bf16* O, float* LSE, const bf16* Q, const bf16* K, const bf16* V,
                                              int T, int H, int Hkv, float scale) {
  constexpr int BR = 16 * NW, BC = 64, LD = D + 8;  // +8: rows shift 4 banks, ldmatrix conflict-free
  bf16* Qs = (bf16*)stepc_smem;
  bf16* Ks = Qs + BR * LD;  // [2][BC][LD]
  bf16* Vs = Ks + 2 * BC * LD;
  int lane = threadIdx.x % STEPC_WARP, warp = threadIdx.x / STEPC_WARP;
  int qt = gridDim.x - 1 - blockIdx.x;  // longest rows first: better tail balance under causality
  int h = blockIdx.y, b = blockIdx.z, hk = h / (H / Hkv);
  long ldq = (long)H * D, ldk = (long)Hkv * D;
  int q0 = qt * BR, qw = q0 + warp * 16;
  const bf16* Kg = K + (long)b * T * ldk + hk * D;
  const bf16* Vg = V + (long)b * T * ldk + hk * D;
  int nkv = (q0 + BR + BC - 1) / BC;

  tile_load_async<BR, D>(Qs, LD, Q + ((long)b * T + q0) * ldq + h * D, ldq);
  tile_load_async<BC, D>(Ks, LD, Kg, ldk);
  tile_load_async<BC, D>(Vs, LD, Vg, ldk);
  cp_async_commit();

  float o[D / 8][4];
  acc_zero<D / 8>(o);
  float m[2] = {STEPC_NEG_INF, STEPC_NEG_INF}, l[2] = {0.0f, 0.0f};
  const float sl2 = scale * STEPC_LOG2E;
  int row[2] = {qw + lane / 4, qw + lane / 4 + 8};

  for (int j = 0; j < nkv; j++) {
    if (j + 1 < nkv) {
      int nb = (j + 1) & 1;
      tile_load_async<BC, D>(Ks + nb * BC * LD, LD, Kg + (long)(j + 1) * BC * ldk, ldk);
      tile_load_async<BC, D>(Vs + nb * BC * LD, LD, Vg + (long)(j + 1) * BC * ldk, ldk);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* Kc = Ks + (j & 1) * BC * LD;
    const bf16* Vc = Vs + (j & 1) * BC * LD;
    int k0 = j * BC;
    if (k0 <= qw + 15) {  // else every key of the tile is above this warp's rows
      float s[BC / 8][4];
      acc_zero<BC / 8>(s);
      warp_mma_nt<D / 16, BC / 8>(s, Qs + warp * 16 * LD, LD, Kc, LD);
      bool diag = k0 + BC - 1 > qw;
      float mx[2] = {m[0], m[1]};
#pragma unroll
      for (int n = 0; n < BC / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          int key = k0 + n * 8 + (lane % 4) * 2 + (e & 1);
          float v = s[n][e] * sl2;
          if (diag && key > row[e >> 1]) v = STEPC_NEG_INF;
          s[n][e] = v;
          mx[e >> 1] = fmaxf(mx[e >> 1], v);
        }
      float rs[2] = {0.0f, 0.0f}, alpha[2];
#pragma unroll
      for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(STEPC_FULL_MASK, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(STEPC_FULL_MASK, mx[r], 2));
        alpha[r] = exp2f(m[r] - mx[r]);  // m = -inf on the first tile: alpha = 0
        m[r] = mx[r];                    // finite: key 0 of tile 0 is visible to every row
      }
#pragma unroll
      for (int n = 0; n < BC / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          float p = exp2f(s[n][e] - m[e >> 1]);
          s[n][e] = p;
          rs[e >> 1] += p;
        }
      l[0] = l[0] * alpha[0] + rs[0];  // per-thread partial sums; the quad is summed at the end
      l[1] = l[1] * alpha[1] + rs[1];
#pragma unroll
      for (int n = 0; n < D / 8; n++) {
        o[n][0] *= alpha[0];
        o[n][1] *= alpha[0];
        o[n][2] *= alpha[1];
        o[n][3] *= alpha[1];
      }
      unsigned pa[BC / 16][4];
      acc_to_afrag<BC / 8>(pa, s);
      warp_mma_rr<BC / 16, D / 8>(o, pa, Vc, LD);
    }
    __syncthreads();  // the next iteration prefetches into the buffer just read
  }
#pragma unroll
  for (int r = 0; r < 2; r++) {
    l[r] += __shfl_xor_sync(STEPC_FULL_MASK, l[r], 1);
    l[r] += __shfl_xor_sync(STEPC_FULL_MASK, l[r], 2);
  }
  float inv[2] = {1.0f / l[0], 1.0f / l[1]};
#pragma unroll
  for (int r = 0; r < 2; r++) {
    bf16* Og = O + ((long)b * T + row[r]) * ldq + h * D + (lane % 4) * 2;
#pragma unroll
    for (int n = 0; n < D / 8; n++)
      *(unsigned*)(Og + n * 8) = pack_bf16x2(o[n][2 * r] * inv[r], o[n][2 * r + 1] * inv[r]);
    if (lane % 4 == 0) LSE[((long)b * H + h) * T + row[r]] = (m[r] + log2f(l[r])) * STEPC_LN2;
  }
}

extern "C" __global__ void __launch_bounds__(256) flash_attention_forward_d64(
    bf16* O, float* LSE,  // (B, T, H, 64), (B, H, T)
    const bf16* Q,        // (B, T, H, 64)
    const bf16* K,        // (B, T, Hkv, 64)
    const bf16* V,        // (B, T, Hkv, 64)
    int B, int T, int H, int Hkv, float scale) {
  (void)B;
  flash_forward<64, 8>(O, LSE, Q, K, V, T, H, Hkv, scale);
}

extern "C" __global__ void __launch_bounds__(256) flash_attention_forward_d128(
    bf16* O, float* LSE,  // (B, T, H, 128), (B, H, T)
    const bf16* Q,        // (B, T, H, 128)
    const bf16* K,        // (B, T, Hkv, 128)
    const bf16* V,        // (B, T, Hkv, 128)
    int B, int T, int H, int Hkv, float scale) {
  (void)B;
  flash_forward<128, 8>(O, LSE, Q, K, V, T, H, Hkv, scale);
}

// ---- backward, step 1: Dsum[b][h][t] = sum_d dO * O (the softmax-backward row dot product).
// Launch: one warp per (b, t, h) row, any block size that is a multiple of 32.
extern "C" __global__ void flash_attention_backward_preprocess(float* Dsum,      // (B, H, T)
                                                               const bf16* dO,   // (B, T, H, D)
                                                               const bf16* O,    // (B, T, H, D)
                                                               int B, int T, int H, int D) {
  int lane = threadIdx.x % STEPC_WARP;
  long r = ((long)blockIdx.x * blockDim.x + threadIdx.x) / STEPC_WARP;  // (b, t, h)
  if (r >= (long)B * T * H) return;
  float s = 0.0f;
  for (int d = lane * 2; d < D; d += 64) {
    unsigned x = *(const unsigned*)(dO + r * D + d), y = *(const unsigned*)(O + r * D + d);
    s += bf16x2_lo(x) * bf16x2_lo(y) + bf16x2_hi(x) * bf16x2_hi(y);
  }
  s = warp_sum(s);
  int h = (int)(r % H);
  long bt = r / H;
  if (lane == 0) Dsum[((bt / T) * H + h) * T + bt % T] = s;
}

// ---- backward, step 2: a block of 4 warps owns 64 keys of one kv head (16 keys per warp) and
// accumulates dK, dV over every query tile (BQ rows) of every query head in the group.
template <int D, int BQ>
__device__ __forceinline__ void flash_backward_dkdv(bf16* dK, bf16* dV, const bf16* Q, const bf16* K,
                                                    const bf16* V, const bf16* dO, const float* LSE,
                                                    const float* Dsum, int T, int H, int Hkv, float scale) {
  constexpr int BC = 64, LD = D + 8;
  bf16* Ks = (bf16*)stepc_smem;
  bf16* Vs = Ks + BC * LD;
  bf16* Qs = Vs + BC * LD;       // [2][BQ][LD]
  bf16* dOs = Qs + 2 * BQ * LD;  // [2][BQ][LD]
  float* Ls = (float*)(dOs + 2 * BQ * LD);  // [2][BQ], LSE * log2(e)
  float* Ds = Ls + 2 * BQ;                  // [2][BQ]
  int lane = threadIdx.x % STEPC_WARP, warp = threadIdx.x / STEPC_WARP;
  int kt = blockIdx.x, hk = blockIdx.y, b = blockIdx.z, G = H / Hkv;
  long ldq = (long)H * D, ldk = (long)Hkv * D;
  int k0 = kt * BC, kw = k0 + warp * 16;
  int i0 = k0 / BQ, nq = T / BQ - i0, niter = G * nq;

  tile_load_async<BC, D>(Ks, LD, K + ((long)b * T + k0) * ldk + hk * D, ldk);
  tile_load_async<BC, D>(Vs, LD, V + ((long)b * T + k0) * ldk + hk * D, ldk);
  // Iteration `it` covers query head hk*G + it / nq, query tile i0 + it % nq.
  auto load = [&](int it, int buf) {
    int h = hk * G + it / nq, q0 = (i0 + it % nq) * BQ;
    tile_load_async<BQ, D>(Qs + buf * BQ * LD, LD, Q + ((long)b * T + q0) * ldq + h * D, ldq);
    tile_load_async<BQ, D>(dOs + buf * BQ * LD, LD, dO + ((long)b * T + q0) * ldq + h * D, ldq);
    const float* lg = LSE + ((long)b * H + h) * T + q0;
    const float* dg = Dsum + ((long)b * H + h) * T + q0;
    for (int c = threadIdx.x; c < BQ / 4; c += blockDim.x) {
      cp_async16(Ls + buf * BQ + c * 4, lg + c * 4);
      cp_async16(Ds + buf * BQ + c * 4, dg + c * 4);
    }
  };
  load(0, 0);
  cp_async_commit();

  float dk[D / 8][4], dv[D / 8][4];
  acc_zero<D / 8>(dk);
  acc_zero<D / 8>(dv);
  const float sl2 = scale * STEPC_LOG2E;
  int key[2] = {kw + lane / 4, kw + lane / 4 + 8};

  for (int it = 0; it < niter; it++) {
    if (it + 1 < niter) {
      load(it + 1, (it + 1) & 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    int buf = it & 1, q0 = (i0 + it % nq) * BQ;
    const bf16* Qc = Qs + buf * BQ * LD;
    const bf16* dOc = dOs + buf * BQ * LD;
    const float* Lc = Ls + buf * BQ;
    const float* Dc = Ds + buf * BQ;
    if (q0 + BQ - 1 >= kw) {  // else every query of the tile is before this warp's keys
      float s[BQ / 8][4], dp[BQ / 8][4];
      acc_zero<BQ / 8>(s);
      acc_zero<BQ / 8>(dp);
      warp_mma_nt<D / 16, BQ / 8>(s, Ks + warp * 16 * LD, LD, Qc, LD);  // S^T = K Q^T
      warp_mma_nt<D / 16, BQ / 8>(dp, Vs + warp * 16 * LD, LD, dOc, LD);  // dP^T = V dO^T
#pragma unroll
      for (int n = 0; n < BQ / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          int qi = n * 8 + (lane % 4) * 2 + (e & 1);
          float p = q0 + qi >= key[e >> 1] ? exp2f(s[n][e] * sl2 - Lc[qi] * STEPC_LOG2E) : 0.0f;
          s[n][e] = p;
          dp[n][e] = p * (dp[n][e] - Dc[qi]);  // dS^T
        }
      unsigned pa[BQ / 16][4], da[BQ / 16][4];
      acc_to_afrag<BQ / 8>(pa, s);
      acc_to_afrag<BQ / 8>(da, dp);
      warp_mma_rr<BQ / 16, D / 8>(dv, pa, dOc, LD);  // dV += P^T dO
      warp_mma_rr<BQ / 16, D / 8>(dk, da, Qc, LD);   // dK += dS^T Q
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < 2; r++) {
    long off = ((long)b * T + key[r]) * ldk + hk * D + (lane % 4) * 2;
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
      *(unsigned*)(dK + off + n * 8) = pack_bf16x2(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale);
      *(unsigned*)(dV + off + n * 8) = pack_bf16x2(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
}

#define STEPC_FLASH_DKDV(D, BQ)                                                                          \
  extern "C" __global__ void __launch_bounds__(128) flash_attention_backward_dkdv_d##D(                  \
      bf16* dK, bf16* dV, /* (B, T, Hkv, D) each */                                                      \
      const bf16* Q, const bf16* K, const bf16* V, /* (B, T, H, D), (B, T, Hkv, D) x2 */                 \
      const bf16* dO, const float* LSE, const float* Dsum, /* (B, T, H, D), (B, H, T) x2 */              \
      int B, int T, int H, int Hkv, float scale) {                                                       \
    (void)B;                                                                                             \
    flash_backward_dkdv<D, BQ>(dK, dV, Q, K, V, dO, LSE, Dsum, T, H, Hkv, scale);                        \
  }
STEPC_FLASH_DKDV(64, 64)
STEPC_FLASH_DKDV(128, 32)

// ---- backward, step 3: a block of 4 warps owns 64 query rows of one head (16 per warp) and
// accumulates dQ over the key tiles (BK keys, double-buffered) up to the diagonal.
template <int D, int BK>
__device__ __forceinline__ void flash_backward_dq(bf16* dQ, const bf16* Q, const bf16* K, const bf16* V,
                                                  const bf16* dO, const float* LSE, const float* Dsum, int T,
                                                  int H, int Hkv, float scale) {
  constexpr int BR = 64, LD = D + 8;
  bf16* Qs = (bf16*)stepc_smem;
  bf16* dOs = Qs + BR * LD;
  bf16* Ks = dOs + BR * LD;     // [2][BK][LD]
  bf16* Vs = Ks + 2 * BK * LD;  // [2][BK][LD]
  int lane = threadIdx.x % STEPC_WARP, warp = threadIdx.x / STEPC_WARP;
  int qt = gridDim.x - 1 - blockIdx.x;
  int h = blockIdx.y, b = blockIdx.z, hk = h / (H / Hkv);
  long ldq = (long)H * D, ldk = (long)Hkv * D;
  int q0 = qt * BR, qw = q0 + warp * 16;
  const bf16* Kg = K + (long)b * T * ldk + hk * D;
  const bf16* Vg = V + (long)b * T * ldk + hk * D;
  int nkv = (q0 + BR + BK - 1) / BK;

  tile_load_async<BR, D>(Qs, LD, Q + ((long)b * T + q0) * ldq + h * D, ldq);
  tile_load_async<BR, D>(dOs, LD, dO + ((long)b * T + q0) * ldq + h * D, ldq);
  tile_load_async<BK, D>(Ks, LD, Kg, ldk);
  tile_load_async<BK, D>(Vs, LD, Vg, ldk);
  cp_async_commit();

  int row[2] = {qw + lane / 4, qw + lane / 4 + 8};
  float L2[2], Dr[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    L2[r] = LSE[((long)b * H + h) * T + row[r]] * STEPC_LOG2E;
    Dr[r] = Dsum[((long)b * H + h) * T + row[r]];
  }
  float dq[D / 8][4];
  acc_zero<D / 8>(dq);
  const float sl2 = scale * STEPC_LOG2E;

  for (int j = 0; j < nkv; j++) {
    if (j + 1 < nkv) {
      int nb = (j + 1) & 1;
      tile_load_async<BK, D>(Ks + nb * BK * LD, LD, Kg + (long)(j + 1) * BK * ldk, ldk);
      tile_load_async<BK, D>(Vs + nb * BK * LD, LD, Vg + (long)(j + 1) * BK * ldk, ldk);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* Kc = Ks + (j & 1) * BK * LD;
    const bf16* Vc = Vs + (j & 1) * BK * LD;
    int k0 = j * BK;
    if (k0 <= qw + 15) {
      float s[BK / 8][4], dp[BK / 8][4];
      acc_zero<BK / 8>(s);
      acc_zero<BK / 8>(dp);
      warp_mma_nt<D / 16, BK / 8>(s, Qs + warp * 16 * LD, LD, Kc, LD);    // S = Q K^T
      warp_mma_nt<D / 16, BK / 8>(dp, dOs + warp * 16 * LD, LD, Vc, LD);  // dP = dO V^T
#pragma unroll
      for (int n = 0; n < BK / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          int kk = k0 + n * 8 + (lane % 4) * 2 + (e & 1), r = e >> 1;
          float p = kk <= row[r] ? exp2f(s[n][e] * sl2 - L2[r]) : 0.0f;
          dp[n][e] = p * (dp[n][e] - Dr[r]);  // dS
        }
      unsigned da[BK / 16][4];
      acc_to_afrag<BK / 8>(da, dp);
      warp_mma_rr<BK / 16, D / 8>(dq, da, Kc, LD);  // dQ += dS K
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < 2; r++) {
    bf16* g = dQ + ((long)b * T + row[r]) * ldq + h * D + (lane % 4) * 2;
#pragma unroll
    for (int n = 0; n < D / 8; n++) *(unsigned*)(g + n * 8) = pack_bf16x2(dq[n][2 * r] * scale, dq[n][2 * r + 1] * scale);
  }
}

#define STEPC_FLASH_DQ(D, BK)                                                                            \
  extern "C" __global__ void __launch_bounds__(128) flash_attention_backward_dq_d##D(                    \
      bf16* dQ, /* (B, T, H, D) */                                                                       \
      const bf16* Q, const bf16* K, const bf16* V, /* (B, T, H, D), (B, T, Hkv, D) x2 */                 \
      const bf16* dO, const float* LSE, const float* Dsum, /* (B, T, H, D), (B, H, T) x2 */              \
      int B, int T, int H, int Hkv, float scale) {                                                       \
    (void)B;                                                                                             \
    flash_backward_dq<D, BK>(dQ, Q, K, V, dO, LSE, Dsum, T, H, Hkv, scale);                              \
  }
STEPC_FLASH_DQ(64, 64)
STEPC_FLASH_DQ(128, 32)
