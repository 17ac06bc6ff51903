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

// ---- forward: a block of NW warps owns BR = 16*MT*NW query rows, each warp 16*MT of them (MT
// m-tiles share every K/V fragment read from shared memory). K/V tiles of BC keys, double-buffered
// with one barrier per tile. QREG keeps the warp's Q fragments in registers for the whole loop.
// Scores stay unscaled until the exponent: p = exp2(s*scale*log2e - m*scale*log2e), one FFMA.
template <int D, int NW, int MT, int BC, bool QREG>
__device__ __forceinline__ void flash_forward(bf16* O, float* LSE, const bf16* Q, const bf16* K, const bf16* V,
                                              int T, int H, int Hkv, float scale) {
  constexpr int WR = 16 * MT, BR = WR * NW, LD = D + 8;  // +8: rows shift 4 banks, ldmatrix conflict-free
  bf16* Qs = (bf16*)stepc_smem;
  bf16* Ks = Qs + BR * LD;  // [2][BC][LD]
  bf16* Vs = Ks + 2 * BC * LD;
  int lane = threadIdx.x % STEPC_WARP, warp = threadIdx.x / STEPC_WARP;
  int qt = gridDim.x - 1 - blockIdx.x;  // longest rows first: better tail balance under causality
  int h = blockIdx.y, b = blockIdx.z, hk = h / (H / Hkv);
  long ldq = (long)H * D, ldk = (long)Hkv * D;
  int q0 = qt * BR, qw = q0 + warp * WR;
  const bf16* Kg = K + (long)b * T * ldk + hk * D;
  const bf16* Vg = V + (long)b * T * ldk + hk * D;
  int nkv = (q0 + BR + BC - 1) / BC;

  tile_load_async<BR, D>(Qs, LD, Q + ((long)b * T + q0) * ldq + h * D, ldq);
  tile_load_async<BC, D>(Ks, LD, Kg, ldk);
  tile_load_async<BC, D>(Vs, LD, Vg, ldk);
  cp_async_commit();

  float o[MT][D / 8][4];
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    acc_zero<D / 8>(o[mt]);
    m[mt][0] = m[mt][1] = STEPC_NEG_INF;
    l[mt][0] = l[mt][1] = 0.0f;
  }
  unsigned qa[QREG ? MT : 1][D / 16][4];
  const float sl2 = scale * STEPC_LOG2E;
  int rowl = qw + lane / 4;  // row of element (mt, e): rowl + mt*16 + (e>>1)*8

  for (int j = 0; j < nkv; j++) {
    cp_async_wait<0>();
    __syncthreads();  // tile j landed for all; every warp is done with tile j-1's buffer
    if (j + 1 < nkv) {
      int nb = (j + 1) & 1;
      tile_load_async<BC, D>(Ks + nb * BC * LD, LD, Kg + (long)(j + 1) * BC * ldk, ldk);
      tile_load_async<BC, D>(Vs + nb * BC * LD, LD, Vg + (long)(j + 1) * BC * ldk, ldk);
      cp_async_commit();
    }
    if (QREG && j == 0) warp_load_afrag<MT, D / 16>(qa, Qs + warp * WR * LD, LD);
    const bf16* Kc = Ks + (j & 1) * BC * LD;
    const bf16* Vc = Vs + (j & 1) * BC * LD;
    int k0 = j * BC;
    if (k0 > qw + WR - 1) continue;  // every key of the tile is above this warp's rows
    float s[MT][BC / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) acc_zero<BC / 8>(s[mt]);
    if constexpr (QREG) warp_mma_nt_mr<MT, D / 16, BC / 8>(s, qa, Kc, LD);
    else warp_mma_nt_m<MT, D / 16, BC / 8>(s, Qs + warp * WR * LD, LD, Kc, LD);
    if (k0 + BC - 1 > qw) {  // the diagonal: mask keys above each row
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < BC / 8; n++)
#pragma unroll
          for (int e = 0; e < 4; e++)
            if (k0 + n * 8 + (lane % 4) * 2 + (e & 1) > rowl + mt * 16 + (e >> 1) * 8) s[mt][n][e] = STEPC_NEG_INF;
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
      float mx[2] = {m[mt][0], m[mt][1]};
#pragma unroll
      for (int n = 0; n < BC / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) mx[e >> 1] = fmaxf(mx[e >> 1], s[mt][n][e]);
      float alpha[2], ms[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
      for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(STEPC_FULL_MASK, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(STEPC_FULL_MASK, mx[r], 2));
        alpha[r] = exp2f((m[mt][r] - mx[r]) * sl2);  // m = -inf on the first tile: alpha = 0
        m[mt][r] = mx[r];  // finite: key 0 of tile 0 is visible to every row
        ms[r] = mx[r] * sl2;
      }
#pragma unroll
      for (int n = 0; n < BC / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          float p = exp2f(fmaf(s[mt][n][e], sl2, -ms[e >> 1]));
          s[mt][n][e] = p;
          rs[e >> 1] += p;
        }
      l[mt][0] = l[mt][0] * alpha[0] + rs[0];  // per-thread partial sums; the quad is summed at the end
      l[mt][1] = l[mt][1] * alpha[1] + rs[1];
#pragma unroll
      for (int n = 0; n < D / 8; n++) {
        o[mt][n][0] *= alpha[0];
        o[mt][n][1] *= alpha[0];
        o[mt][n][2] *= alpha[1];
        o[mt][n][3] *= alpha[1];
      }
    }
    unsigned pa[MT][BC / 16][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) acc_to_afrag<BC / 8>(pa[mt], s[mt]);
    warp_mma_rr_m<MT, BC / 16, D / 8>(o, pa, Vc, LD);
  }
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int r = 0; r < 2; r++) {
      float lr = l[mt][r];
      lr += __shfl_xor_sync(STEPC_FULL_MASK, lr, 1);
      lr += __shfl_xor_sync(STEPC_FULL_MASK, lr, 2);
      float inv = 1.0f / lr;
      int row = rowl + mt * 16 + r * 8;
      bf16* Og = O + ((long)b * T + row) * ldq + h * D + (lane % 4) * 2;
#pragma unroll
      for (int n = 0; n < D / 8; n++)
        *(unsigned*)(Og + n * 8) = pack_bf16x2(o[mt][n][2 * r] * inv, o[mt][n][2 * r + 1] * inv);
      if (lane % 4 == 0) LSE[((long)b * H + h) * T + row] = (m[mt][r] * sl2 + log2f(lr)) * STEPC_LN2;
    }
}

