/* memplan.c — liveness over the schedule and offsets in one arena (plan.h).
 *
 * Program points are the schedule's ops: the micro program (one micro-batch; every micro-batch
 * reuses the same addresses), then the tail. A tensor is live from the first op that writes it to
 * the last op that reads or writes it; persistent tensors (params, main grads, masters, optimizer
 * state) and static graph outputs (scope.c) are live over the whole step; the loss lives to the
 * end so the trainer can read it. An output of an elementwise kernel takes its input's slot when
 * the input dies at that op (plan_op_inplace_input), unless the op is part of a fused group
 * (fuse.h): a group's tensors are live across the whole group.
 *
 * Measure, then allocate: persistent tensors are laid out first from offset 0; transient slots go
 * above them, largest first, each at the best-fitting gap among the slots whose lifetimes
 * overlap it (greedy by size, as TFLite's and ggml's planners). The peak is the maximum over
 * program points of the live bytes; the arena is at least the peak, the difference is
 * fragmentation. Nothing is allocated: a plan for an 8B model is offsets only.
 *
 * The distributed optimizer (Schedule.owner set) keeps the fp32 masters and Adam moments out of
 * the arena, in a region of their own (plan.h, MemPlan.region): every rank packs the state it holds
 * from offset 0, so a rank's region is its shard, 12/DP bytes per parameter up to the whole-tensor
 * granularity of the ownership (an expert's 12/expert-DP); shards are listed per job rank. Its
 * staging on cuda (runtime/zero_coll.h) is a slot of the arena of no tensor's, from the point after
 * the first bucket's fire point to the end (MemPlan.zstage_*), sized by the runtime's own
 * zc_staging_bytes. */
#define _GNU_SOURCE /* qsort_r */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/fuse.h"
#include "plan/plan.h"
#include "runtime/zero_coll.h"

const char *memplan_role_name(int role) {
  if (role == MEM_ROLE_GRAPH) return "graph_buffers";
  if (role == MEM_ROLE_ZERO_STAGING) return "zero_staging";
  switch (role) {
  case ROLE_PARAM: return "weights";
  case ROLE_MASTER: return "master_weights";
  case ROLE_GRAD: return "gradients";
  case ROLE_OPTIM: return "optimizer";
  case ROLE_INPUT: return "inputs";
  case ROLE_ACT: return "activations";
  case ROLE_ACT_GRAD: return "activation_grads";
  case ROLE_WORKSPACE: return "workspace";
  default: return "other";
  }
}

int memplan_role(const Graph *g, const ScopeResult *sr, int t) {
  if (sr && sr->is_static && sr->is_static[t]) return MEM_ROLE_GRAPH;
  const Tensor *x = &g->t[t];
  /* model.fp8_param: the fp8 primary weights (data, transpose, scale_inv) are the step's weights, and
   * the fp32 param they are cast from is its master weight, as in Megatron's job */
  if (x->role == ROLE_PARAM_FP8) return ROLE_PARAM;
  return graph_fp8_master(g, t) ? ROLE_MASTER : (int)x->role;
}

/* A master or Adam moment of a distributed-optimizer step: its bytes live in the region. With fp8
 * primary weights (model.fp8_param) an fp8 linear's fp32 param is its master (memplan_role) and is
 * sharded like one: only its owner holds it, updates it and casts it; the fp8 copies every rank
 * reads are gathered from the owner after the step (runtime: api_dp_absent). */
static bool in_region(const Graph *g, const Schedule *sc, int t) {
  const Tensor *x = &g->t[t];
  return sc->owner && (memplan_role(g, NULL, t) == ROLE_MASTER || (x->role == ROLE_OPTIM && x->of >= 0));
}

/* Persistent roles and static graph outputs are live over the whole step, but a main gradient
 * zeroed in the micro program (transient[t], one micro-batch: optimizer.c) lives from that ZERO to
 * its last use in the tail, like PyTorch's gradients under zero_grad(set_to_none=True). */
static bool pinned(const Graph *g, const ScopeResult *sr, const uint8_t *transient, int t) {
  if (sr && sr->is_static && sr->is_static[t]) return true;
  return role_is_persistent(g->t[t].role) && !(transient && transient[t]);
}

