/* harness.c — see harness.h. */
#include "harness.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cubin/kernel_text.h"
#include "compiler/codegen/cubin/cubin.h"
#include "flash_variants.h"

#define GPU_STR(x) #x
#define GPU_XSTR(x) GPU_STR(x)

int gpu_open(Gpu *g, char *why, size_t whysz) {
  memset(g, 0, sizeof *g);
  g->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!g->lib) {
    snprintf(why, whysz, "no CUDA driver (libcuda.so.1): %s", dlerror());
    return GPU_SKIP;
  }
  /* GPU_XSTR expands cuda.h's version macros first: cuMemAlloc -> "cuMemAlloc_v2". */
#define GPU_LOAD(f)                                                                                \
  if (!(g->f = (__typeof__(&f))dlsym(g->lib, GPU_XSTR(f)))) {                                      \
    snprintf(why, whysz, "libcuda.so.1 lacks %s", GPU_XSTR(f));                                    \
    return 1;                                                                                      \
  }
  GPU_DRIVER_FUNCS(GPU_LOAD)
#undef GPU_LOAD
  int count = 0;
  CUresult r = g->cuInit(0);
  if (r != CUDA_SUCCESS || g->cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    snprintf(why, whysz, "no CUDA device (cuInit: %d, devices: %d)", (int)r, count);
    return GPU_SKIP;
  }
  if (g->cuDeviceGet(&g->dev, 0) != CUDA_SUCCESS || g->cuDevicePrimaryCtxRetain(&g->ctx, g->dev) != CUDA_SUCCESS ||
      g->cuCtxSetCurrent(g->ctx) != CUDA_SUCCESS) {
    snprintf(why, whysz, "cannot create a context on device 0");
    return 1;
  }
  g->cuDeviceGetName(g->name, sizeof g->name, g->dev);
  g->cuDeviceGetAttribute(&g->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g->dev);
  g->cuDeviceGetAttribute(&g->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g->dev);
  return 0;
}

int gpu_load_kernels(Gpu *g, const char *cache_dir) {
  char err[256];
  char *src = kernel_text_assemble(NULL, 0, err, sizeof err);
  if (!src) {
    fprintf(stderr, "assemble: %s\n", err);
    return 1;
  }
  int major = 0, minor = 0;
  g->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g->dev);
  g->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, g->dev);
  char arch[32];
  snprintf(arch, sizeof arch, "sm_%d%d", major, minor);
  CubinOptions opt = {.arch = arch, .cache_dir = cache_dir};
  if (getenv("STEPC_FLASH_VARIANTS") && !(src = flash_variants_append(src, err, sizeof err))) { /* tile tuning (attention.c) */
    fprintf(stderr, "variants: %s\n", err);
    return 1;
  }
  Cubin c;
  char *msg = NULL;
  CubinStatus st = cubin_compile(src, &opt, &c, &msg);
  free(src);
  if (st != CUBIN_OK && st != CUBIN_ERR_IO) {
    fprintf(stderr, "%s\n", msg ? msg : "nvrtc failed");
    free(msg);
    return 1;
  }
  if (msg) fprintf(stderr, "warning: %s\n", msg);
  free(msg);
  fprintf(stderr, "kernels: %s cubin, %zu bytes%s\n", arch, c.size, c.from_cache ? " (cached)" : "");
  CUresult r = g->cuModuleLoadData(&g->mod, c.data);
  cubin_free(&c);
  if (r != CUDA_SUCCESS) {
    const char *s = "?";
    g->cuGetErrorString(r, &s);
    fprintf(stderr, "cuModuleLoadData: %s\n", s);
    return 1;
  }
  return 0;
}

void gpu_close(Gpu *g) {
  if (g->mod) g->cuModuleUnload(g->mod);
  if (g->ctx) g->cuDevicePrimaryCtxRelease(g->dev);
  if (g->lib) dlclose(g->lib);
}

void gpu_ok(Gpu *g, CUresult r, const char *what) {
  if (r == CUDA_SUCCESS) return;
  const char *s = "?";
  g->cuGetErrorString(r, &s);
  fprintf(stderr, "FATAL %s: %s\n", what, s);
  exit(1);
}

CUdeviceptr gpu_alloc(Gpu *g, size_t bytes) {
  CUdeviceptr p = 0;
  gpu_ok(g, g->cuMemAlloc(&p, bytes ? bytes : 16), "cuMemAlloc");
  gpu_ok(g, g->cuMemsetD8(p, 0, bytes ? bytes : 16), "cuMemsetD8");
  return p;
}

