/* arena.c — every device allocation stepc makes, counted: the step's one allocation (the plan's
 * buffers, then the launch scratch, both sized by the compiler), the cuBLASLt and cuDNN workspaces.
 * The count is what `stepc run` reports as max allocated. */
#include <stdio.h>

#include "runtime/record.h"
#include "runtime/rt.h"

int rt_alloc(RtDevice *d, CUdeviceptr *p, size_t bytes, const char *what) {
  *p = 0;
  if (bytes == 0) bytes = 256;
  CUresult r = CUDA_SUCCESS;
  if (d->rec)
    rt_record_alloc(d, p, bytes);
  else
    r = d->cuMemAlloc(p, bytes);
  if (r != CUDA_SUCCESS) {
    char msg[160];
    snprintf(msg, sizeof msg, "cuMemAlloc of %.3f GB for %s (already holding %.3f GB)", (double)bytes / 1e9,
             what, (double)d->allocated / 1e9);
    return rt_check(d, r, msg);
  }
  d->allocated += (int64_t)bytes;
  if (d->allocated > d->max_allocated) d->max_allocated = d->allocated;
  return RT_OK;
}

void rt_free(RtDevice *d, CUdeviceptr p, size_t bytes) {
  if (!p) return;
  if (!d->rec) d->cuMemFree(p);
  d->allocated -= (int64_t)(bytes ? bytes : 256);
}
