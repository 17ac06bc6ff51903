/* trainer.h — the GPU tests' harness: a recipe planned in-process (the compiler's plan_build), the
 * kernels compiled (NVRTC, cached) and loaded, parameters initialised as the CPU executor does, then steps run
 * eagerly, as one captured full-iteration CUDA graph, or with one captured graph per scope
 * instance (model.cuda_graph_impl). */
#ifndef STEPC_RT_CUDA_TRAIN_H
#define STEPC_RT_CUDA_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cli/cpu_train.h"
#include "runtime/cuda/player.h"
#include "runtime/cuda/scoped.h"
#include "frontend/spec.h"

typedef enum {
  RT_TRAIN_OK = 0,
  RT_TRAIN_NO_DEVICE,   /* no driver or no GPU here */
  RT_TRAIN_UNSUPPORTED, /* the recipe needs something the CUDA backend does not run yet */
  RT_TRAIN_ERROR,       /* anything else; the message says what */
} RtTrainStatus;

/* RT_MODE_SCOPED: per-module graphs (cuda_graph_impl local / transformer_engine, scoped.h). */
typedef enum { RT_MODE_EAGER, RT_MODE_FULL_ITERATION, RT_MODE_SCOPED } RtMode;

typedef struct {
  int64_t step;
  double loss, lr, grad_norm;
  double ms;      /* the step's GPU time (CUDA events around its work, inputs staged before) */
  bool replayed;  /* this step was a graph replay */
} RtStepStats;

typedef struct RtTrainer RtTrainer;

/* cache_dir: NVRTC's cubin cache (NULL: the default, see compiler/codegen/cubin/cubin.h). mode_override < 0
 * takes model.cuda_graph_impl. NULL with *status and a message on failure. */
RtTrainer *rt_trainer_new(const Spec *s, CpuData *data, const char *cache_dir, int mode_override, RtTrainStatus *status,
                          char *err, size_t nerr);
void rt_trainer_free(RtTrainer *tr);
/* One optimizer step (all micro-batches). Eager for the first cuda_graph_warmup_steps steps; then
 * in full_iteration mode the step is captured once and replayed every step after, in scoped mode
 * every scope instance is captured once and launched for every micro-batch after. */
int rt_trainer_step(RtTrainer *tr, RtStepStats *st, char *err, size_t nerr);
/* Stages step `step`'s inputs and seeds without running anything (tests drive the player). */
int rt_trainer_stage(RtTrainer *tr, int64_t step, char *err, size_t nerr);

RtDevice *rt_trainer_device(RtTrainer *tr);
/* The player of the planned step's launch program (the plan's, as stepc build stores it). */
RtPlayer *rt_trainer_player(RtTrainer *tr);
/* Micro-batch mb alone: its inputs, the micro program's points, its loss out. */
int rt_trainer_enqueue_micro(RtTrainer *tr, int mb);
/* Whether op o launches anything (it is not fused into another op's launch). */
int rt_trainer_op_runs(const RtTrainer *tr, int o);
/* Tensor t as doubles (its numel; synchronises). */
int rt_trainer_read(RtTrainer *tr, int t, double *out);
/* The micro-batches' losses after a step (synchronises). */
int rt_trainer_read_losses(RtTrainer *tr, float *losses);
const Graph *rt_trainer_graph(const RtTrainer *tr);
RtMode rt_trainer_mode(const RtTrainer *tr);
int rt_trainer_graph_nodes(const RtTrainer *tr); /* nodes of the captured graph(s), 0 before capture */
int rt_trainer_graph_count(const RtTrainer *tr); /* captured graphs: 0 before capture, 1 full_iteration */
/* Scoped mode after capture: graphs, forward/backward ones, nodes, eager and graphed ops per
 * micro-batch. 0, or -1 when the trainer is not scoped. */
int rt_trainer_scoped_stats(const RtTrainer *tr, RtScopedStats *st);
/* The scoped graphs of a scoped trainer (NULL otherwise), for a caller that drives the step
 * itself (the C API). */
RtScoped *rt_trainer_scoped(RtTrainer *tr);
/* The step's planned device peak (memory plan + launch scratch: the prediction beside the measurement) and replay ops. */
int64_t rt_trainer_planned_peak(const RtTrainer *tr);
int rt_trainer_replay_ops(const RtTrainer *tr);

/* The dropout seed of (step, micro-batch): a pure function of train.seed, so replays and reruns
 * draw the same masks. */
uint64_t rt_step_seed(uint64_t seed, int64_t step, int64_t micro);

#endif
