/* scoped.c — per-module scoped CUDA graphs (see scoped.h).
 *
 * The micro program (program points [0, micro_points)) is a list of segments in order: an eager
 * run of points, or one scope instance; each is a point range the player plays. */
#include "runtime/cuda/scoped.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int first, last; /* micro program points, inclusive */
  int inst;        /* scope instance index, or -1 for an eager run */
} Seg;

typedef struct {
  int first, last; /* program points of the instance */
  Phase phase;
  int nlaunch; /* points in it that launch something; 0: no graph */
  RtGraph gr;
} Inst;

struct RtScoped {
  RtDevice *d;
  RtPlayer *x;
  Seg *seg;
  int nseg;
  Inst *inst;
  int ninst;
  int nmb, micro_points, npoints;
  int eager_ops;
  int captured;
};

/* Points first..last, in order. */
static int play_points(RtScoped *s, int first, int last) {
  for (int q = first; q <= last; q++)
    if (rt_player_point(s->x, q)) return RT_ERROR;
  return RT_OK;
}

static int launches(const RtScoped *s, int q) { return rt_player_program(s->x)->point[q].rec.count > 0; }

void rt_scoped_free(RtScoped *s) {
  if (!s) return;
  for (int i = 0; i < s->ninst; i++)
    rt_graph_destroy(s->d, &s->inst[i].gr);
  free(s->seg), free(s->inst);
  free(s);
}

static int push_seg(RtScoped *s, Seg sg) {
  Seg *n = realloc(s->seg, (size_t)(s->nseg + 1) * sizeof *n);
  if (!n) return -1;
  s->seg = n;
  s->seg[s->nseg++] = sg;
  return 0;
}

RtScoped *rt_scoped_new(RtDevice *d, RtPlayer *x, const Graph *g, int micro_points, int npoints,
                        const ImgScope *scope, int nscope, char *err, size_t nerr) {
  RtScoped *s = calloc(1, sizeof *s);
  int *inst_at = malloc((size_t)(micro_points + 1) * sizeof *inst_at);
  if (!s || !inst_at || !(s->inst = calloc((size_t)nscope + 1, sizeof *s->inst))) {
    free(inst_at), free(s);
    snprintf(err, nerr, "out of memory");
    return NULL;
  }
  s->d = d, s->x = x, s->ninst = nscope, s->micro_points = micro_points, s->npoints = npoints;
  s->nmb = g->num_microbatches > 0 ? g->num_microbatches : 1;
  for (int i = 0; i < micro_points; i++)
    inst_at[i] = -1;
  for (int k = 0; k < nscope; k++) {
    const ImgScope *si = &scope[k];
    if (si->scope < 0 || si->first < 0 || si->last >= micro_points || si->last < si->first) {
      snprintf(err, nerr, "scope instance %d is not a per-layer scope of the micro-batch program", k);
      goto fail;
    }
    Inst *in = &s->inst[k];
    in->first = -1, in->phase = (Phase)si->phase;
    for (int i = si->first; i <= si->last; i++) {
      if (inst_at[i] >= 0) {
        /* e.g. transformer_engine with moe and moe_router: one op in two graphs cannot be run */
        snprintf(err, nerr,
                 "CUDA-graph scopes %s and %s of layer %d overlap; choose model.cuda_graph_modules whose "
                 "scopes are "
                 "disjoint",
                 ir_scope_name(scope[inst_at[i]].scope), ir_scope_name(si->scope), si->layer);
        goto fail;
      }
      inst_at[i] = k;
      if (in->first < 0) in->first = i;
      in->last = i;
      in->nlaunch += launches(s, i);
    }
  }
  /* segments in program order */
  Seg cur = {.first = -1, .inst = -1};
  for (int i = 0; i < micro_points; i++) {
    int k = inst_at[i];
    if (cur.first >= 0 && cur.inst != k) {
      if (push_seg(s, cur)) goto oom;
      cur.first = -1;
    }
    if (cur.first < 0) cur = (Seg){.first = i, .inst = k};
    cur.last = i;
    if (k < 0) s->eager_ops += launches(s, i);
  }
  if (cur.first >= 0 && push_seg(s, cur)) goto oom;
  free(inst_at);
  return s;
oom:
  snprintf(err, nerr, "out of memory");
fail:
  free(inst_at);
  rt_scoped_free(s);
  return NULL;
}

int rt_scoped_capture(RtScoped *s) {
  if (s->captured) return RT_OK;
  for (int k = 0; k < s->ninst; k++) {
    Inst *in = &s->inst[k];
    if (!in->nlaunch) continue; /* every op fused away: nothing to capture or launch */
    if (rt_capture_begin(s->d)) return RT_ERROR;
    int rc = play_points(s, in->first, in->last);
    /* end the capture even when an op failed, so that the stream leaves capture mode */
    RtGraph gr = {0};
    int rc2 = rt_capture_end(s->d, &gr);
    if (rc || rc2) {
      rt_graph_destroy(s->d, &gr);
      return RT_ERROR;
    }
    in->gr = gr;
  }
  s->captured = 1;
  return RT_OK;
}

int rt_scoped_enqueue_micro(RtScoped *s, RtSegmentHook after, void *ctx) {
  if (!s->captured) return rt_fail(s->d, "scoped graphs: enqueue before capture");
  for (int mb = 0; mb < s->nmb; mb++) {
    if (rt_player_micro_begin(s->x, mb)) return RT_ERROR;
    for (int i = 0; i < s->nseg; i++) {
      const Seg *sg = &s->seg[i];
      int rc = sg->inst < 0                ? play_points(s, sg->first, sg->last)
               : s->inst[sg->inst].nlaunch ? rt_graph_launch(s->d, &s->inst[sg->inst].gr)
                                           : RT_OK;
      if (rc || (after && after(ctx, mb, sg->first, sg->last))) return RT_ERROR;
    }
    if (rt_player_micro_end(s->x, mb)) return RT_ERROR;
  }
  return RT_OK;
}

int rt_scoped_enqueue_step(RtScoped *s) {
  if (rt_scoped_enqueue_micro(s, NULL, NULL)) return RT_ERROR;
  return play_points(s, s->micro_points, s->npoints - 1);
}

void rt_scoped_stats(const RtScoped *s, RtScopedStats *st) {
  memset(st, 0, sizeof *st);
  st->eager_ops = s->eager_ops;
  for (int k = 0; k < s->ninst; k++) {
    const Inst *in = &s->inst[k];
    st->graphed_ops += in->nlaunch;
    if (!in->nlaunch || !in->gr.exec) continue;
    st->graphs++;
    if (in->phase == IR_PHASE_FORWARD)
      st->forward++;
    else
      st->backward++;
    st->nodes += (long)in->gr.nodes;
  }
}
