/* run.c — `stepc run SPEC --device cuda [--steps N] [--json]` (see run.h): the loss per step,
 * then the measurement record over the steady-state steps (those after the warm-up). */
#include "runtime/cuda/run.h"

#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "runtime/cuda/train.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* FLOPs per step as shared/bench/README.md counts them: 6 (non-embedding params + head) tokens
 * plus causal attention 6 mbs L seq^2 d per micro-batch (d the hidden size). */
static double step_flops(const Spec *s, const Graph *g) {
  double nonemb = 0;
  for (int i = 0; i < g->nt; i++) {
    const Tensor *t = &g->t[i];
    if (t->role == ROLE_PARAM && strncmp(t->name, "embedding.", 10) != 0 && strncmp(t->name, "output_layer.", 13) != 0)
      nonemb += (double)tensor_numel(t);
  }
  const SpecModel *m = &s->model;
  double mbs = (double)s->train.micro_batch_size, seq = (double)m->seq_length, c = (double)m->hidden_size;
  double nmb = g->num_microbatches, tokens = nmb * mbs * seq;
  return 6.0 * tokens * (nonemb + c * (double)m->vocab_size) + nmb * 6.0 * mbs * (double)m->num_layers * seq * seq * c;
}

CudaRunStatus cuda_run(const Spec *s, const CudaRunOptions *o, FILE *out, FILE *progress, char *err, size_t nerr) {
  CpuData data;
  if (cpu_data_open(s, &data, err, nerr) != 0) return CUDA_RUN_ERROR;
  RtTrainStatus ts;
  RtTrainer *tr = rt_trainer_new(s, &data, o->cache_dir, -1, &ts, err, nerr);
  if (!tr) {
    if (data.free) data.free(&data);
    return ts == RT_TRAIN_NO_DEVICE ? CUDA_RUN_NO_DEVICE : ts == RT_TRAIN_UNSUPPORTED ? CUDA_RUN_UNSUPPORTED : CUDA_RUN_ERROR;
  }
  RtDevice *d = rt_trainer_device(tr);
  const Graph *g = rt_trainer_graph(tr);
  int steps = o->steps > 0 ? o->steps : (int)s->train.train_iters;
  int warm = (int)s->model.cuda_graph_warmup_steps;
  RtMode m = rt_trainer_mode(tr);
  const char *mode = m == RT_MODE_FULL_ITERATION ? "full_iteration" : m == RT_MODE_SCOPED ? s->model.cuda_graph_impl : "eager";
  double *ms = calloc((size_t)steps + 1, sizeof *ms);
  int nms = 0;
  CudaRunStatus st = CUDA_RUN_OK;
  int64_t used = 0;
  if (o->json) {
    fprintf(out, "{\"device\": \"cuda\", \"gpu\": ");
    json_write_string(out, d->name);
    fprintf(out, ", \"mode\": \"%s\", \"steps\": [", mode);
  }
  for (int i = 0; i < steps && ms; i++) {
    RtStepStats ss;
    if (rt_trainer_step(tr, &ss, err, nerr) != 0) {
      st = CUDA_RUN_ERROR;
      break;
    }
    if (i >= warm) ms[nms++] = ss.ms;
    if (o->json)
      fprintf(out, "%s{\"step\": %lld, \"loss\": %.9g, \"lr\": %.6e, \"grad_norm\": %.6f, \"ms\": %.3f, \"graph\": %s}", i ? ", " : "",
              (long long)ss.step, ss.loss, ss.lr, ss.grad_norm, ss.ms, ss.replayed ? "true" : "false");
    else
      fprintf(out, "step %5lld  loss %.6f  lr %.3e  grad_norm %.4f  %8.3f ms%s\n", (long long)ss.step, ss.loss, ss.lr, ss.grad_norm,
              ss.ms, ss.replayed ? "  (graph)" : "");
    if (progress && !o->json) fflush(out);
  }
  if (st == CUDA_RUN_OK && rt_mem_used(d, &used) != RT_OK) {
    snprintf(err, nerr, "%s", d->err);
    st = CUDA_RUN_ERROR;
  }
  if (st == CUDA_RUN_OK) {
    qsort(ms, (size_t)nms, sizeof *ms, cmp_double);
    double med = nms ? ms[nms / 2] : 0, tokens = (double)g->num_microbatches * (double)tensor_numel(&g->t[g->tokens]);
    double flops = step_flops(s, g);
    RtExec *x = rt_trainer_exec(tr);
    RtScopedStats sst;
    int sc_ok = rt_trainer_scoped_stats(tr, &sst) == 0;
    int64_t arena = rt_exec_arena_bytes(x), scratch = rt_exec_scratch_bytes(x), ws = (int64_t)rt_blas_workspace_bytes(d);
    int64_t reserved = used - d->used_at_open;
    int64_t predicted = rt_trainer_planned_peak(tr) + ws; /* the plan's peak live bytes + the GEMM workspace */
    if (o->json) {
      fprintf(out, "], \"measure\": {\"steady_steps\": %d, \"median_ms\": %.3f, \"tokens_per_s\": %.0f, \"tflops\": %.1f, "
                   "\"flops_per_step\": %.6e, \"max_allocated_bytes\": %lld, \"arena_bytes\": %lld, \"scratch_bytes\": %lld, "
                   "\"cublaslt_workspace_bytes\": %lld, \"max_reserved_bytes\": %lld, \"device_used_bytes\": %lld, "
                   "\"predicted_peak_bytes\": %lld, \"predicted_peak_source\": \"memory plan peak + cuBLASLt workspace\", "
                   "\"replay_ops\": %d, \"graphs\": %d, \"graph_nodes\": %d, \"eager_ops_per_micro\": %d, \"mode\": \"%s\"}}\n",
              nms, med, med > 0 ? tokens / med * 1e3 : 0, med > 0 ? flops / med / 1e9 : 0, flops, (long long)d->max_allocated,
              (long long)arena, (long long)scratch, (long long)ws, (long long)reserved, (long long)used, (long long)predicted,
              rt_trainer_replay_ops(tr), rt_trainer_graph_count(tr), rt_trainer_graph_nodes(tr), sc_ok ? sst.eager_ops : -1, mode);
    } else if (nms) {
      fprintf(out, "measured over %d steady-state steps after %d warm-up step%s (%s on %s):\n", nms, warm, warm == 1 ? "" : "s", mode, d->name);
      fprintf(out, "  median step        %10.3f ms   (CUDA events around each step's GPU work)\n", med);
      fprintf(out, "  tokens/s           %10.0f\n", tokens / med * 1e3);
      fprintf(out, "  TFLOP/s            %10.1f      (%.3e FLOP/step, counted as shared/bench/README.md)\n", flops / med / 1e9, flops);
      fprintf(out, "  max allocated      %10.3f GB   (stepc's own cuMemAlloc: arena %.3f + scratch %.3f + cuBLASLt workspace %.3f)\n",
              (double)d->max_allocated / 1e9, (double)arena / 1e9, (double)scratch / 1e9, (double)ws / 1e9);
      fprintf(out, "  max reserved       %10.3f GB   (cuMemGetInfo used now - used at context creation: + module, cuBLASLt, graph)\n",
              (double)reserved / 1e9);
      fprintf(out, "  predicted peak     %10.3f GB   (memory plan: peak live bytes %.3f + cuBLASLt workspace %.3f; "
                   "measured / predicted = %.4f)\n",
              (double)predicted / 1e9, (double)rt_trainer_planned_peak(tr) / 1e9, (double)ws / 1e9,
              predicted > 0 ? (double)d->max_allocated / (double)predicted : 0);
      if (rt_trainer_replay_ops(tr)) fprintf(out, "  recompute          %10d replay ops per micro-batch\n", rt_trainer_replay_ops(tr));
      if (sc_ok)
        fprintf(out, "  graphs             %10d      (%d forward, %d backward: one per scope instance, launched every micro-batch; "
                     "%ld nodes; %d ops graphed, %d eager per micro-batch)\n",
                sst.graphs, sst.forward, sst.backward, sst.nodes, sst.graphed_ops, sst.eager_ops);
      else if (rt_trainer_graph_nodes(tr))
        fprintf(out, "  graph              %10d nodes, replayed each step\n", rt_trainer_graph_nodes(tr));
    } else {
      fprintf(out, "no steady-state steps to measure (--steps %d <= cuda_graph_warmup_steps %d)\n", steps, warm);
    }
  } else if (o->json) {
    fprintf(out, "]}\n");
  }
  free(ms);
  rt_trainer_free(tr);
  if (data.free) data.free(&data);
  return st;
}
