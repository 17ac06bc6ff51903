/* comm_overlap.c — tensor parallelism's backward collectives overlapped with the weight-gradient GEMM
 * on a communication stream (plan.h: comm_overlap_order, comm_overlap_windows).
 *
 * Megatron Core's LinearWithGradAccumulationAndAsyncCommunication launches the collective of a
 * column-parallel linear's input gradient — the all-reduce of dx (TP without SP) or its
 * reduce-scatter along the sequence (SP) — asynchronously, computes the weight gradient while it is
 * in flight, and waits for it only where dx is next needed. stepc does the same in two steps:
 *
 *  - order (on the lowered graph, before recompute and scheduling): each backward collective of an
 *    activation gradient moves up to right after the op that produces its input, ahead of the
 *    independent ops autodiff emitted between them (the weight gradient and its accumulation). Only
 *    the order changes; every op computes what it did, so the CPU reference is unchanged bit for bit.
 *  - windows (on the schedule, once the fusions are known): such a collective runs on the
 *    communication stream (RtColl.side, between RT_REC_FORK and RT_REC_JOIN: runtime/program.h) while
 *    the step's stream goes on with the points after it, up to the last one before any of: a point
 *    whose launch reads or writes the collective's input or output, another collective, a gradient
 *    bucket's fire point (data parallelism's own stream), an attention point (its flash alternative
 *    would need the join too), a scope boundary (a capture joins what it forks), the micro
 *    program's end. The step's stream joins after that point's launches. The memory plan keeps the
 *    collective's input and output live across the window (memplan.c), so nothing the step's stream
 *    writes meanwhile lands on them.
 *
 * The collectives themselves are unchanged (the same reduction in the same order), so results are
 * bitwise those of the serial order; only when the work runs changes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/fuse.h"
#include "plan/plan.h"

/* A backward collective of an activation gradient whose result the next op need not wait for, over
 * the TP group (i[1] = 0; the allgather token dispatcher's EP-group reduce-scatters stay in order). */
static bool overlappable(const Graph *g, const Op *op) {
  if (op->tags.phase != IR_PHASE_BACKWARD || op->nin < 1 || op->nout < 1) return false;
  if (op->kind == OP_TP_SCATTER) return op->a.i[1] == 0;
  return op->kind == OP_TP_ALLREDUCE && op->a.i[1] == 0 && op->in[0] != op->out[0] &&
         g->t[op->in[0]].role == ROLE_ACT_GRAD;
}

/* An op whose launch runs a collective: the TP / EP ops, and a delayed-scaling update that reduces its
 * amaxes over every rank first (ir/ops/fp8.c, i[3]). */
static bool collective(const Op *op) {
  switch (op->kind) {
  case OP_FP8_SCALE_UPDATE: return op->a.i[3] == 1;
  case OP_TP_COPY:
  case OP_TP_ALLREDUCE:
  case OP_TP_GATHER:
  case OP_TP_SCATTER:
  case OP_TP_REP_PACK:
  case OP_TP_REP_UNPACK:
  case OP_EP_COUNTS:
  case OP_EP_DISPATCH:
  case OP_EP_COMBINE: return true;
  default: return false;
  }
}

static bool attention(OpKind k) {
  return k == OP_FLASH_ATTN || k == OP_FLASH_ATTN_BWD || k == OP_FLASH_ATTN_DV || k == OP_FLASH_ATTN_DV_BWD;
}

static bool writes(const Op *op, int t) {
  for (int j = 0; j < op->nout; j++)
    if (op->out[j] == t) return true;
  return false;
}

int comm_overlap_order(Graph *g, char *err, size_t nerr) {
  int n = g->nop, moved = 0;
  int *order = malloc((size_t)(n + 1) * sizeof *order);
  if (!order) return snprintf(err, nerr, "out of memory"), -1;
  for (int i = 0; i < n; i++)
    order[i] = i;
  /* order[] is the new sequence; each collective is taken out and put back after its producer */
  for (int i = 0; i < n; i++) {
    const Op *s = &g->op[order[i]];
    if (!overlappable(g, s)) continue;
    int x = s->in[0], p = i - 1;
    while (p >= 0 && order[p] != g->t[x].producer) {
      const Op *b = &g->op[order[p]];
      if (writes(b, x) || writes(b, s->out[0])) break; /* something between writes it: stay */
      p--;
    }
    if (p < 0 || order[p] != g->t[x].producer || p == i - 1) continue;
    int id = order[i];
    memmove(&order[p + 2], &order[p + 1], (size_t)(i - p - 1) * sizeof *order);
    order[p + 1] = id;
    moved++;
  }
  int rc = moved ? graph_reorder(g, order) : 0;
  if (rc) snprintf(err, nerr, "%s", g->err);
  free(order);
  return rc ? -1 : 0;
}

/* Whether any op of o's launch (its fused group) reads or writes tensor a or b. */
static bool group_touches(const Graph *g, const Fusions *fz, int o, int a, int b) {
  int first, last;
  fuse_group(fz, o, &first, &last);
  if (first > o || last < o) first = last = o;
  for (int w = first; w <= last; w++) {
    const Op *op = &g->op[w];
    for (int j = 0; j < op->nin + op->nout; j++) {
      int t = j < op->nin ? op->in[j] : op->out[j - op->nin];
      if (t == a || t == b) return true;
    }
  }
  return false;
}

/* The scope instance holding schedule position i, -1 none. */
static int scope_at(const ScopeResult *sr, int i) {
  for (int k = 0; sr && k < sr->n; k++)
    if (sr->s[k].first <= i && i <= sr->s[k].last) return k;
  return -1;
}

static bool fires_bucket(const Schedule *sc, int o) {
  for (int k = 0; k < sc->nb; k++)
    if (sc->b[k].fire_op == o) return true;
  return false;
}

int comm_overlap_windows(const Graph *g, const Fusions *fz, const ScopeResult *sr, Schedule *sc, char *err,
                         size_t nerr) {
  free(sc->comm_end);
  sc->comm_end = malloc(((size_t)g->nop + 1) * sizeof *sc->comm_end);
  int *pos = malloc(((size_t)sc->nops + 1) * sizeof *pos); /* program point -> schedule position */
  if (!sc->comm_end || !pos) {
    free(pos);
    return snprintf(err, nerr, "out of memory"), -1;
  }
  for (int o = 0; o < g->nop; o++)
    sc->comm_end[o] = -1;
  int np = 0, micro = 0;
  for (int i = 0; i < sc->n; i++)
    if (sc->it[i].kind == SCHED_OP) {
      if (i < sc->micro_end) micro = np + 1;
      pos[np++] = i;
    }
  sc->ncomm = 0;
  for (int q = 0; q < micro; q++) {
    int o = sc->it[pos[q]].id;
    const Op *s = &g->op[o];
    if (!overlappable(g, s)) continue;
    int scope = scope_at(sr, pos[q]), end = q;
    for (int r = q + 1; r < micro; r++) {
      int w = sc->it[pos[r]].id;
      if (collective(&g->op[w]) || attention(g->op[w].kind) || fires_bucket(sc, w) ||
          scope_at(sr, pos[r]) != scope || group_touches(g, fz, w, s->in[0], s->out[0]))
        break;
      end = r;
    }
    if (end == q) continue;
    sc->comm_end[o] = end;
    sc->ncomm++;
    q = end; /* windows do not nest */
  }
  free(pos);
  return 0;
}
