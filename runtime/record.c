/* record.c — the recording device (record.h). */
#include "runtime/record.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_BASE ((CUdeviceptr)1 << 40)
#define FAKE_GAP ((CUdeviceptr)1 << 20)

void rt_record_open(RtDevice *d, RtRecorder *r, int sm_count) {
  memset(d, 0, sizeof *d);
  memset(r, 0, sizeof *r);
  d->rec = r;
  d->sm_count = sm_count;
  d->cc_major = 9;
  d->fake_next = FAKE_BASE;
  snprintf(d->name, sizeof d->name, "recorder (%d SMs)", sm_count);
  r->op = -1;
}

void rt_recorder_free(RtRecorder *r) {
  free(r->r);
  r->r = NULL;
  r->n = r->cap = 0;
}

static RtRec *push(RtDevice *d, RtRecKind kind) {
  RtRecorder *r = d->rec;
  if (r->n == r->cap) {
    int cap = r->cap ? 2 * r->cap : 1024;
    RtRec *n = realloc(r->r, (size_t)cap * sizeof *n);
    if (!n) {
      rt_fail(d, "out of memory recording the step");
      return NULL;
    }
    r->r = n, r->cap = cap;
  }
  RtRec *e = &r->r[r->n++];
  memset(e, 0, sizeof *e);
  e->kind = kind;
  e->op = r->op;
  return e;
}

int rt_record_launch(RtDevice *d, RtKernel k, unsigned gx, unsigned gy, unsigned gz, unsigned block,
                     unsigned smem, void **args) {
  if (!d->rec->on) return RT_OK;
  int n = (int)strlen(rt_ksig(d, (int)k));
  if (n > RT_REC_MAX_ARGS)
    return rt_fail(d, "kernel %s has more than %d parameters", rt_kname(d, (int)k), RT_REC_MAX_ARGS);
  RtRec *e = push(d, RT_REC_LAUNCH);
  if (!e) return RT_ERROR;
  e->k = k;
  e->grid[0] = gx, e->grid[1] = gy, e->grid[2] = gz, e->block = block, e->smem = smem;
  e->nargs = n;
  for (int i = 0; i < n; i++) {
    if (rt_karg_bytes(d, (int)k, i) == 4) {
      uint32_t v;
      memcpy(&v, args[i], 4);
      e->arg[i] = v;
    } else
      memcpy(&e->arg[i], args[i], 8);
  }
  return RT_OK;
}

int rt_record_gemm(RtDevice *d, const RtGemm *g) {
  if (!d->rec->on) return RT_OK;
  RtRec *e = push(d, RT_REC_GEMM);
  if (!e) return RT_ERROR;
  e->gemm = *g;
  return RT_OK;
}

int rt_record_sdpa(RtDevice *d, const RtSdpa *s) {
  if (!d->rec->on) return RT_OK;
  RtRec *e = push(d, RT_REC_SDPA);
  if (!e) return RT_ERROR;
  e->sdpa = *s;
  return RT_OK;
}

int rt_record_memset(RtDevice *d, CUdeviceptr p, size_t bytes) {
  if (!d->rec->on || !bytes) return RT_OK;
  RtRec *e = push(d, RT_REC_MEMSET);
  if (!e) return RT_ERROR;
  e->dst = p, e->bytes = bytes;
  return RT_OK;
}

int rt_record_copy(RtDevice *d, CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  if (!d->rec->on || !bytes) return RT_OK;
  RtRec *e = push(d, RT_REC_COPY);
  if (!e) return RT_ERROR;
  e->dst = dst, e->src = src, e->bytes = bytes;
  return RT_OK;
}

int rt_record_coll(RtDevice *d, const RtColl *c) {
  if (!d->rec->on || c->count <= 0) return RT_OK;
  RtRec *e = push(d, RT_REC_COLL);
  if (!e) return RT_ERROR;
  e->coll = *c;
  return RT_OK;
}

int rt_record_mark(RtDevice *d, RtRecKind kind) {
  if (!d->rec->on) return RT_OK;
  return push(d, kind) ? RT_OK : RT_ERROR;
}

void rt_record_alloc(RtDevice *d, CUdeviceptr *p, size_t bytes) {
  *p = d->fake_next;
  d->fake_next += (bytes + FAKE_GAP - 1) / FAKE_GAP * FAKE_GAP + FAKE_GAP;
}

int rt_record_equal(const RtRec *a, const RtRec *b) {
  if (a->kind != b->kind) return 0;
  switch (a->kind) {
  case RT_REC_LAUNCH:
    if (a->k != b->k || a->nargs != b->nargs || a->block != b->block || a->smem != b->smem ||
        memcmp(a->grid, b->grid, sizeof a->grid))
      return 0;
    return memcmp(a->arg, b->arg, (size_t)a->nargs * sizeof a->arg[0]) == 0;
  case RT_REC_GEMM:
#define EQ_I(f)                                                                                              \
  if (a->gemm.f != b->gemm.f) return 0;
#define EQ_F(f)                                                                                              \
  if (memcmp(&a->gemm.f, &b->gemm.f, sizeof(float))) return 0;
    RT_GEMM_FIELDS(EQ_I, EQ_I, EQ_F)
#undef EQ_I
#undef EQ_F
    return 1;
  case RT_REC_SDPA:
#define EQ_I(f)                                                                                              \
  if (a->sdpa.f != b->sdpa.f) return 0;
#define EQ_F(f)                                                                                              \
  if (memcmp(&a->sdpa.f, &b->sdpa.f, sizeof(float))) return 0;
    RT_SDPA_FIELDS(EQ_I, EQ_I, EQ_F)
#undef EQ_I
#undef EQ_F
    return 1;
  case RT_REC_COLL:
#define EQ_I(f)                                                                                              \
  if (a->coll.f != b->coll.f) return 0;
    RT_COLL_FIELDS(EQ_I, EQ_I, EQ_I)
#undef EQ_I
    return 1;
  case RT_REC_MEMSET: return a->dst == b->dst && a->bytes == b->bytes;
  case RT_REC_COPY: return a->dst == b->dst && a->src == b->src && a->bytes == b->bytes;
  case RT_REC_FORK:
  case RT_REC_JOIN: return 1;
  }
  return 0;
}
