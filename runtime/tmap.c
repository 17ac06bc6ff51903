/* tmap.c — TMA tensor maps (rt.h RtTmap): checked, and encoded by the driver. */
#include <stdio.h>
#include <stdlib.h>

#include "runtime/rt.h"

int rt_tmap_invalid(const RtTmap *t, char *why, size_t n) {
  if (t->rank < 2 || t->rank > 3) return snprintf(why, n, "a tensor map of rank %d (2 or 3)", t->rank), 1;
  if (t->elem != 1 && t->elem != 2)
    return snprintf(why, n, "a tensor map of %d-byte elements (1 or 2)", t->elem), 1;
  if (t->box[0] * (uint32_t)t->elem != 128)
    return snprintf(why, n, "a tensor map whose box rows are %u elements of %d bytes (128 bytes)", t->box[0],
                    t->elem),
           1;
  if (t->ptr % 16) return snprintf(why, n, "a tensor map over an address not 16-byte aligned"), 1;
  if ((t->dim[0] * (uint64_t)t->elem) % 16)
    return snprintf(why, n, "a tensor map whose rows are not a multiple of 16 bytes"), 1;
  for (int i = 0; i < t->rank; i++) {
    if (t->box[i] < 1 || t->box[i] > 256)
      return snprintf(why, n, "a tensor map whose box edge %d is %u (1 to 256)", i, t->box[i]), 1;
    if (t->dim[i] < 1 || t->dim[i] > ((uint64_t)1 << 32))
      return snprintf(why, n, "a tensor map whose dimension %d is %llu (1 to 2^32)", i,
                      (unsigned long long)t->dim[i]),
             1;
  }
  return 0;
}

int rt_tmap_encode(RtDevice *d, const RtTmap *t, void *map) {
  char why[128];
  if (rt_tmap_invalid(t, why, sizeof why)) return rt_fail(d, "%s", why);
  cuuint64_t dim[3], stride[2];
  cuuint32_t box[3], one[3] = {1, 1, 1};
  for (int i = 0; i < t->rank; i++)
    dim[i] = t->dim[i], box[i] = t->box[i];
  for (int i = 1; i < t->rank; i++)
    stride[i - 1] = (i == 1 ? (cuuint64_t)t->elem : stride[i - 2]) * t->dim[i - 1];
  return rt_check(d,
                  d->cuTensorMapEncodeTiled(
                      (CUtensorMap *)map,
                      t->elem == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                      (cuuint32_t)t->rank, (void *)(uintptr_t)t->ptr, dim, stride, box, one,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
                  "cuTensorMapEncodeTiled");
}

int rt_tmap_write(RtDevice *d, CUdeviceptr dst, const RtTmap *t, int64_t n) {
  if (!n || d->rec) return RT_OK;
  unsigned char *maps = aligned_alloc(64, (size_t)n * RT_TMAP_BYTES);
  if (!maps) return rt_fail(d, "out of memory");
  int rc = RT_OK;
  for (int64_t i = 0; i < n && rc == RT_OK; i++)
    rc = rt_tmap_encode(d, &t[i], maps + i * RT_TMAP_BYTES);
  if (rc == RT_OK) rc = rt_copy_h2d(d, dst, maps, (size_t)n * RT_TMAP_BYTES);
  if (rc == RT_OK) rc = rt_sync(d); /* the host buffer is freed below */
  free(maps);
  return rc;
}
