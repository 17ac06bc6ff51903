/* cpu_train.h — the CPU oracle on the compiler's side: a recipe planned and trained on the CPU
 * reference executor in-process (the tests' and `--gradcheck`'s), and gradient checks. Trainers run
 * artifacts through runtime/stepc.h instead. */
#ifndef STEPC_CPU_TRAIN_H
#define STEPC_CPU_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frontend/spec.h"
#include "runtime/cpu/data.h"
#include "runtime/cpu/exec.h"

/* The recipe's data source: data.path's file when it is set (and data.mock is not), else NULL
 * (mock tokens). */
const char *spec_data_path(const Spec *s);
/* cpu_data_open (runtime/cpu/data.h) for the recipe's seed, vocabulary, sequence and source. */
int cpu_data_open_spec(const Spec *s, CpuData *d, char *err, size_t nerr);

typedef struct {
  int64_t step;
  double loss, lr, grad_norm;
} CpuStepStats;

typedef struct CpuTrainer CpuTrainer;
/* Builds the step graph, applies the recipe's recompute, schedules and plans it (fp32 arena
 * offsets, freed ranges poisoned) and initializes the weights from train.seed.
 * Returns NULL with a message; *lower_rc receives plan_build's code (PLAN_UNSUPPORTED, ...). */
CpuTrainer *cpu_trainer_new(const Spec *s, CpuData *data, int nthreads, int *lower_rc, char *err,
                            size_t nerr);
/* One optimizer step over num_microbatches micro-batches; 0 or -1 with a message. */
int cpu_trainer_step(CpuTrainer *tr, CpuStepStats *st, char *err, size_t nerr);
const Graph *cpu_trainer_graph(const CpuTrainer *tr);
void cpu_trainer_free(CpuTrainer *tr);

/* Gradient check: fp64 execution of one micro-batch, each parameter's main gradient against
 * central differences of the loss. */
typedef struct {
  char name[112];
  int64_t numel;
  double worst_rel; /* worst relative error over the checks of this tensor */
  double fd, an;    /* the check that gave it */
} GradcheckRow;

typedef struct {
  int elements; /* single-element checks per tensor (largest-|g| first), besides the direction */
  double h;     /* step of the central difference */
} GradcheckOptions;

/* Fills *rows (malloc'd, *nrows entries) and returns the worst relative error, or -1 with err. */
double cpu_gradcheck_spec(const Spec *s, CpuData *data, const GradcheckOptions *opt, int nthreads,
                          GradcheckRow **rows, int *nrows, int *lower_rc, char *err, size_t nerr);
/* The core, on an already-built fp64 executor: `objective` runs the forward and returns the scalar
 * whose gradient the main gradients hold times `an_scale`. */
double cpu_gradcheck_exec(CpuExec *e, const Graph *g, double (*objective)(CpuExec *e, void *ctx), void *ctx,
                          double an_scale, const GradcheckOptions *opt, GradcheckRow **rows, int *nrows);

/* The documented tolerance of `stepc run --gradcheck` (see docs/cpu-reference.md). */
#define GRADCHECK_TOL 1e-4

#endif
