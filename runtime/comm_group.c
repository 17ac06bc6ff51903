/* comm_group.c — collectives over a group of the job's ranks (comm.h: rt_comm_group_*): tensor
 * parallelism's TP groups and, beside them, its data-parallel groups. Built on the host
 * communicator's all-gather over the whole job — every rank of every group takes part in every
 * call, which the groups of one step do in lockstep (each runs the same ops) — and combined by
 * each member in group-rank order, so a group's sum is member 0 + member 1 + ..., the order the
 * host all-reduce keeps, bitwise reproducible. Simple rather than fast: the CPU device is the oracle.
 *
 * bf16 (RT_COMM_BF16, raw uint16 bit patterns): sums are accumulated in fp32, member after member,
 * and rounded to bf16 once at the end (round to nearest even, a NaN stays a NaN); max compares the
 * values as floats and keeps the winner's bit pattern. */
#include <stdlib.h>
#include <string.h>

#include "runtime/comm_internal.h"

/* Every rank's `bytes` into *all (size * bytes, rank after rank); the caller frees it. */
static int gather_all(RtComm *c, const void *send, size_t bytes, unsigned char **all) {
  *all = malloc(bytes * (size_t)c->size + 1);
  if (!*all) return rt_comm_fail(c, "out of memory");
  if (rt_comm_all_gather(c, send, *all, bytes) != 0) {
    free(*all), *all = NULL;
    return -1;
  }
  return 0;
}

static int valid(RtComm *c, const RtCommGroup *g) {
  if (g->count < 1 || g->stride < 1 || g->first < 0 || g->first + (g->count - 1) * g->stride >= c->size)
    return rt_comm_fail(c, "a group of %d ranks from rank %d, stride %d, outside the job's %d", g->count,
                        g->first, g->stride, c->size);
  return 0;
}

static int valid_type(RtComm *c, RtCommType t) {
  if (t != RT_COMM_F32 && t != RT_COMM_F64 && t != RT_COMM_BF16)
    return rt_comm_fail(c, "a group collective of element type %d (not f32, f64 or bf16)", (int)t);
  return 0;
}

static size_t elem_size(RtCommType t) { return t == RT_COMM_F64 ? 8 : t == RT_COMM_BF16 ? 2 : 4; }

static float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Round to nearest even; a NaN stays a NaN (quieted, its sign and top payload bits kept). */
static uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* out[i] := the bf16 of sum over the members, in group order, of x_k[at + i] in fp32. `all` holds
 * every rank's `stride_bytes`, rank after rank. */
static int bf16_sum(RtComm *c, const RtCommGroup *g, const unsigned char *all, size_t stride_bytes, size_t at,
                    uint16_t *out, size_t n) {
  float *acc = malloc(n * sizeof *acc + 1);
  if (!acc) return rt_comm_fail(c, "out of memory");
  for (int k = 0; k < g->count; k++) {
    const uint16_t *x = (const uint16_t *)(all + (size_t)(g->first + k * g->stride) * stride_bytes + at);
    for (size_t i = 0; i < n; i++)
      acc[i] = k == 0 ? bf16_to_f32(x[i]) : acc[i] + bf16_to_f32(x[i]);
  }
  for (size_t i = 0; i < n; i++)
    out[i] = f32_to_bf16(acc[i]);
  free(acc);
  return 0;
}

int rt_comm_group_allreduce(RtComm *c, const RtCommGroup *g, void *buf, size_t n, RtCommType t, int max) {
  if (valid(c, g) || valid_type(c, t)) return -1;
  size_t es = elem_size(t), bytes = n * es;
  unsigned char *all;
  if (gather_all(c, buf, bytes, &all)) return -1;
  if (t == RT_COMM_BF16 && !max) {
    int rc = bf16_sum(c, g, all, bytes, 0, buf, n);
    free(all);
    return rc;
  }
  memcpy(buf, all + (size_t)g->first * bytes, bytes);
  for (int k = 1; k < g->count; k++) {
    const unsigned char *x = all + (size_t)(g->first + k * g->stride) * bytes;
    for (size_t i = 0; i < n; i++)
      if (t == RT_COMM_F64) {
        double *a = (double *)buf + i, v = ((const double *)x)[i];
        *a = max ? (v > *a ? v : *a) : *a + v;
      } else if (t == RT_COMM_BF16) { /* max: the larger as floats, its bits kept */
        uint16_t *a = (uint16_t *)buf + i, v = ((const uint16_t *)x)[i];
        *a = bf16_to_f32(v) > bf16_to_f32(*a) ? v : *a;
      } else {
        float *a = (float *)buf + i, v = ((const float *)x)[i];
        *a = max ? (v > *a ? v : *a) : *a + v;
      }
  }
  free(all);
  return 0;
}

int rt_comm_group_all_gather(RtComm *c, const RtCommGroup *g, const void *send, void *recv, size_t bytes) {
  if (valid(c, g)) return -1;
  unsigned char *all;
  if (gather_all(c, send, bytes, &all)) return -1;
  for (int k = 0; k < g->count; k++)
    memcpy((unsigned char *)recv + (size_t)k * bytes, all + (size_t)(g->first + k * g->stride) * bytes,
           bytes);
  free(all);
  return 0;
}

int rt_comm_group_reduce_scatter(RtComm *c, const RtCommGroup *g, int member, const void *send, void *recv,
                                 size_t n, RtCommType t) {
  if (valid(c, g) || valid_type(c, t)) return -1;
  if (member < 0 || member >= g->count)
    return rt_comm_fail(c, "member %d of a group of %d ranks", member, g->count);
  size_t es = elem_size(t), bytes = n * es * (size_t)g->count;
  unsigned char *all;
  if (gather_all(c, send, bytes, &all)) return -1;
  size_t at = (size_t)member * n * es; /* this member's segment of every rank's buffer */
  if (t == RT_COMM_BF16) {
    int rc = bf16_sum(c, g, all, bytes, at, recv, n);
    free(all);
    return rc;
  }
  memcpy(recv, all + (size_t)g->first * bytes + at, n * es);
  for (int k = 1; k < g->count; k++) {
    const unsigned char *x = all + (size_t)(g->first + k * g->stride) * bytes + at;
    for (size_t i = 0; i < n; i++)
      if (t == RT_COMM_F64)
        ((double *)recv)[i] += ((const double *)x)[i];
      else
        ((float *)recv)[i] += ((const float *)x)[i];
  }
  free(all);
  return 0;
}
