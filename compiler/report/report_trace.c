/* report_trace.c — a Chrome/Perfetto trace of the planned step: ops on a timeline from the cost
 * model (one track per phase), CUDA-graph scopes and checkpoint regions as slices, gradient
 * buckets as instants, and a live-memory counter. Each op slice carries its bytes, FLOPs and tensor
 * shapes as args; the process is named after the recipe. With many micro-batches the first two and the
 * last are drawn op by op and the others as one slice each, to keep the file small.
 *
 * Times are whole nanoseconds: each op's cost is rounded once, and every start, end and span is a
 * sum of those integers, written as microseconds with exactly three decimals (what a viewer reads
 * back as the same integer). So an op ends exactly where the next begins, and a scope, region or
 * micro-batch that spans ops ends exactly where its last op does: the slices of one track nest or
 * are disjoint by construction (a viewer moves a slice that crosses its predecessor to an overflow
 * track). An op the cost model charges nothing (an absorbed op, a view) is an instant, not a slice
 * of zero or a made-up duration. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report/report.h"

enum {
  TID_FWD = 1,
  TID_BWD = 2,
  TID_REPLAY = 3,
  TID_TAIL = 4,
  TID_BUCKET = 5,
  TID_SCOPE = 6,
  TID_REGION = 7,
  TID_MICRO = 8
};

static int tid_of(Phase p) {
  return p == IR_PHASE_FORWARD    ? TID_FWD
         : p == IR_PHASE_BACKWARD ? TID_BWD
         : p == IR_PHASE_REPLAY   ? TID_REPLAY
                                  : TID_TAIL;
}

/* An op's cost in whole nanoseconds; one that costs anything takes at least 1. */
static int64_t op_ns(const Plan *p, int op) {
  double t = p->cost.op_time[op] * 1e9;
  if (!(t > 0)) return 0;
  int64_t n = llround(t);
  return n > 0 ? n : 1;
}

/* ns as the trace's microseconds: exact, three decimals. */
static void put_us(FILE *f, const char *key, int64_t ns) {
  fprintf(f, ", \"%s\": %" PRId64 ".%03d", key, ns / 1000, (int)(ns % 1000));
}

/* One slice (an instant when dur is 0); for an op, args with what the cost model charged it and the
 * tensors it reads and writes ("name [d0,d1] dtype"), so that a slice in the viewer says why it
 * takes its time. */
