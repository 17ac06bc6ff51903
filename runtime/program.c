/* program.c — the launch program's shared pieces (program.h). */
#include "runtime/program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_api.h>
#include <cudnn_version.h>

const char *const lp_scratch_part_name[LP_SCRATCH_PARTS] = {"norm and bias partial sums",
                                                            "global-norm partials",
                                                            "op workspace (attention row sums)",
                                                            "AdamW hyper-parameters",
                                                            "dropout seeds",
                                                            "micro-batch losses",
                                                            "staged inputs",
                                                            "current dropout seed",
                                                            "multi-tensor tables",
                                                            "initialisation seed and ranks",
                                                            "loss denominator",
                                                            "fp8 amax partials",
                                                            "TMA tensor maps"};

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
#define LP_C(f) slot[n++] = (uint64_t *)&r->coll.f;
  case RT_REC_GEMM: RT_GEMM_FIELDS(LP_N, LP_G, LP_N) break;
  case RT_REC_SDPA: RT_SDPA_FIELDS(LP_N, LP_S, LP_N) break;
  case RT_REC_COLL: RT_COLL_FIELDS(LP_N, LP_C, LP_N) break;
#undef LP_N
#undef LP_G
#undef LP_S
#undef LP_C
  case RT_REC_COPY: slot[n++] = (uint64_t *)&r->src; /* fall through */
  case RT_REC_MEMSET: slot[n++] = (uint64_t *)&r->dst; break;
  case RT_REC_FORK:
  case RT_REC_JOIN: break;
  }
  return n;
}

int lp_init_rec(const LaunchProgram *lp, int i, const uint8_t *held, RtRec *out) {
  *out = lp->rec[i];
  if (!held) return 0;
  for (int k = 0; k < lp->f.ninit_master; k++) {
    const LpInitMaster *m = &lp->init_master[k];
    if (m->rec != i || held[m->tensor]) continue;
    out->arg[m->arg] = 0; /* the kernel writes no master (init_normal / init_normal_tp / init_ones) */
    return 1;
  }
  return 0;
}

void lp_free(LaunchProgram *lp) {
  free(lp->rec), free(lp->point), free(lp->micro), free(lp->tensor_at), free(lp->table), free(lp->row),
      free(lp->init_master);
  free(lp->tmap);
  memset(lp, 0, sizeof *lp);
}

int lp_runtime_libs(const LaunchProgram *lp, int dp_size, char *buf, size_t n) {
  int cudnn = lp->f.attn == LP_ATTN_CUDNN || lp->f.attn == LP_ATTN_AUTO;
  char dnn[320] = "", nccl[96];
  if (cudnn)
    snprintf(dnn, sizeof dnn,
             ", cuDNN %d (libcudnn.so.%d, attention: %s; cuDNN's runtime-compiled engines load NVRTC)",
             CUDNN_MAJOR, CUDNN_MAJOR,
             lp->f.attn == LP_ATTN_AUTO
                 ? "attention_backend=auto, so where cuDNN cannot be loaded or has no engine for a shape, "
                   "stepc's own attention kernels run every attention op instead"
                 : "required, the step refuses to open without it or an engine for every shape");
  if (dp_size > 1)
    snprintf(nccl, sizeof nccl, ", NCCL 2 (libnccl.so.2, data parallel over %d ranks)", dp_size);
  else
    snprintf(nccl, sizeof nccl, ", NCCL 2 (libnccl.so.2) only when joined to a communicator (dp_join)");
  return snprintf(buf, n, "libcuda, cuBLASLt (libcublasLt.so.%d)%s%s; stepc's own code loads no NVRTC",
                  CUBLAS_VER_MAJOR, dnn, nccl);
}
