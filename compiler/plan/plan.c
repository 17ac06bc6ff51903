/* plan.c — the planning pipeline: lower, recompute, schedule, scopes and their check, fusions,
 * memory plan, per-rank memory, cost (plan.h). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/launch/program.h"
#include "lower/lower.h"
#include "passes/fuse.h"
#include "plan/plan.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The passes from the Spec to the applied memory plan: what a build writes and a run runs. */
static int plan_step(const Spec *s, int float_bytes, Plan *p, DiagList *d, bool checks_only, char *err,
                     size_t nerr) {
  int rc = lower_step(s, &p->g, err, nerr);
  if (rc == LOWER_UNSUPPORTED) return PLAN_UNSUPPORTED;
  if (rc != LOWER_OK) return PLAN_ERROR;
  recompute_config_from_spec(s, &p->rc);
  if (comm_overlap_order(p->g, err, nerr) != 0 || recompute_apply(p->g, &p->rc, &p->rr, err, nerr) != 0 ||
      schedule_build(p->g, s, &p->sc, err, nerr) != 0 || scope_build(p->g, s, &p->sc, &p->sr, err, nerr) != 0)
    return PLAN_ERROR;
  if (d) scope_check(p->g, s, &p->sc, &p->rr, &p->sr, d);
  if (checks_only) return PLAN_OK; /* stepc check: the graph checks need no fusions or memory plan */
  /* the fusions shape the memory plan (fuse.h); the buckets fire after the fused launches */
  if (!(p->fz = fusions_new(p->g))) return PLAN_ERROR;
  p->fz->dp = p->sc.dp;
  if (fuse_build(p->g, p->fz, &p->ew, err, nerr) != 0 ||
      schedule_bucket_fire(p->g, p->fz, &p->sc, err, nerr) != 0 ||
      comm_overlap_windows(p->g, p->fz, &p->sr, &p->sc, err, nerr) != 0 ||
      memplan_build(p->g, p->fz, &p->sc, NULL, float_bytes, &p->mp, err, nerr) != 0 ||
      memplan_verify(p->g, &p->mp, err, nerr) != 0)
    return PLAN_ERROR;
  memplan_apply(p->g, &p->mp);
  return fuse_verify(p->g, p->fz, err, nerr) == 0 ? PLAN_OK : PLAN_ERROR;
}

/* Per-rank memory and cost of the planned step. The per-rank report is Megatron's job, whose TE
 * graphs keep their static outputs for the whole step (STEPC-43): it reads a memory plan with them
 * pinned. stepc's own step (p->mp) frees them after their last reader — every graph replays at its
 * planned point over the plan's offsets, so they are ordinary tensors there. The iterations before
 * the TE graphs are captured run without static buffers: a reading of their own, from p->mp. */
static int plan_report(const Spec *s, int float_bytes, Plan *p, char *err, size_t nerr) {
  cost_device_h200(&p->dev);
  if (cost_build(p->g, p->fz, s, &p->dev, &p->cost) != 0) return PLAN_ERROR;
  bool scoped = p->sr.static_bytes > 0;
  MemPlan pinned;
  if (scoped && memplan_build(p->g, p->fz, &p->sc, &p->sr, float_bytes, &pinned, err, nerr) != 0)
    return PLAN_ERROR;
  int rc = memrank_build(p->g, p->fz, s, &p->sc, &p->sr, scoped ? &pinned : &p->mp, &p->rank, err, nerr);
  if (scoped) memplan_free(&pinned);
  if (rc != 0) return PLAN_ERROR;
  if (!scoped || memrank_capture_iteration(s) <= 1) {
    memrank_readings(s, &p->rank, NULL);
    return PLAN_OK;
  }
  RankReport er;
  if (memrank_build(p->g, p->fz, s, &p->sc, NULL, &p->mp, &er, err, nerr) != 0) return PLAN_ERROR;
  memrank_readings(s, &p->rank, &er);
  return PLAN_OK;
}

/* The launch program of the CUDA plan (nominal dtypes): every op lowered to its launches, and the
 * scratch they need sized, so that the plan reports every byte the step allocates. */
