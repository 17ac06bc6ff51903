/* api_internal.h — what the files behind stepc.h share: the handle, the data source it feeds
 * the executors, and the backend table (api_cpu.c, api_cuda.c). */
#ifndef STEPC_API_INTERNAL_H
#define STEPC_API_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "ir.h"
#include "runtime/comm.h"
#include "runtime/cpu/data.h"
#include "runtime/image.h"
#include "runtime/safe_file.h"
#include "runtime/stepc.h"

/* The executors' data source (a CpuData, first member, so they can call it): the bound batch for
 * the next step when there is one, else the artifact's own source (mock tokens or data.path). */
typedef struct {
  CpuData base;
  CpuData recipe;
  int32_t *tok, *tg; /* the bound batch, num_microbatches * B * T each */
  size_t count;
  bool bound;
  /* stepc_bind_batch_device: the caller's device buffers (cuda), copied on the device before the
   * next step's work */
  unsigned long long dtok, dtg;
  bool dbound;
  int world; /* data-parallel ranks (stepc_t.dp): fill's micro index is global (api_dp_micro) */
} ApiData;

typedef struct ApiBackend {
  const char *name;
  int (*init_params)(stepc_t *s, uint64_t seed);
  int (*step)(stepc_t *s, int64_t step, stepc_step_stats *st);
  /* The same step run eagerly, adding each program point's time (ms) to ms[point]. */
  int (*step_profiled)(stepc_t *s, int64_t step, stepc_step_stats *st, double *ms);
  /* stepc_eval: the batch's forward alone (api_eval.c checked the arguments); *sum receives this
   * rank's sum of the micro-batch losses, lp (or NULL) the per-token log-probabilities. */
  /* den: the loss denominator of the evaluated batch (api_loss_den's, over its kept targets) */
  stepc_status (*eval)(stepc_t *s, const int32_t *tok, const int32_t *tg, double den, double *sum, float *lp);
  /* A tensor's numel elements at its nominal dtype (bf16 as raw u16, f32, i32). */
  int (*read)(stepc_t *s, int tensor, void *dst);
  int (*write)(stepc_t *s, int tensor, const void *src);
  /* After loading masters: make each param exactly what the optimizer would have left in it
   * (cpu: the fp32 master's value; cuda: nothing, the bf16 param was loaded as saved). */
  int (*params_from_masters)(stepc_t *s);
  /* Program point q alone (a tail point: api_fp8_param_casts), finished when it returns. */
  int (*point)(stepc_t *s, int q);
  void (*measure)(stepc_t *s, stepc_measure *m);
  void (*free)(stepc_t *s);
} ApiBackend;

