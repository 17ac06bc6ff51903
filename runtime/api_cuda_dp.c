/* api_cuda_dp.c — data parallel on the GPU (api_cuda_internal.h): NCCL joined at open; a
 * communication stream beside the step's; each gradient bucket's collective enqueued there on the
 * last micro-batch as soon as the launch that last writes its gradients has been enqueued on the
 * step's stream (the image's fire_op: the compiler's fusions decide which launch that is), so it
 * runs while the rest of backward does; the step's stream waits for it before the tail (norm,
 * clipping, AdamW). Every fork of the communication stream is joined back, so the same sequence is
 * what the full-iteration capture records (events and stream waits become graph edges).
 *
 * ZeRO-1 (optimizer.use_distributed_optimizer), with the CPU device's ownership (api_dp.c: a
 * gradient, its param, master and moments belong to the rank whose equal range of the bucket
 * holds its first element):
 *  - each bucket's gradients are reduced to their owners (ncclReduce, ncclAvg: the average plain
 *    DP's all-reduce computes), grouped;
 *  - the global norm: every rank runs the step's GRAD_SUMSQ launches, with the tensors it does not
 *    own masked (a multi-tensor table row of n = 0, or the launch skipped) and their partial sums
 *    zeroed; the partials are then summed over the ranks (each slot has one nonzero contributor,
 *    so the sum is that value exactly) and CLIP_COEF reduces them in its fixed order: the norm is
 *    bitwise the plain step's, the same on every rank;
 *  - AdamW: the same masking, so each rank updates only its tensors, every element by the same
 *    arithmetic; the hyper-parameter launch a masked op would have made is kept;
 *  - the updated parameters are broadcast from their owners (ncclBroadcast, grouped). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/api_cuda_internal.h"

#define GROUP_MAX 64 /* collectives per ncclGroupStart / ncclGroupEnd */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int nccl_fail(stepc_t *s, const char *what, const char *err) {
  cu(s)->nccl_failed = true;
  return api_fail(s, STEPC_ERR_RUNTIME, "data parallel, %s: %s", what, err), -1;
}

static int fork_comm(stepc_t *s) {
  ApiCuda *c = cu(s);
  return rt_side_fork(c->d, &c->comm) ? api_cuda_fail(s) : 0;
}

static int join_comm(stepc_t *s) {
  ApiCuda *c = cu(s);
  return rt_side_join(c->d, &c->comm) ? api_cuda_fail(s) : 0;
}

/* One collective of tensor t (ZeRO-1's reduce or broadcast, plain DP's all-reduce). */
typedef int (*OneColl)(stepc_t *s, int t, char *err, size_t nerr);

static RtColl bucket_coll(stepc_t *s, int t);

/* a bucket gradient's mean over its group's communicator (api_cuda_tp.c): the data-parallel one
 * (ncclAvg), an expert's the expert-data-parallel one (its sum / DP) */
static int coll_allreduce(stepc_t *s, int t, char *err, size_t nerr) {
  ApiCuda *c = cu(s);
  RtColl b = bucket_coll(s, t);
  return rt_nccl_coll(c->coll_nccl.group[b.group], &b, c->comm.s, err, nerr);
}

/* ZeRO-1's collectives run over the data-parallel group's communicator (the job's own without TP; under
 * TP the ranks of this TP rank, member order = data-parallel rank: api_cuda_tp.c), owners being
 * data-parallel ranks */
static RtNccl *dp_comm(stepc_t *s) { return cu(s)->coll_nccl.group[RT_COLL_GROUP_DP]; }

static int coll_reduce(stepc_t *s, int t, char *err, size_t nerr) {
  ApiCuda *c = cu(s);
  return rt_nccl_reduce_avg_f32(dp_comm(s), rt_player_tensor(c->x, t), (size_t)tensor_numel(&s->g->t[t]),
                                s->owner[t], c->comm.s, err, nerr);
}

/* a param from its owner; with model.fp8_param an fp8 weight (1 byte an element: its data and its
 * transpose, which the step's end has no launch to make here; and its scale_inv) from the rank that
 * cast its master */
static int coll_broadcast(stepc_t *s, int t, char *err, size_t nerr) {
  ApiCuda *c = cu(s);
  return rt_nccl_broadcast(dp_comm(s), rt_player_tensor(c->x, t), (size_t)s->g->t[t].bytes,
                           api_dp_param_source(s, t), c->comm.s, err, nerr);
}

/* The collectives of tensors t[0..n) on the communication stream, forked from the step's stream
 * (and, with pf, between two marks: one span of `kind`), GROUP_MAX to an NCCL group. */
