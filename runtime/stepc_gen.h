/* stepc_gen.h — the contract between a generated step.c (stepc build) and the library.
 *
 * step.c holds the planned step as code: one stepc_gen_op() call per scheduled op, in plan
 * order, split into the micro-batch program (run once per micro-batch) and the tail (reduction,
 * clipping, AdamW, zeroing; once per step). It defines one object, `stepc_generated_step`, that
 * the library finds when step.c is linked into the same shared object (libstep.so): the library
 * declares it weak, so the stepc executable itself, which has no step.c, runs the schedule
 * through its own loop instead.
 *
 * Each call passes literals the library checks against the step it rebuilt from the artifact's
 * recipe.lua: the program point, the op's id and kind, and (on cuda) its first output's arena
 * offset in the nominal-dtype plan. A mismatch is an error ("artifact out of date"), never a
 * silent divergence. What a call launches — kernels and cuBLASLt GEMMs with the tensors' device
 * pointers, shapes and attributes — is the runtime's per-op-kind dispatch (runtime/cuda/op_*.c)
 * or the CPU reference kernel; step.c decides what runs and in which order.
 *
 * step.c repeats these declarations textually (it compiles without stepc's include path), so
 * STEPC_GEN_ABI changes whenever this file changes. */
#ifndef STEPC_GEN_H
#define STEPC_GEN_H

#define STEPC_GEN_ABI 1

typedef struct stepc_gen_ctx stepc_gen_ctx;

/* Runs program point `point` = op `op` of kind `kind`; out_offset is the op's first output's
 * offset in the nominal-dtype arena (-1 when it has none). 0, or -1 with the handle's message. */
int stepc_gen_op(stepc_gen_ctx *c, int point, int op, int kind, long long out_offset);

typedef struct {
  int abi;                           /* STEPC_GEN_ABI */
  unsigned long long fingerprint;    /* the step's op sequence (api_fingerprint) */
  int points, micro_points;          /* scheduled ops; those in the micro-batch program */
  int (*micro)(stepc_gen_ctx *c);    /* the micro-batch program */
  int (*tail)(stepc_gen_ctx *c);     /* the tail */
  const char *recipe;                /* the recipe it was built from, for messages */
} stepc_generated;

#endif
