/* api_cuda_dp.c — data parallel on the GPU (api_cuda_internal.h): NCCL joined at open; a
 * communication stream beside the step's; each gradient bucket's collective enqueued there on the
 * last micro-batch as soon as the launch that last writes its gradients has been enqueued on the
 * step's stream (the image's fire_op: the compiler's fusions decide which launch that is), so it
 * runs while the rest of backward does; the step's stream waits for it before the tail (norm,
 * clipping, AdamW). Every fork of the communication stream is joined back, so the same sequence is
 * what the full-iteration capture records (events and stream waits become graph edges).
 *
 * Ranks sharing a GPU (the host-staged communicator, api_cuda_tp.c) run the same collectives on the
 * step's own stream, in program order, summed in group order (the CPU device's bits).
 *
 * ZeRO-1 (optimizer.use_distributed_optimizer), with the CPU device's ownership (api_dp.c: a
 * gradient, its param, master and moments belong to the rank whose equal range of the bucket
 * holds its first element; a dense tensor's owner is a data-parallel rank, an expert's under EP an
 * expert-data-parallel rank) and its structure (api_cpu.c), this rank's plan made at open by
 * runtime/zero_coll.h (the same for both communicators, checked for every rank by
 * tests/api/zero_play.c):
 *  - each bucket's gradients, dense and experts' apart, copied owner by owner into a staging
 *    buffer and reduce-scattered (the dense over the data-parallel group, the experts' over the
 *    expert-data-parallel group, both sums divided by DP: ncclAvg, or a sum pre-multiplied by 1/DP);
 *    this rank's block copied back into its gradients once the step's stream waits for it (before
 *    the next bucket packs, or the tail);
 *  - the global norm: every rank runs the step's GRAD_SUMSQ launches, with the tensors it does not
 *    own masked (a multi-tensor table row of n = 0, or the launch skipped) and their partial sums
 *    zeroed; the partials are then summed, the dense ones over the data-parallel group and the
 *    experts' over the expert-data-parallel group (each slot has one nonzero contributor, so the
 *    sum is that value exactly) and CLIP_COEF reduces them in its fixed order: the norm is bitwise
 *    the plain step's, the same on every rank;
 *  - AdamW: the same masking, so each rank updates only its tensors, every element by the same
 *    arithmetic; the hyper-parameter launch a masked op would have made is kept;
 *  - the updated parameters all-gathered per bucket and kind through the staging (each rank's own
 *    copied into its block, the others' copied out of theirs).
 * The staging is a slot of the memory plan's arena (ImgFacts.zero_stage_at / zero_stage_bytes, sized by
 * zc_staging_bytes at build, live after the first bucket's fire point to the step's end): nothing is
 * allocated outside the plan; an image planning less than this rank's zc_plan needs is refused at open. */
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

/* The buckets' gradient collective of tensor t (plain data parallelism): the sum over its group (the
 * data-parallel group; an expert's gradient over the expert-data-parallel group), divided by the
 * data-parallel size — the CPU device's arithmetic; over NCCL ncclAvg, or for an expert a sum
 * pre-multiplied by 1/DP. */
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

/* Collectives x[0..n), each over its group's communicator. With ranks sharing a GPU (api_cuda_tp.c:
 * the host-staged communicator) on the step's own stream (host-staged collectives are serialised on
 * one stream, in program order on every rank, summed in group order); over NCCL on the
 * communication stream, forked from the step's stream (and, with pf, between two marks: one span of
 * `kind`), GROUP_MAX to an NCCL group. */
static int collectives(stepc_t *s, const RtColl *x, int n, int kind, int id, const char *what, CudaProf *pf) {
  ApiCuda *c = cu(s);
  if (c->coll_host) {
    for (int i = 0; i < n; i++)
      if (rt_coll(c->d, &x[i])) return api_cuda_fail(s);
    return 0;
  }
  if (fork_comm(s)) return -1;
  int a = pf ? api_cuda_mark(s, pf, 1) : 0;
  if (a < 0) return -1;
  char err[400];
  for (int i0 = 0; i0 < n; i0 += GROUP_MAX) {
    if (rt_nccl_group(c->nccl, 1, err, sizeof err)) return nccl_fail(s, what, err);
    int rc = 0;
    for (int i = i0; i < n && i < i0 + GROUP_MAX && !rc; i++)
      rc = rt_nccl_coll(c->coll_nccl.group[x[i].group], &x[i], c->comm.s, err, sizeof err);
    char err2[400];
    if (rt_nccl_group(c->nccl, 0, err2, sizeof err2) && !rc) rc = -1, snprintf(err, sizeof err, "%s", err2);
    if (rc) return nccl_fail(s, what, err);
  }
  if (!pf) return 0;
  int b = api_cuda_mark(s, pf, 1);
  return b < 0 || api_cuda_span(s, pf, kind, id, -1, 1, a, b) ? -1 : 0;
}

