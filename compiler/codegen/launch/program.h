/* program.h — the launch program of a planned step (runtime/program.h), built at compile time:
 * the launch lowering (exec.h) runs on a recording device of the target's SM count, and every
 * record is relocated against the step's one allocation (the plan's buffers, then the launch
 * scratch). */
#ifndef STEPC_CODEGEN_LAUNCH_PROGRAM_H
#define STEPC_CODEGEN_LAUNCH_PROGRAM_H

#include <stddef.h>

#include "ir.h"
#include "passes/ew_fuse.h"
#include "plan/plan.h"
#include "runtime/program.h"

/* The SM count a program's grids and partial sums are sized for by default (H100 / H200 SXM). */
#define LAUNCH_DEFAULT_SMS 132

/* 0 with lp filled (lp_free it); 1 when the CUDA backend does not run the step (why says why; lp
 * empty); -1 on an error (err). g must carry the applied memory plan; fz is the compiler's fusions
 * of g, ew their chains' kernels; sc is its schedule (the program's points are its ops, in order). */
int launch_program_build(const Graph *g, const Fusions *fz, const Schedule *sc, const EwKernels *ew,
                         int sm_count, LaunchProgram *lp, char *why, size_t nwhy, char *err, size_t nerr);

typedef struct {
  int launches, gemms, sdpas, memsets, copies;
  unsigned char kernel_used[RT_K_COUNT + RT_GEN_MAX]; /* 1 where the program launches that kernel */
} LaunchStats;
int launch_program_stats(const LaunchProgram *lp, LaunchStats *st);

#endif