static int plan_launches(Plan *p, int float_bytes, char *err, size_t nerr) {
  if (float_bytes != 0) return PLAN_OK; /* the CPU executor's plan: the reference interprets the graph */
  int rc = launch_program_build(p->g, p->fz, &p->sc, &p->ew, p->sm_count, &p->lp, p->lp_why, sizeof p->lp_why,
                                err, nerr);
  p->lp_ok = rc == 0;
  return rc < 0 ? PLAN_ERROR : PLAN_OK;
}

const char *program_digest_hex(const LaunchProgram *lp, char hex[17]) {
  uint64_t h = ir_fnv1a(IR_FNV_OFFSET, &lp->f, sizeof lp->f);
  h = ir_fnv1a(h, lp->rec, (size_t)lp->f.nrec * sizeof *lp->rec);
  snprintf(hex, 17, "%016llx", (unsigned long long)h);
  return hex;
}

int64_t plan_device_peak(const Plan *p) {
  int64_t held = p->mp.arena + p->mp.region;
  if (!p->lp_ok) return held;
  return held + p->lp.f.scratch_bytes + RT_BLAS_WORKSPACE_BYTES + p->lp.f.attn_workspace;
}

int plan_build(const Spec *s, int float_bytes, Plan *p, DiagList *d, char *err, size_t nerr) {
  return plan_build_for(s, float_bytes, LAUNCH_DEFAULT_SMS, p, d, err, nerr);
}

int plan_build_for(const Spec *s, int float_bytes, int sm_count, Plan *p, DiagList *d, char *err,
                   size_t nerr) {
  double t0 = now_s();
  memset(p, 0, sizeof *p);
  p->spec = *s;
  /* the step a build runs (its fp8 linears included), the artifact's plan.json's graph, where one
   * rank's step is the whole step; a sharded recipe keeps its one-rank math here (the per-rank report
   * models the shards) */
  if (spec_one_rank_step(s)) p->spec.per_rank = true;
  s = &p->spec;
  p->sm_count = sm_count > 0 ? sm_count : LAUNCH_DEFAULT_SMS;
  err[0] = 0;
  int rc = plan_step(s, float_bytes, p, d, false, err, nerr);
  if (rc == PLAN_OK) rc = plan_launches(p, float_bytes, err, nerr);
  if (rc == PLAN_OK) rc = plan_report(s, float_bytes, p, err, nerr);
  if (rc == PLAN_ERROR && !err[0]) snprintf(err, nerr, "out of memory");
  if (rc != PLAN_OK) {
    plan_free(p);
    return rc;
  }
  p->build_s = now_s() - t0;
  return PLAN_OK;
}

void plan_free(Plan *p) {
  lp_free(&p->lp);
  cost_free(&p->cost);
  memplan_free(&p->mp);
  ew_kernels_free(&p->ew);
  fusions_free(p->fz);
  p->fz = NULL;
  scope_free(&p->sr);
  schedule_free(&p->sc);
  recompute_result_free(&p->rr);
  graph_free(p->g);
  p->g = NULL;
}

int plan_check(const Spec *s, DiagList *d) {
  /* the same passes as plan_build, up to the graph checks */
  Plan *p = calloc(1, sizeof *p);
  char err[512] = "";
  int rc = p ? plan_step(s, 0, p, d, true, err, sizeof err) : PLAN_ERROR;
  if (rc == PLAN_ERROR && !err[0]) snprintf(err, sizeof err, "out of memory");
  if (p) plan_free(p);
  free(p);
  if (rc == PLAN_OK) return PLAN_OK;
  Diag *n = diag_add(
      d, DIAG_NOTE, "STEPC-44", "model", s->recipe_path,
      "the graph checks (checkpoint regions against CUDA-graph scopes, STEPC-40..43) did not run: %s", err);
  if (n)
    diag_hint(
        n, rc == PLAN_UNSUPPORTED
               ? "the field rules above still apply; the graph checks run once this architecture is lowered"
               : "report this: planning failed on a recipe the field rules accept");
  return rc;
}