struct stepc {
  char err[1024];
  char notice[1024]; /* stepc_notice: what the open chose that the caller should hear ("" none) */
  stepc_options opt;
  StepImage im;  /* the artifact's step (runtime/image.h) */
  char dir[512]; /* the artifact directory */
  const ApiBackend *be;
  void *impl;     /* the backend's state */
  const Graph *g; /* the backend's planned step graph */
  ApiData data;
  bool data_open;
  int64_t step; /* optimizer steps taken */
  stepc_step_stats last;
  /* the running step's status when its backend refuses it before running anything (an
   * all-masked global batch: api_loss_den), else STEPC_OK (a failure is STEPC_ERR_RUNTIME) */
  stepc_status refused;
  char gpu[256];
  /* data parallel (api_dp.c) */
  int rank, world; /* world 1: alone */
  /* tensor parallelism (image tp_size > 1): world = dp * tp, rank = dp_rank * tp + tp_rank (TP
   * fastest, Megatron's order); without it tp 1, dp = world, dp_rank = rank */
  int tp, tp_rank, dp, dp_rank;
  RtCommGroup tp_group, dp_group;
  /* expert parallelism (image ep_size > 1): the EP group is ep consecutive ranks of the job
   * (rank = edp_rank * ep + ep_rank, Megatron's expert grid with ETP 1; under TP it spans TP ranks),
   * each holding its experts; the expert-data-parallel group the ranks holding the same ones (stride
   * ep, world / ep of them). ep 1: none */
  int ep, ep_rank;
  RtCommGroup ep_group, edp_group;
  RtCommGroup world_group; /* every rank: fp8 delayed scaling's amax reduction group */
  bool join_alone;         /* a rank alone joins a job of one anyway (the launch program holds collectives) */
  RtComm *comm;            /* the job's host communicator (rendezvous; the CPU device's collectives) */
  int *bucket_point;       /* per image bucket: the micro program point after which it fires */
  bool dp_last_micro;      /* the micro-batch running now is the step's last: buckets fire */
  float *dp_buf;           /* the CPU device's staging for one bucket */
  size_t ndp_buf;
  /* distributed optimizer (ZeRO-1): per tensor, the rank that owns it — a main gradient, its
   * param, master and moments — or -1 (not sharded: activations, the optimizer's scalars) */
  int *owner;
  double *zero_sumsq; /* per tensor: the owner's sum of squares of its reduced gradient */
  /* the last profiled step's timeline (stepc_profile_timeline); profiling: a profiled step runs */
  stepc_span *span;
  int64_t nspan, capspan;
  bool profiling;
  double prof_t0_ms; /* cpu: the profiled step's start (wall clock) */
};

/* A batch's buffers (not NULL) and element count (num_microbatches * B * T), for the call fn; and its
 * host tokens inside the vocabulary. STEPC_OK, or the error with the message. */
stepc_status api_batch_check(stepc_t *s, const char *fn, const void *tokens, const void *targets,
                             size_t count);
stepc_status api_tokens_check(stepc_t *s, const char *fn, const int32_t *tokens, size_t count);
/* stepc_eval's helpers (api_eval.c): 0 when the step's forward may run alone as an evaluation, else
 * -1 with the reason (STEPC_ERR_UNSUPPORTED); the language-model loss op's per-token losses (n fp32,
 * an ignored target's 0) as log-probabilities, written into lp. */
int api_eval_refusal(stepc_t *s);
void api_eval_logprobs(const float *token_loss, int64_t n, float *lp);

