/* launch.h — launch geometry of the kernels that need more than "any 1-D grid" (plain C, for the
 * host side: codegen, runtime, tests). Dynamic shared memory above 48 KiB must be allowed per
 * function first (cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes)). */
#ifndef STEPC_KERNELS_LAUNCH_H
#define STEPC_KERNELS_LAUNCH_H

/* The grouped fp8 casts (kernels/fp8.cuh fp8_cast_transpose_grouped): a rows cast finds each row's expert
 * among at most this many (its block's shared copy of the segments). */
#define STEPC_FP8_GROUP_EMAX 512

/* Flash attention: T must be a multiple of STEPC_FLASH_T_MULTIPLE, D 64 or 128. Whether the flash
 * kernels take an attention of T rows and head dim D (else the plain kernels run). */
#define STEPC_FLASH_T_MULTIPLE 128
static inline int stepc_flash_supported(long long T, long long D) {
  return (D == 64 || D == 128) && T % STEPC_FLASH_T_MULTIPLE == 0;
}

/* The flash kernels' tiles (kernels/flash.cuh): every block has 128 threads. `wg` says the cubin
 * runs the Hopper kernels (sm_90a, compute capability 9.x: wgmma, one warpgroup per block, 64 query
 * rows or keys per block, operand tiles 1024-aligned: 1 KiB more shared memory than they use);
 * otherwise the mma.sync kernels (4 warps: 32 query rows or 16 keys per warp). The sizes below
 * must match the instantiations there. */
#define STEPC_FLASH_THREADS 128
static inline int stepc_flash_wg(int cc_major) { return cc_major == 9; }
/* The wgmma kernels' shared memory: `resident` rows of D kept for the whole block plus `tile`-row
 * tiles of two operands, double-buffered, and the 1 KiB that aligns them. */
static inline unsigned stepc_flash_wg_tiles_smem(int D, int resident, int tile) {
  return (unsigned)((resident + 4 * tile) * D * 2 + 1024);
}

/* flash_attention_forward_d{64,128}: grid (T / rows, H, B). K/V tiles of 64 keys, double-buffered. */
static inline int stepc_flash_fwd_rows(int wg) { return wg ? 64 : 128; }
static inline unsigned stepc_flash_fwd_smem(int D, int wg) {
  return wg ? stepc_flash_wg_tiles_smem(D, 64, 64) : (unsigned)((128 + 4 * 64) * (D + 8) * 2);
}

/* flash_attention_backward_preprocess: one warp per (b, t, h); block 256, grid ceil(B*T*H/8). */
#define STEPC_FLASH_PRE_THREADS 256

/* flash_attention_backward_dkdv_d{64,128}: grid (T/64, Hkv, B); query tiles of bq rows with their
 * LSE and Dsum, double-buffered (wgmma: 128 at d64, 64 at d128; mma.sync: 64). */
#define STEPC_FLASH_DKDV_KEYS 64
static inline unsigned stepc_flash_dkdv_smem(int D, int wg) {
  int bq = wg && D == 64 ? 128 : 64;
  return wg ? stepc_flash_wg_tiles_smem(D, 2 * 64, bq) + 4 * bq * 4
            : (unsigned)((2 * 64 + 4 * bq) * (D + 8) * 2 + 4 * bq * 4);
}

/* flash_attention_backward_dq_d{64,128}: grid (T / rows, H, B); K/V tiles of bk keys (wgmma 64,
 * mma.sync 32), double-buffered. */
static inline int stepc_flash_dq_rows(int wg) { return wg ? 64 : 128; }
static inline unsigned stepc_flash_dq_smem(int D, int wg) {
  return wg ? stepc_flash_wg_tiles_smem(D, 2 * 64, 64) : (unsigned)((2 * 128 + 4 * 32) * (D + 8) * 2);
}

/* The router's fp32-weight linear on the tensor cores (kernels/moe.cuh router_linear_forward /
 * _dgrad): blocks of 128 threads own 64 rows x 64 output columns, grid (ceil(N / 64), ceil(E / 64))
 * forward, (ceil(C / 64), ceil(N / 64)) dgrad; dynamic shared memory (bf16): the input tile 64 x 32
 * and the weight's three bf16 parts, 64 x 32 each (forward) or 32 x 64 each (dgrad), rows padded by 8. */
#define STEPC_ROUTER_THREADS 128
static inline unsigned stepc_router_fwd_smem(void) { return 4u * 64 * 40 * 2; }
static inline unsigned stepc_router_dgrad_smem(void) { return 64u * 40 * 2 + 3u * 32 * 72 * 2; }

