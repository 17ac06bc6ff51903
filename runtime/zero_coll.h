/* zero_coll.h — the distributed optimizer's (ZeRO-1) data movement on the GPU for one rank, as data:
 * what runtime/api_cuda_dp.c plays through either communicator (NCCL, or host-staged when ranks share
 * a GPU) and what tests/api/zero_play.c checks on every rank of a job without a GPU. Pure: no CUDA
 * call, no communicator; built from the step image's facts (owners, buckets, the launch program's
 * norm slices) and this rank's groups. The CPU device's structure (runtime/api_cpu.c,
 * cpu_zero_part / cpu_zero_share_sumsq / cpu_zero_gather) on device buffers:
 *
 *  - a bucket, one part per kind of state (dense over the data-parallel group, the experts'
 *    — graph_expert_state — over the expert-data-parallel group, each of N ranks): its gradients
 *    copied owner by owner into N equal blocks of a staging buffer (pieces), one in-place
 *    reduce-scatter (fp32, the sum divided by the data-parallel size for both kinds: the plain
 *    step's mean, an expert's sum / DP over expert-DP), then this rank's block copied back into the
 *    gradients it owns (unpieces). The other gradients stay local partial sums, which nothing reads;
 *  - the norm: the GRAD_SUMSQ partial slices of gradients this rank does not own zeroed (clear),
 *    then the dense slices all-reduced (sum) over the data-parallel group and the experts' over the
 *    expert-data-parallel group (norm): each slot has one nonzero contributor;
 *  - AdamW on this rank's tensors only (keep_adamw; the norm's launches keep_sumsq, skip_point);
 *  - the params: per bucket and kind, this rank's owned params copied into its block, an in-place
 *    all-gather (bytes, as bf16 units), every other owner's params copied out of theirs.
 *
 * A gradient outside every bucket (owner -1) is every rank's: updated everywhere, its norm partial
 * kept by member 0 of its group only. Offsets into the staging buffer are relative (zc_coll adds the
 * buffer's address); the norm collectives' addresses are the partials' (ZcRank.norm_at). */
#ifndef STEPC_ZERO_COLL_H
#define STEPC_ZERO_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/image.h"
#include "runtime/program.h"

/* One rank's view of a ZeRO-1 step. */
typedef struct {
  const Graph *g;
  const int64_t *bytes; /* per tensor its bytes (the compiler's memory plan before it is applied); NULL:
                           g->t[t].bytes (the image's graph, where the plan is applied) */
  const int32_t *owner; /* the image's: a data-parallel rank, or an expert's expert-data-parallel rank */
  const ImgBucket *bucket;
  int nbucket;
  const int32_t *bucket_grad;
  int dp, dp_member;   /* the data-parallel group (each TP rank's under TP): size, this rank's index */
  int edp, edp_member; /* the expert-data-parallel group (EP > 1): size, index (job rank / EP) */
  int ep;              /* expert-parallel size (1: no expert state) */
  /* the program: per point its op; the tail starts at nmicro */
  int npoints, nmicro;
  const int *point_op;
  const LpPoint *point;
  CUdeviceptr norm_at; /* the norm partials: address, floats (LpFacts.norm_at, norm_count) */
  int64_t norm_count;
} ZcRank;

/* A tensor's bytes at a staging offset. */
typedef struct {
  int32_t tensor;
  int64_t at, bytes;
} ZcPiece;

/* One collective with its copies: pieces [pack, pack + npack) tensor -> staging before it, pieces
 * [unpack, unpack + nunpack) staging -> tensor after it. coll.src / dst: staging offsets. */
typedef struct {
  RtColl coll;
  int32_t pack, npack, unpack, nunpack;
  int32_t bucket, expert; /* its bucket (the params' too), 1 the experts' part */
} ZcPart;

typedef struct {
  ZcPart *part; /* the buckets' (bucket k's: [bucket_part[k], bucket_part[k + 1])), then the params' */
  int npart, params_first;
  int32_t *bucket_part; /* nbucket + 1 */
  ZcPiece *piece;
  int npiece;
  RtColl *norm; /* the norm partials' exchange (absolute addresses) */
  int nnorm;
  int64_t (*clear)[2]; /* norm-partial float ranges [first, first + count) zeroed first */
  int nclear;
  uint8_t *keep_sumsq, *keep_adamw; /* per tensor: this rank's norm rows, AdamW rows */
  uint8_t *skip_point;              /* per point: an optimizer op of another rank's tensor, run alone */
  int norm_point;                   /* the tail point (CLIP_COEF) the partials are exchanged before; -1 */
  int64_t staging_bytes;            /* the staging: a bucket's parts side by side, the largest bucket's */
} ZcPlan;

/* r's plan into *p (zeroed first). 0, or -1 with err (a GRAD_SUMSQ of another rank's gradient that
 * launches nothing of its own, a norm without CLIP_COEF, out of memory); zc_free frees either way. */
int zc_plan(const ZcRank *r, ZcPlan *p, char *err, size_t nerr);
void zc_free(ZcPlan *p);
/* The staging's bytes for r's layout: zc_plan's staging_bytes, by the same code (only the buckets', the
 * params' parts and the bucket fields first / ngrads of r are read; no program points). The compiler plans
 * this buffer in the arena (compiler/plan/memplan.c) and the runtime refuses an image whose planned
 * staging is smaller than its rank's zc_plan needs. The same for every member of the groups (a part's
 * blocks are all its largest owner's share), so one rank's figure is every rank's. -1 with err. */
int64_t zc_staging_bytes(const ZcRank *r, char *err, size_t nerr);
/* Part i's collective at staging address `staging`. */
RtColl zc_coll(const ZcPlan *p, int i, CUdeviceptr staging);

#endif