#define STEPC_FLASH_FWD(NAME, D, NW, MT, BC, QREG)                                                  \
  extern "C" __global__ void __launch_bounds__(32 * NW) NAME(                                       \
      bf16* O, float* LSE, /* (B, T, H, D), (B, H, T) */                                            \
      const bf16* Q,       /* (B, T, H, D) */                                                       \
      const bf16* K,       /* (B, T, Hkv, D) */                                                     \
      const bf16* V,       /* (B, T, Hkv, D) */                                                     \
      int B, int T, int H, int Hkv, float scale) {                                                  \
    (void)B;                                                                                        \
    flash_forward<D, NW, MT, BC, QREG>(O, LSE, Q, K, V, T, H, Hkv, scale);                          \
  }
STEPC_FLASH_FWD(flash_attention_forward_d64, 64, 4, 2, 64, true)
STEPC_FLASH_FWD(flash_attention_forward_d128, 128, 4, 2, 64, false)
#ifdef STEPC_FLASH_VARIANTS
STEPC_FLASH_FWD(flash_fwd_v64_4_2_64_s, 64, 4, 2, 64, false)
STEPC_FLASH_FWD(flash_fwd_v64_4_2_128_r, 64, 4, 2, 128, true)
STEPC_FLASH_FWD(flash_fwd_v64_8_1_64_r, 64, 8, 1, 64, true)
STEPC_FLASH_FWD(flash_fwd_v128_4_2_32_s, 128, 4, 2, 32, false)
STEPC_FLASH_FWD(flash_fwd_v128_8_1_64_r, 128, 8, 1, 64, true)
STEPC_FLASH_FWD(flash_fwd_v128_4_1_64_r, 128, 4, 1, 64, true)
#endif

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

