// norm.cuh — RMSNorm and LayerNorm, forward (saving mean / rstd) and backward, plus the residual
// add fused in front of a norm. One warp per row; C must be a multiple of 8.
//
// Weight and bias gradients are sums over rows. To stay deterministic without float atomics they
// are two kernels: norm_backward_weight_partial writes per-row-group partial sums into a scratch
// (G, 2C), colsum_accumulate then adds the G partials in a fixed order into the fp32 grads.
#pragma once
#include "common.cuh"

#define STEPC_NORM_VEC 8                                    // 16-byte vectors a lane keeps of a row
#define STEPC_NORM_TILE (STEPC_WARP * 8 * STEPC_NORM_VEC)   // columns a warp keeps in registers: 2048
#define STEPC_NORM_ROW_WARPS_MAX 8                          // as kernels/launch.h: blocks of at most 256 threads

// The warps that share a row (as kernels/launch.h stepc_norm_row_warps): one a STEPC_NORM_TILE
// columns, so that every row up to 8 tiles (16384 columns) wide is read once into registers; warp k
// of a row takes the tiles k, k + S, ... (its slab). A block has at most STEPC_NORM_ROW_WARPS_MAX
// warps: 256 threads launch at any register count (255 x 256 < 64 K), where 32 warps at these
// kernels' 116-159 registers a thread would ask for more than an SM has and fail to launch.
__device__ __forceinline__ int norm_row_warps(int C) {
  int s = (C + STEPC_NORM_TILE - 1) / STEPC_NORM_TILE;
  return s < 1 ? 1 : s > STEPC_NORM_ROW_WARPS_MAX ? STEPC_NORM_ROW_WARPS_MAX : s;
}

// Tile [t0, t0 + STEPC_NORM_TILE) of row p into u: the lane's vector j is columns
// t0 + (lane + 32 j) * 8 .. + 8, the order the sums below run in (as a loop c = lane * 8, += 256).
__device__ __forceinline__ void norm_tile_load(uint4* u, const bf16* p, int t0, int C, int lane) {
#pragma unroll
  for (int j = 0; j < STEPC_NORM_VEC; j++) {
    int c = t0 + (lane + STEPC_WARP * j) * 8;
    if (c < C) u[j] = *(const uint4*)(p + c);
  }
}

// The row's total of v, each of its S warps' sum over its slab, added in slab order (sh: the
// block's S-warp rows, r this warp's row in the block). With S > 1 it synchronises the row's S
// warps (named barrier 1 + r: the block's other rows go on), so each of them calls it, a warp past
// the last row too; with S = 1 it is v (the one warp's sum).
__device__ __forceinline__ float norm_row_total(float v, float* sh, int r, int slab, int S) {
  if (S == 1) return v;
  bar_sync_named(1 + r, S * STEPC_WARP); /* the previous call's reads are done */
  if (threadIdx.x % STEPC_WARP == 0) sh[r * S + slab] = v;
  bar_sync_named(1 + r, S * STEPC_WARP);
  float t = sh[r * S];
  for (int k = 1; k < S; k++) t += sh[r * S + k];
  return t;
}

