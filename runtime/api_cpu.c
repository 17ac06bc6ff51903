/* api_cpu.c — stepc.h on the CPU reference executor: the artifact's CPU plan (fp32 arena offsets,
 * recompute replays, freed ranges poisoned), run by this file's loop. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "runtime/api_internal.h"
#include "runtime/cpu/program.h"

typedef struct {
  Graph *g; /* the image's graph at the CPU plan's slots: every float tensor in fp32 */
  PlanExec *x;
  int32_t *tok, *tg; /* (num_microbatches, B*T) each: the step's batch, drawn to count its kept targets */
  CpuTp tp;          /* tensor parallelism: the TP ops' group (user: the handle) */
  CpuTp ep;          /* expert parallelism: the EP ops' group (ir/ops/ep.c; user: the handle) */
  CpuTp amax;        /* every rank: fp8 delayed scaling's amax reduction (ir/ops/fp8.c; user: the handle) */
} ApiCpu;

static ApiCpu *cpu(stepc_t *s) { return s->impl; }
static CpuExec *ex(stepc_t *s) { return plan_exec_cpu(cpu(s)->x); }

/* ---- tensor and expert parallelism: the TP ops' collectives (ir/ops/tp.c, loss.c) over this rank's TP
 * group, the EP ops' (ir/ops/ep.c) over its EP group: which one is the CpuTp's place in ApiCpu ---- */

static RtCommType comm_type(int f64) { return f64 ? RT_COMM_F64 : RT_COMM_F32; }

static const RtCommGroup *group_of(CpuTp *tp) {
  stepc_t *s = tp->user;
  return tp == &cpu(s)->ep ? &s->ep_group : tp == &cpu(s)->amax ? &s->world_group : &s->tp_group;
}

static int tp_allreduce(CpuTp *tp, void *buf, int64_t n, int f64, int max) {
  stepc_t *s = tp->user;
  return rt_comm_group_allreduce(s->comm, group_of(tp), buf, (size_t)n, comm_type(f64), max);
}

static int tp_all_gather(CpuTp *tp, const void *send, void *recv, int64_t bytes) {
  stepc_t *s = tp->user;
  return rt_comm_group_all_gather(s->comm, group_of(tp), send, recv, (size_t)bytes);
}

static int tp_reduce_scatter(CpuTp *tp, const void *send, void *recv, int64_t n, int f64) {
  stepc_t *s = tp->user;
  return rt_comm_group_reduce_scatter(s->comm, group_of(tp), tp->rank, send, recv, (size_t)n, comm_type(f64));
}

/* A group's CpuTp (ApiCpu.tp, .ep or .amax: group_of tells them apart) on this file's callbacks. */
static CpuTp *group_init(CpuTp *g, stepc_t *s, int rank, int size) {
  *g = (CpuTp){.rank = rank,
               .size = size,
               .allreduce = tp_allreduce,
               .all_gather = tp_all_gather,
               .reduce_scatter = tp_reduce_scatter,
               .user = s};
  return g;
}

/* After a point: a TP op's collective that failed fails the step with the communicator's reason. */
static int tp_check(stepc_t *s, int q) {
  ApiCpu *c = cpu(s);
  if (!c->tp.failed && !c->ep.failed && !c->amax.failed) return 0;
  const char *what = c->tp.failed   ? "tensor parallel"
                     : c->ep.failed ? "expert parallel"
                                    : "fp8 amax reduction";
  c->tp.failed = c->ep.failed = c->amax.failed = 0;
  return api_fail(s, STEPC_ERR_RUNTIME, "%s, rank %d, %s (point %d): %s", what, s->rank,
                  op_name(s->g->op[s->im.point_op[q]].kind), q,
                  s->comm ? rt_comm_error(s->comm) : "no communicator"),
         -1;
}

static int cpu_init(stepc_t *s, uint64_t seed) {
  cpu_exec_init_params(ex(s), seed);
  return 0;
}