/* The MoE grouped GEMMs on the tensor cores (kernels/moe.cuh, grouped_linear_*_tc): blocks of
 * STEPC_MOE_TC_THREADS own a BM x BN output tile; forward/dgrad grid (ceil(out width / BN),
 * ceil(N / BM) + E), wgrad grid (ceil(K / BN), ceil(Nout / BM), E). Dynamic shared memory: on
 * sm_90a (wgmma) 4 stages of 64-wide k steps, (BM + BN) x 64 bf16 each, plus 1 KiB to align them
 * to 1024 bytes; elsewhere (mma.sync) 3 stages of (BM + BN) x 72 bf16. The larger of the two. */
#define STEPC_MOE_TC_BM 128
#define STEPC_MOE_TC_BN 256
#define STEPC_MOE_TC_THREADS 256
static inline unsigned stepc_moe_tc_smem(void) {
  unsigned wg = 4 * (STEPC_MOE_TC_BM + STEPC_MOE_TC_BN) * 64 * 2 + 1024,
           tc = 3 * (STEPC_MOE_TC_BM + STEPC_MOE_TC_BN) * 72 * 2;
  return wg > tc ? wg : tc;
}

/* The warp-specialised grouped GEMMs (kernels/moe.cuh, grouped_*_ws; sm_90a): the same tiles as the
 * *_tc kernels, persistent (stepc_moe_ws_grid blocks over the tiles), blocks of STEPC_MOE_WS_THREADS (a
 * producer warpgroup whose one thread issues the TMA copies, two consumer warpgroups); the operands
 * through tensor maps (kernels/tma.cuh; their boxes: moe.cuh). Dynamic shared memory: 4 stages of
 * (BM + BN) rows of 128 bytes, each stage's two barriers, 1 KiB to align. */
#define STEPC_MOE_WS_THREADS 384
#define STEPC_MOE_WS_STAGES 4
static inline unsigned stepc_moe_ws_smem(void) {
  return STEPC_MOE_WS_STAGES * ((STEPC_MOE_TC_BM + STEPC_MOE_TC_BN) * 64 * 2 + 16) + 1024;
}
/* Their grid: one block per SM, fewer for fewer tiles (column tiles x row_tiles, row_tiles =
 * ceil(N / BM) + E). */
static inline unsigned stepc_moe_ws_grid(int sm_count, long out_width, long row_tiles) {
  long tiles = (out_width + STEPC_MOE_TC_BN - 1) / STEPC_MOE_TC_BN * row_tiles;
  return (unsigned)(tiles < sm_count ? (tiles < 1 ? 1 : tiles) : sm_count);
}

/* The fused QKV split + RoPE kernels (rope_split_qkv, rope_concat_qkv): grid = tokens (a block per
 * token row), block STEPC_ROPE_QKV_THREADS; head size D % 16 == 0 and D / 2 <= STEPC_ROPE_MAX_HALF
 * (rope.cuh's shared angle table). */
#define STEPC_ROPE_QKV_THREADS 128
#define STEPC_ROPE_MAX_HALF 256

/* cross_entropy_cluster (kernels/loss.cuh): a cluster of STEPC_CE_CLUSTER blocks per logits row,
 * each thread holding up to STEPC_CE_VEC 16-byte vectors; grid N * STEPC_CE_CLUSTER, block
 * stepc_ce_threads(Vp): the smallest multiple of 32 that holds a block's share of the row, or 0
 * where a row needs more than 1024 threads a block (Vp > 524288: cross_entropy_forward_backward,
 * two passes, runs instead). */
#define STEPC_CE_CLUSTER 8
#define STEPC_CE_VEC 8
static inline unsigned stepc_ce_threads(int Vp) {
  int cw = (Vp / 8 + STEPC_CE_CLUSTER - 1) / STEPC_CE_CLUSTER, t = (cw + STEPC_CE_VEC - 1) / STEPC_CE_VEC;
  t = (t + 31) / 32 * 32;
  return t > 1024 ? 0u : t < 32 ? 32u : (unsigned)t;
}

/* Row kernels: the norms' backward_input kernels, blockDim 32 * STEPC_NORM_ROWS_PER_BLOCK (a warp a
 * row), grid ceil(N / rows). */
#define STEPC_NORM_ROWS_PER_BLOCK 4