// Shared body of the four forward kernels. `mean_out` null means RMSNorm (no centring).
// With `res_b` non-null the input is x = bf16(inp + res_b), written to `res_out` first: the norm
// then reads exactly the rounded values that the residual stream keeps, so backward agrees.
// A row is S = norm_row_warps(C) warps' (blockDim.x = 32 S rows_per_block): each keeps its slab of up
// to STEPC_NORM_TILE columns in registers, read once (every load of the lane in flight together); a
// slab of more tiles (rows over 8 tiles) is read a tile at a time, again for each pass. Each sum runs
// over a lane's columns in order, then the warp (warp_sum), then the row's warps in order. Returns
// max |out| over the lane's stored values when `fold` (the fused fp8 amax, common.cuh amax_fold),
// else 0.
__device__ __forceinline__ float norm_forward_row(bf16* out, float* mean_out, float* rstd_out, bf16* res_out,
                                                  const bf16* inp, const bf16* res_b, const bf16* weight,
                                                  const bf16* bias, int N, int C, float eps, bool fold) {
  __shared__ float sh[STEPC_NORM_ROW_WARPS_MAX];
  int S = norm_row_warps(C), lane = threadIdx.x % STEPC_WARP, warp = threadIdx.x / STEPC_WARP;
  int slab = warp % S, r = warp / S, step = S * STEPC_NORM_TILE;
  long row = (long)blockIdx.x * (blockDim.x / (STEPC_WARP * S)) + r;
  float m = 0.0f;
  if (S == 1 && row >= N) return m;
  int Cl = row < N ? C : 0; /* the columns this warp walks: none past the last row */
  const bf16* x = inp + row * C;
  bool kept = C <= step;
  uint4 u[STEPC_NORM_VEC], b[STEPC_NORM_VEC];
  float s = 0.0f;
  for (int t0 = slab * STEPC_NORM_TILE; t0 < Cl && (kept || res_b || mean_out); t0 += step) {
    norm_tile_load(u, x, t0, C, lane);
    if (res_b) {
      norm_tile_load(b, res_b + row * C, t0, C, lane);
#pragma unroll
      for (int j = 0; j < STEPC_NORM_VEC; j++) {
        int c = t0 + (lane + STEPC_WARP * j) * 8;
        if (c >= C) continue;
        float a8[8], b8[8];
        unpack8(u[j], a8);
        unpack8(b[j], b8);
        for (int k = 0; k < 8; k++) a8[k] += b8[k];
        u[j] = pack8(a8);
        *(uint4*)(res_out + row * C + c) = u[j];
      }
    }
    if (mean_out)
#pragma unroll
      for (int j = 0; j < STEPC_NORM_VEC; j++) {
        float v[8];
        if (t0 + (lane + STEPC_WARP * j) * 8 >= C) continue;
        unpack8(u[j], v);
        for (int k = 0; k < 8; k++) s += v[k];
      }
  }
  if (res_b) {
    __syncwarp();
    x = res_out + row * C;
  }
  float mean = mean_out ? norm_row_total(warp_sum(s), sh, r, slab, S) / C : 0.0f, ss = 0.0f;
  for (int t0 = slab * STEPC_NORM_TILE; t0 < Cl; t0 += step) {
    if (!kept) norm_tile_load(u, x, t0, C, lane);
#pragma unroll
    for (int j = 0; j < STEPC_NORM_VEC; j++) {
      float v[8];
      if (t0 + (lane + STEPC_WARP * j) * 8 >= C) continue;
      unpack8(u[j], v);
      for (int k = 0; k < 8; k++) ss += (v[k] - mean) * (v[k] - mean);
    }
  }
  float rstd = rsqrtf(norm_row_total(warp_sum(ss), sh, r, slab, S) / C + eps);
  for (int t0 = slab * STEPC_NORM_TILE; t0 < Cl; t0 += step) {
    if (!kept) norm_tile_load(u, x, t0, C, lane);
#pragma unroll
    for (int j = 0; j < STEPC_NORM_VEC; j++) {
      int c = t0 + (lane + STEPC_WARP * j) * 8;
      if (c >= C) continue;
      float v[8], w[8], bb[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      unpack8(u[j], v);
      load8(weight + c, w);
      if (bias) load8(bias + c, bb);
      for (int k = 0; k < 8; k++) v[k] = (v[k] - mean) * rstd * w[k] + bb[k];
      uint4 y = pack8(v);
      *(uint4*)(out + row * C + c) = y;
      if (fold) m = amax8(m, y);
    }
  }
  if (Cl && slab == 0 && lane == 0) {
    rstd_out[row] = rstd;
    if (mean_out) mean_out[row] = mean;
  }
  return m;
}

// The forward kernels' fused fp8 amax of `out` (amax null: none; part, amax as amax_fold's).
__device__ __forceinline__ void norm_forward_amax(float m, float* part, unsigned* amax) {
  __shared__ float red[32];
  if (amax) amax_fold(m, red, part, amax);
}

// Launch for all forward kernels: blockDim.x = 32 S rows (kernels/launch.h stepc_norm_fwd_threads),
// gridDim.x = ceil(N / rows) (stepc_norm_fwd_rows).
extern "C" __global__ void rmsnorm_forward(bf16* out,           // (N, C)
                                           float* rstd,         // (N)
                                           const bf16* inp,     // (N, C)
                                           const bf16* weight,  // (C)
                                           int N, int C, float eps,
                                           float* amax_part,    // (gridDim.x) or null
                                           unsigned* amax) {    // [2] or null: common.cuh amax_fold
  norm_forward_amax(norm_forward_row(out, 0, rstd, 0, inp, 0, weight, 0, N, C, eps, amax), amax_part, amax);
}

extern "C" __global__ void layernorm_forward(bf16* out,           // (N, C)
                                             float* mean,         // (N)
                                             float* rstd,         // (N)
                                             const bf16* inp,     // (N, C)
                                             const bf16* weight,  // (C)
                                             const bf16* bias,    // (C) or null
                                             int N, int C, float eps,
                                             float* amax_part,    // (gridDim.x) or null
                                             unsigned* amax) {    // [2] or null
  norm_forward_amax(norm_forward_row(out, mean, rstd, 0, inp, 0, weight, bias, N, C, eps, amax), amax_part,
                    amax);
}

// residual = a + b; out = rmsnorm(residual). The backward of the add is the identity.
extern "C" __global__ void residual_rmsnorm_forward(bf16* residual,     // (N, C)
                                                    bf16* out,          // (N, C)
                                                    float* rstd,        // (N)
                                                    const bf16* a,      // (N, C)
                                                    const bf16* b,      // (N, C)
                                                    const bf16* weight, // (C)
                                                    int N, int C, float eps,
                                                    float* amax_part,   // (gridDim.x) or null
                                                    unsigned* amax) {   // [2] or null: of out
  norm_forward_amax(norm_forward_row(out, 0, rstd, residual, a, b, weight, 0, N, C, eps, amax), amax_part,
                    amax);
}

extern "C" __global__ void residual_layernorm_forward(bf16* residual,     // (N, C)
                                                      bf16* out,          // (N, C)
                                                      float* mean,        // (N)
                                                      float* rstd,        // (N)
                                                      const bf16* a,      // (N, C)
                                                      const bf16* b,      // (N, C)
                                                      const bf16* weight, // (C)
                                                      const bf16* bias,   // (C) or null
                                                      int N, int C, float eps,
                                                      float* amax_part,   // (gridDim.x) or null
                                                      unsigned* amax) {   // [2] or null: of out
  norm_forward_amax(norm_forward_row(out, mean, rstd, residual, a, b, weight, bias, N, C, eps, amax),
                    amax_part, amax);
}

// The backward's row sums over eight columns: sg += g, sgx += g * xhat (g = dout * weight).
__device__ __forceinline__ void norm_backward_sums8(const float* v, const float* d, const float* w, float mean, float rstd,
                                                    float* sg, float* sgx) {
  for (int k = 0; k < 8; k++) {
    float g = d[k] * w[k];
    *sg += g;
    *sgx += g * (v[k] - mean) * rstd;
  }
}

// dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * weight, xhat = (x - mean) * rstd;
// RMSNorm drops the mean(g) term and uses mean = 0. accumulate != 0 adds into dinp (the residual
// stream's gradient) instead of overwriting it.
__device__ __forceinline__ void norm_backward_row(bf16* dinp, const bf16* dout, const bf16* inp,
                                                  const bf16* weight, const float* mean_in,
                                                  const float* rstd_in, int N, int C, int accumulate) {
  int lane = threadIdx.x % STEPC_WARP;
  long row = (long)blockIdx.x * (blockDim.x / STEPC_WARP) + threadIdx.x / STEPC_WARP;
  if (row >= N) return;
  float mean = mean_in ? mean_in[row] : 0.0f, rstd = rstd_in[row];
  const bf16 *x = inp + row * C, *dy = dout + row * C;
  float sg = 0.0f, sgx = 0.0f;
  for (int c = lane * 8; c < C; c += STEPC_WARP * 8) {
    float v[8], d[8], w[8];
    load8(x + c, v);
    load8(dy + c, d);
    load8(weight + c, w);
    norm_backward_sums8(v, d, w, mean, rstd, &sg, &sgx);
  }
  sg = mean_in ? warp_sum(sg) / C : 0.0f;
  sgx = warp_sum(sgx) / C;
  for (int c = lane * 8; c < C; c += STEPC_WARP * 8) {
    float v[8], d[8], w[8], o[8];
    load8(x + c, v);
    load8(dy + c, d);
    load8(weight + c, w);
    if (accumulate) load8(dinp + row * C + c, o);
    for (int k = 0; k < 8; k++) {
      float r = rstd * (d[k] * w[k] - sg - (v[k] - mean) * rstd * sgx);
      o[k] = accumulate ? o[k] + r : r;
    }
    store8(dinp + row * C + c, o);
  }
}

// Launch: as the forward kernels.
extern "C" __global__ void rmsnorm_backward_input(bf16* dinp,          // (N, C)
                                                  const bf16* dout,    // (N, C)
                                                  const bf16* inp,     // (N, C)
                                                  const bf16* weight,  // (C)
                                                  const float* rstd,   // (N)
                                                  int N, int C, int accumulate) {
  norm_backward_row(dinp, dout, inp, weight, 0, rstd, N, C, accumulate);
}

extern "C" __global__ void layernorm_backward_input(bf16* dinp,          // (N, C)
                                                    const bf16* dout,    // (N, C)
                                                    const bf16* inp,     // (N, C)
                                                    const bf16* weight,  // (C)
                                                    const float* mean,   // (N)
                                                    const float* rstd,   // (N)
                                                    int N, int C, int accumulate) {
  norm_backward_row(dinp, dout, inp, weight, mean, rstd, N, C, accumulate);
}

// dinp (as norm_backward_row with accumulate = 0) and the weight-gradient partial sums, in one
// pass over x and dout: block g owns rows [g R, (g + 1) R), R = ceil(N / G). A row is S =
// norm_row_warps(C) warps', each over its slab (norm_forward_row); the block's W warps are W / S row
// lanes, lane l taking rows r0 + l, r0 + l + W / S, ... (a row up to S tiles wide read once, into
// registers). Each warp adds dout * xhat (and, for LayerNorm, dout) of its lanes' columns into its
// own slice of shared memory (P slices of Cw floats: its slab's tiles, lane-major: the slab's column
// c = 8 v + k sits at ((v / 32) 8 + k) 32 + v % 32, so a warp's 32 lanes touch 32 consecutive floats;
// Cw = C rounded up to 256 where S = 1); at the end the block sums each column's slices in warp order
// into partial[g] = [dw | db]. The sums have a fixed order for a fixed launch, so the result is
// deterministic.
__device__ __forceinline__ void norm_backward_fused(bf16* dinp, float* partial, const bf16* dout, const bf16* addend,
                                                    const bf16* inp, const bf16* weight, const float* mean_in,
                                                    const float* rstd_in, int N, int C, float* amax_part,
                                                    unsigned* amax) {
  STEPC_DYNAMIC_SMEM(float, norm_acc); /* (W, P, Cw) */
  __shared__ float sh[STEPC_NORM_ROW_WARPS_MAX];
  int S = norm_row_warps(C), lane = threadIdx.x % STEPC_WARP, warp = threadIdx.x / STEPC_WARP,
      W = blockDim.x / STEPC_WARP, L = W / S, slab = warp % S, lr = warp / S, step = S * STEPC_NORM_TILE;
  int nt = ((C + STEPC_NORM_TILE - 1) / STEPC_NORM_TILE + S - 1) / S; /* tiles a slab */
  int P = mean_in ? 2 : 1, Cw = S == 1 ? (C + 255) / 256 * 256 : nt * STEPC_NORM_TILE;
  float* acc = norm_acc + (long)warp * P * Cw;
  for (int i = lane; i < P * Cw; i += STEPC_WARP) acc[i] = 0.0f;
  __syncwarp();
  long R = (N + gridDim.x - 1) / gridDim.x, r0 = (long)blockIdx.x * R, r1 = r0 + R < N ? r0 + R : N;
  long its = r1 > r0 ? (r1 - r0 + L - 1) / L : 0; /* the same for every warp: S > 1 syncs each row */
  bool kept = C <= step;
  uint4 ux[STEPC_NORM_VEC], ud[STEPC_NORM_VEC];
  float m = 0.0f; /* max |dinp| over the stored values (the fused fp8 amax) */
  for (long it = 0; it < its; it++) {
    long row = r0 + lr + it * L;
    if (S == 1 && row >= r1) break;
    int Cl = row < r1 ? C : 0; /* the columns this warp walks: none past the group's last row */
    float mean = Cl && mean_in ? mean_in[row] : 0.0f, rstd = Cl ? rstd_in[row] : 0.0f;
    const bf16 *x = inp + row * C, *dy = dout + row * C;
    float sg = 0.0f, sgx = 0.0f;
#pragma unroll
    for (int pass = 0; pass < 2; pass++) { /* the row sums, then dinp and the weight sums */
      if (pass) {
        sg = mean_in ? norm_row_total(warp_sum(sg), sh, lr, slab, S) / C : 0.0f;
        sgx = norm_row_total(warp_sum(sgx), sh, lr, slab, S) / C;
      }
      for (int t0 = slab * STEPC_NORM_TILE, q = 0; t0 < Cl; t0 += step, q++) {
        if (!pass || !kept) {
          norm_tile_load(ux, x, t0, C, lane);
          norm_tile_load(ud, dy, t0, C, lane);
        }
#pragma unroll
        for (int j = 0; j < STEPC_NORM_VEC; j++) {
          int c = t0 + (lane + STEPC_WARP * j) * 8;
          if (c >= C) continue;
          float v[8], d[8], w[8], o[8];
          unpack8(ux[j], v);
          unpack8(ud[j], d);
          load8(weight + c, w);
          if (!pass) {
            norm_backward_sums8(v, d, w, mean, rstd, &sg, &sgx);
            continue;
          }
          float* a = acc + (q * 8 + j) * 256 + lane;
          for (int k = 0; k < 8; k++) {
            float xhat = (v[k] - mean) * rstd;
            o[k] = rstd * (d[k] * w[k] - sg - xhat * sgx);
            a[32 * k] += d[k] * xhat;
            if (mean_in) a[Cw + 32 * k] += d[k];
          }
          if (addend) { /* dx rounded to bf16, then residual_add's sum of it and the addend */
            float e[8];
            load8(addend + row * C + c, e);
            for (int k = 0; k < 8; k++) o[k] = bf16_to_f32(f32_to_bf16(o[k])) + e[k];
          }
          uint4 y = pack8(o);
          *(uint4*)(dinp + row * C + c) = y;
          if (amax) m = amax8(m, y);
        }
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < P * C; i += blockDim.x) {
    int p = i / C, c = i % C, tile = c / STEPC_NORM_TILE;
    int lc = tile / S * STEPC_NORM_TILE + c % STEPC_NORM_TILE, v = lc / 8; /* c in its slab */
    int at = p * Cw + ((v / 32) * 8 + c % 8) * 32 + v % 32;
    float s = 0.0f;
    for (int w = tile % S; w < W; w += S) s += norm_acc[(long)w * P * Cw + at];
    partial[(long)blockIdx.x * 2 * C + i] = s;
  }
  __shared__ float red[32];
  if (amax) amax_fold(m, red, amax_part, amax);
}

// Launch (both): gridDim.x = G row groups, blockDim.x = 32 W (W a multiple of S), dynamic shared
// memory W P Cw 4 bytes (P = 1 RMSNorm, 2 LayerNorm; kernels/launch.h stepc_norm_bwd_warps, _smem). Then colsum_accumulate
// adds partial's columns [0, C) into the weight gradient (and [C, 2C) into the bias gradient).
// addend (or null): dinp = bf16(bf16(dx) + addend), the residual gradient summed as residual_add
// sums it (the compiler's FUSE_NORM_BWD_ADD); dinp may not overlap addend. amax (or null): the fused
// fp8 amax of dinp (common.cuh amax_fold, amax_part (gridDim.x)).
extern "C" __global__ void rmsnorm_backward(bf16* dinp,          // (N, C)
                                            float* partial,      // (G, 2C), the first C columns written
                                            const bf16* dout,    // (N, C)
                                            const bf16* addend,  // (N, C) or null
                                            const bf16* inp,     // (N, C)
                                            const bf16* weight,  // (C)
                                            const float* rstd,   // (N)
                                            int N, int C, float* amax_part, unsigned* amax) {
  norm_backward_fused(dinp, partial, dout, addend, inp, weight, 0, rstd, N, C, amax_part, amax);
}

extern "C" __global__ void layernorm_backward(bf16* dinp,          // (N, C)
                                              float* partial,      // (G, 2C)
                                              const bf16* dout,    // (N, C)
                                              const bf16* addend,  // (N, C) or null
                                              const bf16* inp,     // (N, C)
                                              const bf16* weight,  // (C)
                                              const float* mean,   // (N)
                                              const float* rstd,   // (N)
                                              int N, int C, float* amax_part, unsigned* amax) {
  norm_backward_fused(dinp, partial, dout, addend, inp, weight, mean, rstd, N, C, amax_part, amax);
}

// partial[g][c] = sum over the rows of group g of dout * xhat (the weight gradient) and
// partial[g][C + c] = sum of dout (the bias gradient; unused for RMSNorm). Group g holds rows
// [g * R, (g + 1) * R), R = ceil(N / G); each thread walks its rows in order.
// Launch: gridDim.y = G row groups, gridDim.x * blockDim.x >= C / 2 (two channels per thread).
extern "C" __global__ void norm_backward_weight_partial(float* partial,      // (G, 2C)
                                                        const bf16* dout,   // (N, C)
                                                        const bf16* inp,    // (N, C)
                                                        const float* mean,  // (N) or null (RMSNorm)
                                                        const float* rstd,  // (N)
                                                        int N, int C) {
  int c = (blockIdx.x * blockDim.x + threadIdx.x) * 2;
  if (c >= C) return;
  int G = gridDim.y, g = blockIdx.y;
  long R = (N + G - 1) / G, r0 = g * R, r1 = r0 + R < N ? r0 + R : N;
  float dw0 = 0.0f, dw1 = 0.0f, db0 = 0.0f, db1 = 0.0f;
  for (long r = r0; r < r1; r++) {
    unsigned d = *(const unsigned*)(dout + r * C + c), x = *(const unsigned*)(inp + r * C + c);
    float m = mean ? mean[r] : 0.0f, s = rstd[r];
    float d0 = bf16x2_lo(d), d1 = bf16x2_hi(d);
    dw0 += d0 * (bf16x2_lo(x) - m) * s;
    dw1 += d1 * (bf16x2_hi(x) - m) * s;
    db0 += d0;
    db1 += d1;
  }
  float* p = partial + (long)g * 2 * C;
  p[c] = dw0;
  p[c + 1] = dw1;
  p[C + c] = db0;
  p[C + c + 1] = db1;
}

// partial[g][c] = sum over rows of group g of dout (the gradient of a linear layer's bias).
// Launch: as norm_backward_weight_partial.
extern "C" __global__ void bias_backward_partial(float* partial,     // (G, C)
                                                 const bf16* dout,   // (N, C)
                                                 int N, int C) {
  int c = (blockIdx.x * blockDim.x + threadIdx.x) * 2;
  if (c >= C) return;
  int G = gridDim.y, g = blockIdx.y;
  long R = (N + G - 1) / G, r0 = g * R, r1 = r0 + R < N ? r0 + R : N;
  float s0 = 0.0f, s1 = 0.0f;
  for (long r = r0; r < r1; r++) {
    unsigned d = *(const unsigned*)(dout + r * C + c);
    s0 += bf16x2_lo(d);
    s1 += bf16x2_hi(d);
  }
  partial[(long)g * C + c] = s0;
  partial[(long)g * C + c + 1] = s1;
}

// out[c] += the sum over g = 0..G-1 of partial[g * ld + c]: block b owns columns 32 b .. 32 b + 31,
// its S = blockDim.x / 32 warps each sum a run of ceil(G / S) groups in order, then the S run sums
// are added in order: a fixed order for a fixed launch.
// Launch: gridDim.x = ceil(C / 32), blockDim.x a multiple of 32 (256).
extern "C" __global__ void colsum_accumulate(float* out,            // (C) accumulated
                                             const float* partial,  // (G, ld), first C columns read
                                             int G, int C, int ld) {
  __shared__ float runs[32][33];
  int lane = threadIdx.x % STEPC_WARP, warp = threadIdx.x / STEPC_WARP, S = blockDim.x / STEPC_WARP;
  int c = blockIdx.x * STEPC_WARP + lane, per = (G + S - 1) / S, g0 = warp * per, g1 = g0 + per < G ? g0 + per : G;
  float s = 0.0f;
  if (c < C)
    for (int g = g0; g < g1; g++) s += partial[(long)g * ld + c];
  runs[warp][lane] = s;
  __syncthreads();
  if (warp || c >= C) return;
  float t = 0.0f;
  for (int w = 0; w < S; w++) t += runs[w][lane];
  out[c] += t;
}