typedef struct {
  int64_t size, offset;
  int start, end;
  int first; /* a member tensor (for messages) */
} Slot;

/* The orders the transient slots are placed in (place_transient keeps the one whose arena is
 * smallest, the first on a tie): by size (TFLite's greedy by size); by breadth (the slots of the
 * program point with the most live bytes first, then those of the next fullest point: a slot's key is
 * the most bytes live at any point of its lifetime, so the peak's slots pack without holes); by
 * lifetime (the long-lived ones low in the arena); and by size times lifetime. Each breaks its ties by
 * size, start, then index, so a plan is the same on every machine. */
enum { ORDER_SIZE, ORDER_BREADTH, ORDER_BREADTH_END, ORDER_LIFE, ORDER_AREA, NORDERS };
typedef struct {
  const Slot *s;
  const int64_t *breadth; /* per slot: the most transient bytes live at a point of its lifetime */
  int order;
} OrderCtx;

static int cmp_placement(const void *a, const void *b, void *ctx) {
  const OrderCtx *c = ctx;
  const Slot *x = &c->s[*(const int *)a], *y = &c->s[*(const int *)b];
  int64_t lx = x->end - x->start + 1, ly = y->end - y->start + 1, kx = x->size, ky = y->size;
  switch (c->order) {
  case ORDER_LIFE: kx = lx, ky = ly; break;
  case ORDER_AREA: kx = x->size / 4096 * lx, ky = y->size / 4096 * ly; break;
  case ORDER_BREADTH:
  case ORDER_BREADTH_END: kx = c->breadth[x - c->s], ky = c->breadth[y - c->s]; break;
  default: break;
  }
  if (kx != ky) return kx > ky ? -1 : 1;
  if (c->order == ORDER_BREADTH_END && x->end != y->end) return x->end > y->end ? -1 : 1;
  if (x->size != y->size) return x->size > y->size ? -1 : 1;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return *(const int *)a - *(const int *)b;
}

static int cmp_offset(const void *a, const void *b, void *ctx) {
  const int64_t *off = ctx;
  int x = *(const int *)a, y = *(const int *)b;
  if (off[x] != off[y]) return off[x] < off[y] ? -1 : 1;
  return x - y;
}

static int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

/* Best-fit offsets for the transient slots ts[0..n) in one order (cmp_placement's): each at the
 * smallest gap that holds it among the placed slots whose lifetimes overlap its own, else above them.
 * The offsets into off[], the arena's top into *top. */
static int place_in_order(const Slot *sl, const int64_t *breadth, int *ts, int n, int order, int64_t base,
                          int64_t align, int64_t *off, int64_t *top) {
  OrderCtx ctx = {sl, breadth, order};
  qsort_r(ts, (size_t)n, sizeof *ts, cmp_placement, &ctx);
  int *placed = malloc((size_t)(n + 1) * sizeof *placed), *ov = malloc((size_t)(n + 1) * sizeof *ov);
  if (!placed || !ov) {
    free(placed), free(ov);
    return -1;
  }
  int np = 0;
  *top = base;
  for (int i = 0; i < n; i++) {
    const Slot *s = &sl[ts[i]];
    int nov = 0;
    for (int j = 0; j < np; j++) {
      const Slot *p = &sl[placed[j]];
      if (p->start <= s->end && s->start <= p->end) ov[nov++] = placed[j];
    }
    qsort_r(ov, (size_t)nov, sizeof *ov, cmp_offset, off); /* by their offsets in this order */
    int64_t prev = base, best = -1, best_gap = INT64_MAX;
    for (int j = 0; j < nov; j++) {
      const Slot *p = &sl[ov[j]];
      int64_t gap = off[ov[j]] - prev;
      if (gap >= s->size && gap < best_gap) best = prev, best_gap = gap;
      if (off[ov[j]] + p->size > prev) prev = align_up(off[ov[j]] + p->size, align);
    }
    off[ts[i]] = best >= 0 ? best : prev;
    if (off[ts[i]] + s->size > *top) *top = off[ts[i]] + s->size;
    placed[np++] = ts[i];
  }
  free(placed), free(ov);
  return 0;
}

