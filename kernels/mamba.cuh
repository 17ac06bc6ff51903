// mamba.cuh — the Mamba-2 mixer's device kernels (the semantics are ir/ops/mamba.c's):
//   MAMBA_MIXER      mamba_conv_forward, mamba_chunk_cb, mamba_scan_forward
//   MAMBA_MIXER_BWD  mamba_conv_forward, mamba_scan_states (both ways), mamba_chunk_backward,
//                    mamba_conv_backward, mamba_param_grads
//   mamba_gate_forward/_backward             MAMBA_GATE(_BWD): y silu(z)
//   mamba_group_norm_forward                 MAMBA_GROUP_NORM: RMSNorm of each of G groups, times w
//   mamba_group_norm_backward_input/_weight  MAMBA_GROUP_NORM_BWD
// bf16 in and out, fp32 arithmetic; every sum in a fixed order (no atomics), so a replay or a
// recompute gives the same bits.
//
// The chunked SSD (Mamba-2, Dao & Gu 2024, §6). Per head h (a = -exp(A_log[h])) the recurrence
// S_t = exp(dt_t a) S_{t-1} + dt_t x_t B_t^T (S: P x N), y_t = S_t C_t is taken in chunks of L
// steps. With S0 the state entering a chunk and l_t = sum_{r<=t} dt_r a inside it:
//   y_t   = exp(l_t) S0 C_t + sum_{s<=t} (C_t.B_s) exp(l_t - l_s) dt_s x_s       (intra-chunk block)
//   S_end = exp(l_L) S0 + sum_s exp(l_L - l_s) dt_s x_s B_s^T                    (state passing)
// Rows past T inside the last chunk have dt = 0, x = B = C = 0, so they add nothing.
//
// Row p of S meets only row p of x and of y (both formulas), so the state splits into slices of
// PS = STEPC_MAMBA_SLICE rows of P that never interact. Forward: mamba_conv_forward writes the conv1d
// + SiLU output u (B, T, C) once, in fp32; mamba_chunk_cb the products C_t.B_s of every chunk and
// group (they do not depend on the state, and the PS-row slices and H/G heads of a group share
// them); then mamba_scan_forward, a block per (slice, head, batch row), walks the chunks in order
// with its PS x N slice of S in registers (fp32 mma accumulators): per chunk the intra-chunk block
// from C.B, C S0^T and the update to S_end on the tensor cores (1xTF32), y out; the next chunk's
// rows (B, C, the x slice from u) and its C.B move into a second shared buffer by
// cp.async while the chunk computes, so the only serial chain is the state update. No states go
// to memory. The backward is the mirror: dS, the gradient of the state leaving a chunk, is passed
// from the last chunk back (dS_{c-1} = exp(l_L) dS_c + sum_t exp(l_t) dy_t C_t^T, row-p separable
// as well); mamba_scan_states walks the chunks both ways (blocks as the forward's, without y) and
// writes the state entering each chunk and the gradient of the state leaving it, so that
// mamba_chunk_backward, a block per chunk of one group (its H/G heads in order, so B and C, which
// the group's heads share, are loaded once and their gradients summed over the heads in head
// order), has S0 and dS of its chunk and computes every local gradient in parallel; the gradient
// of the conv output goes to a fp32 workspace, from which mamba_conv_backward takes the conv's
// input, weight and bias gradients (partial sums per row segment), and mamba_param_grads sums the
// per-chunk and per-segment partials in a fixed order.
//
// Workspace (fp32, the op's workspace output; offsets in kernels/launch.h stepc_mamba_ws): the
// forward's u (B, T, C); the backward's states entering and gradients leaving the chunks
// (B, Hp, nc, P, N) of one pass's heads, the conv-output gradient (B, T, C) (which holds u until
// the chunk backward overwrites it), per-chunk partials (B, nc, H, 3) and per-segment conv
// partials (B, segs, K+1, C). The chunk backward's shared-memory rows are padded by four floats
// (mamba_pitch: at widths that are multiples of 32 its tensor-core fragment reads are free of bank
// conflicts along rows, at most 2-way down columns); the scans' by four
// (N+4, and PS-wide rows pitched STEPC_MAMBA_XP) for 16-byte stores and conflict-light fragments.
#pragma once
#include "common.cuh"
#include "mma.cuh"  // cp_async16_zfill

#define STEPC_MAMBA_CHUNK 32   // L, rows per chunk (as kernels/launch.h)
#define STEPC_MAMBA_THREADS 256
#define STEPC_MAMBA_KMAX 8     // conv taps at most
#define STEPC_MAMBA_NMAX 128   // state dim at most (mamba_chunk_backward's register tiles: a warp 16 x 32 of L x N;
                               // the scans' state tiles: a warp 16 x 16 of PS x N)
