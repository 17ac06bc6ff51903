/* exec_internal.h — what the executor's op families (op_*.c) share with exec.c. */
#ifndef STEPC_RT_CUDA_EXEC_INTERNAL_H
#define STEPC_RT_CUDA_EXEC_INTERNAL_H

#include "codegen/launch/exec.h"
#include "ops/ops.h"

#define RT_MAX_HP 8 /* distinct (beta1, beta2, eps) AdamW settings */

/* The fusions the compiler decided (compiler/passes/fuse.c; fusions.h's FuseKind): the op that runs a
 * group carries the kind in RtExec.fz->fuse and the group's first op in RtExec.fz->peer. The memory
 * plan keeps every output of a group off everything the group reads, so each writes straight to its
 * slot. */
enum {
  RT_FUSE_NONE = FUSE_NONE,
  RT_FUSE_LINEAR_ADD = FUSE_LINEAR_ADD,
  RT_FUSE_DROPOUT_ADD = FUSE_DROPOUT_ADD,
  RT_FUSE_ADD_NORM = FUSE_ADD_NORM,
  RT_FUSE_EW = FUSE_EW,
  RT_FUSE_SUMSQ_MULTI = FUSE_SUMSQ_MULTI, /* ops peer..o: one norm_squared_multi over their table */
  RT_FUSE_ADAMW_MULTI = FUSE_ADAMW_MULTI, /* ops peer..o: one adamw_multi over their table */
  RT_FUSE_ROPE_QKV = FUSE_ROPE_QKV,       /* ops o-2..o: QKV split + RoPE (or its gradient), one kernel */
  RT_FUSE_WGRAD_STORE =
      FUSE_WGRAD_STORE,             /* op o alone: its weight gradient stored, not added, into the main one */
  RT_FUSE_LOSS_BWD = FUSE_LOSS_BWD, /* op o skipped: its forward (peer) runs it chunk by chunk */
  RT_FUSE_NORM_BWD_ADD = FUSE_NORM_BWD_ADD, /* the ADD o: its peer's norm backward adds the addend */
};

struct RtExec {
  RtDevice *d;
  const Graph *g;
  const Fusions *fz; /* the compiler's fusions (fusions.h): per tensor alias and sink; per op skip (fused
                        into another op), fuse (RT_FUSE_* of the group it runs) and peer (the group's
                        first op, or -1); the generated chains */
  CUdeviceptr arena;
  int64_t arena_bytes, buf_base[IR_MAX_BUFFERS];
  /* the launch scratch: after the plan's buffers in the same allocation, carved below */
  CUdeviceptr scratch;
  int64_t scratch_bytes;
  CUdeviceptr norm_partial; /* (norm_groups, 2 C) fp32, C the widest normalised/biased row */
  int norm_groups;
  CUdeviceptr gn_partial; /* (n_partial) fp32: a slice of gn_groups per GRAD_SUMSQ op run alone, of
                            its chunk count per multi-tensor group, in op order */
  int gn_groups, n_partial;
  CUdeviceptr multi_table; /* (multi_words) u64: the multi-tensor groups' tables (op_optim.c) */
  uint64_t *multi_host;    /* the same words on the host, written when the executor opens */
  int64_t multi_words;
  CUdeviceptr work;         /* the attention backward's (B, H, T) fp32 row sums (the Mamba ops' workspaces
                               are planned tensors: ir/ops/mamba.c) */
  CUdeviceptr hp;           /* (RT_MAX_HP, 8) fp32 AdamW hyper-parameters */
  CUdeviceptr seeds;        /* (num_microbatches) u64 dropout seeds */
  CUdeviceptr seed_cur;     /* u64: the seed of the micro-batch running now; dropout reads only this
                               fixed slot, so a graph captured once serves every micro-batch */
  CUdeviceptr losses;       /* (num_microbatches) fp32, each micro-batch's mean loss */
  CUdeviceptr init_seed;    /* u64: train.seed, which the initialisation launches read */
  CUdeviceptr rank;         /* int32 [2]: this rank's index in its TP group, in its EP group (written at
                               open after init_seed: runtime/cuda/player.h rt_player_set_ranks) */
  CUdeviceptr loss_den;     /* fp32: the step's loss denominator D (ir/ops/loss.c), which the host counts
                               from the step's targets and stages with them (runtime/api.c api_loss_den) */
  CUdeviceptr amax_partial; /* (amax_parts) fp32: an fp8 cast's per-block maxima (op_fp8.c), or those of a
                               producer folding its output's amax (common.cuh amax_fold) */
  int amax_parts;           /* gn_groups, or the widest such producer's grid */
  CUdeviceptr amax_slot;    /* (fz->namax, 2) u32: each fused amax's value and ticket (fusions.h amax) */
  int64_t scratch_part[RT_SCRATCH_PARTS], scratch_at[RT_SCRATCH_PARTS]; /* bytes, offset in the scratch */
  CUdeviceptr inputs; /* (num_microbatches, 2, B*T) int32: tokens, targets */
  int64_t ntok;       /* B*T */
  int nmb;
  int tp; /* the tensor-parallel group's size (1: none): the shards' tp_size (ir.h Tensor.tp_*) */
  /* per op */
  uint8_t *attn_cudnn;    /* attention ops cuDNN runs (rt_attn_resolve), the others stepc's kernels */
  int *slot;              /* GRAD_SUMSQ: its partial slice's first float; ADAMW: its hp slot
                             (+RT_MAX_HP when it computes the slot's values first);
                             LINEAR_CROSS_ENTROPY: the backward op its launch runs (RT_FUSE_LOSS_BWD) */
  int64_t *multi_at;      /* the op that runs a multi-tensor group: its table's first word, else -1 */
  int64_t *multi_chunks;  /* ... and the group's chunk count (its grid) */
  float *dloss;           /* (LINEAR_)CROSS_ENTROPY: the constant loss gradient of its fused backward
                             (each kept token's gradient weighs it / D, D read at loss_den) */
  int nfused[FUSE_COUNT]; /* groups (chains for RT_FUSE_EW) fused, by RT_FUSE_* */
  CUdeviceptr tmaps;      /* (ntmap, RT_TMAP_BYTES): the TMA tensor maps kernels read (rt_op_tmaps) */
  RtTmap *tmap;           /* the same maps as descriptors, written when the executor opens */
  int ntmap;
  int *tmap_of;  /* per op: its first map's index, or -1 */
  int refused;   /* 1: a launch refused its op's shapes (rt_exec_refuse) */
  int eval;      /* 1: lowering the evaluation (rt_exec_set_eval): dropout off, no fused backward */
  int comm_side; /* 1: lowering a collective for the communication stream (rt_exec_set_comm_side) */
  int solo;      /* 1: lowering a point to run alone (rt_exec_set_solo): no fused fp8 amax */
};