/* The step's stream waits for the communication stream (nothing to wait for when host-staged). */
static int wait_comm(stepc_t *s) { return cu(s)->coll_host ? 0 : join_comm(s); }

/* ---- ZeRO-1 (runtime/zero_coll.h: this rank's plan) ---- */

/* Part i's copies on the step's stream: into the staging (pack) or out of it. */
static int part_copies(stepc_t *s, int i, bool pack) {
  ApiCuda *c = cu(s);
  const ZcPart *p = &c->zc.part[i];
  for (int j = 0; j < (pack ? p->npack : p->nunpack); j++) {
    const ZcPiece *x = &c->zc.piece[(pack ? p->pack : p->unpack) + j];
    CUdeviceptr t = rt_player_tensor(c->x, x->tensor), at = c->zstage + (CUdeviceptr)x->at;
    if (rt_copy_d2d(c->d, pack ? at : t, pack ? t : at, (size_t)x->bytes)) return api_cuda_fail(s);
  }
  return 0;
}

/* Parts [first, last): packed, their collectives enqueued together. */
static int run_parts(stepc_t *s, int first, int last, int kind, int id, const char *what, CudaProf *pf) {
  ApiCuda *c = cu(s);
  RtColl x[2];
  int n = 0;
  for (int i = first; i < last; i++)
    if (part_copies(s, i, true)) return -1;
  for (int i = first; i < last; i++)
    x[n++] = zc_coll(&c->zc, i, c->zstage);
  return collectives(s, x, n, kind, id, what, pf);
}

/* The bucket whose reduce-scatter is in flight: the step's stream waits for it and copies this rank's
 * gradients out of the staging (before the next bucket packs into it, and before the tail). */
static int unpack_pending(stepc_t *s) {
  ApiCuda *c = cu(s);
  int k = c->zpending;
  if (k < 0) return 0;
  c->zpending = -1;
  if (wait_comm(s)) return -1;
  for (int i = c->zc.bucket_part[k]; i < c->zc.bucket_part[k + 1]; i++)
    if (part_copies(s, i, false)) return -1;
  return 0;
}

/* Bucket k's collectives: plain DP's all-reduce of each gradient, or ZeRO-1's reduce-scatter of
 * each part (dense over the data-parallel group, the experts' over the expert-data-parallel one). */
static int fire_bucket(stepc_t *s, int k, CudaProf *pf) {
  ApiCuda *c = cu(s);
  char what[64];
  snprintf(what, sizeof what, "gradient bucket %d", k);
  if (c->zero) {
    if (unpack_pending(s) ||
        run_parts(s, c->zc.bucket_part[k], c->zc.bucket_part[k + 1], STEPC_SPAN_BUCKET, k, what, pf))
      return -1;
    c->zpending = k;
    return 0;
  }
  const ImgBucket *b = &s->im.bucket[k];
  RtColl *x = malloc(((size_t)b->ngrads + 1) * sizeof *x);
  if (!x) return api_fail(s, STEPC_ERR_NOMEM, "out of memory"), -1;
  for (int i = 0; i < b->ngrads; i++)
    x[i] = bucket_coll(s, s->im.bucket_grad[b->first + i]);
  int rc = collectives(s, x, b->ngrads, STEPC_SPAN_BUCKET, k, what, pf);
  free(x);
  return rc;
}

int api_cuda_dp_after_point(stepc_t *s, int mb, int q, CudaProf *pf) {
  ApiCuda *c = cu(s);
  /* fire_point: the buckets joined (a rank alone with NCCL for the program's collectives has none) */
  if (!c->fire_point || mb != c->nmb - 1 || !(c->nccl || c->coll_host)) return 0;
  for (int k = 0; k < s->im.nbucket; k++)
    if (c->fire_point[k] == q && fire_bucket(s, k, pf)) return -1;
  return 0;
}

int api_cuda_dp_join_comm(stepc_t *s) {
  ApiCuda *c = cu(s);
  if (c->zero) return unpack_pending(s);
  return c->comm_ok && c->fire_point && s->im.nbucket > 0 ? join_comm(s) : 0;
}

/* ZeRO-1's norm: the partials of the tensors this rank does not own zeroed, then the dense ones
 * summed over the data-parallel group and the experts' over the expert-data-parallel group; the
 * step's stream waits for them before CLIP_COEF. */
