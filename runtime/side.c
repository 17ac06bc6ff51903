/* side.c — a second stream joined to the runtime's by events (rt.h, "side.c"). */
#include "runtime/rt.h"

int rt_side_new(RtDevice *d, RtSide *c) {
  c->s = NULL, c->fork = c->join = NULL;
  /* non-blocking like d->stream: neither waits on the legacy default stream */
  if (rt_check(d, d->cuStreamCreate(&c->s, CU_STREAM_NON_BLOCKING), "cuStreamCreate (side stream)") ||
      rt_check(d, d->cuEventCreate(&c->fork, CU_EVENT_DISABLE_TIMING), "cuEventCreate (side stream fork)") ||
      rt_check(d, d->cuEventCreate(&c->join, CU_EVENT_DISABLE_TIMING), "cuEventCreate (side stream join)"))
    return RT_ERROR;
  return RT_OK;
}

void rt_side_free(RtDevice *d, RtSide *c) {
  if (c->fork) d->cuEventDestroy(c->fork);
  if (c->join) d->cuEventDestroy(c->join);
  if (c->s) d->cuStreamDestroy(c->s);
  c->s = NULL, c->fork = c->join = NULL;
}

int rt_side_fork(RtDevice *d, RtSide *c) {
  return rt_check(d, d->cuEventRecord(c->fork, d->stream), "cuEventRecord (side stream fork)") ||
                 rt_check(d, d->cuStreamWaitEvent(c->s, c->fork, 0), "cuStreamWaitEvent (side stream fork)")
             ? RT_ERROR
             : RT_OK;
}

int rt_side_join(RtDevice *d, RtSide *c) {
  return rt_check(d, d->cuEventRecord(c->join, c->s), "cuEventRecord (side stream join)") ||
                 rt_check(d, d->cuStreamWaitEvent(d->stream, c->join, 0),
                          "cuStreamWaitEvent (side stream join)")
             ? RT_ERROR
             : RT_OK;
}
