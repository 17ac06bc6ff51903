// mamba.cuh — the Mamba-2 mixer's device kernels (the semantics are ir/ops/mamba.c's):
//   MAMBA_MIXER      mamba_chunk_states, mamba_state_pass, mamba_chunk_output
//   MAMBA_MIXER_BWD  mamba_chunk_states (with dout), mamba_state_pass (both ways),
//                    mamba_chunk_backward, mamba_conv_backward, mamba_param_grads
//   mamba_gate_forward/_backward             MAMBA_GATE(_BWD): y silu(z)
//   mamba_group_norm_forward                 MAMBA_GROUP_NORM: RMSNorm of each of G groups, times w
//   mamba_group_norm_backward_input/_weight  MAMBA_GROUP_NORM_BWD
// bf16 in and out, fp32 arithmetic; every sum in a fixed order (no atomics), so a replay or a
// recompute gives the same bits.
//
// The chunked SSD (Mamba-2, Dao & Gu 2024, §6), chunk-parallel as mamba_ssm's kernels run it. Per
// head h (a = -exp(A_log[h])) the recurrence S_t = exp(dt_t a) S_{t-1} + dt_t x_t B_t^T (S: P x N),
// y_t = S_t C_t is taken in chunks of L steps. With S0 the state entering a chunk and
// l_t = sum_{r<=t} dt_r a inside it:
//   y_t   = exp(l_t) S0 C_t + sum_{s<=t} (C_t.B_s) exp(l_t - l_s) dt_s x_s       (intra-chunk block)
//   S_end = exp(l_L) S0 + sum_s exp(l_L - l_s) dt_s x_s B_s^T                    (state passing)
// Rows past T inside the last chunk have dt = 0, x = B = C = 0, so they add nothing.
//
// Forward: every chunk's own state (the sum above, S0 = 0) and its decay exp(l_L) in parallel
// (mamba_chunk_states), then a short scan over chunks per state element turns them into the state
// entering each chunk (mamba_state_pass), then every chunk's output in parallel
// (mamba_chunk_output). The backward is the mirror: dS, the gradient of the state leaving a chunk,
// is passed from the last chunk back (dS_{c-1} = exp(l_L) dS_c + sum_t exp(l_t) dy_t C_t^T), so the
// chunk kernel has S0 and dS of its chunk and computes every local gradient in parallel; the
// gradient of the conv output goes to a fp32 workspace, from which mamba_conv_backward takes the
// conv's input, weight and bias gradients (partial sums per row segment), and mamba_param_grads
// sums the per-chunk and per-segment partials in a fixed order.
//
// Work per block: a chunk of one group (its H/G heads in order, so B and C, which the group's heads
// share, are loaded once and their gradients summed over the heads in head order). Workspace (fp32,
// the launch scratch's op workspace; offsets in kernels/launch.h stepc_mamba_ws): the chunk states
// (B, H, nc, P, N), their gradients, the chunk decays (B, H, nc), the conv-output gradient
// (B, T, C), per-chunk partials (B, nc, H, 3) and per-segment conv partials (B, segs, K+1, C).
// Shared-memory rows are padded by one float (P+1, N+1) so that a warp reading a column of a
// row-major tile hits 32 banks.
#pragma once

#define STEPC_MAMBA_CHUNK 32   // L, rows per chunk (as kernels/launch.h)
#define STEPC_MAMBA_THREADS 256
#define STEPC_MAMBA_KMAX 8     // conv taps at most
#define STEPC_MAMBA_NMAX 128   // state dim at most (mamba_chunk_backward's register tiles: a warp 16 x 32 of L x N)
#if STEPC_MAMBA_CHUNK != 32
#error "mamba_chunk_backward scans a chunk's rows across one warp"
#endif

struct MambaDims {
  int T, H, P, G, N, K, C, HP, GN, hpg, nc, PP, NP;
};

__device__ __forceinline__ MambaDims mamba_dims(int T, int H, int P, int G, int N, int K) {
  MambaDims d;
  d.T = T, d.H = H, d.P = P, d.G = G, d.N = N, d.K = K;
  d.HP = H * P, d.GN = G * N, d.C = H * P + 2 * G * N, d.hpg = H / G;
  d.nc = (T + STEPC_MAMBA_CHUNK - 1) / STEPC_MAMBA_CHUNK, d.PP = P + 1, d.NP = N + 1;
  return d;
}

__device__ __forceinline__ float mamba_sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }
__device__ __forceinline__ float mamba_softplus(float v) { return v > 20.0f ? v : logf(1.0f + expf(v)); }

// bias + sum_j w[j] x[t - K + 1 + j] for channel ch of row block `base` (= b T), taps in order.
__device__ __forceinline__ float mamba_conv_pre(const bf16* xbc, const bf16* conv, const MambaDims& d, long base, int t,
                                                int ch) {
  const bf16* w = conv + (long)ch * (d.K + 1);
  float s = bf16_to_f32(w[d.K]);
  for (int j = 0; j < d.K; j++) {
    int src = t - (d.K - 1) + j;
    if (src >= 0) s += bf16_to_f32(w[j]) * bf16_to_f32(xbc[(base + src) * d.C + ch]);
  }
  return s;
}

