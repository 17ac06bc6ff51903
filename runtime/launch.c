/* launch.c — kernel launches and copies on the runtime's one stream (all capturable). */
#include <stdio.h>

#include "runtime/record.h"
#include "runtime/rt.h"

int rt_launch(RtDevice *d, RtKernel k, unsigned gx, unsigned gy, unsigned gz, unsigned block, unsigned smem,
              void **args) {
  if (gx == 0 || gy == 0 || gz == 0) return RT_OK; /* nothing to do: an empty tensor */
  if (d->rec) return rt_record_launch(d, k, gx, gy, gz, block, smem, args);
  CUresult r = d->cuLaunchKernel(d->fn[k], gx, gy, gz, block, 1, 1, smem, d->stream, args, NULL);
  if (r == CUDA_SUCCESS) return RT_OK;
  char what[64];
  snprintf(what, sizeof what, "launch of kernel #%d", (int)k);
  return rt_check(d, r, what);
}

unsigned rt_grid1d(const RtDevice *d, int64_t work) {
  int64_t b = (work + 255) / 256, cap = (int64_t)(d->sm_count > 0 ? d->sm_count : 1) * 8;
  return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

int rt_memset0(RtDevice *d, CUdeviceptr p, size_t bytes) {
  if (d->rec) return rt_record_memset(d, p, bytes);
  return bytes ? rt_check(d, d->cuMemsetD8Async(p, 0, bytes, d->stream), "cuMemsetD8Async") : RT_OK;
}

int rt_copy_d2d(RtDevice *d, CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  if (d->rec) return rt_record_copy(d, dst, src, bytes);
  return bytes ? rt_check(d, d->cuMemcpyDtoDAsync(dst, src, bytes, d->stream), "cuMemcpyDtoDAsync") : RT_OK;
}

int rt_copy_h2d(RtDevice *d, CUdeviceptr dst, const void *src, size_t bytes) {
  if (d->rec) return rt_fail(d, "a host-to-device copy on a recording device");
  return bytes ? rt_check(d, d->cuMemcpyHtoDAsync(dst, src, bytes, d->stream), "cuMemcpyHtoDAsync") : RT_OK;
}

int rt_copy_d2h(RtDevice *d, void *dst, CUdeviceptr src, size_t bytes) {
  if (d->rec) return rt_fail(d, "a device-to-host copy on a recording device");
  if (!bytes) return RT_OK;
  if (rt_check(d, d->cuMemcpyDtoHAsync(dst, src, bytes, d->stream), "cuMemcpyDtoHAsync")) return RT_ERROR;
  return rt_sync(d);
}

void rt_coll_bytes(const RtColl *c, int size, int64_t *src_bytes, int64_t *dst_bytes) {
  int64_t es = c->dtype == RT_COLL_BF16 ? 2 : 4, n = c->count * es;
  *src_bytes = c->op == RT_COLL_REDUCE_SCATTER || c->op == RT_COLL_ALL_TO_ALL ? n * size : n;
  *dst_bytes = c->op == RT_COLL_ALL_GATHER || c->op == RT_COLL_ALL_TO_ALL ? n * size : n;
}

int rt_coll(RtDevice *d, const RtColl *c) {
  if (d->rec) return rt_record_coll(d, c);
  if (c->count <= 0) return RT_OK;
  if (!d->coll)
    return rt_fail(d, "a collective (tensor parallelism) with no communicator: the step was opened without "
                      "the job's ranks");
  return d->coll->run(d->coll->ctx, d, c);
}

int rt_comm_fork(RtDevice *d) {
  return d->rec ? rt_record_mark(d, RT_REC_FORK)
                : rt_fail(d, "a communication-stream fork outside a launch program");
}

int rt_comm_join(RtDevice *d) {
  return d->rec ? rt_record_mark(d, RT_REC_JOIN)
                : rt_fail(d, "a communication-stream join outside a launch program");
}