/* Whether main gradient `gr` is an expert-parallel shard's (its experts are this rank's alone). */
static bool expert_grad(const stepc_t *s, int gr) { return s->g->t[s->g->t[gr].of].tp_ep != 0; }

/* Bucket k's main gradients of one kind (`expert`: the expert-parallel shards', else the rest) :=
 * their average over the ranks: packed into one buffer, summed in rank order by the host
 * communicator (rank 0 + rank 1 + ...: on one rank with N micro-batches the same additions happen
 * in the same order, so DP N is bitwise DP 1), divided by N. Under expert parallelism an expert's
 * gradient already holds the contributions of its EP group's tokens: it is summed over the ranks
 * holding the same experts only (the expert-data-parallel group) and divided by the same N, the
 * data-parallel size (Megatron's expert_gradient_scaling_factor 1 / dp). */
static int cpu_reduce_part(stepc_t *s, int k, bool expert) {
  const ImgBucket *b = &s->im.bucket[k];
  const int32_t *gr = s->im.bucket_grad + b->first;
  size_t n = 0;
  for (int i = 0; i < b->ngrads; i++)
    if (expert_grad(s, gr[i]) == expert) n += (size_t)tensor_numel(&s->g->t[gr[i]]);
  if (n == 0) return 0; /* the same on every rank: one graph */
  if (n > s->ndp_buf) {
    float *p = realloc(s->dp_buf, n * sizeof *p);
    if (!p) return api_fail(s, STEPC_ERR_NOMEM, "out of memory"), -1;
    s->dp_buf = p, s->ndp_buf = n;
  }
  size_t at = 0;
  for (int i = 0; i < b->ngrads; i++) {
    if (expert_grad(s, gr[i]) != expert) continue;
    size_t m = (size_t)tensor_numel(&s->g->t[gr[i]]);
    memcpy(s->dp_buf + at, cpu_exec_ptr(ex(s), gr[i]), m * sizeof(float));
    at += m;
  }
  /* under TP the bucket is summed over this rank's data-parallel group (its TP rank's shards) */
  const RtCommGroup *grp = expert ? &s->edp_group : s->tp > 1 ? &s->dp_group : NULL;
  if ((grp ? rt_comm_group_allreduce(s->comm, grp, s->dp_buf, n, RT_COMM_F32, 0)
           : rt_comm_allreduce_sum(s->comm, s->dp_buf, n, RT_COMM_F32)) != 0)
    return api_fail(s, STEPC_ERR_RUNTIME, "data parallel, gradient bucket %d: %s", k, rt_comm_error(s->comm)),
           -1;
  float w = (float)s->dp;
  at = 0;
  for (int i = 0; i < b->ngrads; i++) {
    if (expert_grad(s, gr[i]) != expert) continue;
    size_t m = (size_t)tensor_numel(&s->g->t[gr[i]]);
    float *dst = cpu_exec_ptr(ex(s), gr[i]);
    for (size_t j = 0; j < m; j++)
      dst[j] = s->dp_buf[at + j] / w;
    at += m;
  }
  return 0;
}

static int cpu_reduce_bucket(stepc_t *s, int k) {
  return cpu_reduce_part(s, k, false) || (s->ep > 1 && cpu_reduce_part(s, k, true)) ? -1 : 0;
}

/* ---- the distributed optimizer (ZeRO-1) ----
 * Bitwise plain DP, with each rank updating only its shard: every element is reduced by the same
 * additions in the same order; the global norm's per-tensor sums of squares are each computed by
 * the tensor's owner exactly as GRAD_SUMSQ computes them and shared, so every rank accumulates the
 * same fp32 norm in the same tensor order; the updated params travel from their owners. */

/* ZeRO-1's groups: a tensor's state is owned within the data-parallel group (the whole job, or
 * under TP the ranks of this TP rank), an expert's under EP within the expert-data-parallel group
 * (the ranks holding the same experts, stride EP, with or without TP). The group (NULL: the whole
 * job), its size and this rank's member index there. */
