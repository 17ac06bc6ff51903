/* cpu_run.h — `stepc run SPEC --gradcheck`: every parameter's gradient against finite differences
 * (fp64, the CPU reference executor, in-process). */
#ifndef STEPC_CPU_RUN_H
#define STEPC_CPU_RUN_H

#include <stdbool.h>
#include <stdio.h>

#include "frontend/spec.h"

typedef struct {
  int steps; /* <= 0: train.train_iters */
  bool json;
  bool gradcheck;
  int threads; /* <= 0: 2 */
} CpuRunOptions;

typedef enum {
  CPU_RUN_OK,
  CPU_RUN_UNSUPPORTED,  /* the architecture is not lowered yet */
  CPU_RUN_ERROR,        /* I/O or internal failure; message in err */
  CPU_RUN_CHECK_FAILED, /* a gradient check exceeded its tolerance */
} CpuRunStatus;

/* Results go to `out` (text or JSON), progress to `progress`; errors only to err. */
CpuRunStatus cpu_run(const Spec *s, const CpuRunOptions *o, FILE *out, FILE *progress, char *err,
                     size_t nerr);

#endif