// The conv outputs silu(pre) of channels ch0 .. ch0 + n - 1, rows t0 .. t0 + L - 1 of batch row b,
// into out[r * stride + j] (zero past T).
__device__ __forceinline__ void mamba_load_cols(const MambaDims& d, const bf16* xbc, const bf16* conv, long b, int t0, int ch0, int n,
                                float* out, int stride) {
  const int L = STEPC_MAMBA_CHUNK;
  for (int i = threadIdx.x; i < L * n; i += blockDim.x) {
    int r = i / n, j = i % n, t = t0 + r;
    float v = 0.0f;
    if (t < d.T) {
      float p = mamba_conv_pre(xbc, conv, d, b * d.T, t, ch0 + j);
      v = p * mamba_sigmoid(p);
    }
    out[r * stride + j] = v;
  }
}

// dY of head h (rows t0 .., zero past T) into out[r * stride + p].
__device__ __forceinline__ void mamba_load_dy(const MambaDims& d, const bf16* dout, long b, int h, int t0, float* out, int stride) {
  const int L = STEPC_MAMBA_CHUNK;
  for (int i = threadIdx.x; i < L * d.P; i += blockDim.x) {
    int r = i / d.P, p = i % d.P, t = t0 + r;
    out[r * stride + p] = t < d.T ? bf16_to_f32(dout[((b * d.T + t) * d.H + h) * d.P + p]) : 0.0f;
  }
}

// dt of head h over the chunk and the within-chunk cumulative log decay lc (l_t above); syncs.
__device__ __forceinline__ void mamba_load_dt(const MambaDims& d, const bf16* dtr, long b, int h, int t0, float a, float dtb,
                              float* dtc, float* lc) {
  const int L = STEPC_MAMBA_CHUNK;
  for (int r = threadIdx.x; r < L; r += blockDim.x) {
    int t = t0 + r;
    dtc[r] = t < d.T ? mamba_softplus(bf16_to_f32(dtr[(b * d.T + t) * d.H + h]) + dtb) : 0.0f;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (int r = 0; r < L; r++) s += dtc[r] * a, lc[r] = s;
  }
  __syncthreads();
}

__device__ __forceinline__ void mamba_head_params(const bf16* ssm, int h, float* dtb, float* a, float* D) {
  *dtb = bf16_to_f32(ssm[h * 3]), *a = -expf(bf16_to_f32(ssm[h * 3 + 1])), *D = bf16_to_f32(ssm[h * 3 + 2]);
}

// The chunk products are small GEMMs out of shared memory (M, N in {L, P, N}, K in {L, P, N}), on
// the tensor cores (mma.sync m16n8k8 tf32, fp32 accumulation), each factor
// split into a tf32 high part and the tf32 rounding of the rest, the three significant products
// summed (a_hi b_lo + a_lo b_hi + a_hi b_hi, as CUTLASS's 3xTF32): fp32-level accuracy at a small
// share of the CUDA-core instructions. A warp owns a 16 x 8 NT output tile at (m0, n0); element e of
// its column block j is row mamba_frag_row(m0, e), column mamba_frag_col(n0, j, e). c[j][e] +=
// sum_k A(m, k) ks[k] B(k, n) over k in steps of 8 (a fixed order: replays give the same bits),
// A(m, k) = A[m ars + k acs], B(k, n) = B[k brs + n bcs]; rows, columns and k past M, N, K read 0.
__device__ __forceinline__ int mamba_frag_row(int m0, int e) { return m0 + (threadIdx.x % 32) / 4 + 8 * (e / 2); }
__device__ __forceinline__ int mamba_frag_col(int n0, int j, int e) { return n0 + 8 * j + 2 * (threadIdx.x % 4) + e % 2; }

__device__ __forceinline__ void mamba_tf32_split(float x, unsigned& hi, unsigned& lo) {
#ifdef STEPC_SIMT
  hi = simt_cvt_rna_tf32(x);
  lo = simt_cvt_rna_tf32(x - __uint_as_float(hi));
#else
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(hi) : "f"(x));
  float rest = x - __uint_as_float(hi);
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(lo) : "f"(rest));
#endif
}