static const RtCommGroup *zero_group(stepc_t *s, bool expert, int *size, int *member) {
  if (expert) return *size = s->edp_group.count, *member = s->rank / s->ep, &s->edp_group;
  *size = s->dp, *member = s->dp_rank;
  return s->tp > 1 ? &s->dp_group : NULL;
}

/* Bucket k's gradients of one kind (`expert` or not): reduce-scatter over their group. They are
 * packed owner by owner into N equal segments (zero padded); each rank receives its segment summed
 * in group order and averages it (over the data-parallel size, as the plain step does for both
 * kinds) into the gradients it owns. The others' gradients stay local partial sums, which nothing
 * reads (their GRAD_SUMSQ and ADAMW are the owners'). */
static int cpu_zero_part(stepc_t *s, int k, bool expert) {
  const ImgBucket *b = &s->im.bucket[k];
  const int32_t *gr = s->im.bucket_grad + b->first;
  int N, me;
  const RtCommGroup *grp = zero_group(s, expert, &N, &me);
  size_t seg = 0, any = 0;
  for (int r = 0; r < N; r++) {
    size_t m = 0;
    for (int i = 0; i < b->ngrads; i++)
      if (s->owner[gr[i]] == r && graph_expert_state(s->g, gr[i]) == expert)
        m += (size_t)tensor_numel(&s->g->t[gr[i]]);
    seg = m > seg ? m : seg, any += m;
  }
  if (any == 0) return 0; /* the same on every rank: one graph */
  size_t need = seg * (size_t)(N + 1) + 1;
  if (need > s->ndp_buf) {
    float *p = realloc(s->dp_buf, need * sizeof *p);
    if (!p) return api_fail(s, STEPC_ERR_NOMEM, "out of memory"), -1;
    s->dp_buf = p, s->ndp_buf = need;
  }
  memset(s->dp_buf, 0, need * sizeof *s->dp_buf);
  for (int r = 0; r < N; r++) {
    size_t at = (size_t)r * seg;
    for (int i = 0; i < b->ngrads; i++)
      if (s->owner[gr[i]] == r && graph_expert_state(s->g, gr[i]) == expert) {
        size_t m = (size_t)tensor_numel(&s->g->t[gr[i]]);
        memcpy(s->dp_buf + at, cpu_exec_ptr(ex(s), gr[i]), m * sizeof(float));
        at += m;
      }
  }
  float *mine = s->dp_buf + (size_t)N * seg;
  if ((grp ? rt_comm_group_reduce_scatter(s->comm, grp, me, s->dp_buf, mine, seg, RT_COMM_F32)
           : rt_comm_reduce_scatter_sum(s->comm, s->dp_buf, mine, seg, RT_COMM_F32)) != 0)
    return api_fail(s, STEPC_ERR_RUNTIME, "data parallel, gradient bucket %d (reduce-scatter): %s", k,
                    rt_comm_error(s->comm)),
           -1;
  size_t at = 0;
  for (int i = 0; i < b->ngrads; i++)
    if (s->owner[gr[i]] == me && graph_expert_state(s->g, gr[i]) == expert) {
      size_t m = (size_t)tensor_numel(&s->g->t[gr[i]]);
      float *dst = cpu_exec_ptr(ex(s), gr[i]);
      for (size_t j = 0; j < m; j++)
        dst[j] = mine[at + j] / (float)s->dp;
      at += m;
    }
  return 0;
}

static int cpu_zero_bucket(stepc_t *s, int k) {
  return cpu_zero_part(s, k, false) || (s->ep > 1 && cpu_zero_part(s, k, true)) ? -1 : 0;
}

/* GRAD_SUMSQ's sum for one tensor, as ir/ops/optim.c computes it: chunks of 4096 summed in double,
 * the chunks added in order. */
static double sumsq_like_op(const float *g, int64_t n) {
  double total = 0;
  for (int64_t c0 = 0; c0 < n; c0 += 4096) {
    double p = 0;
    for (int64_t i = c0; i < n && i < c0 + 4096; i++)
      p += (double)g[i] * (double)g[i];
    total += p;
  }
  return total;
}