/* The norms' forward and one-pass backward kernels (kernels/norm.cuh) give a row S warps, each
 * keeping up to STEPC_NORM_TILE_COLS of its columns in registers (as norm.cuh's STEPC_NORM_TILE and
 * STEPC_NORM_ROW_WARPS_MAX): S = 1 up to 2048 columns, 2 up to 4096, ..., 8 from 14337 on (wider
 * rows re-read their tiles). A block has at most 8 warps, so that it launches at any register count. */
#define STEPC_NORM_TILE_COLS 2048
#define STEPC_NORM_ROW_WARPS_MAX 8
static inline int stepc_norm_row_warps(int C) {
  int s = (C + STEPC_NORM_TILE_COLS - 1) / STEPC_NORM_TILE_COLS;
  return s < 1 ? 1 : s > STEPC_NORM_ROW_WARPS_MAX ? STEPC_NORM_ROW_WARPS_MAX : s;
}
/* *norm_forward: rows a block (4, fewer where 4 rows' warps would pass 32), blockDim 32 S rows,
 * grid ceil(N / rows). */
static inline int stepc_norm_fwd_rows(int C) {
  int s = stepc_norm_row_warps(C), r = 4;
  while (r > 1 && r * s > STEPC_NORM_ROW_WARPS_MAX) r /= 2;
  return r;
}
static inline unsigned stepc_norm_fwd_threads(int C) {
  return (unsigned)(32 * stepc_norm_row_warps(C) * stepc_norm_fwd_rows(C));
}

/* rmsnorm_backward / layernorm_backward (dinp and the weight-gradient partials in one pass): grid G
 * row groups, block 32 W, dynamic shared memory stepc_norm_bwd_smem(C, P, W) (P = 1 RMSNorm, 2
 * LayerNorm): each warp's P sums over its slab's columns, the slab padded to whole tiles (to 256
 * columns where S = 1). stepc_norm_bwd_warps gives W: S times up to 4 rows at a time within
 * STEPC_NORM_BWD_SMEM, 0 where one row's sums do not fit (rows over 24576 wide for RMSNorm, 12288
 * for LayerNorm: the three-kernel path, *norm_backward_input + norm_backward_weight_partial +
 * colsum, runs). */
#define STEPC_NORM_BWD_SMEM (96 * 1024)
static inline unsigned stepc_norm_bwd_smem(int C, int P, int W) {
  int s = stepc_norm_row_warps(C), tiles = (C + STEPC_NORM_TILE_COLS - 1) / STEPC_NORM_TILE_COLS;
  int cw = s == 1 ? (C + 255) / 256 * 256 : (tiles + s - 1) / s * STEPC_NORM_TILE_COLS;
  return (unsigned)(cw * 4 * P * W);
}
static inline int stepc_norm_bwd_warps(int C, int P) {
  int s = stepc_norm_row_warps(C);
  unsigned row = stepc_norm_bwd_smem(C, P, s), l = STEPC_NORM_BWD_SMEM / row;
  if (l > 4) l = 4;
  while (l > 1 && l * s > STEPC_NORM_ROW_WARPS_MAX) l--;
  return (int)l * s;
}
/* colsum_accumulate: grid ceil(C / 32), block 32 * STEPC_COLSUM_WARPS. */
#define STEPC_COLSUM_WARPS 8

/* The Mamba-2 mixer (kernels/mamba.cuh): chunks of STEPC_MAMBA_CHUNK rows, blocks of
 * STEPC_MAMBA_THREADS. MAMBA_MIXER: mamba_conv_forward grid (ceil(C / 256), ceil(T /
 * STEPC_MAMBA_CONV_ROWS), B), block 256, writes the conv output u (B, T, C) into the workspace;
 * mamba_chunk_cb grid (nc, G, B) the chunks' C.B products into it; then
 * mamba_scan_forward grid (ceil(P / STEPC_MAMBA_SLICE), H, B), a block a slice of a head's state
 * walking the chunks in order. MAMBA_MIXER_BWD: mamba_conv_forward as the forward (u in the
 * workspace's gpre part: see below), then the groups in passes of StepcMambaWs.gpp groups: pass k
 * launches mamba_scan_states grid (ceil(P / STEPC_MAMBA_SLICE), Hp, 2 B) with Hp = gpp H / G (the
 * pass's heads) and the argument g0 = k gpp, then mamba_chunk_backward grid (nc, gpp, B) with
 * nc = ceil(T / STEPC_MAMBA_CHUNK); then mamba_conv_backward grid (ceil(C / 256), segs, B) with
 * segs = stepc_mamba_segs(T), and mamba_param_grads grid ceil((C (K+1) + 3 H) / 256). Conv taps
 * <= STEPC_MAMBA_KMAX, state dim <= STEPC_MAMBA_NMAX (register tiles), P and N multiples of 4 (the
 * scans read u in float4). Dynamic shared memory (fp32 words; the scans' rows of N columns padded
 * by 4, of a slice's STEPC_MAMBA_SLICE columns pitched STEPC_MAMBA_XP; the chunk backward's rows
 * pitched stepc_mamba_pitch) below, each at most STEPC_MAMBA_SMEM_MAX. */
