/* schedule.c — one linear order of the step (plan.h).
 *
 * The graph is the single-rank math of one micro-batch, already in a valid order after
 * recompute_apply (forward; backward with each replay right before the op that needs it; the
 * optimizer). The micro program is its forward and backward/replay ops and runs once per
 * micro-batch: with PP = 1 micro-batch after micro-batch, main gradients accumulating. The tail
 * runs once per step: gradient reduction (the reduce phase), clipping and the optimizer.
 *
 * Gradient-reduction buckets are placed now for the data-parallel work: main gradients in the
 * order backward completes them, cut into buckets of Megatron's DDP default size
 * (max(40M, 1M x DP) elements), each after the backward op that completes its last gradient, so
 * that its reduce-scatter / all-reduce can overlap the rest of backward on the last micro-batch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/fuse.h"
#include "plan/plan.h"

static int push(Schedule *sc, int *cap, SchedKind k, int id) {
  if (sc->n == *cap) {
    int nc = *cap ? *cap * 2 : 256;
    SchedItem *ni = realloc(sc->it, (size_t)nc * sizeof *ni);
    if (!ni) return -1;
    sc->it = ni;
    *cap = nc;
  }
  sc->it[sc->n++] = (SchedItem){k, id};
  return 0;
}

static bool in_micro(Phase p) {
  return p == IR_PHASE_FORWARD || p == IR_PHASE_BACKWARD || p == IR_PHASE_REPLAY;
}

/* Buckets over the main gradients, by the op that last writes each in the micro program. */
static int make_buckets(const Graph *g, Schedule *sc) {
  int *last = malloc((size_t)(g->nt + 1) * sizeof *last);
  int *ord = malloc((size_t)(g->nt + 1) * sizeof *ord);
  if (!last || !ord) {
    free(last), free(ord);
    return -1;
  }
  for (int t = 0; t < g->nt; t++)
    last[t] = -1;
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    if (!in_micro(op->tags.phase)) continue;
    for (int j = 0; j < op->nout; j++)
      if (g->t[op->out[j]].role == ROLE_GRAD) last[op->out[j]] = o;
  }
  int n = 0;
  for (int o = 0; o < g->nop; o++) /* gradients in completion order */
    for (int j = 0; j < g->op[o].nout; j++) {
      int t = g->op[o].out[j];
      if (g->t[t].role == ROLE_GRAD && last[t] == o) ord[n++] = t, last[t] = -2 - o;
    }
  Bucket cur = {0};
  for (int i = 0; i < n; i++) {
    int t = ord[i];
    int64_t ne = tensor_numel(&g->t[t]);
    cur.params += ne;
    cur.bytes += ne * (int64_t)dtype_size(g->t[t].dtype);
    if (cur.ngrads++ == 0) cur.first = i;
    cur.after_op = -2 - last[t];
    if (cur.params >= sc->bucket_params || i == n - 1) {
      Bucket *nb = realloc(sc->b, (size_t)(sc->nb + 1) * sizeof *nb);
      if (!nb) {
        free(last), free(ord);
        return -1;
      }
      sc->b = nb;
      cur.fire_op = -1;
      sc->b[sc->nb++] = cur;
      cur = (Bucket){0};
    }
  }
  free(last);
  sc->grad = ord; /* the buckets index it: the runtime reduces these tensors bucket by bucket */
  sc->ngrad = n;
  return 0;
}

/* ZeRO-1's shards, as Megatron cuts them (Schedule.owner): each bucket's elements in dp contiguous
 * ranges, one per rank, at whole-tensor granularity, so each rank updates about 1/dp of every
 * bucket; the param, master and moments an AdamW op updates follow its gradient. */
