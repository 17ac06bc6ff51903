/* run_artifact.h — `stepc run`: an artifact trained through its own libstep.so. */
#ifndef STEPC_API_RUN_H
#define STEPC_API_RUN_H

#include <stddef.h>
#include <stdio.h>

#include "runtime/stepc.h"

typedef struct {
  int steps;            /* <= 0: train.train_iters */
  int json;
  stepc_device device;
  int threads;          /* cpu */
  int graph_mode;       /* -1 the recipe's, 0 eager, 1 full_iteration, 2 scoped (stepc_options) */
  int profile;          /* after the steps, one more profiled eagerly (stepc_profile_step), by op class */
} ApiRunOptions;

/* Loads DIR/libstep.so and trains through it; prints the loss per step and the measurements to
 * out. A status, with the message in err. */
stepc_status api_run_artifact(const char *dir, const ApiRunOptions *o, FILE *out, FILE *progress, char *err, size_t nerr);

#endif
