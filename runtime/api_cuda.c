/* api_cuda.c — stepc.h on the GPU. Opening sets the artifact's step up: its launch program
 * (runtime/program.h) on a player (runtime/cuda/player.h) over the one allocation it names, the
 * shipped cubin, cuBLASLt, the parameters. Each step then plays the program: per micro-batch its
 * inputs into the step's slots, the micro program's points, the loss copied out; then the tail's
 * points. In full_iteration mode that whole sequence is captured once (after the warm-up steps of
 * this process) and replayed every step: the step counter, LR and dropout seeds live in device
 * memory, so a replay is the next step. A data-parallel step, and every profiled step, is enqueued
 * point by point (enqueue_points), so that the collectives (api_cuda_dp.c) and the profiling
 * events go between the points. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "runtime/api_cuda_internal.h"

static const ApiBackend CUDA_BACKEND;

int api_cuda_fail(stepc_t *s) {
  api_fail(s, STEPC_ERR_RUNTIME, "%s", cu(s)->d->err);
  rt_clear_error(cu(s)->d);
  return -1;
}

/* ZeRO-1: the fp32 masters this rank holds, for the initialisation (open, and every stepc_init_params)
 * to write no other: another rank's master is absent here (api_dp_absent), its offset in the
 * optimizer-state region one of this rank's own masters or moments. Without ZeRO-1 every one. */
static int hold_masters(stepc_t *s) {
  if (!s->owner) return RT_OK;
  uint8_t *held = malloc((size_t)s->g->nt + 1);
  if (!held) return rt_fail(cu(s)->d, "out of memory");
  for (int t = 0; t < s->g->nt; t++)
    held[t] = !api_dp_absent(s, t);
  int rc = rt_player_hold_masters(cu(s)->x, held, s->g->nt);
  free(held);
  return rc;
}

static int cuda_init(stepc_t *s, uint64_t seed) {
  return rt_player_init(cu(s)->x, seed) ? api_cuda_fail(s) : 0;
}

/* A mark on the step's stream (side 0) or the communication stream (1): its index, or -1. */
int api_cuda_mark(stepc_t *s, CudaProf *pf, int side) {
  ApiCuda *c = cu(s);
  RtMarks *m = side ? &pf->side : &pf->main;
  int *k = side ? &pf->nside : &pf->nmain;
  if (*k >= m->n)
    return api_fail(s, STEPC_ERR_RUNTIME, "profiling: more than %d marks on the %s stream", m->n,
                    side ? "communication" : "step's"),
           -1;
  if (rt_mark_on(c->d, m, *k, side ? c->comm.s : c->d->stream)) return api_cuda_fail(s);
  return (*k)++;
}

int api_cuda_span(stepc_t *s, CudaProf *pf, int kind, int id, int micro, int side, int a, int b) {
  if (pf->nspan == pf->cap) {
    int cap = pf->cap ? 2 * pf->cap : 256;
    CudaSpan *p = realloc(pf->span, (size_t)cap * sizeof *p);
    if (!p) return api_fail(s, STEPC_ERR_NOMEM, "out of memory"), -1;
    pf->span = p, pf->cap = cap;
  }
  pf->span[pf->nspan++] = (CudaSpan){kind, id, micro, side, a, b};
  return 0;
}

/* The step point by point: per micro-batch the staged inputs, each point's launches, the loss
 * copied out; then the tail. Between
 * the points the data-parallel hooks enqueue the collectives on the communication stream
 * (api_cuda_dp.c); with pf, CUDA events around every point and every collective. A data-parallel
 * step runs this, eager or captured, and so does every profiled step. */
/* The tail (reduce and optimizer points) after the micro-batches: the communication stream
 * joined first, then each point, with ZeRO-1's norm exchange and skipped ops, then its
 * parameter all-gather. */
