/* step_emit.h — the host step as C (step.c of an artifact) and what ties it to a runtime step.
 *
 * step.c is the planned step written out: one stepc_gen_op() call per scheduled op in plan order
 * (runtime/stepc_gen.h is the contract), each with its op id, kind and first output's arena
 * offset as literals and its tensors (name, shape, dtype, arena offset), attributes and CUDA
 * kernels in a comment above it. */
#ifndef STEPC_STEP_EMIT_H
#define STEPC_STEP_EMIT_H

#include <stdint.h>
#include <stdio.h>

#include "plan.h"

/* The step as the runtimes build it (rt_trainer_new, the CPU executor): lowered, recompute
 * applied, scheduled, memory planned at float_bytes (0 nominal, 4 the CPU's fp32) and the plan
 * applied to g. 0, or -1 / LOWER_UNSUPPORTED-style code with err; free with step_plan_free. */
typedef struct {
  Graph *g;
  RecomputeResult rr;
  Schedule sc;
  MemPlan mp;
} StepPlan;
int step_plan_build(const Spec *s, int float_bytes, StepPlan *p, char *err, size_t nerr);
void step_plan_free(StepPlan *p);

/* A hash of the op sequence in program order (kinds, phases, modules, attributes, tensor
 * shapes and dtypes): equal for the CPU and CUDA plans of one recipe, different when the step
 * changes. Offsets are not in it (the CPU plan is at 4 bytes per float). */
uint64_t step_fingerprint(const Graph *g);

/* The CUDA kernels (kernels/kernel_list.h names) that the executor launches for op, at most max;
 * returns how many. GEMMs (cuBLASLt) and memsets launch none of ours. */
int step_op_kernels(const Graph *g, const Op *op, const char **names, int max);

/* Writes step.c for the nominal-dtype plan p (step_plan_build(s, 0, ...)). 0, or -1 on a write
 * error. recipe: the name to record. */
int step_emit_c(const StepPlan *p, const char *recipe, FILE *f);

#endif