static int make_owners(const Graph *g, Schedule *sc) {
  if (!(sc->owner = malloc(((size_t)g->nt + 1) * sizeof *sc->owner))) return -1;
  for (int t = 0; t < g->nt; t++)
    sc->owner[t] = -1;
  /* under expert parallelism a bucket's expert gradients (graph_expert_state) are cut over the
   * expert-data-parallel ranks instead (Megatron's expert buffers: their own data-parallel group),
   * the rest over the data-parallel ranks */
  for (int k = 0; k < sc->nb; k++) {
    const Bucket *b = &sc->b[k];
    for (int expert = 0; expert < 2; expert++) {
      int64_t total = 0, at = 0, n = expert ? sc->edp : sc->dp;
      for (int i = 0; i < b->ngrads; i++)
        if (graph_expert_state(g, sc->grad[b->first + i]) == (bool)expert)
          total += tensor_numel(&g->t[sc->grad[b->first + i]]);
      for (int i = 0; i < b->ngrads; i++) {
        int t = sc->grad[b->first + i];
        if (graph_expert_state(g, t) != (bool)expert) continue;
        sc->owner[t] = (int)(at * n / (total > 0 ? total : 1));
        at += tensor_numel(&g->t[t]);
      }
    }
  }
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    if (op->kind != OP_ADAMW) continue;
    for (int j = 0; j < op->nout; j++)
      sc->owner[op->out[j]] = sc->owner[op->in[0]];
  }
  return 0;
}

int schedule_build(const Graph *g, const Spec *s, Schedule *sc, char *err, size_t nerr) {
  memset(sc, 0, sizeof *sc);
  int64_t dp = spec_data_parallel_size(s);
  sc->dp = dp > 1 ? (int)dp : 1;
  sc->tp =
      s->per_rank && s->model.tensor_model_parallel_size > 1 ? (int)s->model.tensor_model_parallel_size : 1;
  sc->ep =
      s->per_rank && s->model.expert_model_parallel_size > 1 ? (int)s->model.expert_model_parallel_size : 1;
  /* Megatron's expert grid (ETP 1): the dp x tp ranks in EP groups of ep consecutive ones */
  sc->edp = sc->dp * sc->tp / sc->ep > 1 ? sc->dp * sc->tp / sc->ep : 1;
  sc->bucket_params = 40000000 > 1000000 * dp ? 40000000 : 1000000 * dp;
  sc->nmicro = g->num_microbatches > 0 ? g->num_microbatches : 1;
  sc->pos = malloc((size_t)(g->nop + 1) * sizeof *sc->pos);
  if (!sc->pos || make_buckets(g, sc) < 0 ||
      (s->optimizer.use_distributed_optimizer && make_owners(g, sc) < 0)) {
    snprintf(err, nerr, "out of memory");
    schedule_free(sc);
    return -1;
  }
  for (int o = 0; o < g->nop; o++)
    sc->pos[o] = -1;
  int cap = 0, nb = 0;
  /* the graph order is valid: forward, then backward with replays */
  for (int pass = 0; pass < 2; pass++) {
    for (int o = 0; o < g->nop; o++) {
      Phase ph = g->op[o].tags.phase;
      if (in_micro(ph) != (pass == 0)) continue;
      sc->pos[o] = sc->n;
      if (push(sc, &cap, SCHED_OP, o) < 0) goto oom;
      sc->nops++;
      while (pass == 0 && nb < sc->nb && sc->b[nb].after_op == o)
        if (push(sc, &cap, SCHED_BUCKET, nb++) < 0) goto oom;
    }
    if (pass == 0) sc->micro_end = sc->n;
  }
  for (int i = 1; i < sc->n; i++) /* a valid order: every input exists before its reader */
    if (sc->it[i].kind == SCHED_OP) {
      const Op *op = &g->op[sc->it[i].id];
      for (int j = 0; j < op->nin; j++) {
        int p = g->t[op->in[j]].producer;
        if (p >= 0 && sc->pos[p] > i) {
          snprintf(err, nerr, "schedule: %s reads %s before it is written", op->tags.module,
                   g->t[op->in[j]].name);
          schedule_free(sc);
          return -1;
        }
      }
    }
  return 0;
oom:
  snprintf(err, nerr, "out of memory");
  schedule_free(sc);
  return -1;
}

/* The op whose CUDA launch carries op o's writes once the fusions are decided (fuse.h): o when it
 * launches; for a weight-gradient ACCUM sunk into its producer's kernel, the producer's launch;
 * for an op absorbed by a fused group, the op that runs the group (a chain's last op, a pair's
 * second, a multi-tensor run's last); for the chunked loss's backward, its forward. -1 when no launch carries
 * them. */