#define STEPC_MAMBA_CHUNK 32
#define STEPC_MAMBA_THREADS 256
#define STEPC_MAMBA_KMAX 8
#define STEPC_MAMBA_NMAX 128
#define STEPC_MAMBA_SLICE 16
#define STEPC_MAMBA_XP 24
#define STEPC_MAMBA_CONV_ROWS 64
#define STEPC_MAMBA_SEGS 64
#define STEPC_MAMBA_SMEM_MAX (227 * 1024)
/* mamba_chunk_cb: a chunk's B and C rows of one group (rows of N + 4) and an empty slice, the
 * scans' chunk buffer without its per-row factors. */
static inline unsigned stepc_mamba_cb_smem(int N) {
  return (unsigned)(4 * STEPC_MAMBA_CHUNK * (2 * (N + 4) + STEPC_MAMBA_XP));
}
/* mamba_scan_forward: two chunk buffers (B and C rows, x slice rows, 4 L per-row factors, the
 * chunk's L x L C.B), two transposed state slices (N x XP), M (L x (L + 4)) and the C S^T halves
 * (4 warps' 16 x 8 tiles): 111.5 KiB at N 128, two blocks an SM. */
static inline unsigned stepc_mamba_scan_smem(int N) {
  long L = STEPC_MAMBA_CHUNK, buf = 2 * L * (N + 4) + L * STEPC_MAMBA_XP + 4 * L + L * L;
  return (unsigned)(4 * (2 * buf + 2L * N * STEPC_MAMBA_XP + L * (L + 4) + 4 * 32 * 4));
}
/* mamba_scan_states: two chunk buffers (B or C rows, x or dy slice rows, 4 L factors). */
static inline unsigned stepc_mamba_scan_states_smem(int N) {
  long L = STEPC_MAMBA_CHUNK;
  return (unsigned)(4 * 2 * (L * (N + 4) + L * STEPC_MAMBA_XP + 4 * L));
}
/* mamba_chunk_backward's row pitch for rows of n floats (kernels/mamba.cuh mamba_pitch): n + 4, 4 mod
 * 32 where n is a multiple of 32 (tensor-core fragment reads free of bank conflicts along rows, at
 * most 2-way down columns). */
static inline long stepc_mamba_pitch(long n) { return n + 4; }
/* mamba_chunk_backward: B and C rows, three L x L tiles, x, dy and a work tile (L x P), a transposed
 * state (N x P), 10 L per-row values and a reduction's 32 (107.4 KiB at P 64, N 128: two blocks an SM). */
static inline unsigned stepc_mamba_chunk_bwd_smem(int P, int N) {
  long L = STEPC_MAMBA_CHUNK, NP = stepc_mamba_pitch(N), PP = stepc_mamba_pitch(P), LP = stepc_mamba_pitch(L);
  return (unsigned)(4 * (2 * L * NP + 3 * L * LP + 3 * L * PP + (long)N * PP + 10 * L + 32));
}
static inline int stepc_mamba_segs(int T) { return T < STEPC_MAMBA_SEGS ? T : STEPC_MAMBA_SEGS; }
/* The mixer's fp32 workspace (the op's workspace output), offsets in floats, each part 64-float
 * aligned. Forward: the conv output u (B, T, C) and the chunks' C.B (B, G, nc, L, L). Backward: the
 * states entering the chunks and the gradients of the states leaving them (st, dst: (B, Hp, nc, P, N) of one pass's Hp = gpp H / G
 * heads), the conv-output gradient gpre (B, T, C), the per-chunk parameter partials (B, nc, H, 3)
 * and the per-segment conv partials (B, segs, K+1, C). The backward's u is gpre: mamba_conv_forward
 * fills it before the first pass, pass k's mamba_scan_states reads the channels of its heads and
 * groups, and pass k's mamba_chunk_backward overwrites exactly those with their gradients (every
 * channel is some pass's, so gpre holds no u when mamba_conv_backward reads it).
 * passes = G / gpp: the fewest that divide G and keep a pass's states within STEPC_MAMBA_PASS_FLOATS
 * (one group a pass at most), so a long sequence's states are not all held at once (at Nemotron 3
 * Nano's mixer, T 8192, 64 heads, P 64, N 128: 537 MB each of st and dst in one pass, 268 MB in two). */