static int collectives(stepc_t *s, const int32_t *t, int n, OneColl one, int kind, int id, const char *what,
                       CudaProf *pf) {
  if (fork_comm(s)) return -1;
  int a = pf ? api_cuda_mark(s, pf, 1) : 0;
  if (a < 0) return -1;
  char err[400];
  for (int i0 = 0; i0 < n; i0 += GROUP_MAX) {
    if (rt_nccl_group(cu(s)->nccl, 1, err, sizeof err)) return nccl_fail(s, what, err);
    int rc = 0;
    for (int i = i0; i < n && i < i0 + GROUP_MAX && !rc; i++)
      rc = one(s, t[i], err, sizeof err);
    char err2[400];
    if (rt_nccl_group(cu(s)->nccl, 0, err2, sizeof err2) && !rc)
      rc = -1, snprintf(err, sizeof err, "%s", err2);
    if (rc) return nccl_fail(s, what, err);
  }
  if (!pf) return 0;
  int b = api_cuda_mark(s, pf, 1);
  return b < 0 || api_cuda_span(s, pf, kind, id, -1, 1, a, b) ? -1 : 0;
}

/* ---- a bucket gradient's all-reduce ----
 * The sum over its group (the data-parallel group; an expert's gradient over the expert-data-
 * parallel group), divided by the data-parallel size — the CPU device's arithmetic. With ranks
 * sharing a GPU (api_cuda_tp.c: the host-staged communicator) it is a collective of the device's
 * communicator on the step's own stream (host-staged collectives are serialised on one stream, in
 * program order on every rank), summed in rank order; over NCCL, on the communication stream. */
static RtColl bucket_coll(stepc_t *s, int t) {
  ApiCuda *c = cu(s);
  int expert = s->g->t[s->g->t[t].of].tp_ep != 0;
  return (RtColl){.op = RT_COLL_ALLREDUCE_SUM,
                  .dtype = RT_COLL_F32,
                  .group = expert ? RT_COLL_GROUP_EDP : RT_COLL_GROUP_DP,
                  .count = tensor_numel(&s->g->t[t]),
                  .div = s->dp,
                  .src = rt_player_tensor(c->x, t),
                  .dst = rt_player_tensor(c->x, t)};
}

static stepc_status host_join(stepc_t *s) {
  ApiCuda *c = cu(s);
  char err[400];
  if (s->im.f.dist_opt)
    return api_fail(
        s, STEPC_ERR_UNSUPPORTED,
        "the distributed optimizer (optimizer.use_distributed_optimizer) with ranks sharing a GPU "
        "(host-staged collectives) is not built: run it with one rank a GPU (NCCL)");
  /* without TP the data-parallel group is the whole job (api_dp_check) */
  if (rt_coll_host_add_group(c->coll_host, RT_COLL_GROUP_DP, &s->dp_group, s->dp_rank, err, sizeof err) ||
      (s->ep > 1 && rt_coll_host_add_group(c->coll_host, RT_COLL_GROUP_EDP, &s->edp_group, s->rank / s->ep,
                                           err, sizeof err)))
    return api_fail(s, STEPC_ERR_RUNTIME, "data parallel: %s", err);
  for (int k = 0; k < s->im.nbucket_grad; k++) {
    RtColl b = bucket_coll(s, s->im.bucket_grad[k]);
    if (c->d->coll->prepare(c->d->coll->ctx, c->d, &b)) return api_cuda_fail(s), STEPC_ERR_RUNTIME;
  }
  return STEPC_OK;
}

static int host_buckets(stepc_t *s, int q) {
  ApiCuda *c = cu(s);
  for (int k = 0; k < s->im.nbucket; k++) {
    if (c->fire_point[k] != q) continue;
    const ImgBucket *b = &s->im.bucket[k];
    for (int i = 0; i < b->ngrads; i++) {
      RtColl x = bucket_coll(s, s->im.bucket_grad[b->first + i]);
      if (rt_coll(c->d, &x)) return api_cuda_fail(s);
    }
  }
  return 0;
}

int api_cuda_dp_after_point(stepc_t *s, int mb, int q, CudaProf *pf) {
  ApiCuda *c = cu(s);
  if (c->coll_host && c->fire_point && mb == c->nmb - 1) return host_buckets(s, q);
  /* fire_point: the buckets joined (a rank alone with NCCL for the program's collectives has none) */
  if (!c->nccl || !c->fire_point || mb != c->nmb - 1) return 0;
  for (int k = 0; k < s->im.nbucket; k++) {
    if (c->fire_point[k] != q) continue;
    const ImgBucket *b = &s->im.bucket[k];
    char what[64];
    snprintf(what, sizeof what, "gradient bucket %d", k);
    if (collectives(s, s->im.bucket_grad + b->first, b->ngrads, c->zero ? coll_reduce : coll_allreduce,
                    STEPC_SPAN_BUCKET, k, what, pf))
      return -1;
  }
  return 0;
}