/* Before the tail's first GRAD_SUMSQ: every owned gradient's sum of squares, shared over its group
 * (each slot has one nonzero contributor, so the all-reduce's additions are exact): the data-parallel
 * one's, then under EP the experts' over the expert-data-parallel group, into their disjoint slots. */
static int cpu_zero_share_sumsq(stepc_t *s, int unused) {
  (void)unused;
  const Graph *g = s->g;
  double *part = s->zero_sumsq + g->nt; /* the experts' (zero_owners sized the array for both) */
  for (int expert = 0; expert < (s->ep > 1 ? 2 : 1); expert++) {
    double *v = expert ? part : s->zero_sumsq;
    int N, me;
    const RtCommGroup *grp = zero_group(s, expert, &N, &me);
    for (int t = 0; t < g->nt; t++)
      v[t] = g->t[t].role == ROLE_GRAD && s->owner[t] == me && graph_expert_state(g, t) == (bool)expert
                 ? sumsq_like_op(cpu_exec_ptr(ex(s), t), tensor_numel(&g->t[t]))
                 : 0.0;
    if ((grp ? rt_comm_group_allreduce(s->comm, grp, v, (size_t)g->nt, RT_COMM_F64, 0)
             : rt_comm_allreduce_sum(s->comm, v, (size_t)g->nt, RT_COMM_F64)) != 0)
      return api_fail(s, STEPC_ERR_RUNTIME, "data parallel, gradient norm: %s", rt_comm_error(s->comm)), -1;
  }
  for (int t = 0; s->ep > 1 && t < g->nt; t++)
    if (graph_expert_state(g, t)) s->zero_sumsq[t] = part[t];
  return 0;
}

/* Tensor t from rank `from` of group grp (size N), through a group all-gather whose sender's block is
 * kept. */
static int group_broadcast(stepc_t *s, int t, int from, const RtCommGroup *grp, int N) {
  size_t n = (size_t)tensor_numel(&s->g->t[t]), need = n * (size_t)N + 1;
  if (need > s->ndp_buf) {
    float *p = realloc(s->dp_buf, need * sizeof *p);
    if (!p) return -1;
    s->dp_buf = p, s->ndp_buf = need;
  }
  float *w = cpu_exec_ptr(ex(s), t);
  if (rt_comm_group_all_gather(s->comm, grp, w, s->dp_buf, n * sizeof(float)) != 0) return -1;
  memcpy(w, s->dp_buf + (size_t)from * n, n * sizeof(float));
  return 0;
}

/* After the tail: each param from its owner (the all-gather of the updated weights); with
 * model.fp8_param the fp8 data, transpose and scale_inv of each sharded master from the rank that cast
 * it (as on cuda: runtime/zero_coll.c). */
static int cpu_zero_gather(stepc_t *s, int unused) {
  (void)unused;
  const Graph *g = s->g;
  for (int t = 0; t < g->nt; t++) {
    int from = api_dp_param_source(s, t);
    if (from < 0) continue;
    int N, me;
    const RtCommGroup *grp = zero_group(s, graph_expert_state(g, t), &N, &me);
    if ((grp ? group_broadcast(s, t, from, grp, N)
             : rt_comm_broadcast(s->comm, cpu_exec_ptr(ex(s), t),
                                 (size_t)tensor_numel(&g->t[t]) * sizeof(float), from)) != 0)
      return api_fail(s, STEPC_ERR_RUNTIME, "data parallel, parameter all-gather: %s",
                      s->comm ? rt_comm_error(s->comm) : "out of memory"),
             -1;
  }
  return 0;
}

int api_cpu_zero_gather(stepc_t *s) {
  if (strcmp(s->be->name, "cpu") != 0)
    return api_fail(s, STEPC_ERR_UNSUPPORTED, "the distributed optimizer runs on the cpu device"), -1;
  return cpu_zero_gather(s, -1);
}

/* The first tail point that sums a gradient's squares (the owners' sums are shared right before it:
 * after the tail's reductions — under SP a replicated parameter's gradient summed over TP —, so
 * each sum is of the final gradient), or -1. */