__device__ __forceinline__ void mamba_mma_tf32(float* c, const unsigned* a, unsigned b0, unsigned b1) {
#ifdef STEPC_SIMT
  simt_mma_m16n8k8_tf32(c, a, b0, b1);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

template <int NT>
__device__ __forceinline__ void mamba_tc_mm(float (&c)[NT][4], int m0, int n0, int M, int N, int K, const float* A,
                                            int ars, int acs, const float* B, int brs, int bcs, const float* ks) {
  int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, r0 = m0 + g, r1 = r0 + 8;
  for (int k0 = 0; k0 < K; k0 += 8) {
    int ka = k0 + t, kb = ka + 4;
    bool ina = ka < K, inb = kb < K;
    float sa = ina ? (ks ? ks[ka] : 1.0f) : 0.0f, sb = inb ? (ks ? ks[kb] : 1.0f) : 0.0f;
    ka = ina ? ka : 0, kb = inb ? kb : 0;
    float av[4] = {r0 < M ? A[r0 * ars + ka * acs] * sa : 0.0f, r1 < M ? A[r1 * ars + ka * acs] * sa : 0.0f,
                   r0 < M ? A[r0 * ars + kb * acs] * sb : 0.0f, r1 < M ? A[r1 * ars + kb * acs] * sb : 0.0f};
    unsigned ah[4], al[4];
#pragma unroll
    for (int i = 0; i < 4; i++) mamba_tf32_split(av[i], ah[i], al[i]);
#pragma unroll
    for (int j = 0; j < NT; j++) {
      int n = n0 + 8 * j + g;
      bool in = n < N;
      float b0 = in && ina ? B[ka * brs + n * bcs] : 0.0f, b1 = in && inb ? B[kb * brs + n * bcs] : 0.0f;
      unsigned bh0, bl0, bh1, bl1;
      mamba_tf32_split(b0, bh0, bl0), mamba_tf32_split(b1, bh1, bl1);
      mamba_mma_tf32(c[j], al, bh0, bh1);
      mamba_mma_tf32(c[j], ah, bl0, bl1);
      mamba_mma_tf32(c[j], ah, bh0, bh1);
    }
  }
}

template <int NT>
__device__ __forceinline__ void mamba_frag_zero(float (&c)[NT][4]) {
#pragma unroll
  for (int j = 0; j < NT; j++) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;
}

// The warps' output tiles of an M x N product in 16 x 8 NT tiles: tile i at (*m0, *n0).
__device__ __forceinline__ int mamba_frag_tiles(int M, int N, int NT) { return ((M + 15) / 16) * ((N + 8 * NT - 1) / (8 * NT)); }
__device__ __forceinline__ void mamba_frag_at(int i, int N, int NT, int* m0, int* n0) {
  int nn = (N + 8 * NT - 1) / (8 * NT);
  *m0 = i / nn * 16, *n0 = i % nn * 8 * NT;
}

// out[t ld + p] = sum_n A[t lda + n] S[n ld + p] (an L x P product over K = N, S a transposed state
// in shared memory with row stride ld), a warp a 16 x 16 tile.
__device__ __forceinline__ void mamba_tc_store_lp(float* out, int ld, int L, int P, int N, const float* A, int lda,
                                                  const float* S) {
  for (int i = threadIdx.x / 32; i < mamba_frag_tiles(L, P, 2); i += blockDim.x / 32) {
    int m0, n0;
    mamba_frag_at(i, P, 2, &m0, &n0);
    float c[2][4];
    mamba_frag_zero(c);
    mamba_tc_mm(c, m0, n0, L, P, N, A, lda, 1, S, ld, 1, nullptr);
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
      for (int q = 0; q < 4; q++) {
        int t = mamba_frag_row(m0, q), p = mamba_frag_col(n0, j, q);
        if (t < L && p < P) out[t * ld + p] = c[j][q];
      }
  }
}

// Every chunk's own state st[b, h, c] = sum_s exp(l_L - l_s) dt_s x_s B_s^T (P x N) and its decay
// dec[b, h, c] = exp(l_L); with dout, also dst[b, h, c] = sum_t exp(l_t) dy_t C_t^T, the chunk's part
// of the gradient passed to the state entering it. Grid (nc, G, B), block STEPC_MAMBA_THREADS,
// dynamic shared memory stepc_mamba_states_smem(P, N) (kernels/launch.h).
extern "C" __global__ void __launch_bounds__(STEPC_MAMBA_THREADS)
    mamba_chunk_states(float* st, float* dst, float* dec, const bf16* dout, const bf16* xbc, const bf16* conv,
                       const bf16* dtr, const bf16* ssm, int T, int H, int P, int G, int N, int K, int g0) {
  STEPC_DYNAMIC_SMEM(float, mamba_smem);
  const int L = STEPC_MAMBA_CHUNK;
  MambaDims d = mamba_dims(T, H, P, G, N, K);
  int c = blockIdx.x, g = g0 + blockIdx.y, t0 = c * L, Hl = gridDim.y * d.hpg;
  long b = blockIdx.z;
  float *Bm = mamba_smem, *Cm = Bm + L * d.NP, *X = Cm + L * d.NP, *dY = X + L * d.PP, *dtc = dY + L * d.PP,
        *lc = dtc + L, *w = lc + L, *e = w + L;
  mamba_load_cols(d, xbc, conv, b, t0, d.HP + g * N, N, Bm, d.NP);
  if (dout) mamba_load_cols(d, xbc, conv, b, t0, d.HP + d.GN + g * N, N, Cm, d.NP);
  for (int q = 0; q < d.hpg; q++) {
    int h = g * d.hpg + q;
    float dtb, a, D;
    mamba_head_params(ssm, h, &dtb, &a, &D);
    mamba_load_cols(d, xbc, conv, b, t0, h * P, P, X, d.PP);
    if (dout) mamba_load_dy(d, dout, b, h, t0, dY, d.PP);
    mamba_load_dt(d, dtr, b, h, t0, a, dtb, dtc, lc);
    long hl = (long)blockIdx.y * d.hpg + q, at = ((b * Hl + hl) * d.nc + c) * (long)P * N;
    for (int s = threadIdx.x; s < L; s += blockDim.x) w[s] = expf(lc[L - 1] - lc[s]) * dtc[s], e[s] = expf(lc[s]);
    if (threadIdx.x == 0) dec[(b * Hl + hl) * d.nc + c] = expf(lc[L - 1]);
    __syncthreads();
    // st = (w X)^T Bm and dst = (e dY)^T Cm: P x N, K = L, a warp a 16 x 32 tile
    for (int i = threadIdx.x / 32; i < mamba_frag_tiles(P, N, 4); i += blockDim.x / 32) {
      int m0, n0;
      mamba_frag_at(i, N, 4, &m0, &n0);
      for (int pass = 0; pass < (dout ? 2 : 1); pass++) {
        float acc[4][4];
        mamba_frag_zero(acc);
        mamba_tc_mm(acc, m0, n0, P, N, L, pass ? dY : X, 1, d.PP, pass ? Cm : Bm, d.NP, 1, pass ? e : w);
        float* out = (pass ? dst : st) + at;
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
          for (int q = 0; q < 4; q++) {
            int p = mamba_frag_row(m0, q), n = mamba_frag_col(n0, j, q);
            if (p < P && n < N) out[(long)p * N + n] = acc[j][q];
          }
      }
    }
    __syncthreads();
  }
}

// The scan over chunks, per state element, in place: forward (blockIdx.z < B) st[c] becomes the
// state entering chunk c (S = 0 before the first, S <- dec[c] S + st[c]); backward (blockIdx.z >= B,
// when dst is given) dst[c] becomes the gradient of the state leaving chunk c (R = 0 after the last,
// R <- dec[c] R + dst[c], walking back). Grid (ceil(P N / 256), H, B or 2 B), block 256.
extern "C" __global__ void __launch_bounds__(256)
    mamba_state_pass(float* st, float* dst, const float* dec, int B, int H, int nc, int PN) {
  const int U = 16;  // chunks in flight: their states and decays are all loaded before any store
  int i = blockIdx.x * blockDim.x + threadIdx.x, h = blockIdx.y, back = (int)blockIdx.z >= B;
  long b = blockIdx.z % B, base = (b * H + h) * nc;
  if (i >= PN) return;
  float* v = back ? dst : st;
  float S = 0.0f, buf[U], dk[U];
  for (int k0 = 0; k0 < nc; k0 += U) {
#pragma unroll
    for (int u = 0; u < U; u++) {
      int k = k0 + u, c = back ? nc - 1 - k : k;
      buf[u] = k < nc ? v[(base + c) * PN + i] : 0.0f;
      dk[u] = k < nc ? __ldg(dec + base + c) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      int k = k0 + u, c = back ? nc - 1 - k : k;
      if (k < nc) {
        v[(base + c) * PN + i] = S;
        S = dk[u] * S + buf[u];
      }
    }
  }
}

// MAMBA_MIXER's output from the states entering the chunks: y (B,T,H*P); xbc (B,T,C) with
// C = H P + 2 G N; conv (C, K+1) = [w | bias]; dtr (B,T,H); ssm (H,3) = [dt_bias | A_log | D].
// Grid (nc, G, B), block STEPC_MAMBA_THREADS, dynamic shared memory stepc_mamba_output_smem(P, N).
extern "C" __global__ void __launch_bounds__(STEPC_MAMBA_THREADS)
    mamba_chunk_output(bf16* y, const float* st, const bf16* xbc, const bf16* conv, const bf16* dtr, const bf16* ssm,
                       int T, int H, int P, int G, int N, int K, int g0) {
  STEPC_DYNAMIC_SMEM(float, mamba_smem);
  const int L = STEPC_MAMBA_CHUNK;
  MambaDims d = mamba_dims(T, H, P, G, N, K);
  int c = blockIdx.x, g = g0 + blockIdx.y, t0 = c * L, Hl = gridDim.y * d.hpg;
  long b = blockIdx.z;
  float *Bm = mamba_smem, *Cm = Bm + L * d.NP, *CB = Cm + L * d.NP, *M = CB + L * L, *X = M + L * L,
        *S = X + L * d.PP, *dtc = S + N * d.PP, *lc = dtc + L;
  mamba_load_cols(d, xbc, conv, b, t0, d.HP + g * N, N, Bm, d.NP);
  mamba_load_cols(d, xbc, conv, b, t0, d.HP + d.GN + g * N, N, Cm, d.NP);
  __syncthreads();
  for (int i = threadIdx.x; i < L * L; i += blockDim.x) {
    int t = i / L, s = i % L;
    float v = 0.0f;
    if (s <= t)
      for (int n = 0; n < N; n++) v += Cm[t * d.NP + n] * Bm[s * d.NP + n];
    CB[i] = v;
  }
  for (int q = 0; q < d.hpg; q++) {
    int h = g * d.hpg + q;
    float dtb, a, D;
    mamba_head_params(ssm, h, &dtb, &a, &D);
    mamba_load_cols(d, xbc, conv, b, t0, h * P, P, X, d.PP);
    const float* S0 = st + ((b * Hl + (long)blockIdx.y * d.hpg + q) * d.nc + c) * (long)P * N;
    for (int i = threadIdx.x; i < P * N; i += blockDim.x) S[(i % N) * d.PP + i / N] = S0[i];  // transposed
    mamba_load_dt(d, dtr, b, h, t0, a, dtb, dtc, lc);
    for (int i = threadIdx.x; i < L * L; i += blockDim.x) {
      int t = i / L, s = i % L;
      M[i] = s <= t ? CB[i] * expf(lc[t] - lc[s]) * dtc[s] : 0.0f;
    }
    __syncthreads();
    // y = exp(l) (Cm S0^T) + M X + D X: L x P, K = N then L (M is zero above the diagonal), a warp
    // a 16 x 16 tile
    for (int i = threadIdx.x / 32; i < mamba_frag_tiles(L, P, 2); i += blockDim.x / 32) {
      int m0, n0;
      mamba_frag_at(i, P, 2, &m0, &n0);
      float cs[2][4], mx[2][4];
      mamba_frag_zero(cs), mamba_frag_zero(mx);
      mamba_tc_mm(cs, m0, n0, L, P, N, Cm, d.NP, 1, S, d.PP, 1, nullptr);
      mamba_tc_mm(mx, m0, n0, L, P, L, M, L, 1, X, d.PP, 1, nullptr);
#pragma unroll
      for (int j = 0; j < 2; j++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
          int t = mamba_frag_row(m0, q), p = mamba_frag_col(n0, j, q);
          if (t < L && p < P && t0 + t < T)
            y[((b * T + t0 + t) * H + h) * P + p] = f32_to_bf16(cs[j][q] * expf(lc[t]) + mx[j][q] + D * X[t * d.PP + p]);
        }
    }
    __syncthreads();
  }
}

__device__ __forceinline__ float mamba_silu_grad(float p) {
  float sg = mamba_sigmoid(p);
  return sg * (1.0f + p * (1.0f - sg));
}

// MAMBA_MIXER_BWD's chunk step, after mamba_chunk_states (with dout) and mamba_state_pass (both
// ways): with S0 = st[b, h, c] and dS = dst[b, h, c], every local gradient of chunk c: the
// conv-output gradient of the heads' x channels and of the group's B and C channels (summed over
// the heads in order) times silu' into gpre (B,T,C); dt_raw's gradient (ddtr); the chunk's parts
// of the dt_bias, A and D gradients into hpart[b, c, h, 0..2]. Grid (nc, G, B), block
// STEPC_MAMBA_THREADS, dynamic shared memory stepc_mamba_chunk_bwd_smem(P, N) (105 KiB at P 64,
// N 128: two blocks an SM). The group's dB and dC stay in registers across its heads (a warp a
// 16 x 32 tensor-core tile of the L x N, so N <= 128: 2 ceil(N / 32) tiles for 8 warps); L = 32, a
// warp's width, for the per-row scan.
extern "C" __global__ void __launch_bounds__(STEPC_MAMBA_THREADS, 2)
    mamba_chunk_backward(float* gpre, bf16* ddtr, float* hpart, const float* st, const float* dst, const bf16* dout,
                         const bf16* xbc, const bf16* conv, const bf16* dtr, const bf16* ssm, int T, int H, int P,
                         int G, int N, int K, int g0) {
  STEPC_DYNAMIC_SMEM(float, mamba_smem);
  const int L = STEPC_MAMBA_CHUNK;
  MambaDims d = mamba_dims(T, H, P, G, N, K);
  int c = blockIdx.x, g = g0 + blockIdx.y, t0 = c * L, PP = d.PP, NP = d.NP, Hl = gridDim.y * d.hpg;
  long b = blockIdx.z;
  float *Bm = mamba_smem, *Cm = Bm + L * NP, *CB = Cm + L * NP, *CBE = CB + L * L, *YXE = CBE + L * L,
        *X = YXE + L * L, *dY = X + L * PP, *TM = dY + L * PP, *SP = TM + L * PP, *dtc = SP + N * PP, *lc = dtc + L,
        *ET = lc + L, *eS = ET + L, *ws = eS + L, *Q = ws + L, *Ry = Q + L, *rowF = Ry + L, *colF = rowF + L,
        *DD = colF + L, *red = DD + L;
  mamba_load_cols(d, xbc, conv, b, t0, d.HP + g * N, N, Bm, NP);
  mamba_load_cols(d, xbc, conv, b, t0, d.HP + d.GN + g * N, N, Cm, NP);
  // this warp's 16 x 32 tile of the group's dB and dC (L x N), summed over the heads in order
  const int warp = threadIdx.x / 32, nw = blockDim.x / 32;
  int om0 = 0, on0 = 0;
  const bool owner = warp < mamba_frag_tiles(L, N, 4);
  mamba_frag_at(warp, N, 4, &om0, &on0);
  float dBr[4][4], dCr[4][4];
  mamba_frag_zero(dBr), mamba_frag_zero(dCr);
  __syncthreads();
  // CB = Cm Bm^T (zero above the diagonal)
  for (int i = warp; i < mamba_frag_tiles(L, L, 2); i += nw) {
    int m0, n0;
    mamba_frag_at(i, L, 2, &m0, &n0);
    float v[2][4];
    mamba_frag_zero(v);
    mamba_tc_mm(v, m0, n0, L, L, N, Cm, NP, 1, Bm, 1, NP, nullptr);
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
      for (int q = 0; q < 4; q++) {
        int t = mamba_frag_row(m0, q), u = mamba_frag_col(n0, j, q);
        if (t < L && u < L) CB[t * L + u] = u <= t ? v[j][q] : 0.0f;
      }
  }
  for (int q = 0; q < d.hpg; q++) {
    int h = g * d.hpg + q;
    float dtb, a, D;
    mamba_head_params(ssm, h, &dtb, &a, &D);
    const long at = ((b * Hl + (long)blockIdx.y * d.hpg + q) * d.nc + c) * (long)P * N;
    mamba_load_cols(d, xbc, conv, b, t0, h * P, P, X, PP);
    mamba_load_dy(d, dout, b, h, t0, dY, PP);
    for (int i = threadIdx.x; i < P * N; i += blockDim.x) SP[(i % N) * PP + i / N] = st[at + i];  // S0^T
    mamba_load_dt(d, dtr, b, h, t0, a, dtb, dtc, lc);
    for (int s = threadIdx.x; s < L; s += blockDim.x) {
      eS[s] = expf(lc[L - 1] - lc[s]);
      ws[s] = eS[s] * dtc[s];
      ET[s] = expf(lc[s]);
    }
    // the L x L factors with their decays (zero above the diagonal): YXE = (dY X^T) E, CBE = CB E
    for (int i = warp; i < mamba_frag_tiles(L, L, 2); i += nw) {
      int m0, n0;
      mamba_frag_at(i, L, 2, &m0, &n0);
      float yx[2][4];
      mamba_frag_zero(yx);
      mamba_tc_mm(yx, m0, n0, L, L, P, dY, PP, 1, X, 1, PP, nullptr);
#pragma unroll
      for (int j = 0; j < 2; j++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
          int t = mamba_frag_row(m0, q), s = mamba_frag_col(n0, j, q);
          if (t >= L || s >= L) continue;
          float e = s <= t ? expf(lc[t] - lc[s]) : 0.0f;
          YXE[t * L + s] = yx[j][q] * e, CBE[t * L + s] = CB[t * L + s] * e;
        }
    }
    // CS = Cm S0^T (L x P) into TM
    mamba_tc_store_lp(TM, PP, L, P, N, Cm, NP, SP);
    __syncthreads();
    // dC of this head, into the group's sum: exp(l_t) dy_t S0 + sum_{s<=t} YXE[t,s] dt_s B_s
    if (owner) {
      float v[4][4], w[4][4];
      mamba_frag_zero(v), mamba_frag_zero(w);
      mamba_tc_mm(v, om0, on0, L, N, P, dY, PP, 1, SP, 1, PP, nullptr);
      mamba_tc_mm(w, om0, on0, L, N, L, YXE, L, 1, Bm, NP, 1, dtc);
#pragma unroll
      for (int j = 0; j < 4; j++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
          int t = mamba_frag_row(om0, q);
          dCr[j][q] += (t < L ? ET[t] : 0.0f) * v[j][q] + w[j][q];
        }
    }
    int lane = threadIdx.x % 32;
    for (int r = warp; r < L; r += nw) {
      float ry = 0.0f;
      for (int p = lane; p < P; p += 32) ry += dY[r * PP + p] * TM[r * PP + p];
      ry = warp_sum(ry);
      if (lane == 0) Ry[r] = ET[r] * ry;
    }
    __syncthreads();
    // dS (transposed) replaces S0, and sd = sum dS . S0 from memory
    float sd = 0.0f;
    for (int i = threadIdx.x; i < P * N; i += blockDim.x) {
      float v = dst[at + i];
      sd += v * st[at + i];
      SP[(i % N) * PP + i / N] = v;
    }
    sd = block_sum(sd, red);  // syncs: dS is written
    // BD = Bm dS^T (L x P) into TM
    mamba_tc_store_lp(TM, PP, L, P, N, Bm, NP, SP);
    __syncthreads();
    // per-row scalars, a warp a row (Q reads BD before dx' replaces it)
    for (int r = warp; r < L; r += nw) {
      float qq = 0.0f, dd = 0.0f;
      for (int p = lane; p < P; p += 32) qq += X[r * PP + p] * TM[r * PP + p], dd += dY[r * PP + p] * X[r * PP + p];
      float rf = lane <= r ? CB[r * L + lane] * YXE[r * L + lane] * dtc[lane] : 0.0f;
      float cf = lane >= r ? CB[lane * L + r] * YXE[lane * L + r] : 0.0f;
      qq = warp_sum(qq), dd = warp_sum(dd), rf = warp_sum(rf), cf = warp_sum(cf);
      if (lane == 0) Q[r] = qq, DD[r] = dd, rowF[r] = rf, colF[r] = cf;
    }
    __syncthreads();
    // dx' = dt CBE^T dY + ws BD + D dY (the D skip) in place of BD, and dB of this head =
    // dt YXE^T Cm + ws X dS
    for (int i = warp; i < mamba_frag_tiles(L, P, 2); i += nw) {
      int m0, n0;
      mamba_frag_at(i, P, 2, &m0, &n0);
      float v[2][4];
      mamba_frag_zero(v);
      mamba_tc_mm(v, m0, n0, L, P, L, CBE, 1, L, dY, PP, 1, nullptr);
#pragma unroll
      for (int j = 0; j < 2; j++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
          int s = mamba_frag_row(m0, q), p = mamba_frag_col(n0, j, q);
          if (s < L && p < P) TM[s * PP + p] = dtc[s] * v[j][q] + ws[s] * TM[s * PP + p] + D * dY[s * PP + p];
        }
    }
    if (owner) {
      float z[4][4], u[4][4];
      mamba_frag_zero(z), mamba_frag_zero(u);
      mamba_tc_mm(z, om0, on0, L, N, L, YXE, 1, L, Cm, NP, 1, nullptr);
      mamba_tc_mm(u, om0, on0, L, N, P, X, PP, 1, SP, 1, PP, nullptr);
#pragma unroll
      for (int j = 0; j < 4; j++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
          int s = mamba_frag_row(om0, q);
          float dts = s < L ? dtc[s] : 0.0f, wss = s < L ? ws[s] : 0.0f;
          dBr[j][q] += dts * z[j][q] + wss * u[j][q];
        }
    }
    // d dt (direct and through the decays l), the chunk's dA, dD, d dt_bias; dt_raw's gradient:
    // warp 0, lane r a row; suf[r] = sum over rows >= r (a suffix scan of fixed shape)
    if (warp == 0) {
      int r = lane, t = t0 + r;
      float tail = warp_sum(ws[r] * Q[r]) + expf(lc[L - 1]) * sd;
      float suf = Ry[r] + rowF[r] - dtc[r] * colF[r] - ws[r] * Q[r] + (r == L - 1 ? tail : 0.0f);
      for (int o = 1; o < 32; o <<= 1) {
        float v = __shfl_down_sync(STEPC_FULL_MASK, suf, o);
        if (lane + o < 32) suf += v;
      }
      float ddt = colF[r] + eS[r] * Q[r] + a * suf, gr = 0.0f;
      long ai = (b * T + t) * H + h;
      if (t < T) {
        gr = ddt * mamba_sigmoid(bf16_to_f32(dtr[ai]) + dtb);
        ddtr[ai] = f32_to_bf16(gr);
      }
      float da = warp_sum(dtc[r] * suf), db = warp_sum(gr), ddd = warp_sum(DD[r]);
      if (lane == 0) {
        float* hp = hpart + ((b * d.nc + c) * H + h) * 3;
        hp[0] = db, hp[1] = da, hp[2] = ddd;
      }
    }
    __syncthreads();
    // the x channels' conv-output gradient (dx', in TM), times silu'
    for (int i = threadIdx.x; i < L * P; i += blockDim.x) {
      int r = i / P, p = i % P, t = t0 + r;
      if (t < T)
        gpre[(b * T + t) * d.C + h * P + p] =
            TM[r * PP + p] * mamba_silu_grad(mamba_conv_pre(xbc, conv, d, b * T, t, h * P + p));
    }
    __syncthreads();
  }
  // the group's B and C channels, from this warp's tiles
  if (owner)
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
      for (int q = 0; q < 4; q++) {
        int r = mamba_frag_row(om0, q), n = mamba_frag_col(on0, j, q), t = t0 + r;
        if (r >= L || n >= N || t >= T) continue;
        int cb = d.HP + g * N + n, cc = d.HP + d.GN + g * N + n;
        gpre[(b * T + t) * d.C + cb] = dBr[j][q] * mamba_silu_grad(mamba_conv_pre(xbc, conv, d, b * T, t, cb));
        gpre[(b * T + t) * d.C + cc] = dCr[j][q] * mamba_silu_grad(mamba_conv_pre(xbc, conv, d, b * T, t, cc));
      }
}

// The conv's backward from the conv-output gradient gpre (B,T,C): dx[t] = sum_j w[j] gpre[t + K-1-j]
// (bf16), and per row segment the weight and bias partials cpart[b, seg, j, ch] =
// sum_t gpre[t] x[t - K+1+j] (j < K), sum_t gpre[t] (j = K). Grid (ceil(C / 256), segs, B), block 256.
extern "C" __global__ void __launch_bounds__(256)
    mamba_conv_backward(bf16* dx, float* cpart, const float* gpre, const bf16* xbc, const bf16* conv, int T, int C,
                        int K, int segs) {
  const int KM = STEPC_MAMBA_KMAX;
  int ch = blockIdx.x * blockDim.x + threadIdx.x, seg = blockIdx.y;
  long b = blockIdx.z;
  if (ch >= C) return;
  int len = (T + segs - 1) / segs, ta = seg * len, tb = ta + len < T ? ta + len : T;
  float w[KM], acc[KM + 1];
#pragma unroll
  for (int j = 0; j < KM; j++) w[j] = j < K ? bf16_to_f32(conv[(long)ch * (K + 1) + j]) : 0.0f, acc[j] = 0.0f;
  acc[KM] = 0.0f;
  const float* gp = gpre + b * T * (long)C + ch;
  const bf16* xp = xbc + b * T * (long)C + ch;
  for (int t = ta; t < tb; t++) {
    float gr = gp[(long)t * C], v = 0.0f;
#pragma unroll
    for (int j = 0; j < KM; j++) {
      if (j >= K) break;
      int ahead = t + K - 1 - j, src = t - (K - 1) + j;
      if (ahead < T) v += w[j] * gp[(long)ahead * C];
      if (src >= 0) acc[j] += gr * bf16_to_f32(xp[(long)src * C]);
    }
    acc[KM] += gr;
    dx[(b * T + t) * (long)C + ch] = f32_to_bf16(v);
  }
  float* cp = cpart + (b * segs + seg) * (long)(K + 1) * C + ch;
#pragma unroll
  for (int j = 0; j < KM; j++)
    if (j < K) cp[(long)j * C] = acc[j];
  cp[(long)K * C] = acc[KM];
}

// The parameter gradients from the partials, each a sum in a fixed order: dconv (C, K+1) over the
// B segs conv partials, dssm (H, 3) = [dt_bias | A_log | D] over the B nc chunk partials (dA_log =
// a dA). Grid ceil((C (K+1) + 3 H) / 256), block 256.
extern "C" __global__ void __launch_bounds__(256)
    mamba_param_grads(bf16* dconv, bf16* dssm, const float* cpart, const float* hpart, const bf16* ssm, int B, int T,
                      int H, int C, int K, int segs) {
  int i = blockIdx.x * blockDim.x + threadIdx.x, nconv = C * (K + 1);
  int nc = (T + STEPC_MAMBA_CHUNK - 1) / STEPC_MAMBA_CHUNK;
  if (i < nconv) {
    int ch = i / (K + 1), j = i % (K + 1);
    float v = 0.0f;
    for (int p = 0; p < B * segs; p++) v += cpart[((long)p * (K + 1) + j) * C + ch];
    dconv[i] = f32_to_bf16(v);
  } else if (i < nconv + 3 * H) {
    int k = (i - nconv) % 3, h = (i - nconv) / 3;
    float v = 0.0f;
    for (long p = 0; p < (long)B * nc; p++) v += hpart[(p * H + h) * 3 + k];
    if (k == 1) v *= -expf(bf16_to_f32(ssm[h * 3 + 1]));
    dssm[i - nconv] = f32_to_bf16(v);
  }
}

// MAMBA_GATE: out = y z sigmoid(z). Grid-stride over n.
extern "C" __global__ void mamba_gate_forward(bf16* out, const bf16* y, const bf16* z, long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
    float zv = bf16_to_f32(z[i]);
    out[i] = f32_to_bf16(bf16_to_f32(y[i]) * zv * mamba_sigmoid(zv));
  }
}

