/* exec.h — the launch lowering: every op of a planned Graph (forward, backward, optimizer) to its
 * CUDA work — kernel launches with grid, block, shared memory and arguments, cuBLASLt GEMMs, cuDNN
 * attention calls, memsets and copies — through a per-op-kind dispatch table, with the CPU
 * reference's semantics (ir/ops/ files) at the IR's dtypes: bf16 activations and weights, fp32
 * master weights, main gradients, moments, norm statistics and loss.
 *
 * `stepc build` runs it on a recording device (runtime/record.h): program.c turns the records into
 * the launch program the artifact carries (runtime/program.h), which the runtime plays. Unit tests
 * (tests/unit/exec_fuse.c, exec_optim.c, dp_cuda.c) run it op by op on a recording device too.
 *
 * Storage: one allocation holding the plan's buffers, then the launch scratch (RT_SCRATCH_*: norm
 * and bias partial sums, global-norm partials, the flash backward's row sums, AdamW
 * hyper-parameters, dropout seeds, losses, per-micro-batch inputs, the current micro-batch's seed, the
 * multi-tensor tables, the initialisation seed); a tensor lives at its plan (buffer, offset), which must be
 * sized at nominal dtype sizes (memplan_apply writes them). The scratch is sized from the graph and the SM
 * count of the device (a recording device's: stepc build --sms), so the plan reports it.
 *
 * Fusions the lowering emits, as the compiler decided them (compiler/passes/fuse.c, fusions.h; each
 * keeps the IR's result, only skips a round trip), besides the pairs and chains:
 *  - a weight gradient whose only consumer is the ACCUM into its fp32 main gradient is accumulated
 *    there directly (cuBLASLt beta = 1 for LINEAR_WGRAD; the embedding, norm and bias kernels
 *    accumulate in fp32 by contract) and the ACCUM is skipped; this is also more accurate than a
 *    bf16 round trip;
 *  - CROSS_ENTROPY runs the fused forward+backward kernel in place over the logits, so its
 *    CROSS_ENTROPY_BWD is skipped and dlogits aliases the logits' storage; the per-token losses
 *    go to the lse tensor's storage (same size), which nothing else reads;
 *  - LINEAR_CROSS_ENTROPY (the output layer in chunks) runs its backward in its own launch, chunk
 *    by chunk over its logits-chunk workspace (RT_FUSE_LOSS_BWD at the skipped backward, whose dx
 *    it writes and whose dW it adds into the fp32 main gradient);
 *  - DROPOUT writes no mask: DROPOUT_BWD regenerates it from (seed, stream) (Philox, see
 *    docs/kernels.md), so the mask tensor is never written.
 *  - a current-scaling fp8 cast whose input's producer folds its amax (fusions.h amax) reads that
 *    amax slot instead of running fp8_amax_partial; a delayed cast never runs it (op_fp8.c).
 * The dropout RNG differs from the CPU executor's (Philox vs splitmix): masks agree in law, not
 * bit for bit; accuracy checks against the CPU run without dropout. */
#ifndef STEPC_RT_CUDA_EXEC_H
#define STEPC_RT_CUDA_EXEC_H

#include <stdint.h>

#include "ir.h"
#include "passes/fusions.h"
#include "runtime/rt.h"

typedef struct RtExec RtExec;

/* The parts of the launch scratch, in their order after the plan's buffers. */
enum {
  RT_SCRATCH_NORM,      /* norm and bias gradients' partial sums */
  RT_SCRATCH_GNORM,     /* global-norm partials */
  RT_SCRATCH_WORK,      /* the flash backward's row sums (the Mamba ops' workspaces are planned) */
  RT_SCRATCH_HPARAMS,   /* AdamW hyper-parameters */
  RT_SCRATCH_SEEDS,     /* one dropout seed per micro-batch */
  RT_SCRATCH_LOSSES,    /* one loss per micro-batch */
  RT_SCRATCH_INPUTS,    /* tokens and targets of every micro-batch */
  RT_SCRATCH_SEED_CUR,  /* the running micro-batch's seed */
  RT_SCRATCH_TABLES,    /* the multi-tensor groups' tables */
  RT_SCRATCH_INIT_SEED, /* train.seed for the initialisation launches */
  RT_SCRATCH_LOSS_DEN,  /* the step's loss denominator (fp32), staged with the inputs */
  RT_SCRATCH_AMAX,      /* the fp8 casts' amax partials (2 per SM, kernels/fp8.cuh) */
  RT_SCRATCH_TMAPS,     /* the TMA tensor maps (RT_TMAP_BYTES each) */
  RT_SCRATCH_PARTS
};

