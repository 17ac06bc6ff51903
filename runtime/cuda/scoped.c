/* scoped.c — per-module scoped CUDA graphs (see scoped.h).
 *
 * The micro program (program points [0, micro_points)) is a list of segments in order: an eager
 * run of op ids, or one scope instance. The executor launches ops in graph order and the micro
 * program is that order, so each segment is an op-id range run with the micro phases. */
#include "runtime/cuda/scoped.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int first, last; /* op ids, inclusive */
  int inst;        /* scope instance index, or -1 for an eager run */
  int last_point;  /* the micro program point of `last` */
} Seg;

typedef struct {
  int first, last; /* op ids of the instance */
  Phase phase;
  int nlaunch;     /* ops in it that launch something; 0: no graph */
  RtGraph gr;
} Inst;

struct RtScoped {
  RtDevice *d;
  RtExec *x;
  Seg *seg;
  int nseg;
  Inst *inst;
  int ninst;
  int nmb, nops;
  int eager_ops;
  int captured;
  RtOpsRunner run; /* launches an op range (rt_scoped_set_runner) */
  void *run_ctx;
};

static int run_dispatch(void *ctx, int first, int last, uint32_t phases) { return rt_exec_enqueue_ops(ctx, first, last, phases); }

void rt_scoped_set_runner(RtScoped *s, RtOpsRunner run, void *ctx) {
  s->run = run ? run : run_dispatch;
  s->run_ctx = run ? ctx : s->x;
}

static const uint32_t MICRO_PHASES =
    IR_PHASE_BIT(IR_PHASE_FORWARD) | IR_PHASE_BIT(IR_PHASE_BACKWARD) | IR_PHASE_BIT(IR_PHASE_REPLAY);

void rt_scoped_free(RtScoped *s) {
  if (!s) return;
  for (int i = 0; i < s->ninst; i++) rt_graph_destroy(s->d, &s->inst[i].gr);
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

RtScoped *rt_scoped_new(RtDevice *d, RtExec *x, const Graph *g, const int32_t *point_op, int micro_points,
                        const ImgScope *scope, int nscope, char *err, size_t nerr) {
  RtScoped *s = calloc(1, sizeof *s);
  int *inst_at = malloc((size_t)(micro_points + 1) * sizeof *inst_at);
  if (!s || !inst_at || !(s->inst = calloc((size_t)nscope + 1, sizeof *s->inst))) {
    free(inst_at), free(s);
    snprintf(err, nerr, "out of memory");
    return NULL;
  }
  s->d = d, s->x = x, s->ninst = nscope, s->nops = g->nop;
  s->run = run_dispatch, s->run_ctx = x;
  s->nmb = g->num_microbatches > 0 ? g->num_microbatches : 1;
  for (int i = 0; i < micro_points; i++) inst_at[i] = -1;
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
        snprintf(err, nerr, "CUDA-graph scopes %s and %s of layer %d overlap; choose model.cuda_graph_modules whose scopes are "
                 "disjoint", ir_scope_name(scope[inst_at[i]].scope), ir_scope_name(si->scope), si->layer);
        goto fail;
      }
      inst_at[i] = k;
      int o = point_op[i];
      if (in->first < 0) in->first = o;
      in->last = o;
      in->nlaunch += rt_exec_op_runs(x, o);
    }
  }
  /* segments in program order; op ids must rise along the micro program (the executor's order) */
  Seg cur = {.first = -1, .inst = -1};
  int prev = -1;
  for (int i = 0; i < micro_points; i++) {
    int o = point_op[i], k = inst_at[i];
    if (o <= prev) {
      snprintf(err, nerr, "the micro-batch program is not in graph order at op %d (%s)", o, g->op[o].tags.module);
      goto fail;
    }
    prev = o;
    if (cur.first >= 0 && cur.inst != k) {
      if (push_seg(s, cur)) goto oom;
      cur.first = -1;
    }
    if (cur.first < 0) cur = (Seg){.first = o, .inst = k};
    cur.last = o, cur.last_point = i;
    if (k < 0) s->eager_ops += rt_exec_op_runs(x, o);
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
    int rc = s->run(s->run_ctx, in->first, in->last, MICRO_PHASES);
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
    if (rt_exec_micro_begin(s->x, mb)) return RT_ERROR;
    int done = -1; /* the last point of the segments enqueued so far */
    for (int i = 0; i < s->nseg; i++) {
      const Seg *sg = &s->seg[i];
      int rc = sg->inst < 0 ? s->run(s->run_ctx, sg->first, sg->last, MICRO_PHASES)
               : s->inst[sg->inst].nlaunch ? rt_graph_launch(s->d, &s->inst[sg->inst].gr)
                                           : RT_OK;
      if (rc || (after && after(ctx, mb, done + 1, sg->last_point))) return RT_ERROR;
      done = sg->last_point;
    }
    if (rt_exec_micro_end(s->x, mb)) return RT_ERROR;
  }
  return RT_OK;
}

int rt_scoped_enqueue_step(RtScoped *s) {
  if (rt_scoped_enqueue_micro(s, NULL, NULL)) return RT_ERROR;
  return s->run(s->run_ctx, 0, s->nops - 1, IR_PHASE_BIT(IR_PHASE_REDUCE) | IR_PHASE_BIT(IR_PHASE_OPTIMIZER));
}

void rt_scoped_stats(const RtScoped *s, RtScopedStats *st) {
  memset(st, 0, sizeof *st);
  st->eager_ops = s->eager_ops;
  for (int k = 0; k < s->ninst; k++) {
    const Inst *in = &s->inst[k];
    st->graphed_ops += in->nlaunch;
    if (!in->nlaunch || !in->gr.exec) continue;
    st->graphs++;
    if (in->phase == IR_PHASE_FORWARD) st->forward++;
    else st->backward++;
    st->nodes += (long)in->gr.nodes;
  }
}