// ---- backward, step 2: a block of NW warps owns BC = 16*MT*NW keys of one kv head (16*MT keys
// per warp) and accumulates dK, dV over every query tile (BQ rows, double-buffered) of every query
// head in the group, in a fixed order.
template <int D, int NW, int MT, int BQ>
__device__ __forceinline__ void flash_backward_dkdv(bf16* dK, bf16* dV, const bf16* Q, const bf16* K,
                                                    const bf16* V, const bf16* dO, const float* LSE,
                                                    const float* Dsum, int T, int H, int Hkv, float scale) {
  constexpr int WK = 16 * MT, BC = WK * NW, LD = D + 8;
  bf16* Ks = (bf16*)stepc_smem;
  bf16* Vs = Ks + BC * LD;
  bf16* Qs = Vs + BC * LD;       // [2][BQ][LD]
  bf16* dOs = Qs + 2 * BQ * LD;  // [2][BQ][LD]
  float* Ls = (float*)(dOs + 2 * BQ * LD);  // [2][BQ]
  float* Ds = Ls + 2 * BQ;                  // [2][BQ]
  int lane = threadIdx.x % STEPC_WARP, warp = threadIdx.x / STEPC_WARP;
  int kt = blockIdx.x, hk = blockIdx.y, b = blockIdx.z, G = H / Hkv;
  long ldq = (long)H * D, ldk = (long)Hkv * D;
  int k0 = kt * BC, kw = k0 + warp * WK;
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

  float dk[MT][D / 8][4], dv[MT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    acc_zero<D / 8>(dk[mt]);
    acc_zero<D / 8>(dv[mt]);
  }
  const float sl2 = scale * STEPC_LOG2E;
  int keyl = kw + lane / 4;  // key of element (mt, e): keyl + mt*16 + (e>>1)*8

  for (int it = 0; it < niter; it++) {
    cp_async_wait<0>();
    __syncthreads();
    if (it + 1 < niter) {
      load(it + 1, (it + 1) & 1);
      cp_async_commit();
    }
    int buf = it & 1, q0 = (i0 + it % nq) * BQ;
    const bf16* Qc = Qs + buf * BQ * LD;
    const bf16* dOc = dOs + buf * BQ * LD;
    const float* Lc = Ls + buf * BQ;
    const float* Dc = Ds + buf * BQ;
    if (q0 + BQ - 1 < kw) continue;  // every query of the tile is before this warp's keys
    float s[MT][BQ / 8][4], dp[MT][BQ / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
      acc_zero<BQ / 8>(s[mt]);
      acc_zero<BQ / 8>(dp[mt]);
    }
    warp_mma_nt_m<MT, D / 16, BQ / 8>(s, Ks + warp * WK * LD, LD, Qc, LD);    // S^T = K Q^T
    warp_mma_nt_m<MT, D / 16, BQ / 8>(dp, Vs + warp * WK * LD, LD, dOc, LD);  // dP^T = V dO^T
    bool diag = q0 < kw + WK - 1;
#pragma unroll
    for (int n = 0; n < BQ / 8; n++)
#pragma unroll
      for (int e1 = 0; e1 < 2; e1++) {
        int qi = n * 8 + (lane % 4) * 2 + e1;
        float lq = Lc[qi] * STEPC_LOG2E, dq = Dc[qi];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
          for (int r = 0; r < 2; r++) {
            int e = r * 2 + e1;
            float p = exp2f(fmaf(s[mt][n][e], sl2, -lq));
            if (diag && q0 + qi < keyl + mt * 16 + r * 8) p = 0.0f;
            s[mt][n][e] = p;
            dp[mt][n][e] = p * (dp[mt][n][e] - dq);  // dS^T
          }
      }
    unsigned pa[MT][BQ / 16][4], da[MT][BQ / 16][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
      acc_to_afrag<BQ / 8>(pa[mt], s[mt]);
      acc_to_afrag<BQ / 8>(da[mt], dp[mt]);
    }
    warp_mma_rr_m<MT, BQ / 16, D / 8>(dv, pa, dOc, LD);  // dV += P^T dO
    warp_mma_rr_m<MT, BQ / 16, D / 8>(dk, da, Qc, LD);   // dK += dS^T Q
  }
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int r = 0; r < 2; r++) {
      long off = ((long)b * T + keyl + mt * 16 + r * 8) * ldk + hk * D + (lane % 4) * 2;
#pragma unroll
      for (int n = 0; n < D / 8; n++) {
        *(unsigned*)(dK + off + n * 8) = pack_bf16x2(dk[mt][n][2 * r] * scale, dk[mt][n][2 * r + 1] * scale);
        *(unsigned*)(dV + off + n * 8) = pack_bf16x2(dv[mt][n][2 * r], dv[mt][n][2 * r + 1]);
      }
    }
}

