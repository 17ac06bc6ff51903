/* program.c — the step's program for the runtime (plan.h: plan_program_build): the schedule's
 * ops as program points, and which slots die after each point (the CPU executor poisons them). */
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

int plan_program_build(const Graph *g, const Schedule *sc, const MemPlan *mp, PlanProgram *out) {
  memset(out, 0, sizeof *out);
  int np = sc->nops;
  out->point_op = malloc((size_t)(np + 1) * sizeof *out->point_op);
  out->poison_start = calloc((size_t)np + 2, sizeof *out->poison_start);
  out->poison = malloc((size_t)(g->nt + 1) * sizeof *out->poison);
  int *slot_end = malloc((size_t)(g->nt + 1) * sizeof *slot_end),
      *rep = malloc((size_t)(g->nt + 1) * sizeof *rep);
  if (!out->point_op || !out->poison_start || !out->poison || !slot_end || !rep) {
    free(slot_end), free(rep);
    plan_program_free(out);
    return -1;
  }
  int p = 0, micro = 0;
  for (int i = 0; i < sc->n; i++)
    if (sc->it[i].kind == SCHED_OP) {
      out->point_op[p++] = sc->it[i].id;
      if (i < sc->micro_end) micro = p;
    }
  out->p.npoints = np, out->p.micro_points = micro, out->p.point_op = out->point_op;
  if (mp) {
    /* a slot dies at the last point any member is live; poison it once, through its largest member */
    for (int s = 0; s < g->nt; s++)
      slot_end[s] = -1, rep[s] = -1;
    for (int t = 0; t < g->nt; t++) {
      int s = mp->slot[t];
      if (s < 0) continue; /* the optimizer-state region: never freed */
      if (mp->end[t] > slot_end[s]) slot_end[s] = mp->end[t];
      if (rep[s] < 0 || mp->size[t] > mp->size[rep[s]]) rep[s] = t;
    }
    for (int s = 0; s < g->nt; s++)
      if (rep[s] >= 0 && slot_end[s] < np - 1) out->poison_start[slot_end[s] + 1]++;
    for (int q = 0; q < np; q++)
      out->poison_start[q + 1] += out->poison_start[q];
    int *fill = malloc((size_t)(np + 1) * sizeof *fill);
    if (!fill) {
      free(slot_end), free(rep);
      plan_program_free(out);
      return -1;
    }
    for (int q = 0; q <= np; q++)
      fill[q] = out->poison_start[q];
    for (int s = 0; s < g->nt; s++)
      if (rep[s] >= 0 && slot_end[s] < np - 1) out->poison[fill[slot_end[s]]++] = rep[s];
    out->npoison = out->poison_start[np];
    free(fill);
    out->p.poison_start = out->poison_start, out->p.poison = out->poison;
  }
  free(slot_end), free(rep);
  return 0;
}

void plan_program_free(PlanProgram *pp) {
  free(pp->point_op), free(pp->poison_start), free(pp->poison);
  memset(pp, 0, sizeof *pp);
}

int plan_scope_points(const Schedule *sc, const ScopeResult *sr, ImgScope *out) {
  int *point_at = malloc((size_t)(sc->n + 1) * sizeof *point_at); /* schedule position -> program point */
  if (!point_at) return -1;
  for (int i = 0, q = 0; i <= sc->n; i++)
    point_at[i] = q, q += i < sc->n && sc->it[i].kind == SCHED_OP;
  int n = 0;
  for (int k = 0; k < sr->n; k++) {
    const ScopeInst *si = &sr->s[k];
    if (si->first < 0 || si->last < si->first || si->last >= sc->n) continue;
    int first = point_at[si->first], last = point_at[si->last + 1] - 1;
    if (last < first) continue; /* no op in it */
    out[n++] = (ImgScope){
        .scope = si->scope, .layer = si->layer, .phase = (int32_t)si->phase, .first = first, .last = last};
  }
  free(point_at);
  return n;
}