static int first_sumsq_point(const stepc_t *s) {
  const StepImage *im = &s->im;
  for (int q = im->micro_points; q < im->npoints; q++)
    if (s->g->op[im->point_op[q]].kind == OP_GRAD_SUMSQ) return q;
  return -1;
}

/* A tail point under ZeRO-1: 1 when handled here (instead of the op), 0 to run the op, -1. */
static int cpu_zero_point(stepc_t *s, int q) {
  const StepImage *im = &s->im;
  if (q == first_sumsq_point(s) && api_dp_timed(s, STEPC_SPAN_NORM, -1, cpu_zero_share_sumsq)) return -1;
  const Op *op = &s->g->op[im->point_op[q]];
  if (op->kind == OP_GRAD_SUMSQ && api_dp_not_mine(s, op->in[0])) {
    /* acc += (real)s, as the op would with the owner's gradient */
    float *acc = cpu_exec_ptr(ex(s), op->out[0]);
    acc[0] += (float)s->zero_sumsq[op->in[0]];
    return 1;
  }
  /* the owner updates it; with model.fp8_param the owner of a master casts it (cpu_zero_gather) */
  return (op->kind == OP_ADAMW && api_dp_not_mine(s, op->in[0])) ||
         ((op->kind == OP_FP8_QUANT || op->kind == OP_FP8_QUANT_GROUPED) && api_dp_absent(s, op->in[0]));
}

/* One program point, then the buckets that fire after it (last micro-batch, data parallel). */
static int cpu_point(stepc_t *s, int q) {
  int zero = s->owner && s->comm && q >= s->im.micro_points;
  int done = zero ? cpu_zero_point(s, q) : 0;
  if (done < 0) return -1;
  if (!done) plan_exec_point(cpu(s)->x, q);
  if (tp_check(s, q)) return -1;
  if (zero && q == s->im.npoints - 1 && api_dp_timed(s, STEPC_SPAN_PARAMS, -1, cpu_zero_gather)) return -1;
  return api_dp_after_point(s, q, s->owner ? cpu_zero_bucket : cpu_reduce_bucket);
}

static int run_range(stepc_t *s, int lo, int hi) {
  for (int q = lo; q < hi; q++)
    if (cpu_point(s, q)) return -1;
  return 0;
}

/* Points [lo, hi) one by one, each's wall time added to ms[point] and to the timeline (the
 * profiled step); the collectives a point is followed by have their own spans (api_dp_timed). */
static int run_timed(stepc_t *s, int lo, int hi, int micro, double *ms) {
  for (int q = lo; q < hi; q++) {
    double t0 = api_now_ms();
    int64_t before = s->nspan;
    if (cpu_point(s, q)) return -1;
    double t1 = api_now_ms(), end = t1, start = t0;
    for (int64_t i = before; i < s->nspan; i++) { /* collectives run inside the point's call */
      double a = s->span[i].start_ms + s->prof_t0_ms, b = s->span[i].end_ms + s->prof_t0_ms;
      if (s->span[i].kind == STEPC_SPAN_NORM)
        start = b > start ? b : start; /* before the op */
      else
        end = a < end ? a : end; /* after it */
    }
    ms[q] += end - start;
    if (api_span_add(s, STEPC_SPAN_POINT, 0, q, micro, start - s->prof_t0_ms, end - s->prof_t0_ms)) return -1;
  }
  return 0;
}

/* The micro program or the tail: points [lo, hi). */
static int run_part(stepc_t *s, int lo, int hi, int micro, double *ms) {
  return ms ? run_timed(s, lo, hi, micro, ms) : run_range(s, lo, hi);
}