#define STEPC_MAMBA_PASS_FLOATS (64L << 20)
typedef struct {
  long st, dst, u, gpre, hpart, cpart, cb, floats; /* cb: the forward's only */
  int passes, gpp, hp; /* hp: a pass's heads, gpp H / G */
} StepcMambaWs;
static inline long stepc_mamba_align(long n) { return (n + 63) / 64 * 64; }
/* The gated group norm's backward (mamba_group_norm_backward_input / _weight / weight_reduce):
 * fp32 workspace of rows G rstd values, then segs C weight partials, segs = stepc_mamba_segs(rows). */
static inline long stepc_mamba_gnorm_ws(long rows, int C, int G) {
  return stepc_mamba_align(rows * G) + (long)stepc_mamba_segs((int)(rows < 1 << 30 ? rows : 1 << 30)) * C;
}
/* The number of passes (above). */
static inline int stepc_mamba_passes(long B, long T, long H, long P, long N, long G) {
  long nc = (T + STEPC_MAMBA_CHUNK - 1) / STEPC_MAMBA_CHUNK, group = B * (H / G) * nc * P * N;
  for (long p = 1; p < G; p++)
    if (G % p == 0 && group * (G / p) <= STEPC_MAMBA_PASS_FLOATS) return (int)p;
  return (int)G;
}
/* The layout for `passes` passes (a divisor of G; tests/gpu/mamba.c sets it, the rest take
 * stepc_mamba_ws's). */
static inline StepcMambaWs stepc_mamba_ws_passes(long B, long T, long H, long P, long N, long G, long C, long K,
                                                 int backward, int passes) {
  long nc = (T + STEPC_MAMBA_CHUNK - 1) / STEPC_MAMBA_CHUNK, Hp = H / passes;
  long nst = stepc_mamba_align(B * Hp * nc * P * N), nu = stepc_mamba_align(B * T * C);
  StepcMambaWs w;
  w.passes = passes, w.gpp = (int)(G / passes), w.hp = (int)Hp;
  if (!backward) {
    w.u = 0, w.st = w.dst = w.gpre = w.hpart = w.cpart = w.cb = nu;
    w.floats = nu + stepc_mamba_align(B * G * nc * STEPC_MAMBA_CHUNK * STEPC_MAMBA_CHUNK);
    return w;
  }
  w.cb = 0, w.st = 0, w.dst = nst, w.gpre = w.u = 2 * nst, w.hpart = w.gpre + nu;
  w.cpart = w.hpart + stepc_mamba_align(B * nc * H * 3);
  w.floats = w.cpart + stepc_mamba_align(B * stepc_mamba_segs((int)T) * (K + 1) * C);
  return w;
}
static inline StepcMambaWs stepc_mamba_ws(long B, long T, long H, long P, long N, long G, long C, long K,
                                          int backward) {
  return stepc_mamba_ws_passes(B, T, H, P, N, G, C, K, backward, stepc_mamba_passes(B, T, H, P, N, G));
}

/* Multi-tensor optimizer kernels (kernels/optimizer.cuh): one block per chunk of one tensor, blocks
 * of STEPC_MULTI_THREADS, grid = the table's total chunk count. The table is rows of 8-byte words,
 * in the group's op order; a row's first chunk is the sum of the chunk counts of the rows before
 * it, so block b finds its row by binary search and the partials come out in a fixed order.
 *   norm_squared_multi: chunks of STEPC_SUMSQ_CHUNK elements; a row is
 *     {x, n, first chunk, dtype (STEPC_MULTI_F32 or STEPC_MULTI_BF16)}, or {x, n, first chunk,
 *     STEPC_MULTI_DONE} for a gradient whose producer wrote its partials (one per output tile of
 *     the grouped wgrad kernels: the row's chunks are those tiles, and write nothing)
 *   adamw_multi: chunks of STEPC_ADAMW_CHUNK elements; a row is
 *     {master, param, grad, m, v, n, first chunk, weight-decay multiplier (float bits, low half)} */
#define STEPC_MULTI_THREADS 256
#define STEPC_SUMSQ_CHUNK 65536
#define STEPC_ADAMW_CHUNK 16384
#define STEPC_SUMSQ_ROW 4
#define STEPC_ADAMW_ROW 8
#define STEPC_MULTI_F32 0
#define STEPC_MULTI_BF16 1
#define STEPC_MULTI_DONE 2

#endif