typedef int (*RtOpFn)(RtExec *x, const Op *op);
/* One row of the per-kind launch table: each family file (op_*.c) lists its ops' rows, ended by
 * {OP_COUNT, NULL}; exec.c gathers them. */
typedef struct {
  OpKind kind;
  RtOpFn run;
} RtOpRow;
/* The families: op_basic.c (elementwise, embedding, RoPE, dropout, activations, QKV split), op_dense.c
 * (norms, linears), op_attn_loss.c (flash / cuDNN attention, cross entropy), op_attn_unfused.c,
 * op_optim.c (norm, clipping, LR, AdamW), op_moe.c (MLA heads, router, dispatcher, grouped experts),
 * op_mamba.c (the Mamba-2 mixer, gate and group norm), op_fp8.c (fp8 casts and products). Their
 * launches are static; what one family
 * hands another is declared below. */
extern const RtOpRow RT_OPS_ATTN_LOSS[], RT_OPS_ATTN_UNFUSED[], RT_OPS_BASIC[], RT_OPS_DENSE[], RT_OPS_FP8[],
    RT_OPS_MAMBA[], RT_OPS_MOE[], RT_OPS_OPTIM[], RT_OPS_TP[];
/* The op workspace (RT_SCRATCH_WORK) bytes a tensor-parallel op needs (op_tp.c): a sequence gather /
 * scatter's member-major staging, the vocab-parallel embedding's local token ids, the vocab-parallel
 * cross entropy's row statistics; 0 for any other op. */
int64_t rt_tp_workspace(const Graph *g, const Op *op);

int rt_attn_resolve(RtExec *x, int *unsupported);

/* DROPOUT and its backward (op_basic.c; tests/unit/exec_fuse.c drives them alone). */
int rt_op_dropout(RtExec *x, const Op *op);
int rt_op_dropout_bwd(RtExec *x, const Op *op);

/* What the dense rows hand to op_moe.c: a LINEAR / LINEAR_DGRAD whose weight is fp32 (the MoE
 * router's), and a SOFTMAX / SOFTMAX_BWD that is not a causal attention softmax. */
int rt_op_router_linear(RtExec *x, const Op *op);
int rt_op_router_linear_dgrad(RtExec *x, const Op *op);
int rt_op_softmax_rows(RtExec *x, const Op *op);
/* The table rows of the multi-tensor group op o runs (op_optim.c, layout in kernels/launch.h),
 * into w (NULL: only counted), and the group's chunk count. RT_OK, or RT_ERROR with the reason. */
