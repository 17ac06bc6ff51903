/* player.h — plays a launch program (runtime/program.h) on one device: the step's one allocation
 * (the plan's buffers and the launch scratch), the multi-tensor tables written into it, every
 * cuDNN attention plan built at open (never inside a capture), then sections of records enqueued
 * on the device's stream: kernel launches, cuBLASLt GEMMs, cuDNN calls, memsets and copies, each
 * pointer relocated against the allocation. Nothing here knows an op: the compiler lowered them.
 * On a recording device (runtime/record.h) the records are recorded again instead of run. */
#ifndef STEPC_RT_CUDA_PLAYER_H
#define STEPC_RT_CUDA_PLAYER_H

#include <stdint.h>

#include "runtime/program.h"
#include "runtime/rt.h"

typedef struct RtPlayer RtPlayer;

/* NULL with the message in d->err. lp must outlive the player; d's kernels module (d->gen too)
 * must be loaded before anything is played. The attention lowering is chosen here, for the whole
 * program: cuDNN's calls when every shape gets a plan; with attention_backend=auto (LP_ATTN_AUTO)
 * and cuDNN unable to load or without an engine, every point's flash alternative, said in
 * rt_player_notice; otherwise (fused) the open fails naming cuDNN's reason.
 * Test knob: RT_TEST_NO_CUDNN_ENV set (not "0") in the environment makes cuDNN count as having no
 * engine for any attention, on a GPU or a recording device, so that CI and a GPU check reach the
 * fallback; nothing else reads it. */
#define RT_TEST_NO_CUDNN_ENV "STEPC_TEST_CUDNN_NO_ENGINE"
/* Measurement knob: RT_COMM_OVERLAP_ENV=0 plays every collective of the launch program on the step's
 * stream, forks and joins as nothing — the same work in the serial order (the same bits), so that a
 * run can measure what the communication stream's overlap saves. */
#define RT_COMM_OVERLAP_ENV "STEPC_COMM_OVERLAP"
RtPlayer *rt_player_new(RtDevice *d, const LaunchProgram *lp);
/* 1 when the points play their flash alternatives (the auto fallback); the notice saying why ("" none). */
int rt_player_flash_fallback(const RtPlayer *p);
const char *rt_player_notice(const RtPlayer *p);
void rt_player_free(RtPlayer *p);
const LaunchProgram *rt_player_program(const RtPlayer *p);
CUdeviceptr rt_player_base(const RtPlayer *p);
/* Tensor t's device address. */
CUdeviceptr rt_player_tensor(const RtPlayer *p, int t);

/* Records [r.first, r.first + r.count) in order. */
int rt_player_play(RtPlayer *p, LpRange r);
/* This rank's index in its tensor-parallel group and in its expert-parallel group (0 without), which
 * the shards' initialisation and the vocab-parallel launches read: before rt_player_init
 * (synchronises). */
int rt_player_set_ranks(RtPlayer *p, int tp_rank, int ep_rank);
/* The initialisation with train.seed = seed (synchronises): every record of the program's init
 * section, each as lp_init_rec gives it for the masters this rank holds (rt_player_hold_masters). */
int rt_player_init(RtPlayer *p, uint64_t seed);
/* The fp32 masters this rank holds, held[t] for each of the image's nt tensors (copied; NULL: every
 * one, the default): the distributed optimizer's rank writes no other master at initialisation
 * (ZeRO-1: the others share its optimizer-state region's offsets). Before rt_player_init. */
int rt_player_hold_masters(RtPlayer *p, const uint8_t *held, int nt);
/* Program point q's launches (its flash alternative after the auto fallback). */
int rt_player_point(RtPlayer *p, int q);
/* Point q run alone, outside a step (its LpPoint.solo where it has one, else its launches). */
int rt_player_point_solo(RtPlayer *p, int q);
/* The program's communication stream (RT_REC_FORK / RT_REC_JOIN: tensor parallelism's backward
 * collectives beside the weight-gradient GEMMs) under profiling. With m set, each fork is followed by
 * a mark of m on that stream and each join preceded by one (marks 0, 1, 2, ... in play order), so a
 * window's two marks are when its collectives ran there; NULL stops marking. After a join, *a and *b
 * are the window's two marks and the call returns 1 (once per window), else 0. */
void rt_player_comm_marks(RtPlayer *p, RtMarks *m);
int rt_player_comm_span(RtPlayer *p, int *a, int *b);
/* Forks (windows) in point q's launches (0 or 1). */
int rt_player_point_forks(const RtPlayer *p, int q);
/* Program point q's evaluation launches (program.h's eval section; none for a point outside it). */
int rt_player_eval_point(RtPlayer *p, int q);
/* The loss op's per-token losses after an evaluated micro-batch (ntok fp32; synchronises). */
int rt_player_read_token_losses(RtPlayer *p, float *dst);
/* Micro-batch mb's inputs into the step's slots, and its loss out to its slot. */
int rt_player_micro_begin(RtPlayer *p, int mb);
int rt_player_micro_end(RtPlayer *p, int mb);
/* One step's inputs staged: tokens and targets (nmb x ntok int32 each, micro-batch major), one
 * dropout seed per micro-batch and the step's loss denominator (kept tokens of the global batch /
 * (nmb * ranks): ir/ops/loss.c), from the host (asynchronous), or the tokens and targets from
 * device buffers. */
int rt_player_stage(RtPlayer *p, const int32_t *tokens, const int32_t *targets, const uint64_t *seeds,
                    double loss_den);
int rt_player_stage_device(RtPlayer *p, CUdeviceptr tokens, CUdeviceptr targets);
/* The micro-batch losses after a step (synchronises). */
int rt_player_read_losses(RtPlayer *p, float *losses);
/* The multi-tensor tables again with the rows whose gradient has keep_sumsq / keep_adamw = 0
 * given no elements (the distributed optimizer's shard; synchronous). */
int rt_player_keep_rows(RtPlayer *p, const uint8_t *keep_sumsq, const uint8_t *keep_adamw);

#endif