// MAMBA_GATE_BWD: dy = dout z s, dz = dout y s (1 + z (1 - s)), s = sigmoid(z).
extern "C" __global__ void mamba_gate_backward(bf16* dy, bf16* dz, const bf16* dout, const bf16* y, const bf16* z, long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
    float zv = bf16_to_f32(z[i]), s = mamba_sigmoid(zv), g = bf16_to_f32(dout[i]);
    dy[i] = f32_to_bf16(g * zv * s);
    dz[i] = f32_to_bf16(g * bf16_to_f32(y[i]) * s * (1.0f + zv * (1.0f - s)));
  }
}

// 1 / rms of group [j0, j0 + gs) of a row, over the warp (a fixed tree).
__device__ __forceinline__ float mamba_gn_rstd(const bf16* row, int j0, int gs, float eps) {
  float ss = 0.0f;
  for (int j = j0 + threadIdx.x % 32; j < j0 + gs; j += 32) {
    float v = bf16_to_f32(row[j]);
    ss += v * v;
  }
  return 1.0f / sqrtf(warp_sum(ss) / (float)gs + eps);
}

// MAMBA_GROUP_NORM: out = x rstd(row, group) w over rows of C = G gs. A warp per (row, group):
// grid ceil(rows G / 8), block 256.
extern "C" __global__ void mamba_group_norm_forward(bf16* out, const bf16* x, const bf16* w, long rows, int C, int G,
                                                   float eps) {
  long k = blockIdx.x * 8L + threadIdx.x / 32;
  if (k >= rows * G) return;
  int gs = C / G, j0 = (int)(k % G) * gs;
  const bf16* row = x + (k / G) * C;
  float rs = mamba_gn_rstd(row, j0, gs, eps);
  for (int j = j0 + threadIdx.x % 32; j < j0 + gs; j += 32)
    out[(k / G) * C + j] = f32_to_bf16(bf16_to_f32(row[j]) * rs * bf16_to_f32(w[j]));
}