/* The transient slots ts[0..n) (of nslots, over np program points) placed in each order of
 * cmp_placement; the smallest arena's offsets kept (the first order's on a tie), stopping early at
 * base + the most transient bytes live at a point (no arena is smaller). */
static int place_transient(Slot *sl, int *ts, int n, int nslots, int np, int64_t base, int64_t align,
                           int64_t *top) {
  int64_t *off = malloc((size_t)(nslots + 1) * sizeof *off),
          *best = malloc((size_t)(nslots + 1) * sizeof *best), *live = calloc((size_t)np + 2, sizeof *live),
          *breadth = calloc((size_t)nslots + 1, sizeof *breadth);
  if (!off || !best || !live || !breadth) {
    free(off), free(best), free(live), free(breadth);
    return -1;
  }
  for (int i = 0; i < n; i++)
    live[sl[ts[i]].start] += sl[ts[i]].size, live[sl[ts[i]].end + 1] -= sl[ts[i]].size;
  int64_t least = 0; /* no arena is smaller than base + the most bytes live at a point */
  for (int q = 0; q <= np; q++) {
    if (q > 0) live[q] += live[q - 1];
    if (live[q] > least) least = live[q];
  }
  for (int i = 0; i < n; i++)
    for (int q = sl[ts[i]].start; q <= sl[ts[i]].end; q++)
      if (live[q] > breadth[ts[i]]) breadth[ts[i]] = live[q];
  least += base;
  *top = INT64_MAX;
  for (int o = 0; o<NORDERS && * top> least; o++) {
    int64_t t;
    if (place_in_order(sl, breadth, ts, n, o, base, align, off, &t) < 0) {
      free(off), free(best), free(live), free(breadth);
      return -1;
    }
    if (t < *top) {
      *top = t;
      for (int i = 0; i < n; i++)
        best[ts[i]] = off[ts[i]];
    }
  }
  for (int i = 0; i < n; i++)
    sl[ts[i]].offset = best[ts[i]];
  free(off), free(best), free(live), free(breadth);
  return 0;
}

/* Whether job rank w holds region tensor t: every rank's (owner -1), or its owner's — a data-parallel
 * rank (w / tp), or for an expert's state under expert parallelism an expert-data-parallel rank
 * (w / ep: Schedule.edp). */
static bool rank_holds(const Graph *g, const MemPlan *mp, int t, int w) {
  int o = mp->owner[t];
  if (o < 0) return true;
  return o == w / (graph_expert_state(g, t) ? mp->ep : mp->tp);
}

/* The region's offsets: the state every rank holds first (owner -1), then each data-parallel rank's
 * own from there, in tensor order; under expert parallelism the experts' state after every rank's
 * own, each expert-data-parallel rank's from the same base (a rank holds one of each, never two
 * that collide); its size, each job rank's shard and the largest. */
static int place_region(const Graph *g, const Schedule *sc, MemPlan *mp) {
  int nt = g->nt, world = sc->dp * sc->tp;
  mp->owner = malloc(((size_t)nt + 1) * sizeof *mp->owner);
  mp->shard = calloc((size_t)world + 1, sizeof *mp->shard);
  int64_t *end = calloc((size_t)sc->dp + (size_t)sc->edp + 1, sizeof *end); /* dense, then expert ends */
  if (!mp->owner || !mp->shard || !end) return free(end), -1;
  mp->nshard = world, mp->tp = sc->tp, mp->ep = sc->ep;
  memcpy(mp->owner, sc->owner, (size_t)nt * sizeof *mp->owner);
  int64_t at = 0;
  for (int t = 0; t < nt; t++)
    if (mp->buffer[t] && mp->owner[t] < 0)
      mp->offset[t] = at, at = align_up(at + mp->size[t], MEMPLAN_REGION_ALIGN);
  mp->region_common = at;
  int64_t ebase = at;
  for (int pass = 0; pass < 2; pass++) { /* 0: the data-parallel ranks' own, 1: the experts' */
    int n = pass ? sc->edp : sc->dp;
    for (int r = 0; r < n; r++)
      end[(pass ? sc->dp : 0) + r] = pass ? ebase : at;
    for (int t = 0; t < nt; t++) {
      int r = mp->owner[t];
      if (!mp->buffer[t] || r < 0 || graph_expert_state(g, t) != (bool)pass) continue;
      int64_t *e = &end[(pass ? sc->dp : 0) + r];
      mp->offset[t] = *e;
      *e = align_up(*e + mp->size[t], MEMPLAN_REGION_ALIGN);
    }
    for (int r = 0; !pass && r < n; r++)
      if (end[r] > ebase) ebase = end[r];
  }
  for (int w = 0; w < world; w++) {
    int64_t d = end[w / sc->tp],
            e = end[sc->dp + w / sc->ep]; /* its expert shard's end (ebase without experts) */
    int64_t need = e > ebase && e > d ? e : d, own = d - at + e - ebase;
    mp->shard[w] = at + own;
    if (need > mp->region) mp->region = need;
    if (mp->shard[w] > mp->shard[mp->region_rank]) mp->region_rank = w;
  }
  free(end);
  return 0;
}

