/* program.c — the launch program's shared pieces (program.h). */
#include "runtime/program.h"

#include <stdlib.h>
#include <string.h>

const char *const lp_scratch_part_name[LP_SCRATCH_PARTS] = {"norm and bias partial sums",
                                                            "global-norm partials",
                                                            "attention row sums",
                                                            "AdamW hyper-parameters",
                                                            "dropout seeds",
                                                            "micro-batch losses",
                                                            "staged inputs",
                                                            "current dropout seed",
                                                            "multi-tensor tables",
                                                            "initialisation seed"};

void lp_free(LaunchProgram *lp) {
  free(lp->rec), free(lp->point), free(lp->micro), free(lp->tensor_at), free(lp->table), free(lp->row);
  memset(lp, 0, sizeof *lp);
}