/* NULL on error with the message in d->err; *unsupported = 1 when the graph holds an op or a
 * dtype the CUDA backend does not run yet (the message says which). fz is the compiler's fusions
 * of g (fusions.h; fusions_new(g) for none), read while the executor lives. The generated kernels
 * (fz's chains') must be d->gen, set before. */
RtExec *rt_exec_new(RtDevice *d, const Graph *g, const Fusions *fz, int *unsupported);
void rt_exec_free(RtExec *x);
/* 1 when a lowering failed on shapes its op's CUDA kernels do not take (an fp8 cast's width not a
 * multiple of 16, say): the step still runs on the CPU device, but has no launch program (the
 * message in d->err says why); 0 when it failed on anything else. */
int rt_exec_refused(const RtExec *x);
/* Bytes of the plan's buffers (the scratch follows them), and of the launch scratch. */
int64_t rt_exec_arena_bytes(const RtExec *x);
int64_t rt_exec_scratch_bytes(const RtExec *x);
/* The cuDNN attention workspace the graph's shapes predict (ir/ops attn_cudnn_workspace) for the
 * attention ops cuDNN runs; rt_sdpa_workspace_bytes is what cuDNN asked for. */
int64_t rt_exec_attn_workspace(const RtExec *x);
CUdeviceptr rt_exec_ptr(const RtExec *x, int tensor);
/* Where launch arguments point: 0 the allocation (the plan's buffers first), 1 the scratch in it. */
CUdeviceptr rt_exec_base(const RtExec *x, int which);
/* FNV-1a of where everything lives: arena and scratch sizes, buffer bases, every tensor's slot
 * and the compiler's fusions (aliases, sinks, skipped ops, chains). */
uint64_t rt_exec_layout_hash(const RtExec *x);

/* Part `part` of the launch scratch: its bytes, and in *at its offset from the allocation's start
 * (NULL: not wanted); -1 for no such part. */
int64_t rt_exec_scratch_part(const RtExec *x, int part, int64_t *at);
/* The multi-tensor tables' words as written at open (the scratch's RT_SCRATCH_TABLES part). */
const uint64_t *rt_exec_tables(const RtExec *x, int64_t *words);
/* The TMA tensor maps as written at open (the RT_SCRATCH_TMAPS part, in this order), *n of them. */
const RtTmap *rt_exec_tmaps(const RtExec *x, int *n);
/* The initialisation (compiler/codegen/launch/program.c record_init plays them in this order):
 * rt_exec_init_zero zeroes the plan's buffers; then rt_exec_init_param for each tensor i initialises
 * param i (and its master) exactly as the CPU executor's cpu_exec_init_params does, in one launch
 * (none for a param initialised to zeros or not at all, or another tensor), reading train.seed from
 * the scratch's RT_SCRATCH_INIT_SEED slot (the player writes it first). */
int rt_exec_init_zero(RtExec *x);
int rt_exec_init_param(RtExec *x, int i);
/* The fp32 tensor param i's initialisation writes (its f32 argument, the first): its master, or the
 * param itself when it is fp32 (its own master); -1 none. Every one, whichever rank of the
 * distributed optimizer holds it: the launch program names it (LpInitMaster) and the runtime nulls
 * it on the others. */
int rt_exec_init_master(const RtExec *x, int i);
/* A micro-batch's ends: micro_begin copies micro-batch `micro`'s staged tokens, targets and
 * dropout seed into the fixed slots every op reads (so no launch depends on which micro-batch
 * runs); micro_end copies the loss to the micro-batch's slot. */