/* The region's bytes of role r on its largest rank (each tensor with the padding after it). */
static int64_t region_role_bytes(const Graph *g, const MemPlan *mp, int r) {
  int64_t b = 0;
  for (int t = 0; mp->region && t < g->nt; t++)
    if (mp->buffer[t] && memplan_role(g, NULL, t) == r && rank_holds(g, mp, t, mp->region_rank))
      b += align_up(mp->size[t], MEMPLAN_REGION_ALIGN);
  return b;
}

/* The distributed optimizer's staging bytes (runtime/zero_coll.h zc_staging_bytes, what each rank's
 * zc_plan needs at open) for the schedule's buckets and owners at the plan's tensor sizes. The staging
 * is the same size on every member of the groups (zero_coll.h), so member 0's figure is every rank's.
 * -1 with err. */
static int64_t zero_staging_bytes(const Graph *g, const Schedule *sc, const int64_t *size, char *err,
                                  size_t nerr) {
  ImgBucket *b = calloc((size_t)sc->nb + 1, sizeof *b);
  if (!b) return snprintf(err, nerr, "out of memory"), -1;
  for (int k = 0; k < sc->nb; k++)
    b[k] = (ImgBucket){.first = sc->b[k].first, .ngrads = sc->b[k].ngrads};
  ZcRank r = {.g = g,
              .bytes = size,
              .owner = sc->owner,
              .bucket = b,
              .nbucket = sc->nb,
              .bucket_grad = sc->grad,
              .dp = sc->dp,
              .edp = sc->edp,
              .ep = sc->ep};
  int64_t n = zc_staging_bytes(&r, err, nerr);
  free(b);
  return n;
}

/* The role a slot's bytes are reported under: its first tensor's, or the staging's (no tensor). */
static int slot_role(const Graph *g, const ScopeResult *sr, const Slot *s) {
  return s->first < 0 ? MEM_ROLE_ZERO_STAGING : memplan_role(g, sr, s->first);
}

