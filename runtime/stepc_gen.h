/* stepc_gen.h — the contract between a generated step.c (stepc build) and the library.
 *
 * step.c holds the planned step as code: one function per scheduled op, in plan order, each
 * holding that op's CUDA work as literals — kernel launches (kernel, grid, block, shared memory
 * and every argument: arena and scratch offsets, sizes, scalars), cuBLASLt GEMMs (every field of
 * the call) and memsets. `stepc build` writes them by running the executor's launch lowering
 * (runtime/cuda/op_*.c) on a recording device (runtime/record.h), so step.c launches exactly what
 * the executor's dispatch would. The micro-batch program runs once per micro-batch (forward,
 * backward with recompute replays; main gradients accumulate), the tail once per step (global
 * norm, clipping, AdamW, zeroing).
 *
 * It defines one object, `stepc_generated_step`, that the library finds when step.c is linked
 * into the same shared object (libstep.so): the library declares it weak, so the stepc
 * executable itself, which has no step.c, runs the schedule through its own loop instead.
 *
 * At open the library checks the object against the step it rebuilt from the artifact's
 * recipe.lua: the op sequence (fingerprint), the kernel list and GEMM fields step.c was written
 * against (runtime_hash), and on cuda where every tensor lives (layout); any difference is
 * ERR_MISMATCH ("the artifact is out of date"), never a launch into the wrong bytes. Each op's
 * function first calls stepc_gen_op(), which checks its program point and, on the CPU reference
 * device, runs the op there (returning 1: its launches are skipped).
 *
 * step.c repeats these declarations textually (it compiles without stepc's include path; the
 * artifact build compiles it with this header force-included, so a drift is a compile error), and
 * STEPC_GEN_ABI changes whenever this file changes. */
#ifndef STEPC_GEN_H
#define STEPC_GEN_H

#define STEPC_GEN_ABI 2

typedef struct stepc_gen_ctx stepc_gen_ctx;

/* Program point `point` = op `op` of kind `kind` starts: 0 launch its work, 1 it ran on the host
 * (cpu device), -1 an error (the handle has the message). */
int stepc_gen_op(stepc_gen_ctx *c, int point, int op, int kind);
/* Device address of allocation `which`: 0 the plan's arena, 1 the executor's scratch. */
unsigned long long stepc_gen_base(stepc_gen_ctx *c, int which);
/* Launches kernel number `kernel` (kernels/kernel_list.h order) with args, as cuLaunchKernel. */
int stepc_gen_launch(stepc_gen_ctx *c, int kernel, unsigned gx, unsigned gy, unsigned gz, unsigned block, unsigned smem,
                     void **args);
/* Runs one cuBLASLt GEMM; gemm points at a struct with runtime/rt.h's RT_GEMM_FIELDS in order
 * (long long, unsigned long long pointers, float), size its sizeof. */
int stepc_gen_gemm(stepc_gen_ctx *c, const void *gemm, unsigned long size);
/* Runs one cuDNN fused attention call; sdpa points at a struct with runtime/rt.h's RT_SDPA_FIELDS
 * in order, size its sizeof. */
int stepc_gen_sdpa(stepc_gen_ctx *c, const void *sdpa, unsigned long size);
int stepc_gen_memset(stepc_gen_ctx *c, unsigned long long dst, unsigned long long bytes);
int stepc_gen_copy(stepc_gen_ctx *c, unsigned long long dst, unsigned long long src, unsigned long long bytes);

typedef struct {
  int abi;                                /* STEPC_GEN_ABI */
  unsigned long long fingerprint;         /* the op sequence (step_fingerprint) */
  unsigned long long runtime_hash;        /* kernel list and GEMM fields it was written against */
  unsigned long long layout;              /* rt_exec_layout_hash of the recorded executor */
  int points, micro_points;               /* scheduled ops; those in the micro-batch program */
  int (*const *point)(stepc_gen_ctx *c);  /* every op's function, in plan order */
  int (*micro)(stepc_gen_ctx *c);         /* the micro-batch program: point[0 .. micro_points) */
  int (*tail)(stepc_gen_ctx *c);          /* the tail: point[micro_points .. points) */
  int sm_count;                           /* the SM count grids were sized for */
  const char *recipe;                     /* the recipe it was built from, for messages */
} stepc_generated;

#endif