int api_cuda_dp_join_comm(stepc_t *s) {
  ApiCuda *c = cu(s);
  return c->comm_ok && c->fire_point && s->im.nbucket > 0 ? join_comm(s) : 0;
}

/* ZeRO-1's norm: the partials of the tensors this rank does not own zeroed, then summed over the
 * ranks on the communication stream, which the step's stream waits for before CLIP_COEF. */
static int exchange_norm(stepc_t *s, CudaProf *pf) {
  ApiCuda *c = cu(s);
  const LpFacts *lf = &rt_player_program(c->x)->f;
  int64_t count = lf->norm_count;
  CUdeviceptr part = rt_player_base(c->x) + (CUdeviceptr)lf->norm_at;
  for (int i = 0; i < c->nzero_clear; i++)
    if (rt_memset0(c->d, part + (CUdeviceptr)(c->zero_clear[i][0] * 4), (size_t)c->zero_clear[i][1] * 4))
      return api_cuda_fail(s);
  if (fork_comm(s)) return -1;
  int a = pf ? api_cuda_mark(s, pf, 1) : 0;
  char err[400];
  if (a < 0) return -1;
  if (rt_nccl_allreduce_sum_f32(dp_comm(s), part, (size_t)count, c->comm.s, err, sizeof err))
    return nccl_fail(s, "gradient norm", err);
  if (pf) {
    int b = api_cuda_mark(s, pf, 1);
    if (b < 0 || api_cuda_span(s, pf, STEPC_SPAN_NORM, -1, -1, 1, a, b)) return -1;
  }
  return join_comm(s);
}

int api_cuda_dp_tail_point(stepc_t *s, int q, CudaProf *pf) {
  ApiCuda *c = cu(s);
  if (!c->nccl || !c->zero) return 0;
  if (q == c->norm_point && exchange_norm(s, pf)) return -1;
  if (!c->skip_point[q]) return 0;
  /* another rank's tensor, its op run alone: only the hyper-parameters the first AdamW of a
   * setting computes for the others */
  return rt_player_play(c->x, rt_player_program(c->x)->point[q].hparams) ? api_cuda_fail(s) : 1;
}

int api_cuda_dp_end(stepc_t *s, CudaProf *pf) {
  ApiCuda *c = cu(s);
  if (!c->nccl || !c->zero) return 0;
  const Graph *g = s->g;
  int32_t *p = malloc(((size_t)g->nt + 1) * sizeof *p);
  if (!p) return api_fail(s, STEPC_ERR_NOMEM, "out of memory"), -1;
  int n = 0;
  for (int t = 0; t < g->nt; t++)
    if (api_dp_param_source(s, t) >= 0) p[n++] = t;
  int rc =
      collectives(s, p, n, coll_broadcast, STEPC_SPAN_PARAMS, -1, "parameter all-gather", pf) || join_comm(s);
  free(p);
  return rc ? -1 : 0;
}

int api_cuda_zero_gather(stepc_t *s) {
  if (strcmp(s->be->name, "cuda") != 0)
    return api_fail(s, STEPC_ERR_UNSUPPORTED, "the cuda all-gather of parameters on the %s device",
                    s->be->name),
           -1;
  return api_cuda_dp_end(s, NULL) || (rt_sync(cu(s)->d) ? api_cuda_fail(s) : 0) ? -1 : 0;
}

static int nccl_abort(RtNccl *n, char *err, size_t nerr) {
  (void)err, (void)nerr;
  rt_nccl_abort(n);
  return 0;
}

int api_cuda_nccl_watch(void *ctx) {
  stepc_t *s = ctx;
  ApiCuda *c = cu(s);
  char err[400];
  double now = now_s(), limit = s->opt.comm_timeout_s > 0 ? s->opt.comm_timeout_s : RT_COMM_DEFAULT_TIMEOUT_S;
  if (c->watch_since == 0) c->watch_since = now;
  if (api_cuda_nccl_each(s, rt_nccl_check, err, sizeof err) == 0 && now - c->watch_since < limit) return 0;
  if (now - c->watch_since >= limit)
    snprintf(err, sizeof err,
             "the step's NCCL collectives did not finish within %.0f s (the communicator's timeout): a rank "
             "died or hangs",
             limit);
  c->nccl_failed = true;
  char ignored[8];
  api_cuda_nccl_each(s, nccl_abort, ignored, sizeof ignored);
  api_fail(s, STEPC_ERR_RUNTIME, "collectives, rank %d: %s; NCCL aborted", s->rank, err);
  return -1;
}