int memplan_build(const Graph *g, const Fusions *fz, const Schedule *sc, const ScopeResult *sr,
                  int float_bytes, MemPlan *mp, char *err, size_t nerr) {
  memset(mp, 0, sizeof *mp);
  int nt = g->nt, np = sc->nops;
  int64_t align = float_bytes > 0 ? 64 : 256;
  mp->ntensors = nt;
  mp->npos = np;
  mp->start = malloc((size_t)(nt + 1) * sizeof *mp->start);
  mp->end = malloc((size_t)(nt + 1) * sizeof *mp->end);
  mp->slot = malloc((size_t)(nt + 1) * sizeof *mp->slot);
  mp->size = malloc((size_t)(nt + 1) * sizeof *mp->size);
  mp->offset = malloc((size_t)(nt + 1) * sizeof *mp->offset);
  mp->live = calloc((size_t)np + 1, sizeof *mp->live);
  mp->live_role = calloc((size_t)(np + 1) * MEM_NROLES, sizeof *mp->live_role);
  mp->buffer = calloc((size_t)nt + 1, 1);
  Slot *sl = malloc((size_t)(nt + 2) * sizeof *sl); /* a slot a tensor at most, and the staging */
  int *ts = malloc((size_t)(nt + 1) * sizeof *ts);
  int64_t *diff = calloc((size_t)np + 2, sizeof *diff);
  if (!mp->start || !mp->end || !mp->slot || !mp->size || !mp->offset || !mp->live || !mp->live_role ||
      !mp->buffer || !sl || !ts || !diff) {
    free(sl), free(ts), free(diff);
    memplan_free(mp);
    snprintf(err, nerr, "out of memory");
    return -1;
  }
  for (int t = 0; t < nt; t++) {
    const Tensor *x = &g->t[t];
    size_t es = dtype_is_float(x->dtype) && float_bytes > 0 ? (size_t)float_bytes : dtype_size(x->dtype);
    mp->size[t] = tensor_numel(x) * (int64_t)es;
    /* the device plan (nominal dtypes): a weight gradient the fusion pass sank into its main
     * gradient (fuse.c, Fusions.sink) is never written on the device, so it takes no bytes; the CPU
     * reference's plans (float_bytes 4 or 8) run the unfused ACCUM and keep it */
    if (float_bytes == 0 && fz->sink[t] >= 0) mp->size[t] = 0;
    mp->start[t] = INT32_MAX, mp->end[t] = -1;
    mp->slot[t] = -1;
    mp->buffer[t] = in_region(g, sc, t);
  }
  /* main gradients zeroed in the micro program: with one micro-batch the micro program runs once a
   * step, so nothing before that ZERO needs them (several micro-batches keep them pinned: each
   * micro-batch adds into them at the same addresses) */
  uint8_t *transient = calloc((size_t)nt + 1, 1);
  if (!transient) {
    free(sl), free(ts), free(diff);
    memplan_free(mp);
    snprintf(err, nerr, "out of memory");
    return -1;
  }
  for (int i = 0; sc->nmicro == 1 && i < sc->micro_end; i++) {
    const Op *op = sc->it[i].kind == SCHED_OP ? &g->op[sc->it[i].id] : NULL;
    if (op && op->kind == OP_ZERO)
      for (int j = 0; j < op->nout; j++)
        transient[op->out[j]] |= g->t[op->out[j]].role == ROLE_GRAD;
  }
  /* program point of each op: its index among the schedule's ops */
  int p = 0;
  for (int i = 0; i < sc->n; i++) {
    if (sc->it[i].kind != SCHED_OP) continue;
    const Op *op = &g->op[sc->it[i].id];
    for (int j = 0; j < op->nout; j++) {
      int t = op->out[j];
      if (p < mp->start[t]) mp->start[t] = p;
      if (p > mp->end[t]) mp->end[t] = p;
    }
    for (int j = 0; j < op->nin; j++) {
      int t = op->in[j];
      if (p > mp->end[t]) mp->end[t] = p;
      if (g->t[t].role == ROLE_INPUT) mp->start[t] = 0; /* written by the trainer before the micro-batch */
    }
    p++;
  }
  /* a fused group (fuse.h) is one launch: everything it reads or writes is live across all of it,
   * so no output of the group lands on anything the group reads */
  int *point = malloc((size_t)(g->nop + 1) * sizeof *point);
  uint8_t *grouped = calloc((size_t)g->nop + 1, 1);
  if (!point || !grouped) {
    free(point), free(grouped), free(sl), free(ts), free(diff), free(transient);
    memplan_free(mp);
    snprintf(err, nerr, "out of memory");
    return -1;
  }
  for (int o = 0; o < g->nop; o++)
    point[o] = -1;
  p = 0;
  for (int i = 0; i < sc->n; i++)
    if (sc->it[i].kind == SCHED_OP) point[sc->it[i].id] = p++;
  for (int o = 0; o < g->nop; o++) {
    int first, last;
    fuse_group(fz, o, &first, &last);
    if (first == last || point[first] < 0 || point[last] < 0) continue;
    int pa = point[first], pb = point[last];
    for (int w = first; w <= last; w++) {
      const Op *op = &g->op[w];
      grouped[w] = 1;
      for (int j = 0; j < op->nin + op->nout; j++) {
        int t = j < op->nin ? op->in[j] : op->out[j - op->nin];
        if (j >= op->nin && pa < mp->start[t]) mp->start[t] = pa;
        if (pb > mp->end[t]) mp->end[t] = pb;
      }
    }
  }
  /* a collective on the communication stream (comm_overlap.c) reads and writes its tensors until the
   * step's stream joins it: they stay live to that point */
  for (int o = 0; sc->comm_end && o < g->nop; o++) {
    const Op *op = &g->op[o];
    for (int j = 0; sc->comm_end[o] >= 0 && j < op->nin + op->nout; j++) {
      int t = j < op->nin ? op->in[j] : op->out[j - op->nin];
      if (sc->comm_end[o] > mp->end[t]) mp->end[t] = sc->comm_end[o];
    }
  }
  for (int t = 0; t < nt; t++) {
    if (pinned(g, sr, transient, t))
      mp->start[t] = 0, mp->end[t] = np - 1;
    else if (t == g->loss)
      mp->end[t] = np - 1;
    if (mp->end[t] < 0) mp->start[t] = mp->end[t] = 0; /* never touched: still needs a home */
    if (mp->start[t] > mp->end[t]) mp->start[t] = mp->end[t];
  }
  /* slots; in-place reuse */
  int nslots = 0;
  p = 0;
  for (int i = 0; i < sc->n; i++) {
    if (sc->it[i].kind != SCHED_OP) continue;
    const Op *op = &g->op[sc->it[i].id];
    for (int j = 0; j < op->nout; j++) {
      int t = op->out[j];
      if (mp->slot[t] >= 0 || mp->start[t] != p || mp->buffer[t]) continue;
      int k = pinned(g, sr, transient, t) || grouped[sc->it[i].id] ? -1 : plan_op_inplace_input(op, j);
      int u = k >= 0 && k < op->nin ? op->in[k] : -1;
      if (u >= 0 && u != t && mp->slot[u] >= 0 && !pinned(g, sr, transient, u) &&
          g->t[u].role != ROLE_INPUT && u != g->loss && mp->end[u] == p && mp->size[u] == mp->size[t] &&
          sl[mp->slot[u]].end == p) {
        Slot *s = &sl[mp->slot[u]];
        mp->slot[t] = mp->slot[u];
        if (mp->end[t] > s->end) s->end = mp->end[t];
        mp->ninplace++;
        continue;
      }
      mp->slot[t] = nslots;
      sl[nslots++] = (Slot){.size = mp->size[t], .start = mp->start[t], .end = mp->end[t], .first = t};
    }
    p++;
  }
  for (int t = 0; t < nt; t++)
    if (mp->slot[t] < 0 && !mp->buffer[t]) {
      mp->slot[t] = nslots;
      sl[nslots++] = (Slot){.size = mp->size[t], .start = mp->start[t], .end = mp->end[t], .first = t};
    }
  /* the distributed optimizer's staging (cuda): from the point after the first bucket's fire point to
   * the end. Its first pack is enqueued on the step's stream after the fire point's launches, so what
   * they read or write is done with before the staging is written; what is live after it (a
   * collective's tensors until its window's join included) is kept apart. At world size 1 there is
   * none: the step's one rank holds all the state and runs no collective (a --dp-join run, which
   * plays them to test them, allocates its own: runtime/api_cuda_dp.c zero_setup) */
  int zs = -1;
  bool world1 = sc->dp <= 1 && sc->tp <= 1 && sc->ep <= 1 && sc->edp <= 1;
  if (float_bytes == 0 && sc->owner && sc->nb > 0 && !world1) {
    int64_t b = zero_staging_bytes(g, sc, mp->size, err, nerr);
    if (b < 0) {
      free(sl), free(ts), free(diff), free(point), free(grouped), free(transient);
      memplan_free(mp);
      return -1;
    }
    int q0 = np - 1;
    for (int k = 0; k < sc->nb; k++) {
      int o = sc->b[k].fire_op >= 0 ? sc->b[k].fire_op : sc->b[k].after_op;
      if (o >= 0 && point[o] >= 0 && point[o] + 1 < q0) q0 = point[o] + 1;
    }
    if (b > 0 && np > 0) {
      zs = nslots;
      sl[nslots++] = (Slot){.size = b, .start = q0, .end = np - 1, .first = -1};
      mp->zstage_bytes = b, mp->zstage_start = q0;
    }
  }
  /* persistent first, bump-allocated; transient best-fit above */
  int64_t base = 0;
  int ntr = 0;
  for (int s = 0; s < nslots; s++) {
    if (sl[s].first >= 0 && pinned(g, sr, transient, sl[s].first)) {
      sl[s].offset = base;
      base = align_up(base + sl[s].size, align);
      mp->persistent += sl[s].size;
    } else {
      ts[ntr++] = s;
    }
  }
  int64_t top = base;
  if (place_transient(sl, ts, ntr, nslots, np, base, align, &top) < 0) {
    free(sl), free(ts), free(diff), free(point), free(grouped), free(transient);
    memplan_free(mp);
    snprintf(err, nerr, "out of memory");
    return -1;
  }
  mp->arena = align_up(top, align);
  for (int t = 0; t < nt; t++)
    mp->offset[t] = mp->buffer[t] ? 0 : sl[mp->slot[t]].offset;
  if (zs >= 0) mp->zstage_offset = sl[zs].offset;
  if (sc->owner && place_region(g, sc, mp) < 0) {
    free(sl), free(ts), free(diff), free(point), free(grouped), free(transient);
    memplan_free(mp);
    snprintf(err, nerr, "out of memory");
    return -1;
  }
  /* live bytes per program point, by slot (a slot's bytes once) and by role (its first tensor's) */
  for (int s = 0; s < nslots; s++)
    diff[sl[s].start] += sl[s].size, diff[sl[s].end + 1] -= sl[s].size;
  int64_t run = 0;
  for (int q = 0; q < np; q++) {
    run += diff[q];
    mp->live[q] = run + mp->region;
    if (mp->live[q] > mp->peak) mp->peak = mp->live[q], mp->peak_pos = q;
  }
  for (int r = 0; r < MEM_NROLES; r++) {
    memset(diff, 0, (size_t)(np + 2) * sizeof *diff);
    for (int s = 0; s < nslots; s++)
      if (slot_role(g, sr, &sl[s]) == r) diff[sl[s].start] += sl[s].size, diff[sl[s].end + 1] -= sl[s].size;
    run = region_role_bytes(g, mp, r);
    for (int q = 0; q < np; q++)
      run += diff[q], mp->live_role[(size_t)q * MEM_NROLES + r] = run;
  }
  free(sl), free(ts), free(diff), free(point), free(grouped), free(transient);
  return 0;
}

