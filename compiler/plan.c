/* plan.c — the planning pipeline: lower, recompute, schedule, scopes and their check, fusions,
 * memory plan, per-rank memory, cost (plan.h). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fuse.h"
#include "lower.h"
#include "plan.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int plan_build(const Spec *s, int float_bytes, Plan *p, DiagList *d, char *err, size_t nerr) {
  double t0 = now_s();
  memset(p, 0, sizeof *p);
  p->spec = *s;
  int rc = lower_step(s, &p->g, err, nerr);
  if (rc == LOWER_UNSUPPORTED) return PLAN_UNSUPPORTED;
  if (rc != LOWER_OK) return PLAN_ERROR;
  recompute_config_from_spec(s, &p->rc);
  if (recompute_apply(p->g, &p->rc, &p->rr, err, nerr) != 0 || schedule_build(p->g, s, &p->sc, err, nerr) != 0 ||
      scope_build(p->g, s, &p->sc, &p->sr, err, nerr) != 0) {
    plan_free(p);
    return PLAN_ERROR;
  }
  if (d) scope_check(p->g, s, &p->sc, &p->rr, &p->sr, d);
  /* the fusions shape the memory plan (fuse.h): the reported plan is the one a build runs */
  EwKernels ew = {0};
  int frc = fuse_build(p->g, &ew, err, nerr);
  ew_kernels_free(&ew);
  if (frc != 0) {
    plan_free(p);
    return PLAN_ERROR;
  }
  cost_device_h200(&p->dev);
  if (memplan_build(p->g, &p->sc, &p->sr, float_bytes, &p->mp, err, nerr) != 0 ||
      memrank_build(p->g, s, &p->sc, &p->sr, &p->mp, &p->rank, err, nerr) != 0 || cost_build(p->g, s, &p->dev, &p->cost) != 0) {
    if (!err[0]) snprintf(err, nerr, "out of memory");
    plan_free(p);
    return PLAN_ERROR;
  }
  /* the iterations before the TE graphs are captured run the same step without static buffers */
  if (p->sr.static_bytes > 0 && memrank_capture_iteration(s) > 1) {
    MemPlan em;
    RankReport er;
    int erc = memplan_build(p->g, &p->sc, NULL, float_bytes, &em, err, nerr);
    if (erc == 0) erc = memrank_build(p->g, s, &p->sc, NULL, &em, &er, err, nerr), memplan_free(&em);
    if (erc != 0) {
      if (!err[0]) snprintf(err, nerr, "out of memory");
      plan_free(p);
      return PLAN_ERROR;
    }
    memrank_readings(s, &p->rank, &er);
  } else {
    memrank_readings(s, &p->rank, NULL);
  }
  p->build_s = now_s() - t0;
  return PLAN_OK;
}

void plan_free(Plan *p) {
  cost_free(&p->cost);
  memplan_free(&p->mp);
  scope_free(&p->sr);
  schedule_free(&p->sc);
  recompute_result_free(&p->rr);
  graph_free(p->g);
  p->g = NULL;
}

int plan_check(const Spec *s, DiagList *d) {
  Graph *g = NULL;
  char err[512] = "";
  int rc = lower_step(s, &g, err, sizeof err);
  if (rc != LOWER_OK) {
    Diag *n = diag_add(d, DIAG_NOTE, "STEPC-44", "model", s->recipe_path,
                       "the graph checks (checkpoint regions against CUDA-graph scopes, STEPC-40..43) did not run: %s", err);
    if (n) diag_hint(n, "the field rules above still apply; the graph checks run once this architecture is lowered");
    return rc == LOWER_UNSUPPORTED ? PLAN_UNSUPPORTED : PLAN_ERROR;
  }
  RecomputeConfig c;
  RecomputeResult rr;
  Schedule sc;
  ScopeResult sr;
  recompute_config_from_spec(s, &c);
  if (recompute_apply(g, &c, &rr, err, sizeof err) != 0) {
    graph_free(g);
    Diag *n = diag_add(d, DIAG_NOTE, "STEPC-44", "model", s->recipe_path, "the graph checks did not run: %s", err);
    if (n) diag_hint(n, "report this: recompute placement failed on a graph that lowered");
    return PLAN_ERROR;
  }
  rc = PLAN_ERROR;
  if (schedule_build(g, s, &sc, err, sizeof err) == 0) {
    if (scope_build(g, s, &sc, &sr, err, sizeof err) == 0) {
      scope_check(g, s, &sc, &rr, &sr, d);
      scope_free(&sr);
      rc = PLAN_OK;
    }
    schedule_free(&sc);
  }
  if (rc != PLAN_OK) {
    Diag *n = diag_add(d, DIAG_NOTE, "STEPC-44", "model", s->recipe_path, "the graph checks did not run: %s", err);
    if (n) diag_hint(n, "report this: scheduling failed on a graph that lowered");
  }
  recompute_result_free(&rr);
  graph_free(g);
  return rc;
}