static int launch_of(const Graph *g, const Fusions *fz, int o, int depth) {
  const Op *op = &g->op[o];
  if (!fz->skip[o]) return o;
  if (fz->fuse[o] == FUSE_LOSS_BWD)
    return fz->peer[o] >= 0 && fz->peer[o] < o && depth < 8 ? launch_of(g, fz, fz->peer[o], depth + 1) : -1;
  if (op->kind == OP_ACCUM && op->nin > 0 && fz->sink[op->in[0]] >= 0) {
    int p = g->t[op->in[0]].producer;
    return p >= 0 && p != o && depth < 8 ? launch_of(g, fz, p, depth + 1) : -1;
  }
  for (int r = o + 1; r < g->nop; r++) {
    int first, last;
    fuse_group(fz, r, &first, &last);
    if (first == last || first > o || fz->fuse[r] == FUSE_LOSS_BWD)
      continue;                           /* that group runs at its first op */
    if (fz->fuse[r] != FUSE_EW) return r; /* pairs and multi-tensor runs are contiguous */
    for (int c = 0; c < fz->nchain; c++)
      if (fz->chain[c].first == first)
        for (int j = 0; j < fz->chain[c].nops; j++)
          if (fz->chain[c].op[j] == o) return r;
  }
  return -1;
}

int schedule_bucket_fire(const Graph *g, const Fusions *fz, Schedule *sc, char *err, size_t nerr) {
  int *last = malloc((size_t)(g->nt + 1) * sizeof *last);   /* per main gradient: its last writing launch */
  int *zero = malloc((size_t)(g->nt + 1) * sizeof *zero);   /* its ZERO's launch in the micro program */
  int *first = malloc((size_t)(g->nt + 1) * sizeof *first); /* its first other writing launch */
  if (!last || !zero || !first)
    return free(last), free(zero), free(first), snprintf(err, nerr, "out of memory"), -1;
  for (int t = 0; t < g->nt; t++)
    last[t] = zero[t] = first[t] = -1;
  int rc = 0;
  for (int o = 0; o < g->nop && rc == 0; o++) {
    const Op *op = &g->op[o];
    if (!in_micro(op->tags.phase)) continue;
    /* one micro-batch: a main gradient's ZERO before its first write (optimizer.c). A skipped one is
     * done by the launch of that write (FUSE_WGRAD_STORE, FUSE_LOSS_BWD), never the last */
    if (op->kind == OP_ZERO && fz->skip[o]) continue;
    for (int j = 0; j < op->nout && rc == 0; j++) {
      int t = op->out[j];
      if (g->t[t].role != ROLE_GRAD) continue;
      int l = launch_of(g, fz, o, 0);
      if (l >= 0 && op->kind == OP_ZERO)
        zero[t] = l;
      else if (l >= 0 && (first[t] < 0 || l < first[t]))
        first[t] = l;
      if (l < 0 || !in_micro(g->op[l].tags.phase))
        rc = -1,
        snprintf(err, nerr,
                 "gradient buckets: %s (op %d, %s) writes the main gradient %s, but no launch of the micro "
                 "program carries it after the fusions",
                 op_name(op->kind), o, op->tags.module, g->t[t].name);
      else if (l > last[t])
        last[t] = l;
    }
  }
  for (int k = 0; k < sc->nb && rc == 0; k++) {
    Bucket *b = &sc->b[k];
    b->fire_op = -1;
    for (int i = 0; i < b->ngrads; i++) {
      int l = last[sc->grad[b->first + i]];
      if (l > b->fire_op) b->fire_op = l;
    }
    if (b->fire_op < 0) rc = -1, snprintf(err, nerr, "gradient bucket %d: no launch writes its gradients", k);
  }
  /* the fusions must not move a write of a gradient ahead of the ZERO it accumulates over */
  for (int t = 0; t < g->nt && rc == 0; t++)
    if (zero[t] >= 0 && first[t] >= 0 && first[t] <= zero[t])
      rc = -1,
      snprintf(err, nerr, "the main gradient %s is written at op %d's launch, before its ZERO (op %d)",
               g->t[t].name, first[t], zero[t]);
  free(last), free(zero), free(first);
  return rc;
}

void schedule_free(Schedule *sc) {
  free(sc->it), free(sc->pos), free(sc->b), free(sc->grad), free(sc->owner), free(sc->comm_end);
  memset(sc, 0, sizeof *sc);
}