/* ---- open ---- */

static int cmp_range(const void *a, const void *b) {
  int64_t x = ((const int64_t *)a)[0], y = ((const int64_t *)b)[0];
  return x < y ? -1 : x > y;
}

/* ZeRO-1: this rank's masks (multi-tensor rows, points it skips) and the partials it zeroes. */
static stepc_status zero_setup(stepc_t *s) {
  ApiCuda *c = cu(s);
  const Graph *g = s->g;
  uint8_t *ks = calloc((size_t)g->nt + 1, 1), *ka = calloc((size_t)g->nt + 1, 1);
  c->skip_point = calloc((size_t)c->npoints + 1, 1);
  c->zero_clear = malloc(((size_t)c->npoints + 1) * sizeof *c->zero_clear);
  if (!ks || !ka || !c->skip_point || !c->zero_clear) {
    free(ks), free(ka);
    return api_fail(s, STEPC_ERR_NOMEM, "out of memory");
  }
  /* a gradient outside every bucket (owner -1) is every rank's: its update runs everywhere (the
   * same on each), its norm partial is counted once (data-parallel rank 0's) */
  for (int t = 0; t < g->nt; t++)
    ka[t] = s->owner[t] == s->dp_rank || s->owner[t] < 0,
    ks[t] = ka[t] && (s->owner[t] >= 0 || s->dp_rank == 0);
  stepc_status st = rt_player_keep_rows(c->x, ks, ka) ? (api_cuda_fail(s), STEPC_ERR_RUNTIME) : STEPC_OK;
  const LaunchProgram *lp = rt_player_program(c->x);
  c->norm_point = -1;
  for (int q = c->nmicro; q < c->npoints && st == STEPC_OK; q++) {
    int o = c->point_op[q];
    const Op *op = &g->op[o];
    const LpPoint *pt = &lp->point[q];
    bool alone = pt->alone;
    if (op->kind == OP_CLIP_COEF && c->norm_point < 0) c->norm_point = q;
    if (op->kind == OP_GRAD_SUMSQ && !ks[op->in[0]]) {
      if (pt->norm_count < 0)
        st = api_fail(s, STEPC_ERR_UNSUPPORTED,
                      "the distributed optimizer on cuda: GRAD_SUMSQ op %d launches nothing and belongs "
                      "to no multi-tensor group",
                      o);
      else
        c->zero_clear[c->nzero_clear][0] = pt->norm_first,
        c->zero_clear[c->nzero_clear++][1] = pt->norm_count;
      c->skip_point[q] = alone;
    }
    if (op->kind == OP_ADAMW && !ka[op->in[0]]) c->skip_point[q] = alone;
    if (op->kind == OP_FP8_QUANT && api_dp_absent(s, op->in[0])) { /* model.fp8_param: the owner casts */
      if (!alone)
        st = api_fail(s, STEPC_ERR_UNSUPPORTED,
                      "the distributed optimizer on cuda: the cast of fp8 primary weight %s launches with "
                      "other ops",
                      g->t[op->in[0]].name);
      c->skip_point[q] = 1;
    }
  }
  free(ks), free(ka);
  if (st != STEPC_OK) return st;
  /* adjacent slices as one memset */
  qsort(c->zero_clear, (size_t)c->nzero_clear, sizeof *c->zero_clear, cmp_range);
  int n = 0;
  for (int i = 0; i < c->nzero_clear; i++)
    if (n > 0 && c->zero_clear[n - 1][0] + c->zero_clear[n - 1][1] == c->zero_clear[i][0])
      c->zero_clear[n - 1][1] += c->zero_clear[i][1];
    else
      c->zero_clear[n][0] = c->zero_clear[i][0], c->zero_clear[n++][1] = c->zero_clear[i][1];
  c->nzero_clear = n;
  if (c->nzero_clear > 0 && c->norm_point < 0)
    return api_fail(s, STEPC_ERR_UNSUPPORTED,
                    "the distributed optimizer on cuda: the step computes a gradient norm without a "
                    "CLIP_COEF op to exchange its partial sums before");
  return STEPC_OK;
}

/* NCCL sets its buffers and connections up at a collective's first call: run each kind the step
 * uses once now, eagerly, so that it never happens inside a graph capture (warm-up 0). At open
 * the gradients and the norm partials are zero and every rank's parameters are the same
 * initialisation, so none of them changes anything. */