#define STEPC_FLASH_DKDV(NAME, D, NW, MT, BQ)                                                            \
  extern "C" __global__ void __launch_bounds__(32 * NW) NAME(                                            \
      bf16* dK, bf16* dV, /* (B, T, Hkv, D) each */                                                      \
      const bf16* Q, const bf16* K, const bf16* V, /* (B, T, H, D), (B, T, Hkv, D) x2 */                 \
      const bf16* dO, const float* LSE, const float* Dsum, /* (B, T, H, D), (B, H, T) x2 */              \
      int B, int T, int H, int Hkv, float scale) {                                                       \
    (void)B;                                                                                             \
    flash_backward_dkdv<D, NW, MT, BQ>(dK, dV, Q, K, V, dO, LSE, Dsum, T, H, Hkv, scale);                \
  }
STEPC_FLASH_DKDV(flash_attention_backward_dkdv_d64, 64, 4, 1, 64)
STEPC_FLASH_DKDV(flash_attention_backward_dkdv_d128, 128, 4, 1, 64)
#ifdef STEPC_FLASH_VARIANTS
STEPC_FLASH_DKDV(flash_dkdv_v64_4_2_32, 64, 4, 2, 32)
STEPC_FLASH_DKDV(flash_dkdv_v64_4_2_16, 64, 4, 2, 16)
STEPC_FLASH_DKDV(flash_dkdv_v64_8_1_64, 64, 8, 1, 64)
STEPC_FLASH_DKDV(flash_dkdv_v128_4_1_32, 128, 4, 1, 32)
STEPC_FLASH_DKDV(flash_dkdv_v128_8_1_32, 128, 8, 1, 32)
#endif