int rt_exec_micro_begin(RtExec *x, int micro);
int rt_exec_micro_end(RtExec *x, int micro);
/* Whether op `op` launches anything (it is not fused into another op). */
int rt_exec_op_runs(const RtExec *x, int op);
/* The fusion op `op` runs (fusions.h's FuseKind: 1 LINEAR+ADD, 2 DROPOUT+ADD, 3 ADD+norm, 4 a
 * generated chain, 5 a multi-tensor GRAD_SUMSQ run, 6 a multi-tensor ADAMW run; 0 none) and, through *peer,
 * its group's first op (-1 none). */
int rt_exec_fusion(const RtExec *x, int op, int *peer);
/* The table of the multi-tensor group op `op` runs (fusion 5 GRAD_SUMSQ, 6 ADAMW; layout in
 * kernels/launch.h): its rows of `width` 8-byte words, as written to the device at open, and the
 * group's chunk count (the launch's grid). 0, or -1 when op runs no such group. */
int rt_exec_multi_table(const RtExec *x, int op, const uint64_t **words, int *rows, int *width,
                        int64_t *chunks);
/* ZeRO-1 (the distributed optimizer): what restricts the optimizer to one rank's shard without
 * changing any element's arithmetic (the program carries these as facts: runtime/program.h).
 *  - rt_exec_norm_partials: GRAD_SUMSQ op `op`'s slice [first, first + count) of the global-norm
 *    partials (floats), whether it runs alone or in a multi-tensor group; rt_exec_norm_buffer:
 *    the whole partials buffer (CLIP_COEF sums it in a fixed order) and its float count.
 *  - rt_exec_multi_keep: rewrites the multi-tensor groups' tables (synchronously): a row whose
 *    gradient has keep_sumsq / keep_adamw[tensor] = 0 gets n = 0, so its chunks' blocks do
 *    nothing (a norm partial of +0, no update); the launches and the other rows are unchanged.
 *  - rt_exec_adamw_hparams: the hyper-parameter launch ADAMW op o makes before its update when
 *    it is the first of its setting (nothing otherwise), for a rank that skips that update. */
int rt_exec_norm_partials(const RtExec *x, int op, int64_t *first, int64_t *count);
CUdeviceptr rt_exec_norm_buffer(const RtExec *x, int64_t *count);
int rt_exec_multi_keep(RtExec *x, const uint8_t *keep_sumsq, const uint8_t *keep_adamw);
int rt_exec_adamw_hparams(RtExec *x, int o);
/* Enqueues op o alone (nothing when it is fused into another), in the order the caller keeps. */
int rt_exec_run_op(RtExec *x, int o);
/* Evaluation lowering (stepc_eval, runtime/program.h's eval section): while on, a forward op is
 * lowered as an evaluation runs it — dropout off (op_for_eval), the chunked output layer's loss
 * without its fused backward (no dx, nothing added to the main gradient). */
void rt_exec_set_eval(RtExec *x, int on);
/* on: lower the next ops as points run alone, outside a step (program.h LpPoint.solo): a cast reads
 * no amax another point's launch folded this step, and runs its own amax pass. */
void rt_exec_set_solo(RtExec *x, int on);
/* 1: the collectives lowered until it is reset run on the launch program's communication stream
 * (RtColl.side: compiler/passes/comm_overlap.c). */
void rt_exec_set_comm_side(RtExec *x, int on);
/* Why the forward ops cannot be played alone as an evaluation (into why), or 0 when they can: a
 * forward op fused into a backward op's launch, a backward op other than the loss's fused into a
 * forward launch, a forward op that writes a parameter, a gradient or optimizer state, a random
 * op op_for_eval cannot turn off. */
int rt_exec_eval_refusal(const RtExec *x, char *why, size_t nwhy);
/* Attention op o's lowering: 0 not an attention op that launches; 1 stepc's flash kernels; 2 a
 * cuDNN call alone (attention_backend=fused, or a shape stepc's kernels do not take); 3 a cuDNN call
 * with a flash alternative (attention_backend=auto). rt_exec_run_attn_flash enqueues a kind-3 op on
 * stepc's flash kernels, as attention_backend=flash lowers it (the alternative the runtime plays
 * when cuDNN cannot run it: runtime/program.h); RT_ERROR for any other op. */
int rt_exec_attn_kind(const RtExec *x, int o);
int rt_exec_run_attn_flash(RtExec *x, int o);

#endif