static stepc_status warm_up(stepc_t *s) {
  ApiCuda *c = cu(s);
  if (s->im.nbucket_grad == 0) return STEPC_OK;
  /* one gradient of each group's communicator (the data-parallel one, the expert-data-parallel one) */
  int32_t t[RT_COLL_GROUPS];
  bool seen[RT_COLL_GROUPS] = {false};
  int n = 0;
  for (int k = 0; k < s->im.nbucket_grad; k++) {
    int64_t grp = bucket_coll(s, s->im.bucket_grad[k]).group;
    if (!seen[grp]) seen[grp] = true, t[n++] = s->im.bucket_grad[k];
  }
  if (collectives(s, t, n, c->zero ? coll_reduce : coll_allreduce, 0, 0, "warm-up", NULL))
    return STEPC_ERR_RUNTIME;
  if (c->zero) {
    int32_t p = -1;
    for (int i = 0; i < s->g->nt && p < 0; i++)
      if (s->g->t[i].role == ROLE_PARAM && s->owner[i] >= 0) p = i;
    const LpFacts *lf = &rt_player_program(c->x)->f;
    int64_t count = lf->norm_count;
    CUdeviceptr part = rt_player_base(c->x) + (CUdeviceptr)lf->norm_at;
    char err[400];
    if ((p >= 0 && collectives(s, &p, 1, coll_broadcast, 0, 0, "warm-up", NULL)) ||
        (rt_nccl_allreduce_sum_f32(dp_comm(s), part, (size_t)count, c->comm.s, err, sizeof err) &&
         nccl_fail(s, "warm-up", err)))
      return STEPC_ERR_RUNTIME;
  }
  if (join_comm(s) || rt_sync(c->d)) return api_cuda_fail(s), STEPC_ERR_RUNTIME;
  return STEPC_OK;
}

stepc_status api_cuda_dp_join(stepc_t *s) {
  ApiCuda *c = cu(s);
  if (s->world == 1 && !s->opt.dp_join) return STEPC_OK;
  for (int k = 0; k < s->im.nbucket_grad; k++)
    if (s->g->t[s->im.bucket_grad[k]].dtype != DT_F32)
      return api_fail(s, STEPC_ERR_UNSUPPORTED, "data parallel: main gradient %s is not fp32",
                      s->g->t[s->im.bucket_grad[k]].name);
  /* each bucket fires after the point of its fire_op: the launch that last writes its gradients */
  c->fire_point = malloc(((size_t)s->im.nbucket + 1) * sizeof *c->fire_point);
  if (!c->fire_point) return api_fail(s, STEPC_ERR_NOMEM, "out of memory");
  for (int k = 0; k < s->im.nbucket; k++) {
    int q = c->op_point[s->im.bucket[k].fire_op];
    if (q < 0 || q >= c->nmicro)
      return api_fail(
          s, STEPC_ERR_IO,
          "%s: gradient bucket %d fires after op %d, which the micro program does not run: rebuild the "
          "artifact",
          s->dir, k, s->im.bucket[k].fire_op);
    c->fire_point[k] = q;
  }
  if (c->coll_host) return host_join(s); /* joined at open: the ranks share a GPU */
  if (rt_side_new(c->d, &c->comm)) return api_cuda_fail(s), STEPC_ERR_RUNTIME;
  c->comm_ok = true;
  stepc_status st = STEPC_OK;
  if (!c->nccl) { /* plain data parallelism (TP / EP joined at open: api_cuda_tp.c) */
    if ((st = api_cuda_nccl_join(s, "data parallel")) != STEPC_OK) return st;
    c->coll_nccl.group[RT_COLL_GROUP_DP] = c->nccl;
  }
  c->zero = s->im.f.dist_opt && s->owner;
  if (c->zero && s->ep > 1)
    return api_fail(
        s, STEPC_ERR_UNSUPPORTED,
        "the distributed optimizer (optimizer.use_distributed_optimizer) under expert parallelism "
        "(alone or with tensor parallelism) runs on the cpu device; on cuda (the experts' state "
        "sharded over the expert-data-parallel group's communicator) it is not built yet");
  if (c->zero && (st = zero_setup(s)) != STEPC_OK) return st;
  return warm_up(s);
}

void api_cuda_dp_free(stepc_t *s) {
  ApiCuda *c = cu(s);
  if (c->comm_ok) rt_side_free(c->d, &c->comm);
  rt_nccl_free(c->nccl, c->nccl_failed);
  free(c->fire_point), free(c->zero_clear), free(c->skip_point);
  c->nccl = NULL, c->comm_ok = false, c->fire_point = NULL, c->zero_clear = NULL, c->skip_point = NULL;
}
