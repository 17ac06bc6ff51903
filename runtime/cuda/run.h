/* run.h — `stepc run --device cuda`: training on the GPU with per-step output and the
 * measurement record (step time, tokens/s, TFLOP/s, memory measured beside the plan's). */
#ifndef STEPC_RT_CUDA_RUN_H
#define STEPC_RT_CUDA_RUN_H

#include <stdbool.h>
#include <stdio.h>

#include "spec.h"

typedef struct {
  int steps;             /* <= 0: train.train_iters */
  bool json;
  const char *cache_dir; /* NVRTC cubin cache; NULL: the default */
} CudaRunOptions;

typedef enum {
  CUDA_RUN_OK,
  CUDA_RUN_NO_DEVICE,   /* no CUDA driver or device on this machine */
  CUDA_RUN_UNSUPPORTED, /* the recipe needs what the CUDA backend does not run yet */
  CUDA_RUN_ERROR,       /* I/O, driver or internal failure */
} CudaRunStatus;

/* Results go to `out` (text or JSON), progress to `progress`; errors only to err. */
CudaRunStatus cuda_run(const Spec *s, const CudaRunOptions *o, FILE *out, FILE *progress, char *err, size_t nerr);

#endif