// MAMBA_GROUP_NORM_BWD, the input's gradient: dx = rstd (dout w - x rstd^2 mean(dout w x)) per
// group; each (row, group)'s rstd into rstd[row G + group] for the weight's gradient. Launch as the
// forward.
extern "C" __global__ void mamba_group_norm_backward_input(bf16* dx, float* rstd, const bf16* dout, const bf16* x,
                                                          const bf16* w, long rows, int C, int G, float eps) {
  long k = blockIdx.x * 8L + threadIdx.x / 32;
  if (k >= rows * G) return;
  int gs = C / G, j0 = (int)(k % G) * gs;
  long r0 = (k / G) * C;
  float rs = mamba_gn_rstd(x + r0, j0, gs, eps), s = 0.0f;
  if (threadIdx.x % 32 == 0) rstd[k] = rs;
  for (int j = j0 + threadIdx.x % 32; j < j0 + gs; j += 32) s += bf16_to_f32(dout[r0 + j]) * bf16_to_f32(w[j]) * bf16_to_f32(x[r0 + j]);
  s = warp_sum(s) / (float)gs;
  for (int j = j0 + threadIdx.x % 32; j < j0 + gs; j += 32)
    dx[r0 + j] = f32_to_bf16(rs * (bf16_to_f32(dout[r0 + j]) * bf16_to_f32(w[j]) - bf16_to_f32(x[r0 + j]) * rs * rs * s));
}

