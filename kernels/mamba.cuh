// mamba.cuh — the Mamba-2 mixer's device kernels (the semantics are ir/ops/mamba.c's):
//   mamba_mixer_forward     MAMBA_MIXER: causal depthwise conv1d + SiLU over xBC, dt = softplus(dt_raw
//                           + dt_bias), the SSD scan in its chunked form, + D x
//   mamba_mixer_backward    MAMBA_MIXER_BWD: the gradients of all four inputs
//   mamba_gate_forward/_backward             MAMBA_GATE(_BWD): y silu(z)
//   mamba_group_norm_forward                 MAMBA_GROUP_NORM: RMSNorm of each of G groups, times w
//   mamba_group_norm_backward_input/_weight  MAMBA_GROUP_NORM_BWD
// bf16 in and out, fp32 arithmetic; every sum in a fixed order (no atomics), so a replay or a
// recompute gives the same bits.
//
// The chunked SSD (Mamba-2, Dao & Gu 2024, §6). Per head h (a = -exp(A_log[h])) the recurrence
// S_t = exp(dt_t a) S_{t-1} + dt_t x_t B_t^T, y_t = S_t C_t is taken in chunks of L steps. With
// S0 the state entering a chunk and l_t = sum_{r<=t} dt_r a inside it:
//   y_t   = exp(l_t) S0 C_t + sum_{s<=t} (C_t.B_s) exp(l_t - l_s) dt_s x_s       (intra-chunk block)
//   S_end = exp(l_L) S0 + sum_s exp(l_L - l_s) dt_s x_s B_s^T                    (state passing)
// Rows past T inside the last chunk have dt = 0, x = B = C = 0, so they add nothing.
//
// The backward (one block per head, all micro-batch rows b in order) walks the chunks backwards
// carrying dS = dL/dS_end; per chunk it needs S0, which it recomputes from a checkpoint: a first
// forward pass stores the state entering every kk-th chunk (kk L >= 2N) in the head's own columns
// of the dxBC output, in the rows of the kk chunks before it (P bf16 of a row hold P/2 floats),
// which are written with their gradient only after the walk has passed that checkpoint's last use.
// So the op needs no memory beyond its inputs and outputs. The group's B and C gradients are sums
// over its heads: the heads of a group are blocks of one thread-block cluster (sm_90) and the sum
// is read through distributed shared memory in head order. Each block owns 2N / (H/G) of the
// group's B/C channels and P x channels for the conv backward and its weight/bias gradients.
//
// What a tensor-core version would need: the chunk products (C B^T, the L x L block times x, the
// state update x^T B and S0 C) are GEMMs of L x N x P; with L = 64..256 they map onto wgmma (m64,
// bf16 operands in shared memory, fp32 accumulators), with the decay factors applied to the
// operands as mamba_ssm's Triton kernels do, and the states passed between chunks by a separate
// short scan over chunk states (which needs a (B, H, T/L, P, N) workspace in the graph).
#pragma once

#define STEPC_MAMBA_CHUNK 32   // L, rows per chunk (as kernels/launch.h); the backward's row sums take L = 32 lanes
#define STEPC_MAMBA_THREADS 256
#define STEPC_MAMBA_CLUSTER 8  // blocks per cluster of the backward
#define STEPC_MAMBA_KMAX 8     // conv taps at most

struct MambaDims {
  int T, H, P, G, N, K, C, HP, GN, hpg;
};

