/* step_plan.h — the planned step as the runtimes run it and as `stepc build` writes it: lowered,
 * recompute applied, scheduled, graph scopes built (their static outputs pinned), memory planned
 * and the plan applied to the graph. One function, so the CUDA trainer, the CPU API and step.c's
 * generator cannot drift apart. */
#ifndef STEPC_STEP_PLAN_H
#define STEPC_STEP_PLAN_H

#include <stdint.h>

#include "ew_fuse.h"
#include "plan.h"

typedef struct {
  Graph *g;
  RecomputeResult rr;
  Schedule sc;
  ScopeResult sr;
  EwKernels ew;  /* the generated kernels of the fused chains (fuse.h) */
  MemPlan mp;
} StepPlan;

/* float_bytes: 0 nominal dtypes (the GPU), 4 the CPU's fp32. 0, -1 with err, or -2
 * (LOWER_UNSUPPORTED: an architecture not lowered yet) with err; free with step_plan_free (also
 * after a failure). */
int step_plan_build(const Spec *s, int float_bytes, StepPlan *p, char *err, size_t nerr);
void step_plan_free(StepPlan *p);

/* A hash of the op sequence in program order (kinds, phases, modules, attributes, tensor
 * shapes and dtypes): equal for the CPU and CUDA plans of one recipe, different when the step
 * changes. Offsets are not in it (the CPU plan is at 4 bytes per float). */
uint64_t step_fingerprint(const Graph *g);

#endif