static int enqueue_tail(stepc_t *s, CudaProf *pf) {
  ApiCuda *c = cu(s);
  int a = 0, b = 0;
  if (api_cuda_dp_join_comm(s)) return -1;
  for (int q = c->nmicro; q < c->npoints; q++) {
    int handled = api_cuda_dp_tail_point(s, q, pf); /* ZeRO-1: the norm's exchange, a skipped op */
    if (handled < 0 || (pf && (a = api_cuda_mark(s, pf, 0)) < 0)) return -1;
    if (!handled && api_cuda_run_point(s, q)) return -1;
    if (pf && ((b = api_cuda_mark(s, pf, 0)) < 0 || api_cuda_span(s, pf, STEPC_SPAN_POINT, q, -1, 0, a, b)))
      return -1;
  }
  return api_cuda_dp_end(s, pf);
}

static int enqueue_points(stepc_t *s, CudaProf *pf) {
  ApiCuda *c = cu(s);
  int a = 0, b = 0;
  for (int mb = 0; mb < c->nmb; mb++) {
    if (rt_player_micro_begin(c->x, mb)) return api_cuda_fail(s);
    if (pf && (a = api_cuda_mark(s, pf, 0)) < 0) return -1;
    for (int q = 0, fork_q = -1, ta, tb; q < c->nmicro; q++) {
      if (api_cuda_run_point(s, q)) return -1;
      if (pf && ((b = api_cuda_mark(s, pf, 0)) < 0 || api_cuda_span(s, pf, STEPC_SPAN_POINT, q, mb, 0, a, b)))
        return -1;
      if (pf && rt_player_point_forks(c->x, q)) fork_q = q; /* a tensor-parallel collective left the stream */
      if (pf && rt_player_comm_span(c->x, &ta, &tb) &&
          api_cuda_span(s, pf, STEPC_SPAN_TP_COLL, fork_q, mb, 2, ta, tb))
        return -1;
      a = b;
      if (api_cuda_dp_after_point(s, mb, q, pf)) return -1;
    }
    if (rt_player_micro_end(c->x, mb)) return api_cuda_fail(s);
  }
  return enqueue_tail(s, pf);
}

/* A scoped-graph step under data parallelism: the micro-batches through the scoped graphs, each
 * bucket's collective enqueued between segments, after the one holding its fire point (a graph
 * is launched whole, so a bucket whose last write is inside one fires when the graph is
 * enqueued); then the tail point by point as above. */
static int after_segment(void *ctx, int mb, int first, int last) {
  for (int q = first; q <= last; q++)
    if (api_cuda_dp_after_point(ctx, mb, q, NULL)) return -1;
  return 0;
}

static int enqueue_scoped_dp(stepc_t *s) {
  if (rt_scoped_enqueue_micro(cu(s)->scoped, after_segment, s)) return s->err[0] ? -1 : api_cuda_fail(s);
  return enqueue_tail(s, NULL);
}

static int enqueue(stepc_t *s) { return enqueue_points(s, NULL); }

/* The dropout seed of (step, micro-batch): a pure function of train.seed, so replays and reruns
 * draw the same masks. */
static uint64_t step_seed(uint64_t seed, int64_t step, int64_t micro) {
  return ops_mix64(ops_mix64(ops_mix64(seed) ^ (uint64_t)step) ^ ((uint64_t)micro << 20));
}

/* Step `step`'s tokens, targets, dropout seeds and loss denominator to the device (the recipe's
 * data, the batch bound on the host, or the one bound on the device, whose targets are read back
 * to count the kept ones: op_attn_loss.c says why the host counts). An all-masked global batch is
 * refused here, before anything runs (api_loss_den). */