int rt_multi_rows(const RtExec *x, int o, uint64_t *w, int64_t *chunks);
/* The output tiles (= blocks) of GROUPED_LINEAR_WGRAD op's launch (op_moe.c): the norm partials it
 * writes for its main gradient (fusions.h norm_by). */
int64_t rt_grouped_wgrad_tiles(const RtExec *x, const Op *op);
/* The TMA tensor maps op's launch reads, into t (NULL: only counted; else their tensors' addresses
 * too); their count, 0 for an op that reads none: the warp-specialised grouped GEMMs' two, bf16
 * (op_moe.c) and fp8 (op_fp8.c). rt_op_tmaps (exec.c) asks both. */
int rt_moe_tmaps(const RtExec *x, const Op *op, RtTmap *t);
int rt_fp8_tmaps(const RtExec *x, const Op *op, RtTmap *t);
int rt_op_tmaps(const RtExec *x, const Op *op, RtTmap *t);
/* Whether the permuted rows whose segments (or row_of) tensor t holds may include rows of no expert,
 * which a grouped GEMM leaves alone (op_moe.c): its output is zeroed first. */
int rt_moe_may_leave_rows(const RtExec *x, int t);
/* The fp32 words of the amax scratch a grouped fp8 cast of op uses (its partials and the experts'
 * scales; op_fp8.c), 0 for another op. */
int64_t rt_fp8_grouped_scratch(const RtExec *x, const Op *op);
/* A launch's refusal of shapes its kernels do not take (exec.h rt_exec_refused): the message into
 * d->err; returns RT_ERROR. */
int rt_exec_refuse(RtExec *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Where op's i-th tensor map lies in the scratch (exec.c). */
CUdeviceptr rt_exec_tmap(const RtExec *x, const Op *op, int i);
/* Where the norm partials of main gradient `grad` start (the slice of the GRAD_SUMSQ that reads it,
 * op_optim.c), or 0 with the reason. */
CUdeviceptr rt_exec_norm_slice(const RtExec *x, int grad);

/* The LINEAR -> ADD pair as one GEMM (op_dense.c; exec.c's analyse chose it). */
int rt_op_linear_add(RtExec *x, const Op *lin, const Op *add);
/* FUSE_NORM_BWD_ADD at the ADD: the norm backward (skipped op `norm`) writes dx + the add's other input. */
int rt_op_norm_bwd_add(RtExec *x, const Op *norm, const Op *add);
static inline int rt_op_index(const RtExec *x, const Op *op) { return (int)(op - x->g->op); }

/* A dropout op's p as the lowering being recorded uses it: 0 in an evaluation (op_for_eval). */
static inline float rt_dropout_p(const RtExec *x, const Op *op) { return x->eval ? 0.0f : (float)op->a.f[0]; }

/* The fused fp8 amax (fusions.h amax, kernels/common.cuh amax_fold): the slot op's launch writes (a
 * producer, which leaves its blocks' maxima in amax_partial on the way) or its cast reads instead of
 * running its amax pass; 0 for none. The producers' 1-D grids (one partial a block): rt_norm_blocks
 * for a norm forward or its one-pass backward (op_dense.c), rt_glu_blocks for a gated activation
 * either way, rt_rope_qkv_blocks for the fused RoPE backward's concat (a block a token row; op_basic.c),
 * rt_adamw_blocks for an fp8 primary weight's AdamW, alone (op_optim.c). In the evaluation's and a
 * point's solo lowering (rt_exec_set_solo) there is none. */
CUdeviceptr rt_amax_slot(const RtExec *x, const Op *op);
unsigned rt_norm_blocks(const RtExec *x, const Op *op);
unsigned rt_rope_qkv_blocks(const RtExec *x, const Op *op);
unsigned rt_adamw_blocks(const RtExec *x, const Op *op);
unsigned rt_glu_blocks(const RtExec *x, const Op *op);

/* Shorthands. */
static inline const Tensor *rt_t(const RtExec *x, int id) { return &x->g->t[id]; }
static inline CUdeviceptr rt_in(const RtExec *x, const Op *op, int i) { return rt_exec_ptr(x, op->in[i]); }
static inline CUdeviceptr rt_out(const RtExec *x, const Op *op, int i) { return rt_exec_ptr(x, op->out[i]); }
static inline int64_t rt_numel(const RtExec *x, int id) { return tensor_numel(&x->g->t[id]); }

#endif
