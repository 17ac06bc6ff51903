/* train.h — training on the GPU: the step graph lowered and planned, the kernels compiled
 * (NVRTC, cached) and loaded, parameters initialised as the CPU executor does, then steps run
 * eagerly or as one captured full-iteration CUDA graph (model.cuda_graph_impl). */
#ifndef STEPC_RT_CUDA_TRAIN_H
#define STEPC_RT_CUDA_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/cpu/train.h"
#include "runtime/cuda/exec.h"
#include "spec.h"

typedef enum {
  RT_TRAIN_OK = 0,
  RT_TRAIN_NO_DEVICE,   /* no driver or no GPU here */
  RT_TRAIN_UNSUPPORTED, /* the recipe needs something the CUDA backend does not run yet */
  RT_TRAIN_ERROR,       /* anything else; the message says what */
} RtTrainStatus;

typedef enum { RT_MODE_EAGER, RT_MODE_FULL_ITERATION } RtMode;

typedef struct {
  int64_t step;
  double loss, lr, grad_norm;
  double ms;      /* the step's GPU time (CUDA events around its work, inputs staged before) */
  bool replayed;  /* this step was a graph replay */
} RtStepStats;

typedef struct RtTrainer RtTrainer;

/* cache_dir: NVRTC's cubin cache (NULL: the default, see compiler/nvrtc.h). mode_override < 0
 * takes model.cuda_graph_impl. NULL with *status and a message on failure. */
RtTrainer *rt_trainer_new(const Spec *s, CpuData *data, const char *cache_dir, int mode_override, RtTrainStatus *status,
                          char *err, size_t nerr);
void rt_trainer_free(RtTrainer *tr);
/* One optimizer step (all micro-batches). Eager for the first cuda_graph_warmup_steps steps, then
 * in full_iteration mode the step is captured once and replayed every step after. */
int rt_trainer_step(RtTrainer *tr, RtStepStats *st, char *err, size_t nerr);
/* Stages step `step`'s inputs and seeds without running anything (tests drive rt_exec_*). */
int rt_trainer_stage(RtTrainer *tr, int64_t step, char *err, size_t nerr);

RtDevice *rt_trainer_device(RtTrainer *tr);
RtExec *rt_trainer_exec(RtTrainer *tr);
const Graph *rt_trainer_graph(const RtTrainer *tr);
RtMode rt_trainer_mode(const RtTrainer *tr);
int rt_trainer_graph_nodes(const RtTrainer *tr); /* nodes of the captured graph, 0 before capture */
/* The memory plan's peak live bytes (the prediction beside the measurement) and replay ops. */
int64_t rt_trainer_planned_peak(const RtTrainer *tr);
int rt_trainer_replay_ops(const RtTrainer *tr);

/* The dropout seed of (step, micro-batch): a pure function of train.seed, so replays and reruns
 * draw the same masks. */
uint64_t rt_step_seed(uint64_t seed, int64_t step, int64_t micro);

#endif
