/* scoped.h — per-module scoped CUDA graphs (model.cuda_graph_impl = local / transformer_engine):
 * every scope instance of the plan (compiler/passes/scope.c: one layer's forward part, or its backward
 * part with the replays placed inside it) is captured once as its own CUDA graph, and the step
 * runs as eager launches for the ops outside scopes and one graph launch per scope instance, for
 * every micro-batch.
 *
 * Why one graph per instance serves every micro-batch and step: every tensor lives at its planned
 * arena offset, the micro-batch's tokens, targets and dropout seed are copied into fixed slots
 * before its ops (the program's begin section), and nothing a captured op launches reads a host value
 * that changes (the LR and step counter are device memory, and optimizer ops run eagerly). */
#ifndef STEPC_RT_CUDA_SCOPED_H
#define STEPC_RT_CUDA_SCOPED_H

#include <stddef.h>

#include "runtime/cuda/player.h"
#include "runtime/image.h"

typedef struct RtScoped RtScoped;

/* Cuts the micro program (points [0, micro_points) of npoints) into eager runs
 * and the scope instances (their point ranges), played by x. Nothing is captured yet. NULL with a message in
 * err (instances that overlap, an order the executor does not run). */
RtScoped *rt_scoped_new(RtDevice *d, RtPlayer *x, const Graph *g, int micro_points, int npoints,
                        const ImgScope *scope, int nscope, char *err, size_t nerr);
void rt_scoped_free(RtScoped *s);
/* Captures every instance's graph (once; a no-op after). Nothing runs: capture only records. */
int rt_scoped_capture(RtScoped *s);
/* Enqueues the whole step: per micro-batch its inputs, eager runs and graph launches in schedule
 * order, its loss; then the tail's points (reduce and optimizer) eagerly. Needs rt_scoped_capture first. */
int rt_scoped_enqueue_step(RtScoped *s);
/* The micro-batches alone (no tail), with after(ctx, mb, first, last) called once each segment
 * (an eager run or one graph) is enqueued: its micro program points are first..last. What the
 * hook enqueues runs between the segments, never inside a graph (data parallel's collectives). */
typedef int (*RtSegmentHook)(void *ctx, int mb, int first_point, int last_point);
int rt_scoped_enqueue_micro(RtScoped *s, RtSegmentHook after, void *ctx);

/* After capture: graphs (instances with at least one launch), forward / backward ones, and their
 * nodes; eager ops per micro-batch (ops outside every scope that launch something). */
typedef struct {
  int graphs, forward, backward;
  long nodes;
  int eager_ops, graphed_ops;
} RtScopedStats;
void rt_scoped_stats(const RtScoped *s, RtScopedStats *st);

#endif
