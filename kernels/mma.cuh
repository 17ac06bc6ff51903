// mma.cuh — warp-level bf16 tensor-core building blocks (sm_80+ mma.sync, ldmatrix, cp.async)
// used by the flash-attention kernels. Fragment layouts are those of the PTX ISA for
// mma.m16n8k16 with bf16 inputs and fp32 accumulators; g = lane / 4, q = lane % 4:
//   A (16x16, row-major):  a0 (g, 2q..2q+1)  a1 (g+8, 2q..)  a2 (g, 8+2q..)  a3 (g+8, 8+2q..)
//   B (16x8, k x n):       b0 (k 2q..2q+1, n g)  b1 (k 8+2q.., n g)
//   C (16x8, fp32):        c0,c1 (g, 2q..2q+1)   c2,c3 (g+8, 2q..2q+1)
// C of two adjacent n-tiles has exactly the layout of one A k-step, which is how softmax
// probabilities go from one product into the next without touching shared memory.
#pragma once
#include "common.cuh"

#ifdef STEPC_SIMT
__device__ __forceinline__ unsigned smem_addr(const void* p) { return simt_smem_addr(p); }
__device__ __forceinline__ void ldsm_x4(unsigned* r, const bf16* p) { simt_ldmatrix_x4(r, smem_addr(p), false); }
__device__ __forceinline__ void ldsm_x4_trans(unsigned* r, const bf16* p) { simt_ldmatrix_x4(r, smem_addr(p), true); }
__device__ __forceinline__ void mma_bf16_16816(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  simt_mma_m16n8k16_bf16(c, a, b0, b1);
}
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) { simt_cp_async16(smem_addr(smem), gmem, true); }
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool full) {
  simt_cp_async16(smem_addr(smem), gmem, full);
}
__device__ __forceinline__ void cp_async_commit() {}
template <int N>
__device__ __forceinline__ void cp_async_wait() {}
#else
extern __shared__ __align__(16) unsigned char stepc_smem[];

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  unsigned r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}

__device__ __forceinline__ void ldsm_x4(unsigned* r, const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

__device__ __forceinline__ void ldsm_x4_trans(unsigned* r, const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

__device__ __forceinline__ void mma_bf16_16816(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(smem)), "l"(gmem) : "memory");
}

