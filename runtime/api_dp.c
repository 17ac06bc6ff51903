/* api_dp.c — data parallel behind stepc.h: the options against the plan, the rendezvous, each
 * rank's micro-batches, the buckets' firing points and the loss over the ranks. The backends
 * reduce the buckets themselves (api_cpu.c over comm.h's host collectives, api_cuda.c over NCCL). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/api_internal.h"
#include "runtime/rdv_wire.h"

stepc_status stepc_options_from_env(stepc_options *o) {
  if (!o) return STEPC_ERR_ARGUMENT;
  RtLaunchEnv e;
  char err[256];
  int r = rt_launch_env(&e, err, sizeof err);
  if (r < 0) return STEPC_ERR_ARGUMENT;
  if (r == 0) return STEPC_OK; /* no launcher: one rank, o as it was */
  /* a launcher of one rank (srun -n 1) needs no communicator, nor NCCL */
  o->rank = e.rank, o->world_size = e.size, o->local_rank = e.local_rank, o->master_port = e.port;
  if (e.size > 1) o->dp_join = 1;
  snprintf(o->master_addr, sizeof o->master_addr, "%s", e.addr);
  return STEPC_OK;
}

/* ZeRO-1's shards, as the compiler cut them (compiler/passes/schedule.c, in the image): each bucket's
 * elements in N contiguous ranges, one per rank, at whole-tensor granularity (a main gradient
 * belongs to the rank whose range holds its first element), so each rank updates about 1/N of
 * every bucket; the param, master and moments an AdamW op updates follow its gradient. This rank's
 * view of the optimizer-state region (buffer 1): the masters and moments of other ranks get no
 * bytes, so that neither device gives them a home, reads or writes them; their offsets stay
 * the owners' (the same numbers on every rank, as the launch program holds them). */
static stepc_status zero_owners(stepc_t *s) {
  StepImage *im = &s->im;
  Graph *g = im->g;
  s->owner = malloc(((size_t)g->nt + 1) * sizeof *s->owner);
  s->zero_sumsq = calloc(2 * (size_t)g->nt + 1, sizeof *s->zero_sumsq); /* the experts' after the rest */
  if (!s->owner || !s->zero_sumsq) return api_fail(s, STEPC_ERR_NOMEM, "out of memory");
  for (int t = 0; t < g->nt; t++) {
    s->owner[t] = im->owner[t];
    if (g->t[t].buffer == 1 && api_dp_not_mine(s, t)) g->t[t].bytes = 0, im->cpu_bytes[t] = 0;
  }
  return STEPC_OK;
}

/* owners are data-parallel ranks: under TP each TP rank's data-parallel group shards its own tensors;
 * under EP (with or without TP) an expert's state is owned by an expert-data-parallel rank (rank / EP:
 * the member index in the group of the ranks holding the same experts) */
bool api_dp_not_mine(const stepc_t *s, int t) {
  if (!s->owner || s->owner[t] < 0) return false;
  return s->owner[t] != (graph_expert_state(s->im.g, t) ? s->rank / s->ep : s->dp_rank);
}

bool api_dp_absent(const stepc_t *s, int t) { return s->g->t[t].buffer == 1 && api_dp_not_mine(s, t); }

int api_dp_param_source(const stepc_t *s, int t) {
  const Tensor *x = &s->g->t[t];
  if (!s->owner) return -1;
  if (x->role == ROLE_PARAM) return x->buffer == 1 ? -1 : s->owner[t];
  if (x->role == ROLE_PARAM_FP8 && x->of >= 0 && s->g->t[x->of].buffer == 1) return s->owner[x->of];
  return -1;
}