#define STEPC_MAMBA_SLICE 16   // PS, rows of P a scan block owns (as kernels/launch.h)
#define STEPC_MAMBA_XP 24      // the scans' row pitch of PS-wide tiles (as kernels/launch.h)
#define STEPC_MAMBA_CONV_ROWS 64  // rows a mamba_conv_forward thread walks (as kernels/launch.h)
#if STEPC_MAMBA_CHUNK != 32
#error "mamba_chunk_backward scans a chunk's rows across one warp"
#endif

struct MambaDims {
  int T, H, P, G, N, K, C, HP, GN, hpg, nc, PP, NP;
};

// mamba_chunk_backward's row pitch for rows of n floats (as kernels/launch.h stepc_mamba_pitch):
// n + 4, which for n a multiple of 32 (Nemotron's P 64, N 128 and the chunk's 32) is 4 mod 32, so
// that a tensor-core fragment read (a warp's 8 rows g and 4 columns t: g pitch + t) hits 32 banks,
// and one down the columns (g + t pitch) at most 2 a bank. (The least pitch 4 mod 32 for any n
// costs ptxas 230 more bytes of spills here: n + 4 is one add on a kernel parameter.)
__device__ __forceinline__ int mamba_pitch(int n) { return n + 4; }

__device__ __forceinline__ MambaDims mamba_dims(int T, int H, int P, int G, int N, int K) {
  MambaDims d;
  d.T = T, d.H = H, d.P = P, d.G = G, d.N = N, d.K = K;
  d.HP = H * P, d.GN = G * N, d.C = H * P + 2 * G * N, d.hpg = H / G;
  d.nc = (T + STEPC_MAMBA_CHUNK - 1) / STEPC_MAMBA_CHUNK, d.PP = mamba_pitch(P), d.NP = mamba_pitch(N);
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

// The conv outputs u (mamba_conv_forward's, fp32 (B, T, C)) of channels ch0 .. ch0 + n - 1, rows
// t0 .. t0 + L - 1 of batch row b, into out[r * stride + j] (zero past T).
__device__ __forceinline__ void mamba_load_cols(const MambaDims& d, const float* u, long b, int t0, int ch0, int n,
                                                float* out, int stride) {
  const int L = STEPC_MAMBA_CHUNK;
  for (int i = threadIdx.x; i < L * n; i += blockDim.x) {
    int r = i / n, j = i % n, t = t0 + r;
    out[r * stride + j] = t < d.T ? u[(b * d.T + t) * d.C + ch0 + j] : 0.0f;
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
// the tensor cores (mma.sync m16n8k8 tf32, fp32 accumulation), each factor rounded to tf32 (10
// mantissa bits: 2^-11 relative, below the bf16 outputs' 2^-9). The three-product split (3xTF32,
// fp32-level products) gave the same max errors against the fp64 reference in every check of
// tests/gpu/mamba.c and cost 13% of the forward, 4% of the backward on an H100, so one product it
// is. A warp owns a 16 x 8 NT output tile at (m0, n0); element e of
// its column block j is row mamba_frag_row(m0, e), column mamba_frag_col(n0, j, e). c[j][e] +=
// sum_k A(m, k) ks[k] B(k, n) over k in steps of 8 (a fixed order: replays give the same bits),
// A(m, k) = A[m ars + k acs], B(k, n) = B[k brs + n bcs]; rows, columns and k past M, N, K read 0.
__device__ __forceinline__ int mamba_frag_row(int m0, int e) { return m0 + (threadIdx.x % 32) / 4 + 8 * (e / 2); }
__device__ __forceinline__ int mamba_frag_col(int n0, int j, int e) { return n0 + 8 * j + 2 * (threadIdx.x % 4) + e % 2; }

__device__ __forceinline__ unsigned mamba_tf32(float x) {
#ifdef STEPC_SIMT
  return simt_cvt_rna_tf32(x);
#else
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
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
  if (m0 + 16 <= M && n0 + 8 * NT <= N && K % 8 == 0) {
    // the whole tile and every k in range (the scans' and Nemotron's shapes): the loop below without
    // its bounds, the same products in the same order, so the same bits
    const float *a0 = A + r0 * ars + t * acs, *a1 = a0 + 8 * ars, *b0 = B + t * brs + (n0 + g) * bcs;
    const int a4 = 4 * acs, b4 = 4 * brs, a8 = 8 * acs, b8 = 8 * brs;
    for (int k0 = 0; k0 < K; k0 += 8, a0 += a8, a1 += a8, b0 += b8) {
      float sa = ks ? ks[k0 + t] : 1.0f, sb = ks ? ks[k0 + t + 4] : 1.0f;
      unsigned ah[4] = {mamba_tf32(a0[0] * sa), mamba_tf32(a1[0] * sa), mamba_tf32(a0[a4] * sb),
                        mamba_tf32(a1[a4] * sb)};
#pragma unroll
      for (int j = 0; j < NT; j++) {
        const float* bj = b0 + 8 * j * bcs;
        mamba_mma_tf32(c[j], ah, mamba_tf32(bj[0]), mamba_tf32(bj[b4]));
      }
    }
    return;
  }
  for (int k0 = 0; k0 < K; k0 += 8) {
    int ka = k0 + t, kb = ka + 4;
    bool ina = ka < K, inb = kb < K;
    float sa = ina ? (ks ? ks[ka] : 1.0f) : 0.0f, sb = inb ? (ks ? ks[kb] : 1.0f) : 0.0f;
    ka = ina ? ka : 0, kb = inb ? kb : 0;
    float av[4] = {r0 < M ? A[r0 * ars + ka * acs] * sa : 0.0f, r1 < M ? A[r1 * ars + ka * acs] * sa : 0.0f,
                   r0 < M ? A[r0 * ars + kb * acs] * sb : 0.0f, r1 < M ? A[r1 * ars + kb * acs] * sb : 0.0f};
    unsigned ah[4];
#pragma unroll
    for (int i = 0; i < 4; i++) ah[i] = mamba_tf32(av[i]);
#pragma unroll
    for (int j = 0; j < NT; j++) {
      int n = n0 + 8 * j + g;
      bool in = n < N;
      float b0 = in && ina ? B[ka * brs + n * bcs] : 0.0f, b1 = in && inb ? B[kb * brs + n * bcs] : 0.0f;
      mamba_mma_tf32(c[j], ah, mamba_tf32(b0), mamba_tf32(b1));
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

// MAMBA_MIXER's conv pre-pass: u[b, t, ch] = silu(bias + sum_j w[j] x[t - K + 1 + j]) (fp32, taps in
// order as mamba_conv_pre), a thread a channel over STEPC_MAMBA_CONV_ROWS rows, the window of the
// last K - 1 inputs in registers. Grid (ceil(C / 256), ceil(T / STEPC_MAMBA_CONV_ROWS), B), block 256.
extern "C" __global__ void __launch_bounds__(256)
    mamba_conv_forward(float* u, const bf16* xbc, const bf16* conv, int T, int C, int K) {
  const int KM = STEPC_MAMBA_KMAX;
  int ch = blockIdx.x * blockDim.x + threadIdx.x, ta = blockIdx.y * STEPC_MAMBA_CONV_ROWS;
  long b = blockIdx.z;
  if (ch >= C) return;
  int tb = ta + STEPC_MAMBA_CONV_ROWS < T ? ta + STEPC_MAMBA_CONV_ROWS : T;
  const bf16* xp = xbc + b * T * (long)C + ch;
  float w[KM], win[KM], bias = bf16_to_f32(conv[(long)ch * (K + 1) + K]);
#pragma unroll
  for (int j = 0; j < KM; j++) {
    w[j] = j < K ? bf16_to_f32(conv[(long)ch * (K + 1) + j]) : 0.0f;
    int src = ta - (K - 1) + j;  // win[j] = x[t - K + 1 + j] for the row t = ta (win[K - 1] is loaded below)
    win[j] = j < K - 1 && src >= 0 ? bf16_to_f32(xp[(long)src * C]) : 0.0f;
  }
  for (int t = ta; t < tb; t++) {
    float s = bias;
#pragma unroll
    for (int j = 0; j < KM; j++) {
      if (j >= K) break;
      if (j == K - 1) win[j] = bf16_to_f32(xp[(long)t * C]);
      s += w[j] * win[j];
    }
#pragma unroll
    for (int j = 0; j + 1 < KM; j++)
      if (j + 1 < K) win[j] = win[j + 1];
    u[(b * T + t) * (long)C + ch] = s * mamba_sigmoid(s);
  }
}

// The scans' chunk buffers. A chunk's rows of nu state-width operands (N columns each: B, C of the
// group, from u) and one slice-width operand (PS columns of the head: x from u, or dy from dout),
// in shared memory as [nu][L][N + 4] then [L][XP] (row pitches that keep 16-byte stores aligned and
// the tensor-core fragment reads mostly free of bank conflicts); rows past T and columns past P
// are 0. Moved in float4 groups, a thread every 256th, by cp.async straight into shared memory
// (mamba_rows_async, from u); a dy slice (bf16) is fetched into registers a chunk ahead, converted,
// and put after the chunk's work (mamba_dy_fetch / _put).
// cu0, cu1: the N-wide operands' first channels in u; cv: the slice's first column (in u, or in
// dout's row); vn: its columns before P; W4: a row's float4 groups.
struct MambaRows {
  const float* u;  // the conv output (B, T, C)
  const bf16* dy;  // the slice operand from dout (B, T, H P) when given, else from u
  long b;
  int T, C, HP, N, nu, cu0, cu1, cv, vn, W4;
};

__device__ __forceinline__ MambaRows mamba_rows(const float* u, const bf16* dy, long b, int T, int C, int HP, int N,
                                                int nu, int cu0, int cu1, int cv, int vn) {
  MambaRows m;
  m.u = u, m.dy = dy, m.b = b, m.T = T, m.C = C, m.HP = HP, m.N = N, m.nu = nu, m.cu0 = cu0, m.cu1 = cu1;
  m.cv = cv, m.vn = vn, m.W4 = (nu * N + STEPC_MAMBA_SLICE) / 4;
  return m;
}

// Column col of a chunk row (a multiple of 4): its channel in u (or, for the slice, in dout's row)
// and its float4's place in buf.
__device__ __forceinline__ int mamba_rows_chan(const MambaRows& m, int col) {
  int un = m.nu * m.N;
  return col < m.N ? m.cu0 + col : col < un ? m.cu1 + col - m.N : m.cv + col - un;
}
__device__ __forceinline__ float* mamba_rows_slot(const MambaRows& m, float* buf, int r, int col) {
  const int L = STEPC_MAMBA_CHUNK, NP = m.N + 4, un = m.nu * m.N;
  return col < un ? buf + (col < m.N ? 0 : L * NP) + r * NP + (col < m.N ? col : col - m.N)
                  : buf + m.nu * L * NP + r * STEPC_MAMBA_XP + col - un;
}

// The dy slice of chunk t0 (rows past T and columns past P zero), from bf16 into registers and then
// into buf: a thread a float4 group (L PS / 4 = 128 threads; the rest hold zeros and put nothing).
__device__ __forceinline__ float4 mamba_dy_fetch(const MambaRows& m, int t0) {
  const int L = STEPC_MAMBA_CHUNK, G4 = STEPC_MAMBA_SLICE / 4, r = threadIdx.x / G4, col = 4 * (threadIdx.x % G4);
  float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (r < L && t0 + r < m.T && col < m.vn) {
    const bf16* p = m.dy + (m.b * m.T + t0 + r) * m.HP + m.cv + col;
    x = make_float4(bf16_to_f32(p[0]), bf16_to_f32(p[1]), bf16_to_f32(p[2]), bf16_to_f32(p[3]));
  }
  return x;
}
__device__ __forceinline__ void mamba_dy_put(float4 v, const MambaRows& m, float* buf) {
  const int L = STEPC_MAMBA_CHUNK, G4 = STEPC_MAMBA_SLICE / 4, r = threadIdx.x / G4;
  if (r < L) *(float4*)mamba_rows_slot(m, buf, r, m.nu * m.N + 4 * (threadIdx.x % G4)) = v;
}

// The rows of chunk t0 into buf by cp.async (committed; complete at the caller's cp_async_wait): the
// operands from u, and the slice too unless it is dy (mamba_dy_fetch / _put).
__device__ __forceinline__ void mamba_rows_async(const MambaRows& m, int t0, float* buf) {
  const int L = STEPC_MAMBA_CHUNK, un = m.nu * m.N, dr = STEPC_MAMBA_THREADS / m.W4,
            dq = STEPC_MAMBA_THREADS % m.W4;
  int r = threadIdx.x / m.W4, q = threadIdx.x % m.W4;
  for (; r < L;) {
    int t = t0 + r, col = 4 * q;
    bool in = t < m.T && (col < un || col - un < m.vn);
    const float* src = m.u + (m.b * m.T + (in ? t : 0)) * m.C + (in ? mamba_rows_chan(m, col) : 0);
    if (!m.dy || col < un) cp_async16_zfill(mamba_rows_slot(m, buf, r, col), src, in);
    r += dr, q += dq;
    if (q >= m.W4) q -= m.W4, r++;
  }
  cp_async_commit();
}

// Warp 0: the chunk's dt (lane r its row; raw the row's dt_raw, in whether the row is before T) and
// into f[0..4L): dt, the within-chunk cumulative log decay l (each lane summing rows 0..r in order,
// as mamba_load_dt), w = exp(l_L - l) dt and e = exp(l).
__device__ __forceinline__ void mamba_scan_dt(float raw, bool in, float a, float dtb, float* f) {
  const int L = STEPC_MAMBA_CHUNK;
  int r = threadIdx.x % 32;
  float dt = in ? mamba_softplus(raw + dtb) : 0.0f, l = 0.0f;
  for (int q = 0; q < L; q++) {
    float v = __shfl_sync(STEPC_FULL_MASK, dt, q) * a;
    if (q <= r) l += v;
  }
  float lL = __shfl_sync(STEPC_FULL_MASK, l, L - 1);
  f[r] = dt, f[L + r] = l, f[2 * L + r] = expf(lL - l) * dt, f[3 * L + r] = expf(l);
}

// MAMBA_MIXER's C.B: cb[b, g, c] (L x L, row t column s) = sum_n C[t, n] B[s, n] over chunk c's rows
// of group g's B and C in u, for s <= t (0 above the diagonal); a warp a 16 x 8 tile. Grid (nc, G,
// B), block STEPC_MAMBA_THREADS, dynamic shared memory stepc_mamba_cb_smem(N) (kernels/launch.h): a
// chunk buffer of the scans' layout, its slice empty.
extern "C" __global__ void __launch_bounds__(STEPC_MAMBA_THREADS)
    mamba_chunk_cb(float* cb, const float* u, int T, int H, int P, int G, int N) {
  STEPC_DYNAMIC_SMEM(float, mamba_smem);
  const int L = STEPC_MAMBA_CHUNK, NP = N + 4, HP = H * P, GN = G * N, C = HP + 2 * GN, nc = (T + L - 1) / L;
  const int c = blockIdx.x, g = blockIdx.y, warp = threadIdx.x / 32;
  const long b = blockIdx.z;
  const float *Bm = mamba_smem, *Cm = Bm + L * NP;
  mamba_rows_async(mamba_rows(u, nullptr, b, T, C, HP, N, 2, HP + g * N, HP + GN + g * N, 0, 0), c * L, mamba_smem);
  cp_async_wait<0>();
  __syncthreads();
  float* out = cb + ((b * G + g) * nc + c) * (long)(L * L);
  for (int i = warp; i < mamba_frag_tiles(L, L, 1); i += blockDim.x / 32) {
    int m0, n0;
    mamba_frag_at(i, L, 1, &m0, &n0);
    float v[1][4];
    mamba_frag_zero(v);
    if (n0 < m0 + 16) mamba_tc_mm<1>(v, m0, n0, L, L, N, Cm, NP, 1, Bm, 1, NP, nullptr);
#pragma unroll
    for (int q = 0; q < 4; q++) {
      int t = mamba_frag_row(m0, q), s = mamba_frag_col(n0, 0, q);
      out[t * L + s] = s <= t ? v[0][q] : 0.0f;
    }
  }
}

// MAMBA_MIXER's output y (B,T,H*P) from the conv output u (mamba_conv_forward), its C.B cb
// (mamba_chunk_cb), dt_raw (B,T,H) and ssm (H,3) = [dt_bias | A_log | D]: a block a (slice of PS
// rows of P, head, batch row) walks the chunks in order with its PS x N slice of the state in
// registers (a warp a 16 x 16 tile of n), per chunk c (S the state entering it):
//   phase A: M = (C.B)_ts exp(l_t - l_s) dt_s (s <= t, a thread every 256th), C S^T (L x PS, a warp
//            one of 4 tiles over one half of n), S <- exp(l_L) S + (w X)^T B into the other state
//            buffer; then the sync;
//   phase B: y = exp(l_t) C S^T + M X + D X (4 warps); the wait for the next chunk's rows, which
//            cp.async has been moving into the other chunk buffer since before phase A, and warp 0
//            its dt; then the sync.
// Grid (ceil(P / PS), H, B), block STEPC_MAMBA_THREADS, dynamic shared memory
// stepc_mamba_scan_smem(N) (kernels/launch.h): two chunk buffers (with the chunk's C.B), two
// transposed states, M, the C S^T halves (111.5 KiB at N 128: two blocks an SM).
extern "C" __global__ void __launch_bounds__(STEPC_MAMBA_THREADS, 2)
    mamba_scan_forward(bf16* y, const float* u, const float* cb, const bf16* dtr, const bf16* ssm, int T, int H, int P,
                       int G, int N) {
  STEPC_DYNAMIC_SMEM(float, mamba_smem);
  const int L = STEPC_MAMBA_CHUNK, PS = STEPC_MAMBA_SLICE, XP = STEPC_MAMBA_XP, MP = L + 4, NP = N + 4;
  const int HP = H * P, GN = G * N, C = HP + 2 * GN, nc = (T + L - 1) / L, h = blockIdx.y, g = h / (H / G);
  const int p0 = blockIdx.x * PS, warp = threadIdx.x / 32, lane = threadIdx.x % 32, ncb = 2 * L * NP + L * XP + 4 * L,
            nbuf = ncb + L * L;
  const long b = blockIdx.z;
  float *Sh = mamba_smem + 2 * nbuf, *M = Sh + 2 * N * XP, *CSp = M + L * MP;
  float dtb, a, D;
  mamba_head_params(ssm, h, &dtb, &a, &D);
  const MambaRows rows = mamba_rows(u, nullptr, b, T, C, HP, N, 2, HP + g * N, HP + GN + g * N, h * P + p0,
                                    P - p0 < PS ? P - p0 : PS);
  float dtn = 0.0f;
  // chunk c's C.B by cp.async into buf + ncb (committed with the rows by mamba_rows_async)
  const float* cbg = cb + (b * G + g) * nc * (long)(L * L);
  auto cb_async = [&](int c, float* buf) {
    for (int i = 4 * threadIdx.x; i < L * L; i += 4 * blockDim.x) cp_async16_zfill(buf + ncb + i, cbg + (long)c * L * L + i, true);
  };
  // the first chunk, a state of zeros; a warp's state tile: rows 0..PS of the slice, n0 = 16 warp
  cb_async(0, mamba_smem);
  mamba_rows_async(rows, 0, mamba_smem);
  cp_async_wait<0>();
  if (warp == 0) {
    if (lane < T) dtn = bf16_to_f32(dtr[(b * T + lane) * H + h]);
    mamba_scan_dt(dtn, lane < T, a, dtb, mamba_smem + 2 * L * NP + L * XP);
  }
  for (int i = threadIdx.x; i < N * XP; i += blockDim.x) Sh[i] = 0.0f;
  float S[2][4];
  mamba_frag_zero(S);
  const int sn0 = 16 * warp;
  const int mi = warp % 4, mm0 = (mi / 2) * 16, mn0 = (mi % 2) * 8;  // this warp's L x PS tile (C S^T, y)
  const int kh = (N / 2 + 7) / 8 * 8, ka = warp < 4 ? 0 : kh, kb = warp < 4 ? (kh < N ? kh : N) : N;
  __syncthreads();
  for (int c = 0; c < nc; c++) {
    const int cur = c & 1, t0 = c * L;
    const float *Bm = mamba_smem + cur * nbuf, *Cm = Bm + L * NP, *X = Cm + L * NP, *dtc = X + L * XP,
                *lc = dtc + L, *w = lc + L, *e = w + L, *CB = Bm + ncb;
    const float *S0 = Sh + cur * N * XP;
    float* S1 = Sh + (cur ^ 1) * N * XP;
    if (c + 1 < nc) {  // the next chunk's rows into the other buffer (free: the last sync ended its reads)
      cb_async(c + 1, mamba_smem + (cur ^ 1) * nbuf);
      mamba_rows_async(rows, t0 + L, mamba_smem + (cur ^ 1) * nbuf);
      if (warp == 0 && t0 + L + lane < T) dtn = bf16_to_f32(dtr[(b * T + t0 + L + lane) * H + h]);
    }
    // phase A: M (zero above the diagonal, where C.B is 0)
    for (int i = threadIdx.x; i < L * L; i += blockDim.x) {
      int t = i / L, s = i % L;
      M[t * MP + s] = s <= t ? CB[i] * expf(lc[t] - lc[s]) * dtc[s] : 0.0f;
    }
    // C S^T over n in [ka, kb): warps 0-3 keep theirs, warps 4-7 leave theirs in CSp
    float cs[1][4];
    mamba_frag_zero(cs);
    if (kb > ka) mamba_tc_mm<1>(cs, mm0, mn0, L, PS, kb - ka, Cm + ka, NP, 1, S0 + ka * XP, XP, 1, nullptr);
    if (warp >= 4)
#pragma unroll
      for (int q = 0; q < 4; q++) CSp[(mi * 32 + lane) * 4 + q] = cs[0][q];
    // the state leaving the chunk, into the other buffer (transposed: [n][p])
    if (sn0 < N) {
      float dec = expf(lc[L - 1]);
#pragma unroll
      for (int j = 0; j < 2; j++)
#pragma unroll
        for (int q = 0; q < 4; q++) S[j][q] *= dec;
      mamba_tc_mm<2>(S, 0, sn0, PS, N, L, X, 1, XP, Bm, NP, 1, w);
#pragma unroll
      for (int j = 0; j < 2; j++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
          int p = mamba_frag_row(0, q), n = mamba_frag_col(sn0, j, q);
          if (n < N) S1[n * XP + p] = S[j][q];
        }
    }
    __syncthreads();
    // phase B: y, a warp (0-3) a 16 x 8 tile of L x PS
    if (warp < 4) {
      float mx[1][4];
      mamba_frag_zero(mx);
      mamba_tc_mm<1>(mx, mm0, mn0, L, PS, L, M, MP, 1, X, XP, 1, nullptr);
#pragma unroll
      for (int q = 0; q < 4; q++) {
        int t = mamba_frag_row(mm0, q), p = mamba_frag_col(mn0, 0, q);
        if (t0 + t < T && p0 + p < P)
          y[((b * T + t0 + t) * H + h) * P + p0 + p] =
              f32_to_bf16((cs[0][q] + CSp[(mi * 32 + lane) * 4 + q]) * e[t] + mx[0][q] + D * X[t * XP + p]);
      }
    }
    if (c + 1 < nc) {
      cp_async_wait<0>();
      if (warp == 0) mamba_scan_dt(dtn, t0 + L + lane < T, a, dtb, mamba_smem + (cur ^ 1) * nbuf + 2 * L * NP + L * XP);
    }
    __syncthreads();
  }
}

// MAMBA_MIXER_BWD's states for mamba_chunk_backward, by the same sequential scan (a block a slice of
// PS rows of P, a head of the pass, a batch row; the slice of the state in registers, a warp a
// 16 x 16 tile of n): forward (blockIdx.z < B) st[b, h, c] = the state entering chunk c (S = 0
// before the first, S <- exp(l_L) S + (w X)^T B); backward (blockIdx.z >= B) dst[b, h, c] = the
// gradient of the state leaving chunk c (R = 0 after the last, walking back,
// R <- exp(l_L) R + (e dY)^T C). Each chunk's rows move into the other buffer during the previous
// chunk's update (u's by cp.async, dY's through registers); one sync a chunk. st, dst (B, Hp, nc,
// P, N) of the pass's Hp = gridDim.y heads (from head g0 H / G). Grid (ceil(P / PS), Hp, 2 B), block STEPC_MAMBA_THREADS, dynamic shared
// memory stepc_mamba_scan_states_smem(N).
extern "C" __global__ void __launch_bounds__(STEPC_MAMBA_THREADS, 4)
    mamba_scan_states(float* st, float* dst, const float* u, const bf16* dout, const bf16* dtr, const bf16* ssm, int T,
                      int H, int P, int G, int N, int g0) {
  STEPC_DYNAMIC_SMEM(float, mamba_smem);
  const int L = STEPC_MAMBA_CHUNK, PS = STEPC_MAMBA_SLICE, XP = STEPC_MAMBA_XP, NP = N + 4, B = gridDim.z / 2;
  const int HP = H * P, GN = G * N, C = HP + 2 * GN, nc = (T + L - 1) / L, hpg = H / G;
  const int hl = blockIdx.y, h = g0 * hpg + hl, g = h / hpg, p0 = blockIdx.x * PS, back = (int)blockIdx.z >= B;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nbuf = L * NP + L * XP + 4 * L, sn0 = 16 * warp;
  const long b = blockIdx.z % B;
  float dtb, a, D;
  mamba_head_params(ssm, h, &dtb, &a, &D);
  (void)D;
  const int vn = P - p0 < PS ? P - p0 : PS;
  const MambaRows rows = back ? mamba_rows(u, dout, b, T, C, HP, N, 1, HP + GN + g * N, 0, h * P + p0, vn)
                              : mamba_rows(u, nullptr, b, T, C, HP, N, 1, HP + g * N, 0, h * P + p0, vn);
  float* out = (back ? dst : st) + (b * gridDim.y + hl) * (long)nc * P * N;
  float4 dyn = make_float4(0.0f, 0.0f, 0.0f, 0.0f);  // backwards: this thread's group of the next dy
  float dtn = 0.0f;
  int c = back ? nc - 1 : 0, t0 = c * L;  // the chunk at hand
  mamba_rows_async(rows, t0, mamba_smem);
  if (back) dyn = mamba_dy_fetch(rows, t0);
  if (warp == 0 && t0 + lane < T) dtn = bf16_to_f32(dtr[(b * T + t0 + lane) * H + h]);
  cp_async_wait<0>();
  if (back) mamba_dy_put(dyn, rows, mamba_smem);
  if (warp == 0) mamba_scan_dt(dtn, t0 + lane < T, a, dtb, mamba_smem + L * NP + L * XP);
  float S[2][4];
  mamba_frag_zero(S);
  __syncthreads();
  for (int k = 0; k < nc; k++) {
    const int cur = k & 1, cn = back ? c - 1 : c + 1, tn = cn * L;
    const float *U = mamba_smem + cur * nbuf, *V = U + L * NP, *f = V + L * XP;
    float* nb = mamba_smem + (cur ^ 1) * nbuf;  // free: the last sync ended its reads
    if (k + 1 < nc) {
      mamba_rows_async(rows, tn, nb);
      if (back) dyn = mamba_dy_fetch(rows, tn);
      if (warp == 0 && tn + lane < T) dtn = bf16_to_f32(dtr[(b * T + tn + lane) * H + h]);
    }
    if (sn0 < N) {
      float* o = out + (long)c * P * N;
#pragma unroll
      for (int j = 0; j < 2; j++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
          int p = mamba_frag_row(0, q), n = mamba_frag_col(sn0, j, q);
          if (p0 + p < P && n < N) o[(long)(p0 + p) * N + n] = S[j][q];
        }
      float dec = expf(f[2 * L - 1]);
#pragma unroll
      for (int j = 0; j < 2; j++)
#pragma unroll
        for (int q = 0; q < 4; q++) S[j][q] *= dec;
      mamba_tc_mm<2>(S, 0, sn0, PS, N, L, V, 1, XP, U, NP, 1, back ? f + 3 * L : f + 2 * L);
    }
    if (k + 1 < nc) {
      cp_async_wait<0>();
      if (back) mamba_dy_put(dyn, rows, nb);
      if (warp == 0) mamba_scan_dt(dtn, tn + lane < T, a, dtb, nb + L * NP + L * XP);
    }
    c = cn;
    __syncthreads();
  }
}

// A state S (P x N, row-major in memory) into SP transposed ([n][p], row pitch PP): where N is a
// multiple of 8, a warp 8 n x 4 p an instruction (four 32-byte sectors of S; with PP 4 mod 32, 32
// distinct banks), else a thread an element. With W (P x N as S), the thread's part of sum S W
// (the elements it moved, in order), so that S is read once.
__device__ __forceinline__ float mamba_state_t(float* SP, const float* S, int P, int N, int PP, const float* W) {
  float dot = 0.0f;
  if (N % 8 == 0) {
    const int lane = threadIdx.x % 32, nb = N / 8, n8 = lane % 8, p4 = lane / 8;
    for (int j = threadIdx.x / 32; j < nb * (P / 4); j += blockDim.x / 32) {
      int n = (j % nb) * 8 + n8, p = (j / nb) * 4 + p4;
      float v = S[(long)p * N + n];
      SP[n * PP + p] = v;
      if (W) dot += v * W[(long)p * N + n];
    }
  } else
    for (int i = threadIdx.x; i < P * N; i += blockDim.x) {
      SP[(i % N) * PP + i / N] = S[i];
      if (W) dot += S[i] * W[i];
    }
  return dot;
}

__device__ __forceinline__ float mamba_silu_grad(float p) {
  float sg = mamba_sigmoid(p);
  return sg * (1.0f + p * (1.0f - sg));
}

// MAMBA_MIXER_BWD's chunk step, after mamba_scan_states (both ways): with S0 = st[b, h, c] and
// dS = dst[b, h, c], every local gradient of chunk c: the conv-output gradient of the heads' x
// channels and of the group's B and C channels (summed over the heads in order) times silu' into
// gpre (B,T,C), over the conv output u that the pass's scans have read there (the block reads its
// chunk's x, B and C rows of u first: only it writes them; silu' recomputes the conv's input);
// dt_raw's gradient (ddtr); the chunk's parts of the dt_bias, A and D gradients into hpart[b, c, h, 0..2]. Grid
// (nc, G, B), block STEPC_MAMBA_THREADS, dynamic shared memory stepc_mamba_chunk_bwd_smem(P, N) (107.4 KiB at P 64,
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
  int c = blockIdx.x, g = g0 + blockIdx.y, t0 = c * L, PP = d.PP, NP = d.NP, LP = mamba_pitch(L),
      Hl = gridDim.y * d.hpg;
  long b = blockIdx.z;
  float *Bm = mamba_smem, *Cm = Bm + L * NP, *CB = Cm + L * NP, *CBE = CB + L * LP, *YXE = CBE + L * LP,
        *X = YXE + L * LP, *dY = X + L * PP, *TM = dY + L * PP, *SP = TM + L * PP, *dtc = SP + N * PP, *lc = dtc + L,
        *ET = lc + L, *eS = ET + L, *ws = eS + L, *Q = ws + L, *Ry = Q + L, *rowF = Ry + L, *colF = rowF + L,
        *DD = colF + L, *red = DD + L;
  mamba_load_cols(d, gpre, b, t0, d.HP + g * N, N, Bm, NP);
  mamba_load_cols(d, gpre, b, t0, d.HP + d.GN + g * N, N, Cm, NP);
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
        if (t < L && u < L) CB[t * LP + u] = u <= t ? v[j][q] : 0.0f;
      }
  }
  for (int q = 0; q < d.hpg; q++) {
    int h = g * d.hpg + q;
    float dtb, a, D;
    mamba_head_params(ssm, h, &dtb, &a, &D);
    const long at = ((b * Hl + (long)blockIdx.y * d.hpg + q) * d.nc + c) * (long)P * N;
    mamba_load_cols(d, gpre, b, t0, h * P, P, X, PP);
    mamba_load_dy(d, dout, b, h, t0, dY, PP);
    mamba_state_t(SP, st + at, P, N, PP, nullptr);  // S0^T
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
          YXE[t * LP + s] = yx[j][q] * e, CBE[t * LP + s] = CB[t * LP + s] * e;
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
      mamba_tc_mm(w, om0, on0, L, N, L, YXE, LP, 1, Bm, NP, 1, dtc);
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
    float sd = block_sum(mamba_state_t(SP, dst + at, P, N, PP, st + at), red);  // syncs: dS is written
    // BD = Bm dS^T (L x P) into TM
    mamba_tc_store_lp(TM, PP, L, P, N, Bm, NP, SP);
    __syncthreads();
    // per-row scalars, a warp a row (Q reads BD before dx' replaces it)
    for (int r = warp; r < L; r += nw) {
      float qq = 0.0f, dd = 0.0f;
      for (int p = lane; p < P; p += 32) qq += X[r * PP + p] * TM[r * PP + p], dd += dY[r * PP + p] * X[r * PP + p];
      float rf = lane <= r ? CB[r * LP + lane] * YXE[r * LP + lane] * dtc[lane] : 0.0f;
      float cf = lane >= r ? CB[lane * LP + r] * YXE[lane * LP + r] : 0.0f;
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
      mamba_tc_mm(v, m0, n0, L, P, L, CBE, 1, LP, dY, PP, 1, nullptr);
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
      mamba_tc_mm(z, om0, on0, L, N, L, YXE, 1, LP, Cm, NP, 1, nullptr);
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