// ---- backward, step 3: a block of NW warps owns BR = 16*MT*NW query rows of one head (16*MT per
// warp) and accumulates dQ over the key tiles (BK keys, double-buffered) up to the diagonal.
template <int D, int NW, int MT, int BK>
__device__ __forceinline__ void flash_backward_dq(bf16* dQ, const bf16* Q, const bf16* K, const bf16* V,
                                                  const bf16* dO, const float* LSE, const float* Dsum, int T,
                                                  int H, int Hkv, float scale) {
  constexpr int WR = 16 * MT, BR = WR * NW, LD = D + 8;
  bf16* Qs = (bf16*)stepc_smem;
  bf16* dOs = Qs + BR * LD;
  bf16* Ks = dOs + BR * LD;     // [2][BK][LD]
  bf16* Vs = Ks + 2 * BK * LD;  // [2][BK][LD]
  int lane = threadIdx.x % STEPC_WARP, warp = threadIdx.x / STEPC_WARP;
  int qt = gridDim.x - 1 - blockIdx.x;
  int h = blockIdx.y, b = blockIdx.z, hk = h / (H / Hkv);
  long ldq = (long)H * D, ldk = (long)Hkv * D;
  int q0 = qt * BR, qw = q0 + warp * WR;
  const bf16* Kg = K + (long)b * T * ldk + hk * D;
  const bf16* Vg = V + (long)b * T * ldk + hk * D;
  int nkv = (q0 + BR + BK - 1) / BK;

  tile_load_async<BR, D>(Qs, LD, Q + ((long)b * T + q0) * ldq + h * D, ldq);
  tile_load_async<BR, D>(dOs, LD, dO + ((long)b * T + q0) * ldq + h * D, ldq);
  tile_load_async<BK, D>(Ks, LD, Kg, ldk);
  tile_load_async<BK, D>(Vs, LD, Vg, ldk);
  cp_async_commit();

  int rowl = qw + lane / 4;  // row of element (mt, e): rowl + mt*16 + (e>>1)*8
  float L2[MT][2], Dr[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int r = 0; r < 2; r++) {
      L2[mt][r] = LSE[((long)b * H + h) * T + rowl + mt * 16 + r * 8] * STEPC_LOG2E;
      Dr[mt][r] = Dsum[((long)b * H + h) * T + rowl + mt * 16 + r * 8];
    }
  float dq[MT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) acc_zero<D / 8>(dq[mt]);
  const float sl2 = scale * STEPC_LOG2E;

  for (int j = 0; j < nkv; j++) {
    cp_async_wait<0>();
    __syncthreads();
    if (j + 1 < nkv) {
      int nb = (j + 1) & 1;
      tile_load_async<BK, D>(Ks + nb * BK * LD, LD, Kg + (long)(j + 1) * BK * ldk, ldk);
      tile_load_async<BK, D>(Vs + nb * BK * LD, LD, Vg + (long)(j + 1) * BK * ldk, ldk);
      cp_async_commit();
    }
    const bf16* Kc = Ks + (j & 1) * BK * LD;
    const bf16* Vc = Vs + (j & 1) * BK * LD;
    int k0 = j * BK;
    if (k0 > qw + WR - 1) continue;
    float s[MT][BK / 8][4], dp[MT][BK / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
      acc_zero<BK / 8>(s[mt]);
      acc_zero<BK / 8>(dp[mt]);
    }
    warp_mma_nt_m<MT, D / 16, BK / 8>(s, Qs + warp * WR * LD, LD, Kc, LD);    // S = Q K^T
    warp_mma_nt_m<MT, D / 16, BK / 8>(dp, dOs + warp * WR * LD, LD, Vc, LD);  // dP = dO V^T
    bool diag = k0 + BK - 1 > qw;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
      for (int n = 0; n < BK / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          int r = e >> 1;
          float p = exp2f(fmaf(s[mt][n][e], sl2, -L2[mt][r]));
          if (diag && k0 + n * 8 + (lane % 4) * 2 + (e & 1) > rowl + mt * 16 + r * 8) p = 0.0f;
          dp[mt][n][e] = p * (dp[mt][n][e] - Dr[mt][r]);  // dS
        }
    unsigned da[MT][BK / 16][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) acc_to_afrag<BK / 8>(da[mt], dp[mt]);
    warp_mma_rr_m<MT, BK / 16, D / 8>(dq, da, Kc, LD);  // dQ += dS K
  }
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int r = 0; r < 2; r++) {
      bf16* g = dQ + ((long)b * T + rowl + mt * 16 + r * 8) * ldq + h * D + (lane % 4) * 2;
#pragma unroll
      for (int n = 0; n < D / 8; n++)
        *(unsigned*)(g + n * 8) = pack_bf16x2(dq[mt][n][2 * r] * scale, dq[mt][n][2 * r + 1] * scale);
    }
}

#define STEPC_FLASH_DQ(NAME, D, NW, MT, BK)                                                              \
  extern "C" __global__ void __launch_bounds__(32 * NW) NAME(                                            \
      bf16* dQ, /* (B, T, H, D) */                                                                       \
      const bf16* Q, const bf16* K, const bf16* V, /* (B, T, H, D), (B, T, Hkv, D) x2 */                 \
      const bf16* dO, const float* LSE, const float* Dsum, /* (B, T, H, D), (B, H, T) x2 */              \
      int B, int T, int H, int Hkv, float scale) {                                                       \
    (void)B;                                                                                             \
    flash_backward_dq<D, NW, MT, BK>(dQ, Q, K, V, dO, LSE, Dsum, T, H, Hkv, scale);                      \
  }
STEPC_FLASH_DQ(flash_attention_backward_dq_d64, 64, 4, 2, 32)
STEPC_FLASH_DQ(flash_attention_backward_dq_d128, 128, 4, 2, 32)
#ifdef STEPC_FLASH_VARIANTS
STEPC_FLASH_DQ(flash_dq_v64_4_1_64, 64, 4, 1, 64)
STEPC_FLASH_DQ(flash_dq_v64_4_2_64, 64, 4, 2, 64)
STEPC_FLASH_DQ(flash_dq_v128_4_1_32, 128, 4, 1, 32)
STEPC_FLASH_DQ(flash_dq_v128_4_1_64, 128, 4, 1, 64)
#endif
