/* api_cuda_tp.c — tensor and expert parallelism on the GPU (api_cuda_internal.h): the launch
 * program's collective records (rt.h RtColl: the TP / EP ops of ir/ops/tp.c and ep.c, lowered by
 * compiler/codegen/launch/op_tp.c) played through one of two communicators, joined before the
 * program opens (the player sizes every collective's buffers at open):
 *  - host-staged (runtime/coll_host.h) when the job's ranks share GPUs — more ranks than this
 *    host's devices (stepc run --nproc 2 on one GPU), or STEPC_COLLECTIVES=host: NCCL refuses two
 *    ranks on one device; each collective is a copy to pinned memory, a host function over the host
 *    communicator, a copy back, all on the step's stream and so captured into its CUDA graphs.
 *    Slow but exact: sums in group order, every rank the same bits;
 *  - NCCL (one rank per GPU, or STEPC_COLLECTIVES=nccl): the same records as ncclAllReduce /
 *    ncclAllGather / ncclReduceScatter on the step's stream, each over its group's communicator —
 *    the job's own where the group is the whole job, else a split of it (ncclCommSplit, color the
 *    group's first rank): the TP, EP, data-parallel and expert-data-parallel groups.
 * Either way the data-parallel buckets take the same groups (api_cuda_dp.c), so TP, TP x DP, EP,
 * EP x expert-DP and TP x EP run. A program lowered with train.force_parallel_lowering holds
 * collectives at world size 1 too: a rank alone joins a job of one (its groups one rank each). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/api_cuda_internal.h"

bool api_cuda_program_collectives(const LaunchProgram *lp, int group) {
  for (int i = 0; i < lp->f.nrec; i++)
    if (lp->rec[i].kind == RT_REC_COLL && (group < 0 || lp->rec[i].coll.group == group)) return true;
  return false;
}

/* STEPC_COLLECTIVES: "host", "nccl", or unset / "auto" (host when the job has more ranks than this
 * host has devices). 1 host, 0 NCCL, -1 a bad value (the message in s). */
int api_cuda_tp_shared(stepc_t *s, int device_count) {
  const char *e = getenv(STEPC_COLLECTIVES_ENV);
  if (e && strcmp(e, "host") == 0) return 1;
  if (e && strcmp(e, "nccl") == 0) return 0;
  if (e && e[0] && strcmp(e, "auto") != 0)
    return api_fail(s, STEPC_ERR_ARGUMENT, "%s=%s: expected host, nccl or auto", STEPC_COLLECTIVES_ENV, e),
           -1;
  return s->world > device_count;
}

/* The communicator of group g, whose member this rank is: the job's own when g is the whole job,
 * else a split of it (every rank calls this for the same groups in the same order); the amax
 * group's always a split (its own: rt.h). */
static stepc_status nccl_group(stepc_t *s, int which, const RtCommGroup *g, int member) {
  ApiCuda *c = cu(s);
  char err[600];
  if (g->count == s->world && which != RT_COLL_GROUP_AMAX)
    return c->coll_nccl.group[which] = c->nccl, STEPC_OK;
  if (rt_nccl_split(c->nccl, g->first, member, &c->nccl_split[which], err, sizeof err)) {
    c->nccl_failed = true;
    return api_fail(s, STEPC_ERR_RUNTIME, "collectives: %s", err);
  }
  c->coll_nccl.group[which] = c->nccl_split[which];
  return STEPC_OK;
}

stepc_status api_cuda_nccl_join(stepc_t *s, const char *what) {
  ApiCuda *c = cu(s);
  char err[600];
  if (rt_nccl_load(&c->nccl, err, sizeof err)) return api_fail(s, STEPC_ERR_UNSUPPORTED, "%s", err);
  stepc_status st = api_dp_join(s, rt_nccl_make_id, c->nccl);
  if (st != STEPC_OK) return st;
  if (rt_nccl_init(c->nccl, rt_comm_id(s->comm), s->world, s->rank, err, sizeof err)) {
    c->nccl_failed = true;
    return api_fail(s, STEPC_ERR_RUNTIME, "%s: %s", what, err);
  }
  rt_coll_nccl_init(&c->coll_nccl);
  return STEPC_OK;
}

stepc_status api_cuda_tp_open(stepc_t *s, int shared) {
  ApiCuda *c = cu(s);
  char err[600];
  stepc_status st;
  s->join_alone = true;
  if (shared) {
    if ((st = api_dp_join(s, NULL, NULL)) != STEPC_OK) return st;
    if (rt_coll_host_new(s->comm, &s->tp_group, s->tp_rank, &s->ep_group, s->ep_rank, &c->coll_host, err,
                         sizeof err) ||
        rt_coll_host_add_group(c->coll_host, RT_COLL_GROUP_AMAX, &s->world_group, s->rank, err, sizeof err))
      return api_fail(s, STEPC_ERR_RUNTIME, "tensor parallelism: %s", err);
    c->d->coll = rt_coll_host_ops(c->coll_host);
    return STEPC_OK;
  }
  if ((st = api_cuda_nccl_join(s, "tensor parallelism")) != STEPC_OK) return st;
  if ((st = nccl_group(s, RT_COLL_GROUP_TP, &s->tp_group, s->tp_rank)) != STEPC_OK ||
      (st = nccl_group(s, RT_COLL_GROUP_EP, &s->ep_group, s->ep_rank)) != STEPC_OK ||
      (st = nccl_group(s, RT_COLL_GROUP_DP, &s->dp_group, s->dp_rank)) != STEPC_OK ||
      (st = nccl_group(s, RT_COLL_GROUP_EDP, &s->edp_group, s->rank / s->ep)) != STEPC_OK ||
      (api_cuda_program_collectives(&s->im.lp, RT_COLL_GROUP_AMAX) &&
       (st = nccl_group(s, RT_COLL_GROUP_AMAX, &s->world_group, s->rank)) != STEPC_OK))
    return st;
  c->d->coll = &c->coll_nccl.ops;
  return STEPC_OK;
}

int api_cuda_tp_check(stepc_t *s) {
  ApiCuda *c = cu(s);
  char err[600];
  if (c->coll_host && rt_coll_host_check(c->coll_host, err, sizeof err))
    return api_fail(s, STEPC_ERR_RUNTIME, "tensor parallelism: %s", err), -1;
  return 0;
}

void api_cuda_tp_free(stepc_t *s) {
  ApiCuda *c = cu(s);
  rt_coll_host_free(c->coll_host);
  c->coll_host = NULL;
  for (int k = 0; k < RT_COLL_GROUPS; k++)
    rt_nccl_free(c->nccl_split[k], c->nccl_failed), c->nccl_split[k] = NULL;
}

int api_cuda_nccl_each(stepc_t *s, int (*fn)(RtNccl *n, char *err, size_t nerr), char *err, size_t nerr) {
  ApiCuda *c = cu(s);
  if (c->nccl && fn(c->nccl, err, nerr)) return -1;
  for (int k = 0; k < RT_COLL_GROUPS; k++)
    if (c->nccl_split[k] && fn(c->nccl_split[k], err, nerr)) return -1;
  return 0;
}

const char *api_cuda_comm_name(const stepc_t *s) {
  return ((const ApiCuda *)s->impl)->coll_host ? "host-staged (ranks share a GPU)" : "nccl";
}
