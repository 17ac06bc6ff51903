/* program.h — runs a planned step on the CPU reference executor in program order, poisoning
 * (NaN bytes) every freed arena range between its last use and its reuse: a plan that frees too
 * early, or a replay that misses a tensor, turns the loss or a gradient into NaN or changes it.
 *
 * The program is the step's order (point -> op id, the micro-batch points first) and, per point,
 * the tensors whose slots die after it; an artifact carries both (runtime/image.h), and the
 * compiler builds them from its schedule and memory plan (compiler/plan/plan.h: plan_program_build). */
#ifndef STEPC_CPU_PROGRAM_H
#define STEPC_CPU_PROGRAM_H

#include <stdint.h>

#include "runtime/cpu/data.h"
#include "runtime/cpu/exec.h"

typedef struct {
  int npoints, micro_points;
  const int32_t *point_op;     /* npoints */
  const int32_t *poison_start; /* npoints + 1, or NULL: nothing is poisoned */
  const int32_t *poison;
} CpuProgram;

typedef struct PlanExec PlanExec;

/* g carries its memory plan. The program's arrays must outlive the executor. NULL with err. */
PlanExec *plan_exec_new(const Graph *g, const CpuProgram *prog, int nthreads, char *err, size_t nerr);
void plan_exec_free(PlanExec *x);
CpuExec *plan_exec_cpu(PlanExec *x);
/* Fills the inputs from d, sets the RNG key (seed, step, micro) and runs the micro program;
 * *loss receives the micro-batch's loss. 0, or -1 with err. */
int plan_exec_micro(PlanExec *x, CpuData *d, uint64_t seed, int64_t step, int64_t micro, double *loss,
                    char *err, size_t nerr);
/* The same in pieces, for a driver that runs program points itself (runtime/api_cpu.c): fill the
 * inputs and set the RNG key; then run points [0, micro_points) per micro-batch and
 * [micro_points, points) once per step. */
int plan_exec_begin_micro(PlanExec *x, CpuData *d, uint64_t seed, int64_t step, int64_t micro, char *err,
                          size_t nerr);
int plan_exec_micro_points(const PlanExec *x);
int plan_exec_points(const PlanExec *x);
void plan_exec_point(PlanExec *x, int q);
/* Point q's op as an evaluation runs it (dropout off: cpu_exec_run_op_eval), then the ranges that die
 * after it poisoned as plan_exec_point does. 0, or -1 (its random numbers cannot be turned off). */
int plan_exec_point_eval(PlanExec *x, int q);
/* Runs the tail (reduction, clipping, optimizer). */
void plan_exec_tail(PlanExec *x);
/* Freed bytes poisoned so far. */
int64_t plan_exec_poisoned(const PlanExec *x);

#endif