// MAMBA_GROUP_NORM_BWD, the weight's gradient dw_j = sum over rows of dout x rstd, in two passes of
// fixed order: per segment of rows (a thread a column, the rows of its segment in order) into
// part[seg, j], after mamba_group_norm_backward_input has written rstd; then
// mamba_group_norm_weight_reduce sums the segments in order. Grid (ceil(C / 256), segs), block 256.
extern "C" __global__ void mamba_group_norm_backward_weight(float* part, const bf16* dout, const bf16* x,
                                                           const float* rstd, long rows, int C, int G, int segs) {
  int j = blockIdx.x * blockDim.x + threadIdx.x, seg = blockIdx.y, gs = C / G;
  if (j >= C) return;
  long len = (rows + segs - 1) / segs, ra = seg * len, rb = ra + len < rows ? ra + len : rows;
  float s = 0.0f;
  for (long r = ra; r < rb; r++) s += bf16_to_f32(dout[r * C + j]) * bf16_to_f32(x[r * C + j]) * rstd[r * G + j / gs];
  part[(long)seg * C + j] = s;
}

// dw_j = the segments' sums in order: into acc (fp32, added) when given, else dw (bf16). Grid
// ceil(C / 256), block 256.
extern "C" __global__ void mamba_group_norm_weight_reduce(bf16* dw, float* acc, const float* part, int C, int segs) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= C) return;
  float v = 0.0f;
  for (int q = 0; q < segs; q++) v += part[(long)q * C + j];
  if (acc) acc[j] += v;
  else dw[j] = f32_to_bf16(v);
}
