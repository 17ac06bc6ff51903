/* fusions.h — the compiler's fusion decisions about one graph (compiler/passes/fuse.c decides them,
 * before the memory plan): which ops the CUDA launch lowering runs as one launch, which tensors use
 * another's storage on the device, and the generated elementwise chains. They are the compiler's,
 * not the graph's: the IR (ir/ir.h) holds the step's semantics only, which the CPU reference runs
 * op by op; the memory plan, the schedule's bucket fire points, the cost model, the launch lowering
 * and the profile read these decisions beside the graph they are about. The runtime never sees
 * them: the step image carries what they decided (the launch program, and per tensor the tensor
 * whose storage it uses: runtime/image.h).
 *
 * A Fusions is sized for one graph (nop ops, nt tensors) and made with "no fusion" everywhere
 * (fusions_new); fuse_build (fuse.h) records the decisions. */
#ifndef STEPC_FUSIONS_H
#define STEPC_FUSIONS_H

#include <stdint.h>

#include "ir.h"

/* Fusions the compiler decides and the CUDA launch lowering runs: the op that runs a fused group
 * carries its kind and `peer`; the ops it absorbed carry `skip`. */
typedef enum {
  FUSE_NONE,
  FUSE_LINEAR_ADD,   /* at the ADD: one GEMM D = x W^T (+ b) + residual into the add's output */
  FUSE_DROPOUT_ADD,  /* at the ADD: dropout_residual_forward */
  FUSE_ADD_NORM,     /* at the norm: residual_{rms,layer}norm_forward writes the sum and the norm */
  FUSE_EW,           /* at a chain's last op: its generated elementwise kernel (EwChain) */
  FUSE_SUMSQ_MULTI,  /* at the last of a run of GRAD_SUMSQ ops (peer the first): norm_squared_multi */
  FUSE_ADAMW_MULTI,  /* at the last of a run of ADAMW ops of one setting: adamw_multi */
  FUSE_ROPE_QKV,     /* SPLIT_QKV, ROPE q, ROPE k at the second ROPE (peer the split): rope_split_qkv;
                        ROPE, ROPE (inverse, the gradients of k and q), CONCAT_QKV at the concat
                        (peer the first ROPE): rope_concat_qkv */
  FUSE_WGRAD_STORE,  /* a LINEAR_WGRAD or GROUPED_LINEAR_WGRAD sunk into its main gradient, the
                        gradient's first writer of a one-micro-batch step: stores the product
                        (cuBLASLt beta = 0; the grouped kernels' store = 1), and the ZERO of that
                        gradient placed before it in the backward is skipped (peer -1) */
  FUSE_LOSS_BWD,     /* at a LINEAR_CROSS_ENTROPY_BWD (skipped) whose forward (peer, an earlier op)
                        runs it in its own launch, chunk by chunk over the forward's logits chunk:
                        the ops peer..o form the group, live as one launch; a ZERO of the main
                        gradient between them (one micro-batch, optimizer.c) is skipped and the
                        launch zeroes the gradient before its first chunk */
  FUSE_NORM_BWD_ADD, /* at the ADD (backward) that sums a norm backward's dx (peer, the op before,
                        skipped) with another gradient: {rms,layer}norm_backward writes dx rounded
                        to bf16 plus the addend, rounded again: the bits of the two kernels */
  FUSE_COUNT
} FuseKind;

/* A generated elementwise chain (compiler/passes/ew_fuse.h): ops op[0] .. op[nops - 1], increasing
 * ids (passable ops that launch nothing may lie between them). Kernel parameters, in order: each
 * stored output, each external input, n, then each op's scalars (its EW_OPS row's,
 * compiler/passes/ew_fuse.c). */
#define EW_MAX_CHAIN 4
#define EW_MAX_IO 8
typedef struct {
  int first, nops;
  int op[EW_MAX_CHAIN];
  int nin, in[EW_MAX_IO];        /* external inputs (tensor ids), in order of first use */
  int store[EW_MAX_CHAIN];       /* per op: its output is written (read after the chain, or last) */
  char scalars[EW_MAX_CHAIN][4]; /* per op: its scalar parameters, f a.f[0] as float, S the
                                   dropout seed slot (pointer), U a.i[0] as unsigned */
  int kernel;                    /* the generated kernel's index (after kernel_list.h's) */
} EwChain;

typedef struct Fusions {
  int nop, nt; /* the graph's, when made */
  int dp;      /* the data-parallel ranks the step is planned for (1 unless the caller sets it before
                  fuse_build): a gradient's norm taken in its producer needs it unreduced, so only at 1 */
  /* per op */
  uint8_t *fuse; /* FuseKind of the group this op runs */
  uint8_t *skip; /* launches nothing on CUDA: absorbed by a fused group, a sunk ACCUM, or
                    the fused loss's backward (FUSE_LOSS_BWD's too) */
  int *peer;     /* fused groups: the first op of the group (this op is the last), else -1 */
  int *amax;     /* the fp8 amax slot (0 .. namax - 1) this op's launch writes, a kernel that produces a
                    tensor an fp8 cast reads folding max|y| of its output into it, or that this op's
                    current-scaling cast reads instead of its amax pass (fuse.c fuse_amax); else -1 */
  int namax;     /* the slots: one per (producer, cast) pair */
  /* per tensor */
  int *alias;     /* the tensor whose storage it uses on CUDA: itself, or the logits for the fused
                     loss's dlogits */
  int *sink;      /* a weight gradient accumulated straight into this main gradient by its
                     producer's kernel (its ACCUM skipped), or -1 */
  int *norm_by;   /* a main gradient: the GROUPED_LINEAR_WGRAD (sunk into it, its last writer) whose
                     kernel also writes its global-norm partials, one per output tile, so that the
                     optimizer's GRAD_SUMSQ of it reads nothing (fuse.c fuse_wgrad_norm); else -1 */
  EwChain *chain; /* the fused elementwise chains */
  int nchain;
} Fusions;

/* "No fusion" for every op and tensor of g: fuse FUSE_NONE, skip 0, peer and amax -1, alias itself,
 * sink and norm_by -1, no chains, dp 1. NULL out of memory; fusions_free after. */
Fusions *fusions_new(const Graph *g);
void fusions_free(Fusions *fz);
/* The tensor whose CUDA storage tensor t uses: its alias, or the main gradient it is sunk into,
 * else t itself. */
int fusions_storage(const Fusions *fz, int t);

#endif
