/* api_cuda_internal.h — what api_cuda.c (the step on the GPU) shares with api_cuda_dp.c (data
 * parallel on the GPU: the communication stream, the buckets' collectives, ZeRO-1). */
#ifndef STEPC_API_CUDA_INTERNAL_H
#define STEPC_API_CUDA_INTERNAL_H

#include "runtime/api_internal.h"
#include "runtime/coll_host.h"
#include "runtime/comm_nccl.h"
#include "runtime/cuda/player.h"
#include "runtime/cuda/scoped.h"
#include "runtime/zero_coll.h"

/* A profiled step's CUDA events (stepc_profile_step, stepc_profile_timeline): on the step's
 * stream a mark before every micro-batch's first point and after every point; on the
 * communication stream a mark before and after every collective. Each span names its two marks. */
typedef struct {
  int kind, id, micro; /* stepc_span's */
  int side;            /* 0 the step's stream, 1 the communication stream, 2 the launch program's (TP) */
  int a, b;            /* its marks */
} CudaSpan;

typedef struct {
  RtMarks main, side;
  RtMarks tp;       /* the launch program's communication stream (rt_player_comm_marks) */
  int nmain, nside; /* marks recorded so far */
  CudaSpan *span;
  int nspan, cap;
} CudaProf;

typedef struct {
  RtDevice dev;
  RtPlayer *x; /* plays the image's launch program */
  RtDevice *d; /* &dev once the driver is open */
  RtTimer timer;
  bool timer_ok, captured, full_iteration;
  RtGraph graph;
  int warmup, steps_here;
  int *point_op;    /* program point -> op id: the micro ops, then the tail's, in graph order */
  int *op_point;    /* op id -> program point */
  RtScoped *scoped; /* cuda_graph_impl local / transformer_engine: per-scope graphs */
  int npoints, nmicro, nmb;
  float *losses;
  int32_t *tok, *tg; /* one step's staged batch, (num_microbatches, B*T) */
  uint64_t *seeds;
  /* data parallel (api_cuda_dp.c) */
  RtNccl *nccl; /* the ranks' NCCL communicator */
  bool nccl_failed;
  double watch_since; /* nccl_watch: when this step's wait began */
  RtSide comm;        /* the communication stream: every collective runs there */
  bool comm_ok;
  int *fire_point; /* per bucket: the micro point after whose launches it fires (image fire_op) */
  /* ZeRO-1 (runtime/zero_coll.h) */
  bool zero;
  ZcPlan zc;          /* this rank's collectives, masks and skipped points */
  CUdeviceptr zstage; /* the staging the parts pack into: the plan's arena slot (ImgFacts.zero_stage_at) */
  CUdeviceptr zstage_own; /* at world size 1 under --dp-join, a staging of its own (the plan has none) */
  int zpending;           /* the bucket whose reduce-scatter is in flight (unpacked later), -1 none */
  /* tensor parallelism (api_cuda_tp.c): the launch program's collectives' communicator */
  RtCollHost *coll_host; /* host-staged */
  /* NCCL: each group's communicator (TP, EP, DP, expert-DP): nccl above where the group is the
   * whole job, else the split this handle owns (nccl_split) */
  RtCollNccl coll_nccl;
  RtNccl *nccl_split[RT_COLL_GROUPS];
} ApiCuda;

static inline ApiCuda *cu(stepc_t *s) { return s->impl; }

/* The driver's message as the handle's (STEPC_ERR_RUNTIME); returns -1. */
int api_cuda_fail(stepc_t *s);
/* Program point q's launches. */
int api_cuda_run_point(stepc_t *s, int q);

/* api_cuda_tp.c: STEPC_COLLECTIVES chooses the TP collectives' backend (host / nccl / auto). */
#define STEPC_COLLECTIVES_ENV "STEPC_COLLECTIVES"
/* 1: host-staged (the ranks share this host's device_count GPUs, or the variable says host), 0: NCCL,
 * -1: a bad value (the message in s). */
int api_cuda_tp_shared(stepc_t *s, int device_count);
/* Whether the launch program holds collective records over group (any group: -1); a communicator
 * joins at open for them (TP / EP ops, fp8 delayed scaling's amax reduction). */
bool api_cuda_program_collectives(const LaunchProgram *lp, int group);
/* Loads NCCL, joins the job (its unique id through the rendezvous) and makes the job's
 * communicator c->nccl (its group table cleared); `what` prefixes a failure. */
stepc_status api_cuda_nccl_join(stepc_t *s, const char *what);
/* Joins the job and sets the device's communicator, before the launch program opens. */
stepc_status api_cuda_tp_open(stepc_t *s, int shared);
/* After the step's stream synchronised: a host-staged collective's failure, as the handle's error (-1). */
int api_cuda_tp_check(stepc_t *s);
void api_cuda_tp_free(stepc_t *s);
/* fn on every NCCL communicator of the handle (the job's, then the groups' splits): 0, or the
 * first -1 (err filled by fn). */
int api_cuda_nccl_each(stepc_t *s, int (*fn)(RtNccl *n, char *err, size_t nerr), char *err, size_t nerr);

/* api_cuda_dp.c. Every hook is a no-op without a communicator. */
/* After point q's launches on micro-batch mb: the buckets that fire there, on the last micro-batch. */
int api_cuda_dp_after_point(stepc_t *s, int mb, int q, CudaProf *pf);
/* After the micro program's last micro-batch: the step's stream waits for the communication stream. */
int api_cuda_dp_join_comm(stepc_t *s);
/* A tail point under ZeRO-1: 1 when handled here (its launches skipped), 0 to run it, -1. */
int api_cuda_dp_tail_point(stepc_t *s, int q, CudaProf *pf);
/* After the tail: ZeRO-1's parameters from their owners. */
int api_cuda_dp_end(stepc_t *s, CudaProf *pf);
/* While a data-parallel step runs (rt_timer_stop_watched): NCCL's asynchronous error and the
 * communicator's timeout, ending in ncclCommAbort. */
int api_cuda_nccl_watch(void *ctx);
void api_cuda_dp_free(stepc_t *s);

/* Profiling marks: a mark on the step's stream (side 0) or the communication stream (1); returns
 * its index, or -1 (the message set). A span from mark a to mark b. */
int api_cuda_mark(stepc_t *s, CudaProf *pf, int side);
int api_cuda_span(stepc_t *s, CudaProf *pf, int kind, int id, int micro, int side, int a, int b);

#endif
