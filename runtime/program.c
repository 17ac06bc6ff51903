/* program.c — the launch program's shared pieces (program.h). */
#include "runtime/program.h"

#include <stdlib.h>
#include <string.h>

const char *const lp_scratch_part_name[LP_SCRATCH_PARTS] = {"norm and bias partial sums",
                                                            "global-norm partials",
                                                            "op workspace (attention row sums, Mamba states)",
                                                            "AdamW hyper-parameters",
                                                            "dropout seeds",
                                                            "micro-batch losses",
                                                            "staged inputs",
                                                            "current dropout seed",
                                                            "multi-tensor tables",
                                                            "initialisation seed",
                                                            "loss denominator"};

int lp_rec_addrs(RtRec *r, const char *sig, uint64_t **slot) {
  int n = 0;
  switch (r->kind) {
  case RT_REC_LAUNCH:
    for (int i = 0; i < r->nargs && sig[i]; i++)
      if (sig[i] == 'p') slot[n++] = &r->arg[i];
    break;
#define LP_N(f)
#define LP_G(f) slot[n++] = (uint64_t *)&r->gemm.f;
#define LP_S(f) slot[n++] = (uint64_t *)&r->sdpa.f;
  case RT_REC_GEMM: RT_GEMM_FIELDS(LP_N, LP_G, LP_N) break;
  case RT_REC_SDPA: RT_SDPA_FIELDS(LP_N, LP_S, LP_N) break;
#undef LP_N
#undef LP_G
#undef LP_S
  case RT_REC_COPY: slot[n++] = (uint64_t *)&r->src; /* fall through */
  case RT_REC_MEMSET: slot[n++] = (uint64_t *)&r->dst; break;
  }
  return n;
}

void lp_free(LaunchProgram *lp) {
  free(lp->rec), free(lp->point), free(lp->micro), free(lp->tensor_at), free(lp->table), free(lp->row);
  memset(lp, 0, sizeof *lp);
}