__device__ __forceinline__ MambaDims mamba_dims(int T, int H, int P, int G, int N, int K) {
  MambaDims d;
  d.T = T, d.H = H, d.P = P, d.G = G, d.N = N, d.K = K;
  d.HP = H * P, d.GN = G * N, d.C = H * P + 2 * G * N, d.hpg = H / G;
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

// Column j of a head's chunk view [x (P) | B (N) | C (N)] -> its channel of xBC.
__device__ __forceinline__ int mamba_channel(const MambaDims& d, int h, int g, int j) {
  return j < d.P ? h * d.P + j : j < d.P + d.N ? d.HP + g * d.N + (j - d.P) : d.HP + d.GN + g * d.N + (j - d.P - d.N);
}

// One chunk of head h, batch row b, from t0: the conv outputs X (L x P), Bm, Cm (L x N), dt and
// the within-chunk cumulative log decay lc; dY (L x P) from dout when given.
__device__ void mamba_load_chunk(const MambaDims& d, const bf16* xbc, const bf16* conv, const bf16* dtr, const bf16* dout,
                                 long b, int h, int t0, float a, float dtb, float* X, float* Bm, float* Cm, float* dY,
                                 float* dtc, float* lc) {
  const int L = STEPC_MAMBA_CHUNK, W = d.P + 2 * d.N, g = h / d.hpg;
  long base = b * d.T;
  for (int i = threadIdx.x; i < L * W; i += blockDim.x) {
    int r = i / W, j = i % W, t = t0 + r;
    float v = 0.0f;
    if (t < d.T) {
      float p = mamba_conv_pre(xbc, conv, d, base, t, mamba_channel(d, h, g, j));
      v = p * mamba_sigmoid(p);
    }
    if (j < d.P) X[r * d.P + j] = v;
    else if (j < d.P + d.N) Bm[r * d.N + j - d.P] = v;
    else Cm[r * d.N + j - d.P - d.N] = v;
  }
  if (dY)
    for (int i = threadIdx.x; i < L * d.P; i += blockDim.x) {
      int r = i / d.P, t = t0 + r;
      dY[i] = t < d.T ? bf16_to_f32(dout[((base + t) * d.H + h) * d.P + i % d.P]) : 0.0f;
    }
  for (int r = threadIdx.x; r < L; r += blockDim.x) {
    int t = t0 + r;
    dtc[r] = t < d.T ? mamba_softplus(bf16_to_f32(dtr[(base + t) * d.H + h]) + dtb) : 0.0f;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (int r = 0; r < L; r++) s += dtc[r] * a, lc[r] = s;
  }
  __syncthreads();
}

// S (P x N) <- exp(l_L) S + sum_s exp(l_L - l_s) dt_s X_s B_s^T, s in order. ws: L floats.
__device__ void mamba_state_update(const MambaDims& d, float* S, const float* X, const float* Bm, const float* dtc,
                                   const float* lc, float* ws) {
  const int L = STEPC_MAMBA_CHUNK;
  for (int s = threadIdx.x; s < L; s += blockDim.x) ws[s] = expf(lc[L - 1] - lc[s]) * dtc[s];
  __syncthreads();
  float eL = expf(lc[L - 1]);
  for (int i = threadIdx.x; i < d.P * d.N; i += blockDim.x) {
    int p = i / d.N, n = i % d.N;
    float acc = 0.0f;
    for (int s = 0; s < L; s++) acc += ws[s] * X[s * d.P + p] * Bm[s * d.N + n];
    S[i] = eL * S[i] + acc;
  }
  __syncthreads();
}

// MAMBA_MIXER. y (B,T,H*P); xbc (B,T,C) with C = H P + 2 G N; conv (C, K+1) = [w | bias]; dtr
// (B,T,H); ssm (H,3) = [dt_bias | A_log | D]. Launch: grid (H, B), block STEPC_MAMBA_THREADS,
// dynamic shared memory stepc_mamba_fwd_smem(P, N) (kernels/launch.h).
extern "C" __global__ void __launch_bounds__(STEPC_MAMBA_THREADS)
    mamba_mixer_forward(bf16* y, const bf16* xbc, const bf16* conv, const bf16* dtr, const bf16* ssm, int T, int H,
                        int P, int G, int N, int K) {
  extern __shared__ float mamba_smem[];
  const int L = STEPC_MAMBA_CHUNK;
  MambaDims d = mamba_dims(T, H, P, G, N, K);
  int h = blockIdx.x;
  long b = blockIdx.y;
  float dtb = bf16_to_f32(ssm[h * 3]), a = -expf(bf16_to_f32(ssm[h * 3 + 1])), D = bf16_to_f32(ssm[h * 3 + 2]);
  float *S = mamba_smem, *X = S + P * N, *Bm = X + L * P, *Cm = Bm + L * N, *M = Cm + L * N, *dtc = M + L * L,
        *lc = dtc + L, *ws = lc + L;
  for (int i = threadIdx.x; i < P * N; i += blockDim.x) S[i] = 0.0f;
  for (int t0 = 0; t0 < T; t0 += L) {
    mamba_load_chunk(d, xbc, conv, dtr, nullptr, b, h, t0, a, dtb, X, Bm, Cm, nullptr, dtc, lc);
    for (int i = threadIdx.x; i < L * L; i += blockDim.x) {
      int t = i / L, s = i % L;
      float v = 0.0f;
      if (s <= t) {
        for (int n = 0; n < N; n++) v += Cm[t * N + n] * Bm[s * N + n];
        v *= expf(lc[t] - lc[s]) * dtc[s];
      }
      M[i] = v;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < L * P; i += blockDim.x) {
      int t = i / P, p = i % P;
      if (t0 + t >= T) continue;
      float acc = 0.0f;
      for (int n = 0; n < N; n++) acc += Cm[t * N + n] * S[p * N + n];
      acc *= expf(lc[t]);
      for (int s = 0; s <= t; s++) acc += M[t * L + s] * X[s * P + p];
      acc += D * X[t * P + p];
      y[((b * T + t0 + t) * H + h) * P + p] = f32_to_bf16(acc);
    }
    __syncthreads();
    mamba_state_update(d, S, X, Bm, dtc, lc, ws);
  }
}

// The checkpoint of the state entering chunk jj * kk (jj >= 1): P N floats in rows
// [(jj-1) kk L, jj kk L) of head h's x columns of dx (P/2 floats a row).
__device__ __forceinline__ float* mamba_ckpt(const MambaDims& d, bf16* dx, long b, int h, int kk, int jj, int i) {
  const int L = STEPC_MAMBA_CHUNK, half = d.P / 2;
  long t = (long)(jj - 1) * kk * L + i / half;
  return (float*)(dx + (b * d.T + t) * d.C + (long)h * d.P) + i % half;
}

// MAMBA_MIXER_BWD. in: dout (B,T,H*P) and the forward's inputs; out: dx (B,T,C), dconv (C,K+1),
// ddtr (B,T,H), dssm (H,3). Launch: grid ceil(H / STEPC_MAMBA_CLUSTER) STEPC_MAMBA_CLUSTER blocks
// (block h = head h; blocks past H only keep the cluster barriers), block STEPC_MAMBA_THREADS,
// dynamic shared memory stepc_mamba_bwd_smem(P, N, H/G). Needs H/G dividing STEPC_MAMBA_CLUSTER
// and 2N, P even, K <= STEPC_MAMBA_KMAX (compiler/codegen/launch/op_mamba.c checks).
extern "C" __global__ void __cluster_dims__(STEPC_MAMBA_CLUSTER, 1, 1) __launch_bounds__(STEPC_MAMBA_THREADS)
    mamba_mixer_backward(bf16* dx, bf16* dconv, bf16* ddtr, bf16* dssm, const bf16* dout, const bf16* xbc,
                         const bf16* conv, const bf16* dtr, const bf16* ssm, int B, int T, int H, int P, int G, int N,
                         int K) {
  extern __shared__ float mamba_smem[];
  const int L = STEPC_MAMBA_CHUNK, KC = STEPC_MAMBA_KMAX;
  MambaDims d = mamba_dims(T, H, P, G, N, K);
  int h = blockIdx.x, live = h < H, hc = live ? h : 0, g = hc / d.hpg;
  unsigned rank = cluster_rank(), gbase = rank / d.hpg * d.hpg;
  int nown = 2 * N / d.hpg, own0 = (int)(rank % d.hpg) * nown, nch = P + nown;
  float dtb = bf16_to_f32(ssm[hc * 3]), a = -expf(bf16_to_f32(ssm[hc * 3 + 1])), D = bf16_to_f32(ssm[hc * 3 + 2]);
  float *S0 = mamba_smem, *dS = S0 + P * N, *X = dS + P * N, *dY = X + L * P, *dXa = dY + L * P, *Bm = dXa + L * P,
        *Cm = Bm + L * N, *dBh = Cm + L * N, *dCh = dBh + L * N, *CB = dCh + L * N, *YX = CB + L * L, *E = YX + L * L,
        *dtc = E + L * L, *lc = dtc + L, *ws = lc + L, *eS = ws + L, *ET = eS + L, *Q = ET + L, *Ry = Q + L, *rowF = Ry + L,
        *colF = rowF + L, *DD = colF + L, *red = DD + L, *GG = red + 32, *acc = GG + (L + KC - 1) * nch;
  // acc: per owned channel (K taps, bias), then dt_bias, dA, dD
  float* hacc = acc + nch * (K + 1);
  for (int i = threadIdx.x; i < nch * (K + 1) + 3; i += blockDim.x) acc[i] = 0.0f;
  int nc = (T + L - 1) / L, kk = (2 * N + L - 1) / L;
  // the channel of owned column c: the head's x channels, then its share of the group's B | C
  auto chan = [&](int c) { return c < P ? hc * P + c : d.HP + (own0 + c - P < N ? g * N + own0 + c - P : d.GN + g * N + own0 + c - P - N); };
  for (long b = 0; b < B; b++) {
    if (live) {  // forward: the checkpoints
      for (int i = threadIdx.x; i < P * N; i += blockDim.x) S0[i] = 0.0f;
      for (int c = 0; c + 1 < nc; c++) {
        mamba_load_chunk(d, xbc, conv, dtr, nullptr, b, h, c * L, a, dtb, X, Bm, Cm, nullptr, dtc, lc);
        mamba_state_update(d, S0, X, Bm, dtc, lc, ws);
        if ((c + 1) % kk == 0)
          for (int i = threadIdx.x; i < P * N; i += blockDim.x) *mamba_ckpt(d, dx, b, h, kk, (c + 1) / kk, i) = S0[i];
      }
      __syncthreads();
      for (int i = threadIdx.x; i < P * N; i += blockDim.x) dS[i] = 0.0f;
      for (int i = threadIdx.x; i < (L + KC - 1) * nch; i += blockDim.x) GG[i] = 0.0f;
      __syncthreads();
    }
    for (int c = nc - 1; c >= 0; c--) {
      int t0 = c * L;
      if (live) {
        // 1. S0 of chunk c: its checkpoint, then the chunks since
        int jj = c / kk;
        for (int i = threadIdx.x; i < P * N; i += blockDim.x) S0[i] = jj ? *mamba_ckpt(d, dx, b, h, kk, jj, i) : 0.0f;
        __syncthreads();
        for (int cc = jj * kk; cc < c; cc++) {
          mamba_load_chunk(d, xbc, conv, dtr, nullptr, b, h, cc * L, a, dtb, X, Bm, Cm, nullptr, dtc, lc);
          mamba_state_update(d, S0, X, Bm, dtc, lc, ws);
        }
        // 2. the chunk
        mamba_load_chunk(d, xbc, conv, dtr, dout, b, h, t0, a, dtb, X, Bm, Cm, dY, dtc, lc);
        // 3. the L x L factors (zero above the diagonal)
        for (int i = threadIdx.x; i < L * L; i += blockDim.x) {
          int t = i / L, s = i % L;
          float cb = 0.0f, yx = 0.0f, e = 0.0f;
          if (s <= t) {
            for (int n = 0; n < N; n++) cb += Cm[t * N + n] * Bm[s * N + n];
            for (int p = 0; p < P; p++) yx += dY[t * P + p] * X[s * P + p];
            e = expf(lc[t] - lc[s]);
          }
          CB[i] = cb, YX[i] = yx, E[i] = e;
        }
        for (int s = threadIdx.x; s < L; s += blockDim.x) {
          eS[s] = expf(lc[L - 1] - lc[s]);
          ws[s] = eS[s] * dtc[s];
          ET[s] = expf(lc[s]);
        }
        __syncthreads();
        // 4. dx' (with the D skip), dC, dB of this head
        for (int i = threadIdx.x; i < L * P; i += blockDim.x) {
          int s = i / P, p = i % P;
          float v = 0.0f, u = 0.0f;
          for (int t = s; t < L; t++) v += CB[t * L + s] * E[t * L + s] * dY[t * P + p];
          v *= dtc[s];
          for (int n = 0; n < N; n++) u += dS[p * N + n] * Bm[s * N + n];
          dXa[i] = v + ws[s] * u + D * dY[i];
        }
        for (int i = threadIdx.x; i < L * N; i += blockDim.x) {
          int t = i / N, n = i % N;
          float v = 0.0f, w = 0.0f, u = 0.0f, z = 0.0f;
          for (int p = 0; p < P; p++) v += dY[t * P + p] * S0[p * N + n];
          for (int s = 0; s <= t; s++) w += YX[t * L + s] * E[t * L + s] * dtc[s] * Bm[s * N + n];
          dCh[i] = ET[t] * v + w;
          int s = t;  // row s of dB
          for (int tt = s; tt < L; tt++) z += YX[tt * L + s] * E[tt * L + s] * Cm[tt * N + n];
          for (int p = 0; p < P; p++) u += X[s * P + p] * dS[p * N + n];
          dBh[i] = dtc[s] * z + ws[s] * u;
        }
        // 5. per-row scalars, a warp a row
        int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
        for (int r = warp; r < L; r += nw) {
          float q = 0.0f, ry = 0.0f, dd = 0.0f;
          for (int p = lane; p < P; p += 32) {
            float u = 0.0f, v = 0.0f;
            for (int n = 0; n < N; n++) u += dS[p * N + n] * Bm[r * N + n], v += S0[p * N + n] * Cm[r * N + n];
            q += X[r * P + p] * u, ry += dY[r * P + p] * v, dd += dY[r * P + p] * X[r * P + p];
          }
          float rf = lane <= r ? CB[r * L + lane] * YX[r * L + lane] * E[r * L + lane] * dtc[lane] : 0.0f;
          float cf = lane >= r ? CB[lane * L + r] * YX[lane * L + r] * E[lane * L + r] : 0.0f;
          q = warp_sum(q), ry = warp_sum(ry), dd = warp_sum(dd), rf = warp_sum(rf), cf = warp_sum(cf);
          if (lane == 0) Q[r] = q, Ry[r] = ET[r] * ry, DD[r] = dd, rowF[r] = rf, colF[r] = cf;
        }
        float sd = 0.0f;
        for (int i = threadIdx.x; i < P * N; i += blockDim.x) sd += dS[i] * S0[i];
        sd = block_sum(sd, red);  // syncs: the rows above are written
        // 6. d dt (direct and through the decays l), dA, dD, d dt_bias; dt_raw's gradient
        if (threadIdx.x == 0) {
          float tail = expf(lc[L - 1]) * sd, suf = 0.0f, da = 0.0f, db = 0.0f, ddd = 0.0f;
          for (int s = 0; s < L; s++) tail += ws[s] * Q[s];
          for (int r = L - 1; r >= 0; r--) {
            suf += Ry[r] + rowF[r] - dtc[r] * colF[r] - ws[r] * Q[r] + (r == L - 1 ? tail : 0.0f);
            float ddt = colF[r] + eS[r] * Q[r] + a * suf;
            da += dtc[r] * suf;
            int t = t0 + r;
            if (t < T) {
              long at = (b * T + t) * H + h;
              float gr = ddt * mamba_sigmoid(bf16_to_f32(dtr[at]) + dtb);
              ddtr[at] = f32_to_bf16(gr);
              db += gr;
            }
            ddd += DD[r];
          }
          hacc[0] += db, hacc[1] += da, hacc[2] += ddd;
        }
        // 7. dS for the chunk before: exp(l_L) dS + sum_t exp(l_t) dy_t C_t^T
        float eL = expf(lc[L - 1]);
        for (int i = threadIdx.x; i < P * N; i += blockDim.x) {
          int p = i / N, n = i % N;
          float v = 0.0f;
          for (int t = 0; t < L; t++) v += ET[t] * dY[t * P + p] * Cm[t * N + n];
          dS[i] = eL * dS[i] + v;
        }
        // 8a. the conv's carry: the first K-1 rows of the later chunk's gradients
        for (int i = threadIdx.x; i < (K - 1) * nch; i += blockDim.x) GG[L * nch + i] = GG[i];
        __syncthreads();
        for (int i = threadIdx.x; i < L * P; i += blockDim.x) GG[(i / P) * nch + i % P] = dXa[i];
      }
      // 8b. the group's B and C gradients: the heads' sums in head order
      cluster_arrive();
      cluster_wait();
      if (live)
        for (int i = threadIdx.x; i < L * nown; i += blockDim.x) {
          int r = i / nown, col = own0 + i % nown;
          const float* src = col < N ? &dBh[r * N + col] : &dCh[r * N + col - N];
          float v = 0.0f;
          for (int q = 0; q < d.hpg; q++) v += cluster_load(src, gbase + q);
          GG[r * nch + P + i % nown] = v;
        }
      cluster_arrive();
      cluster_wait();
      if (!live) continue;
      __syncthreads();
      // 9. the conv backward, a thread per owned channel: silu', then dx, dw, dbias
      for (int cidx = threadIdx.x; cidx < nch; cidx += blockDim.x) {
        int ch = chan(cidx);
        const bf16* w = conv + (long)ch * (K + 1);
        float* ac = acc + cidx * (K + 1);
        for (int r = 0; r < L; r++) {
          int t = t0 + r;
          float gr = 0.0f;
          if (t < T) {
            float p = mamba_conv_pre(xbc, conv, d, b * T, t, ch), sg = mamba_sigmoid(p);
            gr = GG[r * nch + cidx] * sg * (1.0f + p * (1.0f - sg));
          }
          GG[r * nch + cidx] = gr;
        }
        for (int r = 0; r < L && t0 + r < T; r++) {
          int t = t0 + r;
          float v = 0.0f, gr = GG[r * nch + cidx];
          for (int j = 0; j < K; j++) {
            v += bf16_to_f32(w[j]) * GG[(r + K - 1 - j) * nch + cidx];
            int src = t - (K - 1) + j;
            if (src >= 0) ac[j] += gr * bf16_to_f32(xbc[(b * T + src) * d.C + ch]);
          }
          ac[K] += gr;
          dx[(b * T + t) * d.C + ch] = f32_to_bf16(v);
        }
      }
      __syncthreads();
    }
  }
  if (!live) return;
  for (int cidx = threadIdx.x; cidx < nch; cidx += blockDim.x)
    for (int j = 0; j <= K; j++) dconv[(long)chan(cidx) * (K + 1) + j] = f32_to_bf16(acc[cidx * (K + 1) + j]);
  if (threadIdx.x == 0) {
    dssm[h * 3] = f32_to_bf16(hacc[0]);
    dssm[h * 3 + 1] = f32_to_bf16(hacc[1] * a);
    dssm[h * 3 + 2] = f32_to_bf16(hacc[2]);
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
// group. Launch as the forward.
extern "C" __global__ void mamba_group_norm_backward_input(bf16* dx, const bf16* dout, const bf16* x, const bf16* w,
                                                          long rows, int C, int G, float eps) {
  long k = blockIdx.x * 8L + threadIdx.x / 32;
  if (k >= rows * G) return;
  int gs = C / G, j0 = (int)(k % G) * gs;
  long r0 = (k / G) * C;
  float rs = mamba_gn_rstd(x + r0, j0, gs, eps), s = 0.0f;
  for (int j = j0 + threadIdx.x % 32; j < j0 + gs; j += 32) s += bf16_to_f32(dout[r0 + j]) * bf16_to_f32(w[j]) * bf16_to_f32(x[r0 + j]);
  s = warp_sum(s) / (float)gs;
  for (int j = j0 + threadIdx.x % 32; j < j0 + gs; j += 32)
    dx[r0 + j] = f32_to_bf16(rs * (bf16_to_f32(dout[r0 + j]) * bf16_to_f32(w[j]) - bf16_to_f32(x[r0 + j]) * rs * rs * s));
}

// MAMBA_GROUP_NORM_BWD, the weight's gradient dw_j = sum over rows of dout x rstd: a block per 32
// columns, warp w summing rows w, w + 8, ... (each recomputing the rstd of the groups its columns
// touch), the 8 warps' sums added in warp order. Into acc (fp32, added) when given, else dw (bf16).
// Launch: grid ceil(C / 32), block 256.
extern "C" __global__ void mamba_group_norm_backward_weight(bf16* dw, float* acc, const bf16* dout, const bf16* x,
                                                           long rows, int C, int G, float eps) {
  __shared__ float part[8][32];
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gs = C / G, c0 = blockIdx.x * 32, j = c0 + lane;
  int g0 = c0 / gs, g1 = (c0 + 31 < C ? c0 + 31 : C - 1) / gs;
  float s = 0.0f;
  for (long r = warp; r < rows; r += 8) {
    const bf16* row = x + r * C;
    float mine = 0.0f;
    for (int gg = g0; gg <= g1; gg++) {
      float rs = mamba_gn_rstd(row, gg * gs, gs, eps);
      if (j < C && j / gs == gg) mine = rs;
    }
    if (j < C) s += bf16_to_f32(dout[r * C + j]) * bf16_to_f32(row[j]) * mine;
  }
  part[warp][lane] = s;
  __syncthreads();
  if (warp == 0 && j < C) {
    float v = 0.0f;
    for (int q = 0; q < 8; q++) v += part[q][lane];
    if (acc) acc[j] += v;
    else dw[j] = f32_to_bf16(v);
  }
}
