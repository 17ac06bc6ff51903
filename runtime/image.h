/* image.h — the step image: everything the runtime needs to run a compiled step, in one file of
 * the artifact (step.img). `stepc build` writes it from the planned step; stepc_open reads it. It
 * holds no recipe: opening an artifact needs no Lua, no NVRTC and no compiler.
 *
 * What it carries: the planned graph (every tensor's name, dtype, shape, role, initialisation and
 * its slot in the CUDA plan's arena, and the tensor whose slot holds it on CUDA where the compiler's
 * fusions put it on another's; every op with its attributes and tags), the launch program the CUDA
 * runtime plays (runtime/program.h, which carries every fusion the compiler decided),
 * the CPU reference plan (fp32 slots and the ranges poisoned
 * after their last use), the program order, the CUDA-graph scope instances, the names and
 * signatures of the generated kernels in the shipped cubin, and the step's facts (seed, data
 * source, graph mode and warm-up, predicted peaks, the step fingerprint checkpoints name it by).
 * Format 7 added the launch program's evaluation section (program.h: each forward point's eval
 * range, where the per-token losses are, or why there is none).
 * A distributed-optimizer step (format 4) also carries each tensor's owning rank and, for its
 * masters and Adam moments, their places in the optimizer-state region (buffer 1, compiler/plan/memplan.c):
 * each tensor at the offset its owner packs it to, so that the same offsets (and the launch
 * program's addresses) hold on every rank; stepc_open gives the tensors of other ranks no bytes.
 *
 * The format is binary and versioned: a header (magic, version, the sizes of the structs it
 * stores, the payload's length and FNV-1a hash) and the payload. A file from another version, a
 * truncated one or one with a flipped bit is refused with a message; every index, bound, count and
 * size in it is checked when it is read (image_check), with a message naming the field. Nothing here prints
 * or exits. */
#ifndef STEPC_IMAGE_H
#define STEPC_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "ir.h"
#include "runtime/program.h"
#include "runtime/rt.h"

#define STEPC_IMAGE_VERSION 13
#define STEPC_IMAGE_FILE "step.img"

/* One CUDA-graph scope instance of the plan (compiler/passes/scope.c): program points first..last. */
typedef struct {
  int32_t scope; /* IR_SCOPE_* bit index, or -1 for the full iteration */
  int32_t layer;
  int32_t phase; /* IR_PHASE_FORWARD, or IR_PHASE_BACKWARD (backward + its replays) */
  int32_t first, last;
} ImgScope;

/* One DDP gradient bucket (compiler/passes/schedule.c): main gradients bucket_grad[first .. first+ngrads),
 * reduced across the data-parallel ranks on the last micro-batch once they are complete: on the
 * CPU device (every op on its own) after op `after_op`; on cuda after op `fire_op`, whose launch
 * is the last to write any of them once the compiler's fusions are applied (schedule_bucket_fire). */
typedef struct {
  int32_t after_op;
  int32_t first, ngrads;
  int32_t fire_op;
  int64_t params; /* elements */
} ImgBucket;

typedef enum { IMG_MODE_EAGER = 0, IMG_MODE_FULL_ITERATION = 1, IMG_MODE_SCOPED = 2 } ImgMode;