stepc_status api_dp_check(stepc_t *s) {
  const stepc_options *o = &s->opt;
  int world = o->world_size > 1 ? o->world_size : 1;
  s->world = world, s->rank = o->rank;
  s->tp = s->im.f.tp_size > 1 ? s->im.f.tp_size : 1;
  s->tp_rank = o->rank % s->tp, s->dp_rank = o->rank / s->tp, s->dp = world / s->tp;
  s->tp_group = (RtCommGroup){.first = s->dp_rank * s->tp, .stride = 1, .count = s->tp};
  s->dp_group = (RtCommGroup){.first = s->tp_rank, .stride = s->tp, .count = s->dp > 0 ? s->dp : 1};
  s->ep = s->im.f.ep_size > 1 ? s->im.f.ep_size : 1;
  s->ep_rank = o->rank % s->ep;
  s->ep_group = (RtCommGroup){.first = o->rank - s->ep_rank, .stride = 1, .count = s->ep};
  s->edp_group =
      (RtCommGroup){.first = s->ep_rank, .stride = s->ep, .count = world / s->ep > 0 ? world / s->ep : 1};
  s->world_group = (RtCommGroup){.first = 0, .stride = 1, .count = world};
  if (o->rank < 0 || o->rank >= world)
    return api_fail(s, STEPC_ERR_ARGUMENT,
                    "stepc_open: rank %d of a world of %d (the rank must be in [0, world_size))", o->rank,
                    world);
  int tp = s->im.f.tp_size > 1 ? s->im.f.tp_size : 1;
  if (world != s->im.f.dp_size * tp && tp > 1)
    return api_fail(s, STEPC_ERR_MISMATCH,
                    "%s was planned for %d ranks (%d data-parallel x %d tensor-parallel); this job has %d: "
                    "rebuild it with train.world_size=%d (the per-rank micro-batches and the memory plan "
                    "depend on it)",
                    s->dir, s->im.f.dp_size * tp, s->im.f.dp_size, tp, world, world);
  if (s->ep > 1 && world != s->im.f.dp_size * tp)
    return api_fail(
        s, STEPC_ERR_MISMATCH,
        "%s was planned for %d ranks (%d data-parallel x %d tensor-parallel, in expert-parallel groups "
        "of %d); this job has %d: rebuild it with train.world_size=%d",
        s->dir, s->im.f.dp_size * tp, s->im.f.dp_size, tp, s->ep, world, world);
  if (tp == 1 && world != s->im.f.dp_size)
    return api_fail(s, STEPC_ERR_MISMATCH,
                    "%s was planned for %d data-parallel rank%s (train.world_size / (TP*PP*CP)); this job "
                    "has %d: rebuild it with "
                    "train.world_size=%d (the per-rank micro-batches and the memory plan depend on it)",
                    s->dir, s->im.f.dp_size, s->im.f.dp_size == 1 ? "" : "s", world, world);
  if ((world > 1 || o->dp_join) && (o->master_port <= 0 || o->master_port > 65535))
    return api_fail(s, STEPC_ERR_ARGUMENT,
                    "stepc_open: master_port %d is not a TCP port (set it, or stepc_options_from_env)",
                    o->master_port);
  /* inf or NaN would lift the bound on every wait (a hung rank would hang the job); a negative
   * number is no timeout either */
  if (!(o->comm_timeout_s >= 0 && o->comm_timeout_s <= RT_COMM_MAX_TIMEOUT_S))
    return api_fail(s, STEPC_ERR_ARGUMENT,
                    "stepc_open: comm_timeout_s %g is not a number of seconds in [0, %.0f] (0: the "
                    "default %.0f s)",
                    o->comm_timeout_s, RT_COMM_MAX_TIMEOUT_S, RT_COMM_DEFAULT_TIMEOUT_S);
  /* each bucket fires after the micro point that runs its op */
  const StepImage *im = &s->im;
  s->bucket_point = malloc(((size_t)im->nbucket + 1) * sizeof *s->bucket_point);
  if (!s->bucket_point) return api_fail(s, STEPC_ERR_NOMEM, "out of memory");
  for (int k = 0; k < im->nbucket; k++) {
    s->bucket_point[k] = -1;
    for (int q = 0; q < im->micro_points; q++)
      if (im->point_op[q] == im->bucket[k].after_op) s->bucket_point[k] = q;
    if (s->bucket_point[k] < 0)
      return api_fail(
          s, STEPC_ERR_IO,
          "%s: gradient bucket %d fires after op %d, which the micro program does not run: rebuild the "
          "artifact",
          s->dir, k, im->bucket[k].after_op);
  }
  if (im->f.dist_opt) return zero_owners(s);
  return STEPC_OK;
}

/* The plan facts every rank must share beyond the step itself: DP size, sharding, buckets, owners. */
static uint64_t plan_hash(const StepImage *im) {
  int32_t f[2] = {im->f.dp_size, im->f.dist_opt};
  uint64_t h = ir_fnv1a(IR_FNV_OFFSET, f, sizeof f);
  h = ir_fnv1a(h, im->bucket, (size_t)im->nbucket * sizeof *im->bucket);
  h = ir_fnv1a(h, im->owner, (size_t)im->g->nt * sizeof *im->owner);
  return ir_fnv1a(h, im->bucket_grad, (size_t)im->nbucket_grad * sizeof *im->bucket_grad);
}