static int stage(stepc_t *s, int64_t step) {
  ApiCuda *c = cu(s);
  const Graph *g = s->g;
  int64_t kept = 0, n = (int64_t)g->num_microbatches * tensor_numel(&g->t[g->tokens]);
  double den = 0;
  if (api_kept(s, step, c->tok, c->tg, &kept)) return -1;
  for (int mb = 0; mb < g->num_microbatches; mb++)
    c->seeds[mb] = step_seed(s->im.f.seed, step, api_dp_micro(s, mb));
  if (s->data.dbound) {
    if (rt_copy_d2h(c->d, c->tg, (CUdeviceptr)s->data.dtg, (size_t)n * sizeof *c->tg))
      return api_cuda_fail(s);
    kept = cpu_data_count_kept(c->tg, n, s->im.f.vocab_size);
  }
  if (api_loss_den(s, kept, NULL, &den)) return -1;
  if (rt_player_stage(c->x, c->tok, c->tg, c->seeds, den)) return api_cuda_fail(s);
  /* a device binding overwrites the staged tokens and targets (the seeds stay) */
  if (s->data.dbound && rt_player_stage_device(c->x, (CUdeviceptr)s->data.dtok, (CUdeviceptr)s->data.dtg))
    return api_cuda_fail(s);
  return 0;
}

/* An fp32 scalar tensor (the LR, the gradient norm) as a double (synchronises). */
static int read_f32(ApiCuda *c, int t, double *v) {
  float f = 0;
  if (rt_copy_d2h(c->d, &f, rt_player_tensor(c->x, t), 4)) return RT_ERROR;
  *v = f;
  return RT_OK;
}

/* The step's loss (mean over micro-batches), LR and gradient norm, after its work. */
static int read_stats(stepc_t *s, stepc_step_stats *st) {
  ApiCuda *c = cu(s);
  double lr = 0, gn = 0, loss = 0;
  if (rt_player_read_losses(c->x, c->losses) || read_f32(c, s->g->lr, &lr) ||
      read_f32(c, s->g->grad_norm, &gn))
    return RT_ERROR;
  for (int mb = 0; mb < c->nmb; mb++)
    loss += c->losses[mb];
  if (api_dp_loss(s, loss, &st->loss)) return RT_ERROR;
  st->lr = lr;
  st->grad_norm = gn;
  return RT_OK;
}

int api_cuda_run_point(stepc_t *s, int q) { return rt_player_point(cu(s)->x, q) ? api_cuda_fail(s) : 0; }

/* Waits for the step's work (watching NCCL in a data-parallel step) and its time. */
static int cuda_wait(stepc_t *s, double *ms) {
  ApiCuda *c = cu(s);
  c->watch_since = 0;
  if (c->nccl ? rt_timer_stop_watched(c->d, &c->timer, ms, api_cuda_nccl_watch, s)
              : rt_timer_stop(c->d, &c->timer, ms))
    return s->err[0] ? -1 : api_cuda_fail(s);
  return api_cuda_tp_check(s);
}

/* ms from the step's start event to mark k of m. */
static int since_start(stepc_t *s, CUevent e, double *ms) {
  ApiCuda *c = cu(s);
  float f = 0;
  if (rt_check(c->d, c->d->cuEventElapsedTime(&f, c->timer.a, e), "cuEventElapsedTime"))
    return api_cuda_fail(s);
  *ms = f;
  return 0;
}

/* One step eagerly with CUDA events around every point and collective (enqueue_points): each
 * point's time (its kernels and the gap before them) added to ms[point], every span to the
 * handle's timeline. */