// 16 bytes when `full`, else 16 zero bytes (the source is not read: src-size 0).
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool full) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(smem)), "l"(gmem), "r"(full ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
#endif

// ROWS x COLS bf16 from global (row stride ldg elements) to shared (row stride lds), 16 bytes per
// cp.async, spread over the block's threads. Completes at the caller's cp_async_wait.
template <int ROWS, int COLS>
__device__ __forceinline__ void tile_load_async(bf16* s, int lds, const bf16* g, long ldg) {
  constexpr int CHUNKS = ROWS * COLS / 8;
  for (int c = threadIdx.x; c < CHUNKS; c += blockDim.x) {
    int r = c / (COLS / 8), col = (c % (COLS / 8)) * 8;
    cp_async16(s + r * lds + col, g + r * ldg + col);
  }
}

// c[NT] += A * B^T for one warp: A is 16 x (16*KS) row-major in shared memory; B^T is stored as
// (8*NT) x (16*KS) row-major ("n rows of k"), e.g. K for Q K^T. NT even.
template <int KS, int NT>
__device__ __forceinline__ void warp_mma_nt(float (*c)[4], const bf16* As, int lda, const bf16* Bs, int ldb) {
  int lane = threadIdx.x % STEPC_WARP;
#pragma unroll
  for (int ks = 0; ks < KS; ks++) {
    unsigned a[4];
    ldsm_x4(a, As + (lane % 16) * lda + ks * 16 + (lane / 16) * 8);
#pragma unroll
    for (int p = 0; p < NT / 2; p++) {
      unsigned b[4];
      ldsm_x4(b, Bs + (p * 16 + (lane / 16) * 8 + lane % 8) * ldb + ks * 16 + ((lane / 8) % 2) * 8);
      mma_bf16_16816(c[2 * p], a, b[0], b[1]);
      mma_bf16_16816(c[2 * p + 1], a, b[2], b[3]);
    }
  }
}

// c[NT] += A * B for one warp: A is 16 x (16*KS) held in registers as A fragments; B is stored
// (16*KS) x (8*NT) row-major ("k rows of n"), e.g. V for P V. NT even.
template <int KS, int NT>
__device__ __forceinline__ void warp_mma_rr(float (*c)[4], const unsigned (*a)[4], const bf16* Bs, int ldb) {
  int lane = threadIdx.x % STEPC_WARP;
#pragma unroll
  for (int ks = 0; ks < KS; ks++) {
#pragma unroll
    for (int p = 0; p < NT / 2; p++) {
      unsigned b[4];
      ldsm_x4_trans(b, Bs + (ks * 16 + ((lane / 8) % 2) * 8 + lane % 8) * ldb + p * 16 + (lane / 16) * 8);
      mma_bf16_16816(c[2 * p], a[ks], b[0], b[1]);
      mma_bf16_16816(c[2 * p + 1], a[ks], b[2], b[3]);
    }
  }
}

// fp32 accumulators of NT n-tiles -> bf16 A fragments of NT/2 k-steps (see the layouts above).
template <int NT>
__device__ __forceinline__ void acc_to_afrag(unsigned (*a)[4], const float (*c)[4]) {
#pragma unroll
  for (int k = 0; k < NT / 2; k++) {
    a[k][0] = pack_bf16x2(c[2 * k][0], c[2 * k][1]);
    a[k][1] = pack_bf16x2(c[2 * k][2], c[2 * k][3]);
    a[k][2] = pack_bf16x2(c[2 * k + 1][0], c[2 * k + 1][1]);
    a[k][3] = pack_bf16x2(c[2 * k + 1][2], c[2 * k + 1][3]);
  }
}

template <int NT>
__device__ __forceinline__ void acc_zero(float (*c)[4]) {
#pragma unroll
  for (int i = 0; i < NT; i++) c[i][0] = c[i][1] = c[i][2] = c[i][3] = 0.0f;
}

// ---- several m-tiles per warp: a warp owns MT consecutive 16-row A tiles, so every B fragment
// read from shared memory feeds MT tensor-core ops (MT times the reuse of the one-tile versions).

// c[MT][NT] += A * B^T; A is (16*MT) x (16*KS) row-major in shared memory, B^T (8*NT) x (16*KS).
template <int MT, int KS, int NT>
__device__ __forceinline__ void warp_mma_nt_m(float (*c)[NT][4], const bf16* As, int lda, const bf16* Bs, int ldb) {
  int lane = threadIdx.x % STEPC_WARP;
#pragma unroll
  for (int ks = 0; ks < KS; ks++) {
    unsigned a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) ldsm_x4(a[mt], As + (mt * 16 + lane % 16) * lda + ks * 16 + (lane / 16) * 8);
#pragma unroll
    for (int p = 0; p < NT / 2; p++) {
      unsigned b[4];
      ldsm_x4(b, Bs + (p * 16 + (lane / 16) * 8 + lane % 8) * ldb + ks * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        mma_bf16_16816(c[mt][2 * p], a[mt], b[0], b[1]);
        mma_bf16_16816(c[mt][2 * p + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// Same with A already in registers: a[MT][KS][4] fragments.
template <int MT, int KS, int NT>
__device__ __forceinline__ void warp_mma_nt_mr(float (*c)[NT][4], const unsigned (*a)[KS][4], const bf16* Bs, int ldb) {
  int lane = threadIdx.x % STEPC_WARP;
#pragma unroll
  for (int ks = 0; ks < KS; ks++) {
#pragma unroll
    for (int p = 0; p < NT / 2; p++) {
      unsigned b[4];
      ldsm_x4(b, Bs + (p * 16 + (lane / 16) * 8 + lane % 8) * ldb + ks * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        mma_bf16_16816(c[mt][2 * p], a[mt][ks], b[0], b[1]);
        mma_bf16_16816(c[mt][2 * p + 1], a[mt][ks], b[2], b[3]);
      }
    }
  }
}

// c[MT][NT] += A * B; A in registers as a[MT][KS][4]; B (16*KS) x (8*NT) row-major in shared.
template <int MT, int KS, int NT>
__device__ __forceinline__ void warp_mma_rr_m(float (*c)[NT][4], const unsigned (*a)[KS][4], const bf16* Bs, int ldb) {
  int lane = threadIdx.x % STEPC_WARP;
#pragma unroll
  for (int ks = 0; ks < KS; ks++) {
#pragma unroll
    for (int p = 0; p < NT / 2; p++) {
      unsigned b[4];
      ldsm_x4_trans(b, Bs + (ks * 16 + ((lane / 8) % 2) * 8 + lane % 8) * ldb + p * 16 + (lane / 16) * 8);
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        mma_bf16_16816(c[mt][2 * p], a[mt][ks], b[0], b[1]);
        mma_bf16_16816(c[mt][2 * p + 1], a[mt][ks], b[2], b[3]);
      }
    }
  }
}

// A fragments of a (16*MT) x (16*KS) row-major shared tile, for keeping an operand in registers.
template <int MT, int KS>
__device__ __forceinline__ void warp_load_afrag(unsigned (*a)[KS][4], const bf16* As, int lda) {
  int lane = threadIdx.x % STEPC_WARP;
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int ks = 0; ks < KS; ks++) ldsm_x4(a[mt][ks], As + (mt * 16 + lane % 16) * lda + ks * 16 + (lane / 16) * 8);
}

// A fragments of a (16*MT) x (16*KS) tile stored transposed, (16*KS) x (16*MT) row-major ("k rows
// of m", e.g. dy for dy^T x): ldmatrix.trans hands each lane the (m, k) pairs of the row-major
// fragment. Matrix j of the x4 load is (m 8*(j%2).., k 8*(j/2)..), as a0..a3 above.
template <int MT, int KS>
__device__ __forceinline__ void warp_load_afrag_trans(unsigned (*a)[KS][4], const bf16* As, int lda) {
  int lane = threadIdx.x % STEPC_WARP;
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
      ldsm_x4_trans(a[mt][ks], As + (ks * 16 + (lane / 16) * 8 + lane % 8) * lda + mt * 16 + ((lane / 8) % 2) * 8);
}
