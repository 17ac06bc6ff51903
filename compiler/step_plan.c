/* step_plan.c — the planned step shared by the runtimes and step.c's generator (step_plan.h). */
#include "step_plan.h"

#include <string.h>

#include "fuse.h"
#include "lower.h"
#include "nvrtc.h"
#include "runtime/stepc_gen.h"

int step_plan_build(const Spec *s, int float_bytes, StepPlan *p, char *err, size_t nerr) {
  memset(p, 0, sizeof *p);
  int rc = lower_step(s, &p->g, err, nerr);
  if (rc != LOWER_OK) return rc;
  /* the recipe's graph scopes pin their static outputs whichever mode runs, so an eager run of a
   * scoped recipe runs at the very offsets its graphs do */
  RecomputeConfig cfg;
  recompute_config_from_spec(s, &cfg);
  if (recompute_apply(p->g, &cfg, &p->rr, err, nerr) != 0 || schedule_build(p->g, s, &p->sc, err, nerr) != 0 ||
      scope_build(p->g, s, &p->sc, &p->sr, err, nerr) != 0 || fuse_build(p->g, &p->ew, err, nerr) != 0 ||
      schedule_bucket_fire(p->g, &p->sc, err, nerr) != 0 ||
      memplan_build(p->g, &p->sc, &p->sr, float_bytes, &p->mp, err, nerr) != 0 ||
      memplan_verify(p->g, &p->mp, err, nerr) != 0)
    return -1;
  memplan_apply(p->g, &p->mp);
  return fuse_verify(p->g, err, nerr);
}

void step_plan_free(StepPlan *p) {
  memplan_free(&p->mp);
  ew_kernels_free(&p->ew);
  scope_free(&p->sr);
  schedule_free(&p->sc);
  recompute_result_free(&p->rr);
  graph_free(p->g);
  memset(p, 0, sizeof *p);
}

static bool in_micro(Phase ph) { return ph == IR_PHASE_FORWARD || ph == IR_PHASE_BACKWARD || ph == IR_PHASE_REPLAY; }

static uint64_t mix(uint64_t h, const void *p, size_t n) { return cubin_fnv1a(h, p, n); }

static uint64_t mix_tensor(uint64_t h, const Tensor *t) {
  int32_t v[3] = {t->dtype, t->role, t->ndim};
  h = mix(h, v, sizeof v);
  h = mix(h, t->shape, sizeof t->shape);
  return mix(h, t->name, strlen(t->name));
}

uint64_t step_fingerprint(const Graph *g) {
  uint64_t h = CUBIN_FNV_OFFSET;
  int32_t head[3] = {STEPC_GEN_ABI, g->nop, g->num_microbatches};
  h = mix(h, head, sizeof head);
  for (int pass = 0; pass < 2; pass++)
    for (int o = 0; o < g->nop; o++) {
      const Op *op = &g->op[o];
      if (in_micro(op->tags.phase) != (pass == 0)) continue;
      int32_t v[5] = {o, op->kind, op->tags.phase, op->nin, op->nout};
      h = mix(h, v, sizeof v);
      h = mix(h, op->tags.module, strlen(op->tags.module));
      h = mix(h, op->a.i, sizeof op->a.i);
      h = mix(h, op->a.f, sizeof op->a.f);
      for (int i = 0; i < op->nin; i++) h = mix_tensor(h, &g->t[op->in[i]]);
      for (int i = 0; i < op->nout; i++) h = mix_tensor(h, &g->t[op->out[i]]);
    }
  return h;
}
