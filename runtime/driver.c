/* driver.c — the CUDA driver through dlopen: open the first device, its primary context (which
 * cuBLASLt, a runtime-API library, shares) and one non-blocking stream. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime/rt.h"

#define RT_STR(x) #x
#define RT_XSTR(x) RT_STR(x)

int rt_fail(RtDevice *d, const char *fmt, ...) {
  if (d->err[0]) return RT_ERROR;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->err, sizeof d->err, fmt, ap);
  va_end(ap);
  return RT_ERROR;
}

void rt_clear_error(RtDevice *d) { d->err[0] = 0; }

int rt_check(RtDevice *d, CUresult r, const char *what) {
  if (r == CUDA_SUCCESS) return RT_OK;
  const char *s = NULL;
  if (d->cuGetErrorString) d->cuGetErrorString(r, &s);
  return rt_fail(d, "%s: %s (CUresult %d)", what, s ? s : "unknown error", (int)r);
}

static int open_device(RtDevice *d, int ordinal, int wrap);

int rt_open(RtDevice *d) { return open_device(d, 0, 0); }
int rt_open_device(RtDevice *d, int ordinal) { return open_device(d, ordinal, 0); }
int rt_open_device_shared(RtDevice *d, int ordinal) { return open_device(d, ordinal, 1); }

static int open_device(RtDevice *d, int ordinal, int wrap) {
  memset(d, 0, sizeof *d);
  d->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!d->lib) {
    snprintf(d->err, sizeof d->err, "no CUDA driver on this machine (dlopen libcuda.so.1: %s)", dlerror());
    return RT_NO_DEVICE;
  }
#define RT_LOAD(f)                                                                                           \
  if (!(d->f = (__typeof__(&f))dlsym(d->lib, RT_XSTR(f)))) {                                                 \
    snprintf(d->err, sizeof d->err, "libcuda.so.1 lacks %s (driver too old?)", RT_XSTR(f));                  \
    return RT_ERROR;                                                                                         \
  }
  RT_DRIVER_FUNCS(RT_LOAD)
#undef RT_LOAD
  *(void **)&d->cuFuncGetParamInfo = dlsym(d->lib, "cuFuncGetParamInfo"); /* 12.4 and later */
  int count = 0;
  CUresult r = d->cuInit(0);
  if (r != CUDA_SUCCESS || d->cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    snprintf(d->err, sizeof d->err, "no CUDA device (cuInit: %d, devices: %d)", (int)r, count);
    return RT_NO_DEVICE;
  }
  d->device_count = count;
  if (wrap && ordinal >= 0) ordinal %= count;
  if (ordinal < 0 || ordinal >= count) {
    snprintf(d->err, sizeof d->err, "no CUDA device %d (LOCAL_RANK): this host has %d", ordinal, count);
    return RT_NO_DEVICE;
  }
  if (rt_check(d, d->cuDeviceGet(&d->dev, ordinal), "cuDeviceGet") ||
      rt_check(d, d->cuDevicePrimaryCtxRetain(&d->ctx, d->dev), "cuDevicePrimaryCtxRetain") ||
      rt_check(d, d->cuCtxSetCurrent(d->ctx), "cuCtxSetCurrent") ||
      rt_check(d, d->cuStreamCreate(&d->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate"))
    return RT_ERROR;
  d->cuDeviceGetName(d->name, sizeof d->name, d->dev);
  d->cuDeviceGetAttribute(&d->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev);
  d->cuDeviceGetAttribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev);
  d->cuDeviceGetAttribute(&d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev);
  size_t free_b = 0, total_b = 0;
  if (rt_check(d, d->cuMemGetInfo(&free_b, &total_b), "cuMemGetInfo")) return RT_ERROR;
  d->total_mem = (int64_t)total_b;
  d->used_at_open = (int64_t)(total_b - free_b);
  return RT_OK;
}

void rt_close(RtDevice *d) {
  if (!d->lib) return;
  rt_dnn_close(d);
  rt_blas_close(d);
  if (d->mod) d->cuModuleUnload(d->mod);
  if (d->stream) d->cuStreamDestroy(d->stream);
  if (d->ctx) d->cuDevicePrimaryCtxRelease(d->dev);
  dlclose(d->lib);
  d->lib = NULL;
}

int rt_sync(RtDevice *d) {
  if (d->rec) return RT_OK;
  return rt_check(d, d->cuStreamSynchronize(d->stream), "synchronize (a kernel faulted?)");
}