static int cuda_step_profiled(stepc_t *s, int64_t step, stepc_step_stats *st, double *ms) {
  ApiCuda *c = cu(s);
  RtDevice *d = c->d;
  int nmb = c->nmb, ntail = c->npoints - c->nmicro;
  CudaProf pf = {0};
  if (stage(s, step)) return -1;
  int rc = 0;
  int windows = 0;
  for (int q = 0; q < c->nmicro; q++)
    windows += rt_player_point_forks(c->x, q);
  if (rt_marks_new(d, &pf.main, nmb * (c->nmicro + 1) + 2 * ntail + 2) ||
      (c->nccl && rt_marks_new(d, &pf.side, 2 * (s->im.nbucket + 2))) ||
      (windows && rt_marks_new(d, &pf.tp, 2 * windows * nmb)))
    rc = api_cuda_fail(s);
  if (windows) rt_player_comm_marks(c->x, &pf.tp);
  if (!rc && rt_timer_start(d, &c->timer)) rc = api_cuda_fail(s);
  if (!rc) rc = enqueue_points(s, &pf);
  if (!rc) rc = cuda_wait(s, &st->ms);
  if (!rc && read_stats(s, st)) rc = api_cuda_fail(s);
  for (int i = 0; i < pf.nspan && !rc; i++) {
    const CudaSpan *p = &pf.span[i];
    const RtMarks *m = p->side == 2 ? &pf.tp : p->side ? &pf.side : &pf.main;
    double t0 = 0, t1 = 0;
    rc = since_start(s, m->e[p->a], &t0) || since_start(s, m->e[p->b], &t1) ||
         api_span_add(s, p->kind, p->side, p->id, p->micro, t0, t1);
    if (!rc && p->kind == STEPC_SPAN_POINT) ms[p->id] += t1 - t0;
  }
  rt_player_comm_marks(c->x, NULL);
  rt_marks_free(d, &pf.main);
  rt_marks_free(d, &pf.side);
  rt_marks_free(d, &pf.tp);
  free(pf.span);
  if (rc) return -1;
  c->steps_here++;
  return 0;
}

static int cuda_step(stepc_t *s, int64_t step, stepc_step_stats *st) {
  ApiCuda *c = cu(s);
  RtDevice *d = c->d;
  if (stage(s, step)) return -1;
  bool replay = (c->full_iteration || c->scoped) && c->steps_here >= c->warmup;
  if (replay && c->scoped && !c->captured) {
    /* one graph per scope instance */
    if (rt_scoped_capture(c->scoped)) return s->err[0] ? -1 : api_cuda_fail(s);
    c->captured = true;
  } else if (replay && !c->captured) {
    if (rt_capture_begin(d)) return api_cuda_fail(s);
    int rc = enqueue(s);
    RtGraph gr;
    int rc2 = rt_capture_end(d, &gr);
    if (rc) return -1;
    if (rc2) return api_cuda_fail(s);
    c->graph = gr;
    c->captured = true;
  }
  if (rt_timer_start(d, &c->timer)) return api_cuda_fail(s);
  int rc = !replay     ? enqueue(s)
           : c->scoped ? (c->nccl ? enqueue_scoped_dp(s) : rt_scoped_enqueue_step(c->scoped))
                       : rt_graph_launch(d, &c->graph);
  if (rc != 0) return s->err[0] ? -1 : api_cuda_fail(s);
  if (cuda_wait(s, &st->ms)) return -1;
  double lr = 0, gn = 0, loss = 0;
  if (rt_player_read_losses(c->x, c->losses) || read_f32(c, s->g->lr, &lr) ||
      read_f32(c, s->g->grad_norm, &gn))
    return api_cuda_fail(s);
  for (int mb = 0; mb < c->nmb; mb++)
    loss += c->losses[mb];
  char nerr[400];
  if (api_cuda_nccl_each(s, rt_nccl_check, nerr, sizeof nerr)) {
    c->nccl_failed = true;
    return api_fail(s, STEPC_ERR_RUNTIME, "collectives: %s", nerr), -1;
  }
  if (api_dp_loss(s, loss, &st->loss)) return -1;
  st->lr = lr;
  st->grad_norm = gn;
  st->replayed = replay;
  c->steps_here++;
  return 0;
}

/* stepc_eval: the batch and zero seeds staged (dropout is off), then per micro-batch its begin
 * section, every forward point's evaluation launches and its end section, eagerly in every graph
 * mode (a captured step's graph reads the slots the next step stages again); the losses and, on
 * request, each micro-batch's per-token losses read back. */
