/* measure.c — CUDA events around a region of the stream, and device memory in use. */
#include <time.h>

#include "runtime/rt.h"

#include <stdlib.h>

int rt_timer_new(RtDevice *d, RtTimer *t) {
  t->a = t->b = NULL;
  if (rt_check(d, d->cuEventCreate(&t->a, CU_EVENT_DEFAULT), "cuEventCreate")) return RT_ERROR;
  return rt_check(d, d->cuEventCreate(&t->b, CU_EVENT_DEFAULT), "cuEventCreate");
}

void rt_timer_free(RtDevice *d, RtTimer *t) {
  if (t->a) d->cuEventDestroy(t->a);
  if (t->b) d->cuEventDestroy(t->b);
  t->a = t->b = NULL;
}

int rt_timer_start(RtDevice *d, RtTimer *t) {
  return rt_check(d, d->cuEventRecord(t->a, d->stream), "cuEventRecord");
}

int rt_timer_stop(RtDevice *d, RtTimer *t, double *ms) {
  float f = 0;
  if (rt_check(d, d->cuEventRecord(t->b, d->stream), "cuEventRecord") ||
      rt_check(d, d->cuEventSynchronize(t->b), "cuEventSynchronize (a kernel faulted?)") ||
      rt_check(d, d->cuEventElapsedTime(&f, t->a, t->b), "cuEventElapsedTime"))
    return RT_ERROR;
  *ms = f;
  return RT_OK;
}

int rt_marks_new(RtDevice *d, RtMarks *m, int n) {
  m->n = 0;
  if (!(m->e = calloc((size_t)n + 1, sizeof *m->e))) return rt_fail(d, "out of memory");
  for (; m->n < n; m->n++)
    if (rt_check(d, d->cuEventCreate(&m->e[m->n], CU_EVENT_DEFAULT), "cuEventCreate")) return RT_ERROR;
  return RT_OK;
}

void rt_marks_free(RtDevice *d, RtMarks *m) {
  for (int i = 0; i < m->n; i++)
    d->cuEventDestroy(m->e[i]);
  free(m->e);
  m->e = NULL, m->n = 0;
}

int rt_mark_on(RtDevice *d, RtMarks *m, int i, CUstream s) {
  if (i < 0 || i >= m->n) return rt_fail(d, "mark %d of %d", i, m->n);
  return rt_check(d, d->cuEventRecord(m->e[i], s), "cuEventRecord");
}

int rt_timer_stop_watched(RtDevice *d, RtTimer *t, double *ms, int (*watch)(void *ctx), void *ctx) {
  if (rt_check(d, d->cuEventRecord(t->b, d->stream), "cuEventRecord")) return RT_ERROR;
  for (;;) {
    CUresult r = d->cuEventQuery(t->b);
    if (r == CUDA_SUCCESS) break;
    if (r != CUDA_ERROR_NOT_READY) return rt_check(d, r, "cuEventQuery (a kernel faulted?)");
    if (watch(ctx)) return RT_ERROR;
    struct timespec ts = {0, 200 * 1000}; /* 0.2 ms: a step's end is seen about as soon as a sync would */
    nanosleep(&ts, NULL);
  }
  float f = 0;
  if (rt_check(d, d->cuEventElapsedTime(&f, t->a, t->b), "cuEventElapsedTime")) return RT_ERROR;
  *ms = f;
  return RT_OK;
}