static void slice(FILE *f, bool *first, const char *name, const char *cat, int tid, int64_t ts, int64_t dur,
                  const Graph *g, const Op *op) {
  fprintf(f, "%s\n{\"name\": ", *first ? "" : ",");
  json_write_string(f, name);
  fprintf(f, ", \"cat\": \"%s\", \"ph\": \"%s\", \"pid\": 0, \"tid\": %d", cat, dur > 0 ? "X" : "i", tid);
  put_us(f, "ts", ts);
  if (dur > 0)
    put_us(f, "dur", dur);
  else
    fputs(", \"s\": \"t\"", f);
  if (op) {
    fprintf(f, ", \"args\": {\"op\": \"%s\", \"module\": ", op_name(op->kind));
    json_write_string(f, op->tags.module);
    fprintf(f, ", \"layer\": %d, \"bytes\": %.0f, \"flops\": %.0f", op->tags.layer, op_bytes(g, op),
            op_flops(g, op));
    for (int io = 0; io < 2; io++) {
      fprintf(f, ", \"%s\": [", io ? "outputs" : "inputs");
      int n = io ? op->nout : op->nin;
      for (int k = 0; k < n; k++) {
        const Tensor *t = &g->t[io ? op->out[k] : op->in[k]];
        char desc[IR_NAME_MAX + 96];
        size_t u = (size_t)snprintf(desc, sizeof desc, "%s [", t->name);
        for (int d = 0; d < t->ndim && u < sizeof desc; d++)
          u += (size_t)snprintf(desc + u, sizeof desc - u, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        if (u < sizeof desc) snprintf(desc + u, sizeof desc - u, "] %s", dtype_name(t->dtype));
        if (k) fputs(", ", f);
        json_write_string(f, desc);
      }
      fputc(']', f);
    }
    fputc('}', f);
  }
  fputc('}', f);
  *first = false;
}

int report_trace(const Plan *p, FILE *f) {
  const Graph *g = p->g;
  const Schedule *sc = &p->sc;
  int64_t *start = malloc((size_t)(sc->n + 1) * sizeof *start);
  if (!start) return -1;
  bool first = true;
  fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [");
  /* the process row is named after the recipe, so that two traces opened together tell apart */
  fprintf(f, "\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": {\"name\": ");
  char pname[SPEC_MAX_STR + 32];
  snprintf(pname, sizeof pname, "stepc plan: %s", p->spec.recipe_path);
  json_write_string(f, pname);
  fprintf(f, "}}");
  first = false;
  static const char *const TN[] = {"",
                                   "forward",
                                   "backward",
                                   "replay",
                                   "reduce + optimizer",
                                   "gradient buckets",
                                   "CUDA-graph scopes",
                                   "checkpoint regions",
                                   "micro-batches"};
  for (int t = 1; t <= TID_MICRO; t++) {
    fprintf(f,
            ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, \"args\": {\"name\": "
            "\"%s\"}}",
            t, TN[t]);
  }
  int64_t ts = 0, micro_ns = 0;
  for (int i = 0; i < sc->micro_end; i++)
    if (sc->it[i].kind == SCHED_OP) micro_ns += op_ns(p, sc->it[i].id);
  for (int m = 0; m < sc->nmicro; m++) {
    bool detail = m < 2 || m == sc->nmicro - 1;
    char nm[64];
    snprintf(nm, sizeof nm, "micro-batch %d", m);
    slice(f, &first, nm, "micro", TID_MICRO, ts, micro_ns, g, NULL);
    if (!detail) {
      ts += micro_ns;
      continue;
    }
    int q = 0;
    for (int i = 0; i < sc->micro_end; i++) {
      start[i] = ts;
      if (sc->it[i].kind == SCHED_BUCKET) {
        if (m == sc->nmicro - 1) {
          fprintf(
              f,
              ",\n{\"name\": \"bucket %d (%.1f MB)\", \"ph\": \"i\", \"s\": \"t\", \"pid\": 0, \"tid\": %d",
              sc->it[i].id, (double)sc->b[sc->it[i].id].bytes / 1e6, TID_BUCKET);
          put_us(f, "ts", ts);
          fputc('}', f);
        }
        continue;
      }
      const Op *op = &g->op[sc->it[i].id];
      int64_t dur = op_ns(p, sc->it[i].id);
      char name[200];
      snprintf(name, sizeof name, "%s %s", op_name(op->kind), op->tags.module);
      slice(f, &first, name, phase_name(op->tags.phase), tid_of(op->tags.phase), ts, dur, g, op);
      fprintf(f, ",\n{\"name\": \"live GB\", \"ph\": \"C\", \"pid\": 0");
      put_us(f, "ts", ts);
      fprintf(f, ", \"args\": {\"live\": %.4f}}", (double)p->mp.live[q] / 1e9);
      ts += dur;
      q++;
    }
    for (int i = 0; i < p->sr.n && m == 0; i++) {
      const ScopeInst *s = &p->sr.s[i];
      if (s->scope < 0 || s->last >= sc->micro_end) continue;
      char n2[80];
      snprintf(n2, sizeof n2, "graph %s L%d (%s)", ir_scope_name(s->scope), s->layer,
               s->phase == IR_PHASE_FORWARD ? "fwd" : "bwd");
      int64_t end = s->last + 1 < sc->micro_end ? start[s->last + 1] : ts;
      slice(f, &first, n2, "scope", TID_SCOPE, start[s->first], end - start[s->first], g, NULL);
    }
    for (int i = 0; i < p->rr.n && m == 0; i++) {
      const Region *r = &p->rr.r[i];
      char rn[64], n2[96];
      recompute_region_name(r, rn, sizeof rn);
      int a = sc->pos[r->first], b = sc->pos[r->last];
      snprintf(n2, sizeof n2, "region %s", rn);
      slice(f, &first, n2, "region", TID_REGION, start[a],
            (b + 1 < sc->micro_end ? start[b + 1] : ts) - start[a], g, NULL);
      if (r->replay_first >= 0 && r->outer == i) {
        a = sc->pos[r->replay_first], b = sc->pos[r->replay_last];
        snprintf(n2, sizeof n2, "replay %s", rn);
        slice(f, &first, n2, "region", TID_REGION, start[a],
              (b + 1 < sc->micro_end ? start[b + 1] : ts) - start[a], g, NULL);
      }
    }
  }
  for (int i = sc->micro_end; i < sc->n; i++)
    if (sc->it[i].kind == SCHED_OP) {
      const Op *op = &g->op[sc->it[i].id];
      int64_t dur = op_ns(p, sc->it[i].id);
      char name[200];
      snprintf(name, sizeof name, "%s %s", op_name(op->kind), op->tags.module);
      slice(f, &first, name, phase_name(op->tags.phase), TID_TAIL, ts, dur, g, op);
      ts += dur;
    }
  if (p->sr.impl == SCOPE_FULL_ITERATION)
    slice(f, &first, "graph full_iteration (whole step)", "scope", TID_SCOPE, 0, ts, g, NULL);
  fprintf(f, "\n]}\n");
  free(start);
  return 0;
}
