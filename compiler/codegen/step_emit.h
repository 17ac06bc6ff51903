/* step_emit.h — step.c, the host step of an artifact (runtime/stepc_gen.h is its contract).
 *
 * The planned step is run once on a recording device (runtime/record.h): the CUDA executor's
 * launch lowering produces every kernel launch, GEMM and memset of every scheduled op, and each is
 * written out as literals — kernel, grid, block, shared memory and every argument (arena and
 * scratch offsets, sizes, scalars). Above each op's function a comment gives the op, its module,
 * phase and layer, every tensor (name, shape, dtype, role, arena slot) and its attributes. */
#ifndef STEPC_STEP_EMIT_H
#define STEPC_STEP_EMIT_H

#include <stdio.h>

#include "runtime/rt.h"
#include "plan.h"

/* The SM count step.c's grids are sized for by default (H100 / H200 SXM). */
#define STEP_EMIT_DEFAULT_SMS 132

typedef struct {
  int launches, gemms, sdpas, memsets, copies;
  unsigned char kernel_used[RT_K_COUNT + RT_GEN_MAX]; /* 1 where step.c launches that kernel */
  int ngen;                              /* generated kernels (compiler/ew_fuse.h), handles RT_K_COUNT + i */
  char gen_name[RT_GEN_MAX][64];
  char *kernels_cu;                      /* kernels.cu: hand-written + generated (ew_kernels_cu; malloc'd,
                                            the caller frees) */
  int cuda;                              /* 0: the CUDA backend does not run this step (why: err) */
} StepEmitStats;

/* Writes step.c for the nominal-dtype plan p (plan_build(s, 0, ...)), recorded for a GPU of
 * sm_count SMs; recipe: the name to record. When the CUDA executor does not take the step (an fp32
 * recipe, an op not built on CUDA), step.c still drives the CPU reference device: every op's
 * function holds only its stepc_gen_op() call, st->cuda is 0 and why says why. 0, or -1 with err
 * (a write error, a recording failure). */
int step_emit_c(const Plan *p, const char *recipe, int sm_count, FILE *f, StepEmitStats *st, char *why, size_t nwhy,
                char *err, size_t nerr);

#endif