void memplan_apply(Graph *g, const MemPlan *mp) {
  for (int t = 0; t < g->nt; t++) {
    g->t[t].buffer = mp->buffer[t];
    g->t[t].offset = mp->offset[t];
    g->t[t].bytes = mp->size[t];
  }
  g->nbuffers = mp->region ? 2 : 1;
  g->buffer_bytes[0] = mp->arena;
  g->buffer_bytes[1] = mp->region;
}

/* Two tensors of the region may share a rank when one of them is every rank's, both are one's, or
 * one is a data-parallel rank's and the other an expert-data-parallel rank's. */
static bool same_rank(const Graph *g, const MemPlan *mp, int a, int b) {
  return mp->owner[a] < 0 || mp->owner[b] < 0 || graph_expert_state(g, a) != graph_expert_state(g, b) ||
         mp->owner[a] == mp->owner[b];
}

int memplan_verify(const Graph *g, const MemPlan *mp, char *err, size_t nerr) {
  int nt = mp->ntensors;
  for (int a = 0; a < nt; a++) {
    int64_t cap = mp->buffer[a] ? mp->region : mp->arena;
    if (mp->offset[a] < 0 || mp->offset[a] + mp->size[a] > cap) {
      snprintf(err, nerr, "%s lies outside the %s", g->t[a].name,
               mp->buffer[a] ? "optimizer-state region" : "arena");
      return -1;
    }
    if (mp->buffer[a] && mp->owner[a] >= 0 && mp->offset[a] < mp->region_common) {
      snprintf(err, nerr, "%s (rank %d's) lies in the region's part every rank holds", g->t[a].name,
               mp->owner[a]);
      return -1;
    }
    for (int b = a + 1; b < nt; b++) {
      if (mp->buffer[a] != mp->buffer[b] || mp->size[a] == 0 || mp->size[b] == 0) continue;
      if (mp->buffer[a] ? !same_rank(g, mp, a, b) : mp->slot[a] == mp->slot[b]) continue;
      bool time = mp->start[a] <= mp->end[b] && mp->start[b] <= mp->end[a];
      bool space = mp->offset[a] < mp->offset[b] + mp->size[b] && mp->offset[b] < mp->offset[a] + mp->size[a];
      if (time && space) {
        snprintf(err, nerr, "%s and %s are live together and overlap", g->t[a].name, g->t[b].name);
        return -1;
      }
    }
  }
  /* the staging: in the arena, over no arena tensor live with it */
  if (mp->zstage_bytes) {
    if (mp->zstage_offset < 0 || mp->zstage_offset + mp->zstage_bytes > mp->arena) {
      snprintf(err, nerr, "the distributed optimizer's staging lies outside the arena");
      return -1;
    }
    for (int a = 0; a < nt; a++)
      if (!mp->buffer[a] && mp->size[a] > 0 && mp->end[a] >= mp->zstage_start &&
          mp->offset[a] < mp->zstage_offset + mp->zstage_bytes &&
          mp->zstage_offset < mp->offset[a] + mp->size[a]) {
        snprintf(err, nerr, "%s and the distributed optimizer's staging are live together and overlap",
                 g->t[a].name);
        return -1;
      }
  }
  /* each rank's shard: the bytes of the tensors it holds, each padded, fill it exactly */
  for (int r = 0; mp->region && r < mp->nshard; r++) {
    int64_t held = 0;
    for (int t = 0; t < nt; t++)
      if (mp->buffer[t] && rank_holds(g, mp, t, r))
        held += (mp->size[t] + MEMPLAN_REGION_ALIGN - 1) / MEMPLAN_REGION_ALIGN * MEMPLAN_REGION_ALIGN;
    if (held != mp->shard[r] || mp->shard[r] > mp->region) {
      snprintf(err, nerr, "rank %d's optimizer-state shard: %lld bytes held, %lld planned (region %lld)", r,
               (long long)held, (long long)mp->shard[r], (long long)mp->region);
      return -1;
    }
  }
  /* in-place members of a slot never overlap in time except at the handover op */
  int64_t peak = 0;
  char *seen = calloc((size_t)nt + 1, 1);
  if (!seen) return -1;
  for (int q = 0; q < mp->npos; q++) {
    int64_t live = mp->region; /* the region: live for the whole step */
    if (mp->zstage_bytes && q >= mp->zstage_start) live += mp->zstage_bytes;
    memset(seen, 0, (size_t)nt);
    for (int t = 0; t < nt; t++)
      if (!mp->buffer[t] && mp->start[t] <= q && q <= mp->end[t] && !seen[mp->slot[t]])
        seen[mp->slot[t]] = 1, live += mp->size[t];
    if (live != mp->live[q]) {
      free(seen);
      snprintf(err, nerr, "live bytes at point %d: %lld recounted, %lld planned", q, (long long)live,
               (long long)mp->live[q]);
      return -1;
    }
    if (live > peak) peak = live;
  }
  free(seen);
  if (peak != mp->peak || mp->arena + mp->region < mp->peak) {
    snprintf(err, nerr, "peak %lld recounted, %lld planned (arena %lld, region %lld)", (long long)peak,
             (long long)mp->peak, (long long)mp->arena, (long long)mp->region);
    return -1;
  }
  return 0;
}

void memplan_free(MemPlan *mp) {
  free(mp->start), free(mp->end), free(mp->slot), free(mp->size), free(mp->offset), free(mp->live),
      free(mp->live_role);
  free(mp->buffer), free(mp->owner), free(mp->shard);
  memset(mp, 0, sizeof *mp);
}
