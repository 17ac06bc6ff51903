/* graph.c — a region of the stream captured as one CUDA graph and replayed.
 *
 * Capture mode is thread-local: another thread's CUDA calls do not break the capture, this
 * thread's unsafe calls (a synchronous copy, an allocation) fail it, which is what we want to
 * learn about. cuBLASLt is capturable because its workspace is preset (gemm.c). */
#include "runtime/rt.h"

int rt_capture_begin(RtDevice *d) {
  return rt_check(d, d->cuStreamBeginCapture(d->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                  "cuStreamBeginCapture");
}

int rt_capture_end(RtDevice *d, RtGraph *g) {
  g->graph = NULL;
  g->exec = NULL;
  if (rt_check(d, d->cuStreamEndCapture(d->stream, &g->graph), "cuStreamEndCapture")) return RT_ERROR;
  if (rt_check(d, d->cuGraphGetNodes(g->graph, NULL, &g->nodes), "cuGraphGetNodes")) return RT_ERROR;
  return rt_check(d, d->cuGraphInstantiate(&g->exec, g->graph, 0), "cuGraphInstantiate");
}

int rt_graph_launch(RtDevice *d, const RtGraph *g) {
  return rt_check(d, d->cuGraphLaunch(g->exec, d->stream), "cuGraphLaunch");
}

void rt_graph_destroy(RtDevice *d, RtGraph *g) {
  if (g->exec) d->cuGraphExecDestroy(g->exec);
  if (g->graph) d->cuGraphDestroy(g->graph);
  g->exec = NULL;
  g->graph = NULL;
}