/* Records the first message of a failing call and returns st. */
stepc_status api_fail(stepc_t *s, stepc_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Backends: set s->be, s->impl, s->g; 0, or a status with the message. */
stepc_status api_cpu_open(stepc_t *s);
stepc_status api_cuda_open(stepc_t *s);
/* The cuda backend's api_dp_join: NCCL loaded, its id through the rendezvous, the communicator. */
stepc_status api_cuda_dp_join(stepc_t *s);
/* The CUDA step's collectives, for stepc_info.comm: "nccl", or "host-staged (ranks share a GPU)". */
const char *api_cuda_comm_name(const stepc_t *s);

/* ---- data parallel (api_dp.c) ---- */
/* At open, before the backend: the options against the artifact's plan (world size, rank). */
stepc_status api_dp_check(stepc_t *s);
/* After the backend: the rendezvous (make_id: NCCL's unique id on rank 0, or NULL). */
stepc_status api_dp_join(stepc_t *s, int (*make_id)(void *, unsigned char *, char *, size_t), void *ctx);
void api_dp_free(stepc_t *s);
/* The global micro-batch index of this rank's micro-batch mb: mb * world + rank, so that DP N
 * with k micro-batches per rank draws the batches (and dropout masks) DP 1 draws with N * k. */
int64_t api_dp_micro(const stepc_t *s, int64_t mb);
/* Runs reduce(s, bucket) for every bucket that fires after micro program point q, when the
 * running micro-batch is the last. 0, or -1 with the message. */
int api_dp_after_point(stepc_t *s, int q, int (*reduce)(stepc_t *s, int bucket));
/* The host's clock in ms (the cpu device's profiled timeline). */
double api_now_ms(void);
/* run(s, id) (a host collective), its wall time appended to the timeline as a span of `kind` on
 * the communication track when a profiled step runs. 0, or -1 with the message. */
int api_dp_timed(stepc_t *s, int kind, int id, int (*run)(stepc_t *s, int id));
/* The step's loss: this rank's sum over its micro-batches in, the mean over every rank's out (the
 * sum in rank order, as DP 1 sums its micro-batches). 0, or -1 with the message. */
int api_dp_loss(stepc_t *s, double local_sum, double *mean);
/* After a load (what: "checkpoint" or "parameters"): every rank's (status, step, fp) gathered, so
 * that ranks that loaded different files or steps, or where one failed, all refuse together. st
 * when alone or when every rank agrees; else an error naming each rank's values. */
stepc_status api_dp_agree_load(stepc_t *s, stepc_status st, const char *what, long long step, uint64_t fp);
/* 1 when tensor t's optimizer state lives on another rank (ZeRO-1): not saved or loaded here. */
bool api_dp_not_mine(const stepc_t *s, int t);
/* 1 when tensor t lies in the optimizer-state region and another rank holds it (ZeRO-1: a master,
 * a moment, or with model.fp8_param an fp8 primary weight's fp32 param): it has no bytes here, and
 * nothing here reads or writes it. */
bool api_dp_absent(const stepc_t *s, int t);
/* ZeRO-1: the data-parallel rank whose values tensor t takes after the optimizer, or -1 (computed
 * here, or no param): a param its owner's AdamW updated and, with model.fp8_param, the fp8 copies
 * (data, transpose, scale_inv) of a sharded master, which only the master's owner casts (the master
 * itself stays with its owner: -1). The same on every rank. */
int api_dp_param_source(const stepc_t *s, int t);
/* ZeRO-1 on the cpu device: every sharded param := its owner's (after a checkpoint load), and with
 * model.fp8_param every fp8 weight its master's owner cast. */
int api_cpu_zero_gather(stepc_t *s);
/* The same on cuda (api_cuda_dp.c: the step's parameter all-gather, run alone). */
int api_cuda_zero_gather(stepc_t *s);

/* The running step's loss denominator (ir/ops/loss.c) from this rank's kept targets: their sum
 * over the ranks / (num_microbatches * ranks). Every rank calls it before its step runs anything.
 * An all-masked global batch (no kept target on any rank) is refused: STEPC_ERR_ARGUMENT with
 * the message and, for a step (eval NULL), s->refused = STEPC_ERR_ARGUMENT, so stepc_step returns
 * that and leaves the state as it was; an evaluation names itself by `eval` ("stepc_eval").
 * STEPC_OK, or the failure's status with the message. */
stepc_status api_loss_den(stepc_t *s, int64_t kept, const char *eval, double *den);
/* model.fp8_param: the fp8 primary weights' casts of their fp32 masters (the step's FP8_QUANT
 * points that write ROLE_PARAM_FP8 tensors, compiler/lower/lower_blocks.h lb_fp8_param_casts), run
 * alone after whatever sets the masters outside a step (open, init, a load), so that the next step
 * and evaluation read the fp8 copies of the masters they hold. Nothing without fp8_param. */
stepc_status api_fp8_param_casts(stepc_t *s);
/* This rank's kept targets of step `step` (cpu_data_kept over its micro-batches, drawn into tok and
 * tg: num_microbatches * B * T each, micro-batch mb at mb * B * T). 0, or -1 with the message. */
int api_kept(stepc_t *s, int64_t step, int32_t *tok, int32_t *tg, int64_t *kept);

/* Appends one span to the profiled step's timeline. 0, or -1 (out of memory, with the message). */
int api_span_add(stepc_t *s, int kind, int stream, int id, int micro, double start_ms, double end_ms);

#endif
