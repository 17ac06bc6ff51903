/* harness.h — what the GPU kernel tests share: the CUDA driver API reached through dlopen (so the
 * binary starts, and skips, on a machine without a driver), device buffers, launches, timing,
 * bf16 host data and tolerance checks that print one line per check. */
#ifndef STEPC_TESTS_GPU_HARNESS_H
#define STEPC_TESTS_GPU_HARNESS_H

#include <cuda.h>
#include <stdint.h>
#include <stdio.h>

#define GPU_SKIP 77 /* ctest SKIP_RETURN_CODE */

/* The driver entry points we use, by the versioned symbol names cuda.h maps them to. */
#define GPU_DRIVER_FUNCS(X)                                                                                  \
  X(cuInit)                                                                                                  \
  X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain)  \
      X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuModuleLoadData)                \
          X(cuModuleUnload) X(cuModuleGetFunction) X(cuFuncSetAttribute) X(cuLaunchKernel) X(cuMemAlloc)     \
              X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemsetD8) X(cuEventCreate)    \
                  X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime) X(cuEventDestroy)             \
                      X(cuGetErrorString) X(cuTensorMapEncodeTiled)

typedef struct {
#define GPU_DECL(f) __typeof__(&f) f;
  GPU_DRIVER_FUNCS(GPU_DECL)
#undef GPU_DECL
  void *lib;
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  int sm_count, cc_major; /* cc_major: compute capability, set by gpu_open */
  char name[256];
  int checks, failed; /* tallies of gpu_check_* */
  int emulated;       /* the CPU's harness (tests/simt): no timings, no production-size runs */
} Gpu;

/* 0: ready; GPU_SKIP: no driver or no device (why says which); 1: a real failure. */
int gpu_open(Gpu *g, char *why, size_t whysz);
/* Compiles every kernel with NVRTC (cache in cache_dir, NULL for the default) and loads it. */
int gpu_load_kernels(Gpu *g, const char *cache_dir);
void gpu_close(Gpu *g);

/* Any driver failure in the helpers below is fatal to the test program (message, exit 1). */
void gpu_ok(Gpu *g, CUresult r, const char *what);
CUdeviceptr gpu_alloc(Gpu *g, size_t bytes);
void gpu_free(Gpu *g, CUdeviceptr p);
void gpu_put(Gpu *g, CUdeviceptr dst, const void *src, size_t bytes);
void gpu_get(Gpu *g, void *dst, CUdeviceptr src, size_t bytes);
CUdeviceptr gpu_dup(Gpu *g, const void *src, size_t bytes); /* alloc + put */
void gpu_memset(Gpu *g, CUdeviceptr dst, unsigned char value, size_t bytes);
void gpu_copy(Gpu *g, CUdeviceptr dst, CUdeviceptr src, size_t bytes); /* device to device */
void gpu_sync(Gpu *g);
/* A TMA tensor map (kernels/tma.cuh) over the row-major tensor at p of `elem`-byte elements (2: bf16, 1:
 * fp8 codes): `rank` dimensions, dims[0] the contiguous one; loads of box[0] x box[1] [x box[2]] elements
 * (box[0] x elem = 128: 128-byte rows, the 128-byte swizzle), zeros outside the tensor. Written into
 * device memory (gpu_free it); its address. */
CUdeviceptr gpu_tmap(Gpu *g, CUdeviceptr p, int elem, int rank, const uint64_t *dims, const uint32_t *box);
/* Whether this device runs kernel `name` (the GPU every kernel; the CPU's harness, tests/simt, those
 * compiled for it): a test of kernels it lacks prints SKIP instead of launching them. */
int gpu_has_kernel(Gpu *g, const char *name);
/* Launches `name` with the kernel's parameters as an argv of pointers to each argument. */
void gpu_launch(Gpu *g, const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned block,
                unsigned smem, void **args);
/* The grid of a grid-stride kernel over n items in blocks of 256 (the runtime's rt_grid1d). */
unsigned gpu_grid1d(Gpu *g, long n);
/* The median of v[0..n) (v sorted in place). */
double gpu_median(double *v, int n);
/* Milliseconds per call of fn(ctx), the median of `reps` timed calls after `warmup` calls. */
double gpu_time_ms(Gpu *g, void (*fn)(Gpu *, void *), void *ctx, int warmup, int reps);

/* Deterministic host data. */
typedef struct {
  uint64_t s;
} Rng;
double rng_uniform(Rng *r); /* [-1, 1) */
/* n bf16 values uniform in [-amp, amp): the bf16 bits in h, their exact values in d. */
void rand_bf16(Rng *r, uint16_t *h, double *d, long n, double amp);
void bf16_to_double(const uint16_t *h, double *d, long n);
void float_to_double(const float *f, double *d, long n);

/* |got - ref| <= atol + rtol |ref| elementwise; one line "PASS/FAIL name max_err ..." either way. */
int gpu_check(Gpu *g, const char *name, const double *got, const double *ref, long n, double atol,
              double rtol);
/* Bitwise equality of two buffers (determinism, replay). */
int gpu_check_bitwise(Gpu *g, const char *name, const void *a, const void *b, size_t bytes);
/* A plain condition. */
int gpu_check_true(Gpu *g, const char *name, int ok, const char *detail);

/* Test groups (tests/gpu/basic.c, attention.c). */
void test_basic(Gpu *g);
void test_attention(Gpu *g);
void test_mamba(Gpu *g); /* mamba.c: the Mamba-2 kernels against ir/ops/mamba.c in fp64 */
void test_fp8(Gpu *g);   /* fp8.c: the current- and delayed-scaling casts and update, exact */
void bench_attention(Gpu *g);
void bench_mamba(Gpu *g);              /* tests/gpu/mamba.c: each mixer kernel at Nemotron's shape */
void test_bandwidth(Gpu *g);           /* bandwidth.c: checked and timed at shape M (not with --no-bench) */
void bench_attention_variants(Gpu *g); /* with STEPC_FLASH_VARIANTS set: tile-size variants */

#endif