stepc_status api_dp_join(stepc_t *s, int (*make_id)(void *, unsigned char *, char *, size_t), void *ctx) {
  const stepc_options *o = &s->opt;
  if (s->world == 1 && !o->dp_join && !s->join_alone) return STEPC_OK;
  RtRendezvous rv = {.rank = s->rank,
                     .size = s->world,
                     .port = o->master_port,
                     .timeout_s = o->comm_timeout_s,
                     .fingerprint = s->im.f.fingerprint,
                     .plan_hash = plan_hash(&s->im),
                     .make_id = make_id,
                     .make_id_ctx = ctx};
  snprintf(rv.addr, sizeof rv.addr, "%s", o->master_addr[0] ? o->master_addr : "127.0.0.1");
  snprintf(rv.what, sizeof rv.what, "%s", s->dir);
  char err[600];
  if (s->world > 1 &&
      !(rv.secret = rdv_secret_from_env(err, sizeof err))) /* alone, nobody joins: no secret needed */
    return api_fail(s, STEPC_ERR_ARGUMENT, "data parallel: %s", err);
  if (rt_comm_open(&rv, &s->comm, err, sizeof err) != 0)
    return api_fail(s, STEPC_ERR_MISMATCH, "data parallel: %s", err);
  return STEPC_OK;
}

void api_dp_free(stepc_t *s) {
  rt_comm_free(s->comm);
  s->comm = NULL;
  free(s->bucket_point), free(s->dp_buf), free(s->owner), free(s->zero_sumsq);
  s->bucket_point = NULL, s->dp_buf = NULL, s->owner = NULL, s->zero_sumsq = NULL;
}

/* the TP ranks of a data-parallel rank run the same micro-batches */
int64_t api_dp_micro(const stepc_t *s, int64_t mb) { return mb * s->dp + s->dp_rank; }

double api_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

int api_dp_timed(stepc_t *s, int kind, int id, int (*run)(stepc_t *s, int id)) {
  double t0 = api_now_ms();
  if (run(s, id)) return -1;
  return s->profiling ? api_span_add(s, kind, 1, id, -1, t0 - s->prof_t0_ms, api_now_ms() - s->prof_t0_ms)
                      : 0;
}

int api_dp_after_point(stepc_t *s, int q, int (*reduce)(stepc_t *s, int bucket)) {
  if (!s->dp_last_micro || !s->comm) return 0;
  for (int k = 0; k < s->im.nbucket; k++)
    if (s->bucket_point[k] == q && api_dp_timed(s, STEPC_SPAN_BUCKET, k, reduce)) return -1;
  return 0;
}

int api_dp_loss(stepc_t *s, double local_sum, double *mean) {
  double sum = local_sum;
  if (s->comm && rt_comm_allreduce_sum(s->comm, &sum, 1, RT_COMM_F64) != 0)
    return api_fail(s, STEPC_ERR_RUNTIME, "data parallel: %s", rt_comm_error(s->comm)), -1;
  *mean = sum / ((double)s->g->num_microbatches * (double)s->world);
  return 0;
}

/* What each rank loaded; gathered whole (all_gather moves bytes). */
typedef struct {
  int64_t status, step;
  uint64_t fp;
} LoadedAs;

/* "rank 0: step 3, checkpoint 0123...; rank 1: ..." into msg (the first ranks when many). */
static void list_ranks(const LoadedAs *v, int world, const char *what, char *msg, size_t n) {
  size_t at = 0;
  msg[0] = 0;
  for (int r = 0; r < world && at + 80 < n; r++)
    at += (size_t)snprintf(msg + at, n - at, "%srank %d: step %lld, %s %016llx", r ? "; " : "", r,
                           (long long)v[r].step, what, (unsigned long long)v[r].fp);
  if (at + 80 >= n) snprintf(msg + at, n - at, "; ...");
}

stepc_status api_dp_agree_load(stepc_t *s, stepc_status st, const char *what, long long step, uint64_t fp) {
  if (!s->comm) return st;
  LoadedAs me = {st, step, fp}, *all = calloc((size_t)s->world, sizeof *all);
  if (!all) return api_fail(s, STEPC_ERR_NOMEM, "out of memory");
  if (rt_comm_all_gather(s->comm, &me, all, sizeof me) != 0) {
    free(all);
    return api_fail(s, STEPC_ERR_RUNTIME, "data parallel: after the %s load: %s", what,
                    rt_comm_error(s->comm));
  }
  int failed = -1, differs = 0;
  for (int r = 0; r < s->world; r++) {
    if (all[r].status != STEPC_OK && failed < 0) failed = r;
    differs |= all[r].step != all[0].step || all[r].fp != all[0].fp;
  }
  char msg[1200];
  if (st == STEPC_OK && failed >= 0)
    st = api_fail(s, (stepc_status)all[failed].status,
                  "data parallel: rank %d could not load its %s (its error says why): no rank "
                  "goes on",
                  failed, what);
  else if (st == STEPC_OK && differs) {
    list_ranks(all, s->world, what, msg, sizeof msg);
    st = api_fail(s, STEPC_ERR_MISMATCH,
                  "data parallel: the ranks did not load the same %s (%s): every rank must load the same one",
                  what, msg);
  }
  free(all);
  return st;
}