static int cpu_step_with(stepc_t *s, int64_t step, stepc_step_stats *st, double *ms) {
  ApiCpu *c = cpu(s);
  const Graph *g = s->g;
  double t0 = api_now_ms(), loss = 0, den = 0;
  s->prof_t0_ms = t0;
  int64_t kept = 0;
  /* the loss's denominator first: the kept targets of every micro-batch of every rank */
  if (api_kept(s, step, c->tok, c->tg, &kept) || api_loss_den(s, kept, NULL, &den)) return -1;
  cpu_exec_set_loss_den(ex(s), den);
  int nmicro = plan_exec_micro_points(c->x), npts = plan_exec_points(c->x);
  for (int64_t mb = 0; mb < g->num_microbatches; mb++) {
    /* the data and the dropout key are the global micro-batch's (api_dp_micro) */
    if (plan_exec_begin_micro(c->x, &s->data.base, s->im.f.seed, step, api_dp_micro(s, mb), s->err,
                              sizeof s->err) != 0)
      return -1;
    s->dp_last_micro = mb == g->num_microbatches - 1;
    if (run_part(s, 0, nmicro, (int)mb, ms)) return -1;
    loss += cpu_exec_get(ex(s), g->loss, 0);
  }
  s->dp_last_micro = false;
  if (run_part(s, nmicro, npts, -1, ms)) return -1;
  if (api_dp_loss(s, loss, &st->loss)) return -1;
  st->lr = cpu_exec_get(ex(s), g->lr, 0);
  st->grad_norm = cpu_exec_get(ex(s), g->grad_norm, 0);
  st->ms = api_now_ms() - t0;
  return 0;
}

/* ---- stepc_eval ---- */

/* The evaluation's batch as a data source: micro-batch mb of the caller's buffers. */
typedef struct {
  CpuData base;
  const int32_t *tok, *tg;
} EvalData;

static int eval_fill(CpuData *d, int64_t step, int64_t micro, int64_t b, int64_t t, int32_t *tok,
                     int32_t *tg) {
  (void)step;
  const EvalData *e = (const EvalData *)d;
  size_t n = (size_t)(b * t);
  memcpy(tok, e->tok + (size_t)micro * n, n * sizeof *tok);
  memcpy(tg, e->tg + (size_t)micro * n, n * sizeof *tg);
  return 0;
}

/* The loss op's per-token losses of the micro-batch that ran, into tl (B*T): LINEAR_CROSS_ENTROPY
 * keeps them (token_loss); CROSS_ENTROPY keeps the row log-sum-exp beside the logits, and the
 * token's loss is its lse minus its target's logit, as ir/ops/linear_loss.c computes it (0 for an
 * ignored target). Vocab-parallel (TP, CROSS_ENTROPY i[0] = 1): the lse is the group's already, and
 * the target's logit, which one rank holds, is summed over the group (every rank gets the losses).
 * 0, or -1 when the group's sum failed. */
static int token_losses(stepc_t *s, int lo, float *tl) {
  const Graph *g = s->g;
  const Op *op = &g->op[lo];
  const Tensor *tgt = &g->t[op->in[op->kind == OP_CROSS_ENTROPY ? 1 : 2]];
  int64_t n = tensor_numel(tgt);
  const float *o1 = cpu_exec_ptr(ex(s), op->out[1]);
  if (op->kind == OP_LINEAR_CROSS_ENTROPY) {
    memcpy(tl, o1, (size_t)n * sizeof *tl);
    return 0;
  }
  const float *x = cpu_exec_ptr(ex(s), op->in[0]);
  const int32_t *tg = cpu_exec_ptr(ex(s), op->in[1]);
  int64_t v = g->t[op->in[0]].shape[2];
  if (op->a.i[0] && s->tp > 1) {
    CpuTp *tp = &cpu(s)->tp;
    int64_t off = (int64_t)tp->rank * v, all = v * tp->size;
    for (int64_t r = 0; r < n; r++)
      tl[r] = tg[r] >= off && tg[r] < off + v ? x[r * v + tg[r] - off] : 0.0f;
    if (tp->allreduce(tp, tl, n, 0, 0)) return -1;
    for (int64_t r = 0; r < n; r++)
      tl[r] = tg[r] >= 0 && tg[r] < all ? o1[r] - tl[r] : 0.0f;
    return 0;
  }
  for (int64_t r = 0; r < n; r++)
    tl[r] = tg[r] >= 0 && tg[r] < v ? o1[r] - x[r * v + tg[r]] : 0.0f;
  return 0;
}