static stepc_status cuda_eval(stepc_t *s, const int32_t *tok, const int32_t *tg, double den, double *sum,
                              float *lp) {
  ApiCuda *c = cu(s);
  const LpFacts *f = &s->im.lp.f;
  if (!f->has_eval)
    return api_fail(s, STEPC_ERR_UNSUPPORTED, "stepc_eval: %s holds no evaluation program: %s", s->dir,
                    f->eval_refusal);
  memset(c->seeds, 0, (size_t)c->nmb * sizeof *c->seeds);
  if (rt_player_stage(c->x, tok, tg, c->seeds, den)) return api_cuda_fail(s), STEPC_ERR_RUNTIME;
  for (int mb = 0; mb < c->nmb; mb++) {
    if (rt_player_micro_begin(c->x, mb)) return api_cuda_fail(s), STEPC_ERR_RUNTIME;
    for (int q = 0; q < c->nmicro; q++)
      if (rt_player_eval_point(c->x, q)) return api_cuda_fail(s), STEPC_ERR_RUNTIME;
    if (rt_player_micro_end(c->x, mb)) return api_cuda_fail(s), STEPC_ERR_RUNTIME;
    if (lp) {
      float *out = lp + (int64_t)mb * f->ntok;
      if (rt_player_read_token_losses(c->x, out)) return api_cuda_fail(s), STEPC_ERR_RUNTIME;
      api_eval_logprobs(out, f->ntok, out);
    }
  }
  if (rt_player_read_losses(c->x, c->losses) || rt_sync(c->d)) return api_cuda_fail(s), STEPC_ERR_RUNTIME;
  if (api_cuda_tp_check(s)) return STEPC_ERR_RUNTIME;
  for (int mb = 0; mb < c->nmb; mb++)
    *sum += c->losses[mb];
  return STEPC_OK;
}

static int cuda_read(stepc_t *s, int t, void *dst) {
  ApiCuda *c = cu(s);
  if (s->g->t[t].bytes == 0 && s->im.storage[t] == t)
    return api_fail(s, STEPC_ERR_ARGUMENT,
                    "tensor %s is another rank's (the distributed optimizer's shard): rank %d does not "
                    "hold it",
                    s->g->t[t].name, s->rank),
           -1;
  return rt_copy_d2h(c->d, dst, rt_player_tensor(c->x, t), (size_t)s->g->t[t].bytes) ? api_cuda_fail(s) : 0;
}

static int cuda_write(stepc_t *s, int t, const void *src) {
  ApiCuda *c = cu(s);
  if (s->g->t[t].bytes == 0 && s->im.storage[t] == t)
    return api_fail(s, STEPC_ERR_ARGUMENT,
                    "tensor %s is another rank's (the distributed optimizer's shard): rank %d does not "
                    "hold it",
                    s->g->t[t].name, s->rank),
           -1;
  /* the copy is asynchronous: wait before the caller may reuse src */
  return rt_copy_h2d(c->d, rt_player_tensor(c->x, t), src, (size_t)s->g->t[t].bytes) || rt_sync(c->d)
             ? api_cuda_fail(s)
             : 0;
}

static int cuda_params_from_masters(stepc_t *s) {
  (void)s; /* the bf16 params were loaded as saved: AdamW left them = bf16(master) */
  return 0;
}

static int cuda_point_alone(stepc_t *s, int q) {
  return rt_player_point_solo(cu(s)->x, q) || rt_sync(cu(s)->d) ? api_cuda_fail(s) : 0;
}

static void cuda_measure(stepc_t *s, stepc_measure *m) {
  ApiCuda *c = cu(s);
  m->max_allocated_bytes = c->d->max_allocated;
  m->arena_bytes = rt_player_program(c->x)->f.alloc_bytes;
  m->predicted_peak_bytes = s->im.f.cuda_peak; /* the plan's device peak, its workspaces included */
  m->optimizer_region_bytes = s->g->nbuffers > 1 ? s->g->buffer_bytes[1] : 0;
  m->replay_ops = s->im.f.nreplay;
  RtScopedStats ss = {0};
  if (c->captured && c->scoped) rt_scoped_stats(c->scoped, &ss);
  m->graph_nodes = !c->captured ? 0 : c->scoped ? (int64_t)ss.nodes : (int64_t)c->graph.nodes;
}