void gpu_free(Gpu *g, CUdeviceptr p) { gpu_ok(g, g->cuMemFree(p), "cuMemFree"); }
void gpu_put(Gpu *g, CUdeviceptr dst, const void *src, size_t n) { gpu_ok(g, g->cuMemcpyHtoD(dst, src, n), "HtoD"); }
void gpu_get(Gpu *g, void *dst, CUdeviceptr src, size_t n) { gpu_ok(g, g->cuMemcpyDtoH(dst, src, n), "DtoH"); }
unsigned gpu_grid1d(Gpu *g, long n) {
  long b = (n + 255) / 256, cap = (long)g->sm_count * 8;
  return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}
void gpu_memset(Gpu *g, CUdeviceptr dst, unsigned char value, size_t n) {
  gpu_ok(g, g->cuMemsetD8(dst, value, n), "cuMemsetD8");
}
void gpu_copy(Gpu *g, CUdeviceptr dst, CUdeviceptr src, size_t n) { gpu_ok(g, g->cuMemcpyDtoD(dst, src, n), "DtoD"); }
void gpu_sync(Gpu *g) { gpu_ok(g, g->cuCtxSynchronize(), "synchronize (a kernel faulted?)"); }

CUdeviceptr gpu_dup(Gpu *g, const void *src, size_t bytes) {
  CUdeviceptr p = gpu_alloc(g, bytes);
  gpu_put(g, p, src, bytes);
  return p;
}

CUdeviceptr gpu_tmap(Gpu *g, CUdeviceptr p, int elem, int rank, const uint64_t *dims, const uint32_t *box) {
  CUtensorMap map;
  cuuint64_t dim[3], stride[2];
  cuuint32_t bx[3], one[3] = {1, 1, 1};
  for (int i = 0; i < rank; i++) dim[i] = dims[i], bx[i] = box[i];
  for (int i = 1; i < rank; i++) stride[i - 1] = (i == 1 ? (cuuint64_t)elem : stride[i - 2]) * dims[i - 1];
  gpu_ok(g,
         g->cuTensorMapEncodeTiled(&map, elem == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                   (cuuint32_t)rank, (void *)(uintptr_t)p, dim, stride, bx, one, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
         "cuTensorMapEncodeTiled");
  return gpu_dup(g, &map, sizeof map);
}

int gpu_has_kernel(Gpu *g, const char *name) {
  CUfunction f;
  return g->cuModuleGetFunction(&f, g->mod, name) == CUDA_SUCCESS;
}

void gpu_launch(Gpu *g, const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned block, unsigned smem,
                void **args) {
  CUfunction f;
  char what[160];
  snprintf(what, sizeof what, "cuModuleGetFunction(%s)", name);
  gpu_ok(g, g->cuModuleGetFunction(&f, g->mod, name), what);
  /* the opt-in whenever there is dynamic shared memory: 48 KB of it plus a kernel's static arrays
   * already pass the 48 KB a launch gets without it */
  if (smem > 0)
    gpu_ok(g, g->cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)smem), "smem attribute");
  snprintf(what, sizeof what, "launch %s", name);
  gpu_ok(g, g->cuLaunchKernel(f, gx, gy, gz, block, 1, 1, smem, 0, args, NULL), what);
}

double gpu_time_ms(Gpu *g, void (*fn)(Gpu *, void *), void *ctx, int warmup, int reps) {
  for (int i = 0; i < warmup; i++) fn(g, ctx);
  gpu_sync(g);
  CUevent a, b;
  gpu_ok(g, g->cuEventCreate(&a, CU_EVENT_DEFAULT), "event");
  gpu_ok(g, g->cuEventCreate(&b, CU_EVENT_DEFAULT), "event");
  double t[64];
  if (reps > 64) reps = 64;
  for (int i = 0; i < reps; i++) {
    float ms = 0;
    gpu_ok(g, g->cuEventRecord(a, 0), "record");
    fn(g, ctx);
    gpu_ok(g, g->cuEventRecord(b, 0), "record");
    gpu_ok(g, g->cuEventSynchronize(b), "event sync");
    gpu_ok(g, g->cuEventElapsedTime(&ms, a, b), "elapsed");
    t[i] = ms;
  }
  g->cuEventDestroy(a);
  g->cuEventDestroy(b);
  return gpu_median(t, reps);
}
