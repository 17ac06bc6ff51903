// tma.cuh — Hopper's tensor memory accelerator (TMA: cp.async.bulk.tensor, one thread copies a
// whole tile from global into shared memory, in the 128-byte swizzle the wgmma descriptors read)
// and the shared-memory barriers (mbarrier) a TMA copy reports its bytes to. Used by the
// warp-specialised grouped GEMMs (moe.cuh): one producer thread issues every copy, the consumer
// warpgroups wait on a stage's "full" barrier and release it through its "empty" barrier.
//
// A tensor map (the 128-byte CUtensorMap the driver encodes on the host: cuTensorMapEncodeTiled)
// lives in global memory; a kernel takes its address. Barriers are 8 bytes at 8-byte aligned shared
// addresses. A phase of a barrier completes when its arrivals (mbar_init's count) and the bytes
// announced by mbar_arrive_tx have all come in; mbar_wait(bar, parity) returns once the phase of
// that parity has completed (the first phase has parity 0).
#pragma once
#include "common.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#ifdef STEPC_SIMT
// tests/simt: the barriers kept by the scheduler, the copies done at once (simt.cc)
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) { simt_mbar_init(bar, count); }
__device__ __forceinline__ void mbar_init_fence() {}
__device__ __forceinline__ void mbar_arrive(unsigned bar) { simt_mbar_arrive(bar, 0); }
__device__ __forceinline__ void mbar_arrive_tx(unsigned bar, unsigned bytes) { simt_mbar_arrive(bar, bytes); }
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) { simt_mbar_wait(bar, parity); }
__device__ __forceinline__ void tma_load_2d(unsigned dst, const void* map, unsigned bar, int c0, int c1) {
  int c[2] = {c0, c1};
  simt_tma_load(dst, map, bar, c, 2);
}
__device__ __forceinline__ void tma_load_3d(unsigned dst, const void* map, unsigned bar, int c0, int c1, int c2) {
  int c[3] = {c0, c1, c2};
  simt_tma_load(dst, map, bar, c, 3);
}
#else
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// After the barriers' init and before the __syncthreads that publishes them: visible to the TMA unit too.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// One arrival that also announces `bytes` the phase must receive from TMA copies.
__device__ __forceinline__ void mbar_arrive_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// The box of the map at coordinates (c0 the contiguous dimension, c1[, c2]) into shared memory at dst
// (1024-aligned for the 128-byte swizzle); elements outside the tensor arrive as zeros and count.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const void* map, unsigned bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void tma_load_3d(unsigned dst, const void* map, unsigned bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
#endif  // STEPC_SIMT
#endif