static int exchange_norm(stepc_t *s, CudaProf *pf) {
  ApiCuda *c = cu(s);
  CUdeviceptr part = rt_player_base(c->x) + (CUdeviceptr)rt_player_program(c->x)->f.norm_at;
  for (int i = 0; i < c->zc.nclear; i++)
    if (rt_memset0(c->d, part + (CUdeviceptr)(c->zc.clear[i][0] * 4), (size_t)c->zc.clear[i][1] * 4))
      return api_cuda_fail(s);
  return collectives(s, c->zc.norm, c->zc.nnorm, STEPC_SPAN_NORM, -1, "gradient norm", pf) || wait_comm(s)
             ? -1
             : 0;
}

int api_cuda_dp_tail_point(stepc_t *s, int q, CudaProf *pf) {
  ApiCuda *c = cu(s);
  if (!c->zero) return 0;
  if (q == c->zc.norm_point && exchange_norm(s, pf)) return -1;
  if (!c->zc.skip_point[q]) return 0;
  /* another rank's tensor, its op run alone: only the hyper-parameters the first AdamW of a
   * setting computes for the others */
  return rt_player_play(c->x, rt_player_program(c->x)->point[q].hparams) ? api_cuda_fail(s) : 1;
}

/* After the tail: the params' all-gather, part by part through the staging. */
static int gather_params(stepc_t *s, CudaProf *pf) {
  ApiCuda *c = cu(s);
  for (int i = c->zc.params_first; i < c->zc.npart; i++)
    if (run_parts(s, i, i + 1, STEPC_SPAN_PARAMS, -1, "parameter all-gather", pf) || wait_comm(s) ||
        part_copies(s, i, false))
      return -1;
  return 0;
}

int api_cuda_dp_end(stepc_t *s, CudaProf *pf) { return cu(s)->zero ? gather_params(s, pf) : 0; }

/* model.fp8_param's casts run alone (after open, init, a load: runtime/api.c api_fp8_param_casts):
 * then the owners' fp8 weights all-gathered as at a step's end, and waited for. */
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

/* ZeRO-1: this rank's plan (runtime/zero_coll.h), its multi-tensor rows masked, the planned staging. */
static stepc_status zero_setup(stepc_t *s) {
  ApiCuda *c = cu(s);
  const LaunchProgram *lp = rt_player_program(c->x);
  ZcRank r = {.g = s->g,
              .owner = s->owner,
              .bucket = s->im.bucket,
              .nbucket = s->im.nbucket,
              .bucket_grad = s->im.bucket_grad,
              .dp = s->dp,
              .dp_member = s->dp_rank,
              .edp = s->edp_group.count,
              .edp_member = s->rank / s->ep,
              .ep = s->ep,
              .npoints = c->npoints,
              .nmicro = c->nmicro,
              .point_op = c->point_op,
              .point = lp->point,
              .norm_at = rt_player_base(c->x) + (CUdeviceptr)lp->f.norm_at,
              .norm_count = lp->f.norm_count};
  char err[400];
  if (zc_plan(&r, &c->zc, err, sizeof err)) return api_fail(s, STEPC_ERR_UNSUPPORTED, "%s", err);
  c->zpending = -1;
  /* the staging is the memory plan's (an arena slot, compiler/plan/memplan.c), but at world size 1,
   * where the plan has none (its one rank holds all the state: a step without --dp-join runs no
   * collective), a --dp-join run gets one of its own here, outside the plan */
  if (s->world == 1 && s->im.f.zero_stage_bytes == 0 && c->zc.staging_bytes > 0) {
    if (rt_alloc(c->d, &c->zstage_own, (size_t)c->zc.staging_bytes,
                 "the distributed optimizer's staging (world size 1)"))
      return api_cuda_fail(s), STEPC_ERR_NOMEM;
    c->zstage = c->zstage_own;
  } else if (c->zc.staging_bytes > s->im.f.zero_stage_bytes)
    return api_fail(
        s, STEPC_ERR_IO,
        "%s: the distributed optimizer's staging needs %lld bytes on rank %d, the image plans %lld: "
        "rebuild the artifact",
        s->dir, (long long)c->zc.staging_bytes, s->rank, (long long)s->im.f.zero_stage_bytes);
  else
    c->zstage = rt_player_base(c->x) + (CUdeviceptr)s->im.f.zero_stage_at;
  if (rt_player_keep_rows(c->x, c->zc.keep_sumsq, c->zc.keep_adamw))
    return api_cuda_fail(s), STEPC_ERR_RUNTIME;
  return STEPC_OK;
}