/* Per micro-batch: its inputs, then the micro program's forward points as an evaluation runs them
 * (plan_exec_point_eval: dropout off), in program order; no backward, reduction or optimizer point,
 * no data-parallel hook. The RNG key is set (dropout does not read it). */
static stepc_status cpu_eval(stepc_t *s, const int32_t *tok, const int32_t *tg, double den, double *sum,
                             float *lp) {
  ApiCpu *c = cpu(s);
  cpu_exec_set_loss_den(ex(s), den); /* the next step sets its own */
  const Graph *g = s->g;
  EvalData d = {.base = {.fill = eval_fill}, .tok = tok, .tg = tg};
  int lo = graph_lm_loss_op(g), nmicro = plan_exec_micro_points(c->x);
  int64_t ntok = tensor_numel(&g->t[g->tokens]);
  for (int64_t mb = 0; mb < g->num_microbatches; mb++) {
    if (plan_exec_begin_micro(c->x, &d.base, s->im.f.seed, s->step + 1, mb, s->err, sizeof s->err) != 0)
      return STEPC_ERR_RUNTIME;
    for (int q = 0; q < nmicro; q++) {
      if (g->op[s->im.point_op[q]].tags.phase != IR_PHASE_FORWARD) continue;
      if (plan_exec_point_eval(c->x, q) != 0)
        return api_fail(s, STEPC_ERR_UNSUPPORTED,
                        "stepc_eval: point %d's random numbers cannot be turned off", q);
      if (tp_check(s, q)) return STEPC_ERR_RUNTIME;
    }
    *sum += cpu_exec_get(ex(s), g->loss, 0);
    if (lp) {
      float *out = lp + mb * ntok;
      if (token_losses(s, lo, out) != 0)
        return api_fail(s, STEPC_ERR_RUNTIME, "stepc_eval: tensor parallel: the target logits' sum failed");
      api_eval_logprobs(out, ntok, out);
    }
  }
  return STEPC_OK;
}

static int cpu_step(stepc_t *s, int64_t step, stepc_step_stats *st) {
  return cpu_step_with(s, step, st, NULL);
}

static uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);                 /* round to nearest even */
}

