// flash.cuh — causal flash attention with GQA, forward and backward, head dims 64 and 128,
// bf16 in/out, fp32 softmax and accumulation, FlashAttention-2 style: on Hopper (sm_90a) with
// wgmma, one warpgroup per block; elsewhere with mma.sync, 4 warps per block.
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
#include "wgmma.cuh"

#define STEPC_LOG2E 1.4426950408889634f
#define STEPC_LN2 0.6931471805599453f

// ---- the tile math both instruction sets share: 16 rows of one warp in mma.m16n8k16's C-fragment
// layout (rows row0 and row0 + 8 of this thread; column 8 n + 2 (lane % 4) + e % 2).

// One key tile of the forward's online softmax, the scores' half: s (NT n-tiles of unscaled
// scores) becomes P, keys above the row masked on the diagonal; the running max m and partial
// sums l updated; alpha, the factor the output's rows must be scaled by (flash_rescale). Scores
// stay unscaled until the exponent: p = exp2(s*sl2 - m*sl2), one FFMA.
template <int NT>
__device__ __forceinline__ void flash_softmax_scores(float (*s)[4], float* m, float* l, float* alpha, bool diag, int k0,
                                                     int row0, float sl2) {
  int lane = threadIdx.x % STEPC_WARP;
  if (diag) {
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
      for (int e = 0; e < 4; e++)
        if (k0 + n * 8 + (lane % 4) * 2 + (e & 1) > row0 + (e >> 1) * 8) s[n][e] = STEPC_NEG_INF;
  }
  float mx[2] = {m[0], m[1]};
#pragma unroll
  for (int n = 0; n < NT; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
  float ms[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
  for (int r = 0; r < 2; r++) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(STEPC_FULL_MASK, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(STEPC_FULL_MASK, mx[r], 2));
    alpha[r] = exp2f((m[r] - mx[r]) * sl2);  // m = -inf on the first tile: alpha = 0
    m[r] = mx[r];  // finite: key 0 of tile 0 is visible to every row
    ms[r] = mx[r] * sl2;
  }
#pragma unroll
  for (int n = 0; n < NT; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      float p = exp2f(fmaf(s[n][e], sl2, -ms[e >> 1]));
      s[n][e] = p;
      rs[e >> 1] += p;
    }
  l[0] = l[0] * alpha[0] + rs[0];  // per-thread partial sums; the quad is summed at the end
  l[1] = l[1] * alpha[1] + rs[1];
}

// The output's half: o (ND n-tiles) scaled by alpha row by row.
template <int ND>
__device__ __forceinline__ void flash_rescale(float (*o)[4], const float* alpha) {
#pragma unroll
  for (int n = 0; n < ND; n++) {
    o[n][0] *= alpha[0];
    o[n][1] *= alpha[0];
    o[n][2] *= alpha[1];
    o[n][3] *= alpha[1];
  }
}

// The forward's end for 16 rows: O = o / l as bf16 (Og: row 0 of the head, row stride ldq), LSE.
template <int ND>
__device__ __forceinline__ void flash_forward_store(bf16* Og, long ldq, float* Lg, const float (*o)[4], const float* m,
                                                    const float* l, int row0, float sl2) {
  int lane = threadIdx.x % STEPC_WARP;
#pragma unroll
  for (int r = 0; r < 2; r++) {
    float lr = l[r];
    lr += __shfl_xor_sync(STEPC_FULL_MASK, lr, 1);
    lr += __shfl_xor_sync(STEPC_FULL_MASK, lr, 2);
    float inv = 1.0f / lr;
    int row = row0 + r * 8;
    bf16* g = Og + (long)row * ldq + (lane % 4) * 2;
#pragma unroll
    for (int n = 0; n < ND; n++) *(unsigned*)(g + n * 8) = pack_bf16x2(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    if (lane % 4 == 0) Lg[row] = (m[r] * sl2 + log2f(lr)) * STEPC_LN2;
  }
}

// dK/dV's tile, transposed (rows are keys key0 (+8), columns queries q0 + 8 n + ...): s = S^T
// becomes P^T and dp = dP^T becomes dS^T = P^T (dP^T - Dsum), with each query's LSE and Dsum from
// Lc, Dc (the tile's, in shared memory); on the diagonal, queries before the key get P = 0.
template <int NT>
__device__ __forceinline__ void flash_dkdv_tile(float (*s)[4], float (*dp)[4], const float* Lc, const float* Dc, bool diag,
                                                int q0, int key0, float sl2) {
  int lane = threadIdx.x % STEPC_WARP;
#pragma unroll
  for (int n = 0; n < NT; n++)
#pragma unroll
    for (int e1 = 0; e1 < 2; e1++) {
      int qi = n * 8 + (lane % 4) * 2 + e1;
      float lq = Lc[qi] * STEPC_LOG2E, dq = Dc[qi];
#pragma unroll
      for (int r = 0; r < 2; r++) {
        int e = r * 2 + e1;
        float p = exp2f(fmaf(s[n][e], sl2, -lq));
        if (diag && q0 + qi < key0 + r * 8) p = 0.0f;
        s[n][e] = p;
        dp[n][e] = p * (dp[n][e] - dq);  // dS^T
      }
    }
}

// dQ's tile (rows are queries row0 (+8), columns keys k0 + 8 n + ...): dp = dP becomes
// dS = P (dP - Dsum) with P from s = S and the rows' LSE (log2 units, L2) and Dsum (Dr).
template <int NT>
__device__ __forceinline__ void flash_dq_tile(const float (*s)[4], float (*dp)[4], const float* L2, const float* Dr, bool diag,
                                              int k0, int row0, float sl2) {
  int lane = threadIdx.x % STEPC_WARP;
#pragma unroll
  for (int n = 0; n < NT; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      int r = e >> 1;
      float p = exp2f(fmaf(s[n][e], sl2, -L2[r]));
      if (diag && k0 + n * 8 + (lane % 4) * 2 + (e & 1) > row0 + r * 8) p = 0.0f;
      dp[n][e] = p * (dp[n][e] - Dr[r]);  // dS
    }
}

// ---- Hopper (sm_90a): the same three kernels on wgmma. A block is one warpgroup (128 threads)
// owning 64 query rows (forward, dQ) or 64 keys (dK/dV); each of its warps holds 16 of them in the
// layout above, so the tile math is shared. Every operand tile is R rows x D bf16 in the 128-byte
// swizzled layout (kernels/wgmma.cuh), D / 64 blocks of R rows: read as a K-major operand (rows x k
// = D: Q, K, V, dO in S = Q K^T, dP = dO V^T and their transposes) or, unchanged, as an MN-major
// one (k = rows, n = D: V in P V, dO and Q in dV and dK, K in dQ). P and dS go from the
// accumulators to A fragments in registers. Products run synchronously (issue, commit, wait);
// several blocks per SM overlap one block's softmax with another's products.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FLASH_WG_ROWS 64

// R x D bf16 from g (row stride ld elements) into the swizzled tile at shared address s.
template <int R, int D>
__device__ __forceinline__ void flash_wg_load(unsigned s, const bf16* g, long ld) {
#pragma unroll
  for (int i = 0; i < R * D / 8 / 128; i++) {
    int c = threadIdx.x + i * 128, r = c / (D / 8), c16 = c % (D / 8);
    cp_async16_zfill_s(s + (c16 / 8) * (R * 128) + r * 128 + (((c16 % 8) ^ (r & 7)) << 4), g + (long)r * ld + c16 * 8, true);
  }
}

// k-step ks (16 of D) of an R-row tile read K-major; k-step ks (rows 16 ks..) of one read MN-major.
template <int R>
__device__ __forceinline__ unsigned long long flash_wg_kmajor(unsigned s, int ks) {
  return wg_desc(s + (ks / 4) * (R * 128) + (ks % 4) * 32, 16, 1024);
}
template <int R>
__device__ __forceinline__ unsigned long long flash_wg_mnmajor(unsigned s, int ks) {
  return wg_desc(s + ks * 2048, R * 128, 1024);
}

// acc (64 x N) (+)= A B^T over k = D: A an R_A-row tile, B an N-row tile, both K-major.
template <int N, int D, int RA>
__device__ __forceinline__ void flash_wg_nt(float* acc, unsigned a, unsigned b) {
#pragma unroll
  for (int ks = 0; ks < D / 16; ks++) {
    if constexpr (N == 32) wgmma_ss_m64n32k16(acc, flash_wg_kmajor<RA>(a, ks), flash_wg_kmajor<N>(b, ks), ks > 0);
    else if constexpr (N == 64) wgmma_ss_m64n64k16(acc, flash_wg_kmajor<RA>(a, ks), flash_wg_kmajor<N>(b, ks), ks > 0);
    else wgmma_ss_m64n128k16(acc, flash_wg_kmajor<RA>(a, ks), flash_wg_kmajor<N>(b, ks), ks > 0);
  }
}

// acc (64 x D) += A B over k = K rows: A (64 x K) in registers as K/16 fragments, B a K-row tile
// read MN-major.
template <int D, int K>
__device__ __forceinline__ void flash_wg_rn(float* acc, const unsigned (*a)[4], unsigned b) {
#pragma unroll
  for (int ks = 0; ks < K / 16; ks++) {
    if constexpr (D == 64) wgmma_rs_m64n64k16(acc, a[ks], flash_wg_mnmajor<K>(b, ks), 1);
    else wgmma_rs_m64n128k16(acc, a[ks], flash_wg_mnmajor<K>(b, ks), 1);
  }
}

// Forward: K/V tiles of BC keys, double-buffered; the products run synchronously (a 3-stage
// version that ran tile j's scores beside P_{j-1} V_{j-1} measured 5% slower at M, 3% faster at
// L8: several blocks per SM already overlap one block's softmax with another's products).
// Shared memory: stepc_flash_fwd_smem (launch.h).
template <int D, int BC>
__device__ __forceinline__ void flash_forward_wg(bf16* O, float* LSE, const bf16* Q, const bf16* K, const bf16* V, int T,
                                                 int H, int Hkv, float scale) {
  constexpr int BR = FLASH_WG_ROWS, KV = BC * D * 2;
  unsigned sq = wg_smem_base(), sk = sq + BR * D * 2, sv = sk + 2 * KV;
  int lane = threadIdx.x % STEPC_WARP, warp = threadIdx.x / STEPC_WARP;
  int qt = gridDim.x - 1 - blockIdx.x;  // longest rows first: better tail balance under causality
  int h = blockIdx.y, b = blockIdx.z, hk = h / (H / Hkv);
  long ldq = (long)H * D, ldk = (long)Hkv * D;
  int q0 = qt * BR, rowl = q0 + warp * 16 + lane / 4;
  const bf16* Kg = K + (long)b * T * ldk + hk * D;
  const bf16* Vg = V + (long)b * T * ldk + hk * D;
  int nkv = (q0 + BR + BC - 1) / BC;

  flash_wg_load<BR, D>(sq, Q + ((long)b * T + q0) * ldq + h * D, ldq);
  flash_wg_load<BC, D>(sk, Kg, ldk);
  flash_wg_load<BC, D>(sv, Vg, ldk);
  cp_async_commit();

  float o[D / 8][4], m[2] = {STEPC_NEG_INF, STEPC_NEG_INF}, l[2] = {0.0f, 0.0f};
  acc_zero<D / 8>(o);
  const float sl2 = scale * STEPC_LOG2E;
  for (int j = 0; j < nkv; j++) {
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();  // tile j landed for all; tile j-1's products are done (waited below)
    if (j + 1 < nkv) {
      int nb = (j + 1) & 1;
      flash_wg_load<BC, D>(sk + nb * KV, Kg + (long)(j + 1) * BC * ldk, ldk);
      flash_wg_load<BC, D>(sv + nb * KV, Vg + (long)(j + 1) * BC * ldk, ldk);
      cp_async_commit();
    }
    int k0 = j * BC;
    float s[BC / 8][4], alpha[2];
    wg_fence();
    flash_wg_nt<BC, D, BR>(&s[0][0], sq, sk + (j & 1) * KV);
    wg_commit();
    wg_wait_all();
    wg_pin<BC / 2>(&s[0][0]);
    flash_softmax_scores<BC / 8>(s, m, l, alpha, k0 + BC - 1 > q0, k0, rowl, sl2);
    flash_rescale<D / 8>(o, alpha);
    unsigned pa[BC / 16][4];
    acc_to_afrag<BC / 8>(pa, s);
    wg_fence();
    flash_wg_rn<D, BC>(&o[0][0], pa, sv + (j & 1) * KV);
    wg_commit();
    wg_wait_all();
    wg_pin<D / 2>(&o[0][0]);
    wg_pin_u<BC / 4>(&pa[0][0]);
  }
  flash_forward_store<D / 8>(O + ((long)b * T) * ldq + h * D, ldq, LSE + ((long)b * H + h) * T, o, m, l, rowl, sl2);
}

// dK/dV: the block's 64 keys of kv head hk against query tiles of BQ rows (double-buffered, with
// their LSE and Dsum) of every query head of the group, in a fixed order. Shared memory:
// stepc_flash_dkdv_smem.
template <int D, int BQ>
__device__ __forceinline__ void flash_backward_dkdv_wg(bf16* dK, bf16* dV, const bf16* Q, const bf16* K, const bf16* V,
                                                       const bf16* dO, const float* LSE, const float* Dsum, int T, int H,
                                                       int Hkv, float scale) {
  constexpr int BC = FLASH_WG_ROWS, QT = BQ * D * 2;
  unsigned sk = wg_smem_base(), sv = sk + BC * D * 2, sq = sv + BC * D * 2, sdo = sq + 2 * QT;
  float* Ls = (float*)(stepc_smem + (sdo + 2 * QT - smem_addr(stepc_smem)));  // [2][BQ]
  float* Ds = Ls + 2 * BQ;                                                     // [2][BQ]
  int lane = threadIdx.x % STEPC_WARP, warp = threadIdx.x / STEPC_WARP;
  int hk = blockIdx.y, b = blockIdx.z, G = H / Hkv;
  long ldq = (long)H * D, ldk = (long)Hkv * D;
  int k0 = blockIdx.x * BC, keyl = k0 + warp * 16 + lane / 4;
  int i0 = k0 / BQ, nq = T / BQ - i0, niter = G * nq;

  flash_wg_load<BC, D>(sk, K + ((long)b * T + k0) * ldk + hk * D, ldk);
  flash_wg_load<BC, D>(sv, V + ((long)b * T + k0) * ldk + hk * D, ldk);
  auto load = [&](int it, int buf) {  // iteration it: query head hk*G + it / nq, query tile i0 + it % nq
    int h = hk * G + it / nq, q0 = (i0 + it % nq) * BQ;
    flash_wg_load<BQ, D>(sq + buf * QT, Q + ((long)b * T + q0) * ldq + h * D, ldq);
    flash_wg_load<BQ, D>(sdo + buf * QT, dO + ((long)b * T + q0) * ldq + h * D, ldq);
    const float* lg = LSE + ((long)b * H + h) * T + q0;
    const float* dg = Dsum + ((long)b * H + h) * T + q0;
    for (int c = threadIdx.x; c < BQ / 4; c += 128) {
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
  for (int it = 0; it < niter; it++) {
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
    if (it + 1 < niter) {
      load(it + 1, (it + 1) & 1);
      cp_async_commit();
    }
    int buf = it & 1, q0 = (i0 + it % nq) * BQ;
    unsigned qc = sq + buf * QT, doc = sdo + buf * QT;
    float s[BQ / 8][4], dp[BQ / 8][4];
    wg_fence();
    flash_wg_nt<BQ, D, BC>(&s[0][0], sk, qc);    // S^T = K Q^T
    flash_wg_nt<BQ, D, BC>(&dp[0][0], sv, doc);  // dP^T = V dO^T
    wg_commit();
    wg_wait_all();
    wg_pin<BQ / 2>(&s[0][0]);
    wg_pin<BQ / 2>(&dp[0][0]);
    flash_dkdv_tile<BQ / 8>(s, dp, Ls + buf * BQ, Ds + buf * BQ, q0 < k0 + BC - 1, q0, keyl, sl2);
    unsigned pa[BQ / 16][4], da[BQ / 16][4];
    acc_to_afrag<BQ / 8>(pa, s);
    acc_to_afrag<BQ / 8>(da, dp);
    wg_fence();
    flash_wg_rn<D, BQ>(&dv[0][0], pa, doc);  // dV += P^T dO
    flash_wg_rn<D, BQ>(&dk[0][0], da, qc);   // dK += dS^T Q
    wg_commit();
    wg_wait_all();
    wg_pin<D / 2>(&dv[0][0]);
    wg_pin<D / 2>(&dk[0][0]);
    wg_pin_u<BQ / 4>(&pa[0][0]);
    wg_pin_u<BQ / 4>(&da[0][0]);
  }
#pragma unroll
  for (int r = 0; r < 2; r++) {
    long off = ((long)b * T + keyl + r * 8) * ldk + hk * D + (lane % 4) * 2;
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
      *(unsigned*)(dK + off + n * 8) = pack_bf16x2(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale);
      *(unsigned*)(dV + off + n * 8) = pack_bf16x2(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
}

// dQ: the block's 64 query rows of head h against key tiles of BK (double-buffered) up to the
// diagonal. Shared memory: stepc_flash_dq_smem.
template <int D, int BK>
__device__ __forceinline__ void flash_backward_dq_wg(bf16* dQ, const bf16* Q, const bf16* K, const bf16* V, const bf16* dO,
                                                     const float* LSE, const float* Dsum, int T, int H, int Hkv,
                                                     float scale) {
  constexpr int BR = FLASH_WG_ROWS, KT = BK * D * 2;
  unsigned sq = wg_smem_base(), sdo = sq + BR * D * 2, sk = sdo + BR * D * 2, sv = sk + 2 * KT;
  int lane = threadIdx.x % STEPC_WARP, warp = threadIdx.x / STEPC_WARP;
  int qt = gridDim.x - 1 - blockIdx.x;
  int h = blockIdx.y, b = blockIdx.z, hk = h / (H / Hkv);
  long ldq = (long)H * D, ldk = (long)Hkv * D;
  int q0 = qt * BR, rowl = q0 + warp * 16 + lane / 4;
  const bf16* Kg = K + (long)b * T * ldk + hk * D;
  const bf16* Vg = V + (long)b * T * ldk + hk * D;
  int nkv = (q0 + BR + BK - 1) / BK;

  flash_wg_load<BR, D>(sq, Q + ((long)b * T + q0) * ldq + h * D, ldq);
  flash_wg_load<BR, D>(sdo, dO + ((long)b * T + q0) * ldq + h * D, ldq);
  flash_wg_load<BK, D>(sk, Kg, ldk);
  flash_wg_load<BK, D>(sv, Vg, ldk);
  cp_async_commit();

  float L2[2], Dr[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    L2[r] = LSE[((long)b * H + h) * T + rowl + r * 8] * STEPC_LOG2E;
    Dr[r] = Dsum[((long)b * H + h) * T + rowl + r * 8];
  }
  float dq[D / 8][4];
  acc_zero<D / 8>(dq);
  const float sl2 = scale * STEPC_LOG2E;
  for (int j = 0; j < nkv; j++) {
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
    if (j + 1 < nkv) {
      int nb = (j + 1) & 1;
      flash_wg_load<BK, D>(sk + nb * KT, Kg + (long)(j + 1) * BK * ldk, ldk);
      flash_wg_load<BK, D>(sv + nb * KT, Vg + (long)(j + 1) * BK * ldk, ldk);
      cp_async_commit();
    }
    unsigned kc = sk + (j & 1) * KT, vc = sv + (j & 1) * KT;
    int k0 = j * BK;
    float s[BK / 8][4], dp[BK / 8][4];
    wg_fence();
    flash_wg_nt<BK, D, BR>(&s[0][0], sq, kc);    // S = Q K^T
    flash_wg_nt<BK, D, BR>(&dp[0][0], sdo, vc);  // dP = dO V^T
    wg_commit();
    wg_wait_all();
    wg_pin<BK / 2>(&s[0][0]);
    wg_pin<BK / 2>(&dp[0][0]);
    flash_dq_tile<BK / 8>(s, dp, L2, Dr, k0 + BK - 1 > q0, k0, rowl, sl2);
    unsigned da[BK / 16][4];
    acc_to_afrag<BK / 8>(da, dp);
    wg_fence();
    flash_wg_rn<D, BK>(&dq[0][0], da, kc);  // dQ += dS K
    wg_commit();
    wg_wait_all();
    wg_pin<D / 2>(&dq[0][0]);
    wg_pin_u<BK / 4>(&da[0][0]);
  }
#pragma unroll
  for (int r = 0; r < 2; r++) {
    bf16* g = dQ + ((long)b * T + rowl + r * 8) * ldq + h * D + (lane % 4) * 2;
#pragma unroll
    for (int n = 0; n < D / 8; n++) *(unsigned*)(g + n * 8) = pack_bf16x2(dq[n][2 * r] * scale, dq[n][2 * r + 1] * scale);
  }
}
#endif

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
    bool diag = k0 + BC - 1 > qw;  // the diagonal: mask keys above each row
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
      float alpha[2];
      flash_softmax_scores<BC / 8>(s[mt], m[mt], l[mt], alpha, diag, k0, rowl + mt * 16, sl2);
      flash_rescale<D / 8>(o[mt], alpha);
    }
    unsigned pa[MT][BC / 16][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) acc_to_afrag<BC / 8>(pa[mt], s[mt]);
    warp_mma_rr_m<MT, BC / 16, D / 8>(o, pa, Vc, LD);
  }
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
    flash_forward_store<D / 8>(O + ((long)b * T) * ldq + h * D, ldq, LSE + ((long)b * H + h) * T, o[mt], m[mt], l[mt],
                               rowl + mt * 16, sl2);
}

// Entry points: CALL is the kernel's body, one of the templates above. On sm_90a the production
// kernels run on wgmma; the tile-size variants (tests/gpu/attention.c) keep both kinds.
#define FLASH_FWD_ARGS O, LSE, Q, K, V, T, H, Hkv, scale
#define STEPC_FLASH_FWD(NAME, THREADS, CALL)                                                        \
  extern "C" __global__ void __launch_bounds__(THREADS) NAME(                                       \
      bf16* O, float* LSE, /* (B, T, H, D), (B, H, T) */                                            \
      const bf16* Q,       /* (B, T, H, D) */                                                       \
      const bf16* K,       /* (B, T, Hkv, D) */                                                     \
      const bf16* V,       /* (B, T, Hkv, D) */                                                     \
      int B, int T, int H, int Hkv, float scale) {                                                  \
    (void)B;                                                                                        \
    CALL;                                                                                           \
  }
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
STEPC_FLASH_FWD(flash_attention_forward_d64, 128, (flash_forward_wg<64, 64>(FLASH_FWD_ARGS)))
STEPC_FLASH_FWD(flash_attention_forward_d128, 128, (flash_forward_wg<128, 64>(FLASH_FWD_ARGS)))
#else
STEPC_FLASH_FWD(flash_attention_forward_d64, 128, (flash_forward<64, 4, 2, 64, true>(FLASH_FWD_ARGS)))
STEPC_FLASH_FWD(flash_attention_forward_d128, 128, (flash_forward<128, 4, 2, 64, false>(FLASH_FWD_ARGS)))
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
    for (int mt = 0; mt < MT; mt++) flash_dkdv_tile<BQ / 8>(s[mt], dp[mt], Lc, Dc, diag, q0, keyl + mt * 16, sl2);
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

#define FLASH_DKDV_ARGS dK, dV, Q, K, V, dO, LSE, Dsum, T, H, Hkv, scale
#define STEPC_FLASH_DKDV(NAME, THREADS, CALL)                                                            \
  extern "C" __global__ void __launch_bounds__(THREADS) NAME(                                            \
      bf16* dK, bf16* dV, /* (B, T, Hkv, D) each */                                                      \
      const bf16* Q, const bf16* K, const bf16* V, /* (B, T, H, D), (B, T, Hkv, D) x2 */                 \
      const bf16* dO, const float* LSE, const float* Dsum, /* (B, T, H, D), (B, H, T) x2 */              \
      int B, int T, int H, int Hkv, float scale) {                                                       \
    (void)B;                                                                                             \
    CALL;                                                                                                \
  }
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
STEPC_FLASH_DKDV(flash_attention_backward_dkdv_d64, 128, (flash_backward_dkdv_wg<64, 128>(FLASH_DKDV_ARGS)))
STEPC_FLASH_DKDV(flash_attention_backward_dkdv_d128, 128, (flash_backward_dkdv_wg<128, 64>(FLASH_DKDV_ARGS)))
#else
STEPC_FLASH_DKDV(flash_attention_backward_dkdv_d64, 128, (flash_backward_dkdv<64, 4, 1, 64>(FLASH_DKDV_ARGS)))
STEPC_FLASH_DKDV(flash_attention_backward_dkdv_d128, 128, (flash_backward_dkdv<128, 4, 1, 64>(FLASH_DKDV_ARGS)))
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
    for (int mt = 0; mt < MT; mt++) flash_dq_tile<BK / 8>(s[mt], dp[mt], L2[mt], Dr[mt], diag, k0, rowl + mt * 16, sl2);
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

#define FLASH_DQ_ARGS dQ, Q, K, V, dO, LSE, Dsum, T, H, Hkv, scale
#define STEPC_FLASH_DQ(NAME, THREADS, CALL)                                                              \
  extern "C" __global__ void __launch_bounds__(THREADS) NAME(                                            \
      bf16* dQ, /* (B, T, H, D) */                                                                       \
      const bf16* Q, const bf16* K, const bf16* V, /* (B, T, H, D), (B, T, Hkv, D) x2 */                 \
      const bf16* dO, const float* LSE, const float* Dsum, /* (B, T, H, D), (B, H, T) x2 */              \
      int B, int T, int H, int Hkv, float scale) {                                                       \
    (void)B;                                                                                             \
    CALL;                                                                                                \
  }
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
STEPC_FLASH_DQ(flash_attention_backward_dq_d64, 128, (flash_backward_dq_wg<64, 64>(FLASH_DQ_ARGS)))
STEPC_FLASH_DQ(flash_attention_backward_dq_d128, 128, (flash_backward_dq_wg<128, 64>(FLASH_DQ_ARGS)))
#else
STEPC_FLASH_DQ(flash_attention_backward_dq_d64, 128, (flash_backward_dq<64, 4, 2, 32>(FLASH_DQ_ARGS)))
STEPC_FLASH_DQ(flash_attention_backward_dq_d128, 128, (flash_backward_dq<128, 4, 2, 32>(FLASH_DQ_ARGS)))
#endif