/* NCCL sets its buffers and connections up at a collective's first call: run each kind the step
 * uses once now, eagerly, so that it never happens inside a graph capture (warm-up 0). At open
 * the gradients and the norm partials are zero and every rank's parameters are the same
 * initialisation, so none of them changes anything. ZeRO-1: every part's collective and the norm's. */
static stepc_status warm_up(stepc_t *s) {
  ApiCuda *c = cu(s);
  if (s->im.nbucket_grad == 0) return STEPC_OK;
  int rc = 0;
  if (c->zero) {
    for (int i = 0; i < c->zc.npart && !rc; i++)
      rc = run_parts(s, i, i + 1, 0, 0, "warm-up", NULL) || join_comm(s);
    rc = rc || collectives(s, c->zc.norm, c->zc.nnorm, 0, 0, "warm-up", NULL);
  } else { /* one gradient of each group's communicator (the data-parallel one, the expert-data-parallel one)
            */
    RtColl x[RT_COLL_GROUPS];
    bool seen[RT_COLL_GROUPS] = {false};
    int n = 0;
    for (int k = 0; k < s->im.nbucket_grad; k++) {
      RtColl b = bucket_coll(s, s->im.bucket_grad[k]);
      if (!seen[b.group]) seen[b.group] = true, x[n++] = b;
    }
    rc = collectives(s, x, n, 0, 0, "warm-up", NULL);
  }
  if (rc) return STEPC_ERR_RUNTIME;
  if (join_comm(s) || rt_sync(c->d)) return api_cuda_fail(s), STEPC_ERR_RUNTIME;
  return STEPC_OK;
}

/* Ranks sharing a GPU: the data-parallel groups added to the host-staged communicator (joined at
 * open) and every collective the buckets (and ZeRO-1) will run prepared. */
static stepc_status host_join(stepc_t *s) {
  ApiCuda *c = cu(s);
  char err[400];
  /* without TP the data-parallel group is the whole job (api_dp_check) */
  if (rt_coll_host_add_group(c->coll_host, RT_COLL_GROUP_DP, &s->dp_group, s->dp_rank, err, sizeof err) ||
      (s->ep > 1 && rt_coll_host_add_group(c->coll_host, RT_COLL_GROUP_EDP, &s->edp_group, s->rank / s->ep,
                                           err, sizeof err)))
    return api_fail(s, STEPC_ERR_RUNTIME, "data parallel: %s", err);
  int rc = 0;
  for (int k = 0; k < s->im.nbucket_grad && !c->zero && !rc; k++) {
    RtColl b = bucket_coll(s, s->im.bucket_grad[k]);
    rc = c->d->coll->prepare(c->d->coll->ctx, c->d, &b);
  }
  for (int i = 0; i < c->zc.npart && !rc; i++) {
    RtColl x = zc_coll(&c->zc, i, c->zstage);
    rc = c->d->coll->prepare(c->d->coll->ctx, c->d, &x);
  }
  for (int i = 0; i < c->zc.nnorm && !rc; i++)
    rc = c->d->coll->prepare(c->d->coll->ctx, c->d, &c->zc.norm[i]);
  return rc ? (api_cuda_fail(s), STEPC_ERR_RUNTIME) : STEPC_OK;
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
  stepc_status st = STEPC_OK;
  c->zero = s->im.f.dist_opt && s->owner;
  if (c->zero && (st = zero_setup(s)) != STEPC_OK) return st;
  if (c->coll_host) return host_join(s); /* joined at open: the ranks share a GPU */
  if (rt_side_new(c->d, &c->comm)) return api_cuda_fail(s), STEPC_ERR_RUNTIME;
  c->comm_ok = true;
  if (!c->nccl) { /* plain data parallelism (TP / EP joined at open: api_cuda_tp.c) */
    if ((st = api_cuda_nccl_join(s, "data parallel")) != STEPC_OK) return st;
    c->coll_nccl.group[RT_COLL_GROUP_DP] = c->nccl;
  }
  return warm_up(s);
}

void api_cuda_dp_free(stepc_t *s) {
  ApiCuda *c = cu(s);
  if (c->comm_ok) rt_side_free(c->d, &c->comm);
  rt_nccl_free(c->nccl, c->nccl_failed);
  if (c->zstage_own) rt_free(c->d, c->zstage_own, (size_t)c->zc.staging_bytes);
  zc_free(&c->zc);
  free(c->fire_point);
  c->nccl = NULL, c->comm_ok = false, c->fire_point = NULL, c->zstage = 0, c->zstage_own = 0;
}