static float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* A tensor this rank does not hold (another rank's optimizer state): -1 with the message. */
static int held(stepc_t *s, const Tensor *T) {
  if (T->bytes > 0) return 0;
  return api_fail(s, STEPC_ERR_ARGUMENT,
                  "tensor %s is another rank's (the distributed optimizer's shard): rank %d does not hold it",
                  T->name, s->rank),
         -1;
}

static int cpu_read(stepc_t *s, int t, void *dst) {
  const Tensor *T = &s->g->t[t];
  int64_t n = tensor_numel(T);
  if (held(s, T)) return -1;
  const void *src = cpu_exec_ptr(ex(s), t);
  if (!dtype_is_float(T->dtype))
    memcpy(dst, src, (size_t)n * dtype_size(T->dtype));
  else if (T->dtype == DT_F32)
    memcpy(dst, src, (size_t)n * 4);
  else if (T->dtype == DT_BF16)
    for (int64_t i = 0; i < n; i++)
      ((uint16_t *)dst)[i] = f32_to_bf16(((const float *)src)[i]);
  else
    return api_fail(s, STEPC_ERR_UNSUPPORTED, "tensor %s is %s: checkpoints hold f32, bf16 and int tensors",
                    T->name, dtype_name(T->dtype)),
           -1;
  return 0;
}

static int cpu_write(stepc_t *s, int t, const void *src) {
  const Tensor *T = &s->g->t[t];
  int64_t n = tensor_numel(T);
  if (held(s, T)) return -1;
  void *dst = cpu_exec_ptr(ex(s), t);
  if (!dtype_is_float(T->dtype))
    memcpy(dst, src, (size_t)n * dtype_size(T->dtype));
  else if (T->dtype == DT_F32)
    memcpy(dst, src, (size_t)n * 4);
  else if (T->dtype == DT_BF16)
    for (int64_t i = 0; i < n; i++)
      ((float *)dst)[i] = bf16_to_f32(((const uint16_t *)src)[i]);
  else
    return api_fail(s, STEPC_ERR_UNSUPPORTED, "tensor %s is %s", T->name, dtype_name(T->dtype)), -1;
  return 0;
}

/* The CPU's AdamW leaves param = master exactly (both fp32 here), so a resumed step must too. */
static int cpu_params_from_masters(stepc_t *s) {
  const Graph *g = s->g;
  for (int i = 0; i < g->nt; i++)
    if (g->t[i].role == ROLE_MASTER && g->t[i].of >= 0 && g->t[i].bytes > 0) /* the masters this rank holds */
      memcpy(cpu_exec_ptr(ex(s), g->t[i].of), cpu_exec_ptr(ex(s), i), (size_t)g->t[i].bytes);
  return 0;
}

static int cpu_point_alone(stepc_t *s, int q) {
  plan_exec_point(cpu(s)->x, q);
  return 0;
}

static void cpu_measure(stepc_t *s, stepc_measure *m) {
  ApiCpu *c = cpu(s);
  m->arena_bytes = m->max_allocated_bytes = c->g->buffer_bytes[0] + c->g->buffer_bytes[1];
  m->optimizer_region_bytes = c->g->buffer_bytes[1];
  m->predicted_peak_bytes = s->im.f.cpu_peak;
  m->replay_ops = s->im.f.nreplay;
}

static void cpu_free(stepc_t *s) {
  ApiCpu *c = cpu(s);
  if (!c) return;
  plan_exec_free(c->x);
  graph_free(c->g);
  free(c->tok), free(c->tg);
  free(c);
  s->impl = NULL;
}

static const ApiBackend CPU_BACKEND = {"cpu",           cpu_init,    cpu_step,  cpu_step_with,
                                       cpu_eval,        cpu_read,    cpu_write, cpu_params_from_masters,
                                       cpu_point_alone, cpu_measure, cpu_free};

stepc_status api_cpu_open(stepc_t *s) {
  ApiCpu *c = calloc(1, sizeof *c);
  if (!c) return api_fail(s, STEPC_ERR_NOMEM, "out of memory");
  s->impl = c;
  s->be = &CPU_BACKEND;
  if (!(c->g = image_cpu_graph(&s->im))) return api_fail(s, STEPC_ERR_NOMEM, "out of memory");
  s->g = c->g;
  size_t n = (size_t)c->g->num_microbatches * (size_t)tensor_numel(&c->g->t[c->g->tokens]);
  c->tok = malloc(n * sizeof *c->tok);
  c->tg = malloc(n * sizeof *c->tg);
  if (!c->tok || !c->tg) return api_fail(s, STEPC_ERR_NOMEM, "out of memory");
  const StepImage *im = &s->im;
  CpuProgram prog = {.npoints = im->npoints,
                     .micro_points = im->micro_points,
                     .point_op = im->point_op,
                     .poison_start = im->poison_start,
                     .poison = im->poison};
  c->x = plan_exec_new(c->g, &prog, s->opt.cpu_threads, s->err, sizeof s->err);
  if (!c->x) return STEPC_ERR_RUNTIME;
  /* the collectives reach s->comm when they run: the rendezvous comes after this */
  if (s->tp > 1) cpu_exec_set_tp(ex(s), group_init(&c->tp, s, s->tp_rank, s->tp));
  if (s->ep > 1) cpu_exec_set_ep(ex(s), group_init(&c->ep, s, s->ep_rank, s->ep));        /* ir/ops/ep.c */
  if (s->world > 1) cpu_exec_set_amax(ex(s), group_init(&c->amax, s, s->rank, s->world)); /* ir/ops/fp8.c */
  cpu_exec_init_params(ex(s), im->f.seed);
  return STEPC_OK;
}
