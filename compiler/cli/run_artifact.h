/* run_artifact.h — `stepc run`: an artifact trained through its own libstep.so. */
#ifndef STEPC_API_RUN_H
#define STEPC_API_RUN_H

#include <stddef.h>
#include <stdio.h>

#include "runtime/stepc.h"

typedef struct {
  int steps; /* <= 0: train.train_iters */
  int json;
  stepc_device device;
  int threads;           /* cpu */
  int graph_mode;        /* -1 the recipe's, 0 eager, 1 full_iteration, 2 scoped (stepc_options) */
  int profile;           /* after the steps, one more profiled eagerly (stepc_profile_step), by op class */
  int quiet;             /* text output: no line per step, one summary at the end */
  int dp_join;           /* join a communicator even with one rank (--dp-join: NCCL in the graph) */
  double comm_timeout_s; /* 0: the runtime's default */
  const char *timeline;  /* with profile: the profiled step's measured timeline as a Chrome trace
                            here (rank 0 writes it), NULL none */
  const char *eval_data; /* a text file: its validation batch evaluated (stepc_eval), NULL none */
  int eval_every;        /* with eval_data: every this many steps; <= 0: after the last step only */
  int gemm_tuning;       /* stepc_options.gemm_tuning (API 8); 0: not set */
} ApiRunOptions;

/* `stepc run DIR --nproc N`: N processes of this executable on this host, each `stepc run DIR`
 * as rank r under torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1, a free
 * MASTER_PORT). Rank 0's output is ours; the others' stdout is discarded, their stderr kept with
 * a "[rank r]" prefix; each rank that fails is named with its exit status or signal. Returns the exit
 * code: 0 when every rank succeeded, else rank 0's code if it failed, else the first failing rank's.
 * child_args: the options after DIR. */
int run_nproc(const char *dir, int nproc, char *const *child_args, int nchild_args, FILE *progress);

/* Loads DIR/libstep.so and trains through it; prints the loss per step and the measurements to
 * out. A status, with the message in err. */
stepc_status api_run_artifact(const char *dir, const ApiRunOptions *o, FILE *out, FILE *progress, char *err,
                              size_t nerr);

#endif