/* The step's facts (fixed size). */
typedef struct {
  uint64_t fingerprint; /* step_fingerprint of the graph (checkpoints name the step by it) */
  uint64_t seed;        /* train.seed: parameter init, mock data, dropout */
  uint64_t kernel_list; /* rt_kernel_list_hash of the kernels the launch program names by handle */
  int64_t train_iters;
  int64_t vocab_size;
  int64_t seq_length;
  int32_t graph_mode;   /* ImgMode: the recipe's model.cuda_graph_impl */
  int32_t warmup_steps; /* model.cuda_graph_warmup_steps */
  int32_t data_text;    /* 1: windows of data_path's bytes; 0: mock tokens from the seed */
  int32_t nreplay;      /* recompute replay ops per micro-batch */
  int64_t cuda_peak;    /* the step's device peak as the plan names it: the arena and the
                           optimizer-state region, the launch scratch, cuBLASLt's and cuDNN's
                           workspaces (plan_device_peak) */
  int64_t cpu_peak;     /* the CPU (fp32) plan's */
  int64_t cpu_arena;
  int32_t sm_count;      /* the launch program's grids were sized for this many SMs */
  int32_t dp_size;       /* data-parallel ranks the step was planned for: world_size / (TP*PP*CP); the
                            graph is one rank's share (num_microbatches = gbs / (mbs * dp_size)) */
  int32_t dist_opt;      /* optimizer.use_distributed_optimizer (Megatron's ZeRO-1) */
  int32_t tp_size;       /* tensor-parallel ranks (0 or 1: none): the graph is one TP rank's shard,
                            world_size = dp_size * tp_size, TP ranks fastest (docs/parallelism.md) */
  int32_t ep_size;       /* expert-parallel ranks (0 or 1: none): the graph holds E/ep_size experts; the EP
                            groups are ep_size consecutive ranks inside the data-parallel ranks */
  int32_t ep_pad;        /* 0 */
  int64_t cpu_region;    /* the CPU plan's optimizer-state region (buffer 1; the CUDA plan's is
                            g->buffer_bytes[1]): the largest rank's shard, 0 without one */
  int64_t zero_stage_at; /* the distributed optimizer's staging on cuda (runtime/zero_coll.h): its offset
                            in the CUDA plan's arena (buffer 0) and its bytes (zc_staging_bytes), live
                            after the first bucket's fire point to the step's end (compiler/plan/memplan.c);
                            0, 0 without one */
  int64_t zero_stage_bytes;
  char data_path[1024];   /* as the recipe gave it (data.path is the user's file, read at run time) */
  char recipe[256];       /* the recipe's file name, for messages */
  char cuda_refusal[512]; /* "" when the CUDA backend runs the step, else why not */
  char cubin[64];         /* the cubin's file name in the artifact ("" none) */
} ImgFacts;

typedef struct {
  ImgFacts f;
  Graph *g;            /* tensors at the CUDA plan's slots (nominal dtypes) */
  int64_t *cpu_offset; /* per tensor: its slot in the CPU plan (fp32 for floats) */
  int64_t *cpu_bytes;
  int npoints, micro_points; /* the program: point -> op, micro-batch points first */
  int32_t *point_op;
  int32_t *poison_start; /* CPU: CSR over points (npoints + 1) into poison[] */
  int32_t *poison;       /* tensors whose CPU slot dies after the point: poisoned there */
  int npoison;
  ImgScope *scope;
  int nscope;
  RtGenKernels gen;  /* the generated kernels in the cubin, after kernel_list.h's */
  ImgBucket *bucket; /* DDP buckets in the order they fire */
  int nbucket;
  int32_t *bucket_grad; /* main-gradient tensor ids, in backward's completion order */
  int nbucket_grad;
  int32_t *owner;   /* per tensor: the distributed optimizer's owning rank (compiler/passes/schedule.c)
                       or -1 (every rank's, or no distributed optimizer) */
  int32_t *storage; /* per tensor: the tensor whose CUDA slot holds it: itself, or the one the compiler's
                       fusions put it on (compiler/passes/fusions.h: the logits for the fused loss's
                       dlogits, the main gradient a weight gradient is accumulated into by its
                       producer's kernel), which then needs no slot of its own (bytes 0) */
  int has_program;  /* 1: lp holds the launch program (the CUDA backend runs the step) */
  LaunchProgram lp; /* what the CUDA runtime plays (program.h); its points are point_op's */
} StepImage;

/* 0, or -1 with err. The graph, arrays and image are the caller's (image_free). */
int image_write(const char *path, const StepImage *im, char *err, size_t nerr);
int image_read(const char *path, StepImage *im, char *err, size_t nerr);
/* Writes a payload behind this build's header (magic, version, struct sizes, its length and hash):
 * what image_write does with the payload it lays out; the fuzzer seals its mutated payloads with
 * it so that they reach image_check. 0, or -1 with err. */
int image_seal(const char *path, const void *payload, size_t n, char *err, size_t nerr);
void image_free(StepImage *im);
/* Every fact of a read image that the runtime uses as an index, bound, count, divisor or size,
 * checked (image_check.c; image_read calls it). 0, or -1 with the field and what is wrong in why. */
int image_check(StepImage *im, char *why, size_t nwhy);
/* A graph with the CPU plan's slots applied (the arena, and the region for the tensors im->g keeps
 * in buffer 1): a copy of im->g (graph_free it). NULL on failure. */
Graph *image_cpu_graph(const StepImage *im);

#endif