static void cuda_free(stepc_t *s) {
  ApiCuda *c = cu(s);
  if (!c) return;
  if (c->d) {
    if (c->captured && !c->scoped) rt_graph_destroy(c->d, &c->graph);
    rt_scoped_free(c->scoped);
    if (c->timer_ok) rt_timer_free(c->d, &c->timer);
    rt_player_free(c->x);
    api_cuda_tp_free(s);
    api_cuda_dp_free(s);
    rt_close(c->d);
  }
  free(c->point_op), free(c->op_point), free(c->losses), free(c->tok), free(c->tg), free(c->seeds);
  free(c);
  s->impl = NULL;
}

static const ApiBackend CUDA_BACKEND = {"cuda",           cuda_init,    cuda_step,  cuda_step_profiled,
                                        cuda_eval,        cuda_read,    cuda_write, cuda_params_from_masters,
                                        cuda_point_alone, cuda_measure, cuda_free};

/* The artifact's cubin, read whole. NULL with the message. */
static void *read_cubin(stepc_t *s, const char *name) {
  char path[700];
  snprintf(path, sizeof path, "%s/%s", s->dir, name);
  char err[800];
  uint64_t n = 0;
  FILE *f = rt_open_regular(path, RT_FOLLOW, STEPC_CUBIN_MAX_BYTES, &n, err, sizeof err);
  if (!f) return api_fail(s, STEPC_ERR_IO, "the artifact's cubin: %s", err), NULL;
  void *buf = NULL;
  if (n > 0 && (buf = malloc((size_t)n)) && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (!buf) api_fail(s, STEPC_ERR_IO, "cannot read the artifact's cubin %s", path);
  return buf;
}

stepc_status api_cuda_open(stepc_t *s) {
  const StepImage *im = &s->im;
  ApiCuda *c = calloc(1, sizeof *c);
  if (!c) return api_fail(s, STEPC_ERR_NOMEM, "out of memory");
  /* tensor parallelism: ranks may share the GPUs (host-staged collectives, api_cuda_tp.c) */
  int rc = s->world > 1 ? rt_open_device_shared(&c->dev, s->opt.local_rank)
                        : rt_open_device(&c->dev, s->opt.local_rank);
  if (rc != RT_OK) {
    api_fail(s, rc == RT_NO_DEVICE ? STEPC_ERR_NO_DEVICE : STEPC_ERR_RUNTIME, "%s", c->dev.err);
    if (c->dev.lib) rt_close(&c->dev);
    free(c);
    return rc == RT_NO_DEVICE ? STEPC_ERR_NO_DEVICE : STEPC_ERR_RUNTIME;
  }
  s->impl = c;
  s->be = &CUDA_BACKEND;
  c->d = &c->dev;
  s->g = im->g;
  snprintf(s->gpu, sizeof s->gpu, "%s", c->d->name);
  if (im->f.cuda_refusal[0]) return api_fail(s, STEPC_ERR_UNSUPPORTED, "%s", im->f.cuda_refusal);
  char arch[16];
  snprintf(arch, sizeof arch, "sm_%d%d", c->d->cc_major, c->d->cc_minor);
  if (!im->f.cubin[0] || !strstr(im->f.cubin, arch))
    return api_fail(s, STEPC_ERR_UNSUPPORTED,
                    "this GPU is %s, the artifact holds %s: rebuild it with stepc build --arch %s", arch,
                    im->f.cubin[0] ? im->f.cubin : "no cubin", arch);
  if (!im->has_program)
    return api_fail(s, STEPC_ERR_UNSUPPORTED, "%s holds no launch program: rebuild the artifact", s->dir);
  bool colls = api_cuda_program_collectives(&im->lp, -1);
  if (s->world > 1 ||
      colls) { /* several ranks: do they share the GPUs (host-staged collectives) or not (NCCL)? */
    int shared = api_cuda_tp_shared(s, c->d->device_count);
    if (shared < 0) return STEPC_ERR_ARGUMENT;
    if (!shared && s->opt.local_rank >= c->d->device_count)
      return api_fail(
          s, STEPC_ERR_NO_DEVICE,
          "no CUDA device %d (LOCAL_RANK) for NCCL's one rank a GPU: this host has %d (%s=host lets "
          "ranks share them)",
          s->opt.local_rank, c->d->device_count, STEPC_COLLECTIVES_ENV);
    /* the launch program's collectives (TP, EP, or any at world 1) join at open; plain data
     * parallelism over NCCL joins after (api_cuda_dp_join) */
    stepc_status st = shared || colls ? api_cuda_tp_open(s, shared) : STEPC_OK;
    if (st != STEPC_OK) return st;
  }
  c->d->gen = &im->gen; /* the generated kernels' handles follow the static ones (rt.h) */
  void *cubin = read_cubin(s, im->f.cubin);
  if (!cubin) return STEPC_ERR_IO;
  rc = rt_module_load(c->d, cubin);
  free(cubin);
  c->d->gemm_tune = s->opt.gemm_tuning;
  if (rc || rt_blas_open(c->d, RT_BLAS_WORKSPACE_BYTES) || !(c->x = rt_player_new(c->d, &im->lp)) ||
      rt_player_set_ranks(c->x, s->tp_rank, s->ep_rank) || hold_masters(s) ||
      rt_player_init(c->x, im->f.seed))
    return api_cuda_fail(s), STEPC_ERR_RUNTIME;
  snprintf(s->notice, sizeof s->notice, "%s", rt_player_notice(c->x));
  c->nmb = im->lp.f.nmb;
  int mode = s->opt.graph_mode >= 0 ? s->opt.graph_mode : im->f.graph_mode;
  c->full_iteration = mode == IMG_MODE_FULL_ITERATION;
  c->warmup = im->f.warmup_steps;
  if (mode == IMG_MODE_SCOPED && !(c->scoped = rt_scoped_new(c->d, c->x, im->g, im->micro_points, im->npoints,
                                                             im->scope, im->nscope, s->err, sizeof s->err)))
    return STEPC_ERR_UNSUPPORTED;
  const Graph *g = s->g;
  int64_t n = tensor_numel(&g->t[g->tokens]) * g->num_microbatches;
  c->point_op = malloc((size_t)(g->nop + 1) * sizeof *c->point_op);
  c->op_point = malloc((size_t)(g->nop + 1) * sizeof *c->op_point);
  c->losses = malloc((size_t)(g->num_microbatches + 1) * sizeof *c->losses);
  c->tok = malloc((size_t)n * sizeof *c->tok);
  c->tg = malloc((size_t)n * sizeof *c->tg);
  c->seeds = malloc((size_t)g->num_microbatches * sizeof *c->seeds);
  if (!c->point_op || !c->op_point || !c->losses || !c->tok || !c->tg || !c->seeds)
    return api_fail(s, STEPC_ERR_NOMEM, "out of memory");
  for (int o = 0; o < g->nop; o++)
    c->op_point[o] = -1;
  c->npoints = im->npoints, c->nmicro = im->micro_points;
  for (int q = 0; q < c->npoints; q++)
    c->point_op[q] = im->point_op[q], c->op_point[im->point_op[q]] = q;
  if (rt_timer_new(c->d, &c->timer)) return api_cuda_fail(s), STEPC_ERR_RUNTIME;
  c->timer_ok = true;
  return STEPC_OK;
}
