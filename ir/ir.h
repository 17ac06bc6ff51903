/* ir.h — the graph IR: tensors, ops from one op table, and the tags every later pass works on.
 *
 * A Graph is a flat list of tensors and a list of ops in a valid execution order (builders append
 * an op only after its inputs exist). Each op carries its tags: layer, module path, phase, the
 * recompute labels whose Megatron boundary contains it and the per-layer CUDA-graph scopes that
 * would capture it (docs/megatron-rules.md §2.2, §3.2). Backward ops inherit the tags
 * of the forward op they differentiate (their `fwd`), with phase IR_PHASE_BACKWARD.
 *
 * A tensor's storage is (buffer, offset, bytes), written by a memory plan (graph_plan_trivial for
 * now). Executors reach bytes only through that triple, so a planner that reuses memory can run
 * on them unchanged. What the compiler decides later about running the graph (its fusions:
 * compiler/passes/fusions.h) is the compiler's and lives beside the graph, not in it.
 *
 * Errors: building functions return -1 and leave a message in g->err (the first error sticks);
 * nothing here prints or exits. */
#ifndef STEPC_IR_H
#define STEPC_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ops/op_list.h"

#define IR_MAX_DIMS 4
#define IR_MAX_IN 8
#define IR_MAX_OUT 5
#define IR_MAX_IATTR 8
#define IR_MAX_FATTR 4
#define IR_NAME_MAX 112
#define IR_MODULE_MAX 80
#define IR_MAX_BUFFERS 8
/* Bounds that keep every size sum in int64: a tensor holds at most IR_MAX_NUMEL elements (at most
 * 8 bytes each, so 2^43 bytes) and a graph at most IR_MAX_TENSORS tensors, so the sum of all their
 * bytes, and with it any arena offset, stays below 2^62 (STEPC-32 in docs/rules.md). */
#define IR_MAX_NUMEL ((int64_t)1 << 40)
#define IR_MAX_TENSORS (1 << 19)

typedef enum {
#define IR_OP_ENUM(NAME, sym) OP_##NAME,
  OP_LIST(IR_OP_ENUM)
#undef IR_OP_ENUM
      OP_COUNT
} OpKind;

/* Nominal dtypes (what the device will store). The CPU executor stores every floating tensor in
 * its own precision (fp32, or fp64 for gradient checks); see graph_plan_trivial. */
/* DT_F8E4M3 / DT_F8E5M2: fp8 (OCP E4M3 with no infinities, and E5M2), one byte; the CPU executor
 * keeps their values as floats (ir/ops/fp8.c). */
typedef enum { DT_F32, DT_BF16, DT_F16, DT_F64, DT_I32, DT_I64, DT_U8, DT_F8E4M3, DT_F8E5M2, DT_COUNT } DType;

typedef enum {
  ROLE_PARAM,     /* compute weights (bf16 under model.bf16), persistent */
  ROLE_MASTER,    /* fp32 master copy of a bf16 param, persistent */
  ROLE_GRAD,      /* fp32 main gradient, accumulated over micro-batches, persistent */
  ROLE_OPTIM,     /* Adam moments, step counter, lr, norm and clip scalars, persistent */
  ROLE_INPUT,     /* tokens and targets of one micro-batch */
  ROLE_ACT,       /* forward activations */
  ROLE_ACT_GRAD,  /* gradients flowing backward: of activations, and one micro-batch's weight grads */
  ROLE_WORKSPACE, /* scratch that lives within one op */
  ROLE_PARAM_FP8, /* model.fp8_param: an fp8 primary weight's data, transpose or scale_inv (of: its fp32
                     param, the master), persistent; written by the param's cast at the end of the
                     optimizer phase (and after an init or load), read by LINEAR_FP8 */
  ROLE_COUNT
} TensorRole;

typedef enum {
  IR_PHASE_FORWARD,
  IR_PHASE_BACKWARD,
  IR_PHASE_REPLAY,
  IR_PHASE_REDUCE,
  IR_PHASE_OPTIMIZER,
  IR_PHASE_COUNT
} Phase;
#define IR_PHASE_BIT(p) (1u << (p))

/* Recompute labels, in the order of SPEC_LABELS (spec.h); bit i = label i. */
enum {
  IR_LABEL_CORE_ATTN = 1u << 0,
  IR_LABEL_MOE_ACT = 1u << 1,
  IR_LABEL_LAYERNORM = 1u << 2,
  IR_LABEL_MLA_UP_PROJ = 1u << 3,
  IR_LABEL_MLP = 1u << 4,
  IR_LABEL_MOE = 1u << 5,
  IR_LABEL_SHARED_EXPERTS = 1u << 6,
  IR_LABEL_GDN_NORM_OUT = 1u << 7,
  IR_LABEL_MLP_ACT = 1u << 8, /* stepc's own: the dense MLP's activation output */
  IR_NLABELS = 9
};

/* Per-layer CUDA-graph scopes (docs/megatron-rules.md §2.2): `layer` is the whole-layer capture
 * (cuda_graph_modules = []), the others are cuda_graph_modules values. */
enum {
  IR_SCOPE_LAYER = 1u << 0,
  IR_SCOPE_ATTN = 1u << 1,
  IR_SCOPE_MLP = 1u << 2,
  IR_SCOPE_MOE = 1u << 3,
  IR_SCOPE_MOE_ROUTER = 1u << 4,
  IR_SCOPE_MOE_PREPROCESS = 1u << 5,
  IR_SCOPE_MAMBA = 1u << 6,
  IR_NSCOPES = 7
};

/* How the executor initializes a persistent tensor (Megatron's init_method and friends). */
typedef enum { IR_INIT_NONE, IR_INIT_ZEROS, IR_INIT_ONES, IR_INIT_NORMAL } IrInit;

typedef struct {
  char name[IR_NAME_MAX]; /* "layers.3.self_attention.linear_qkv.weight" */
  DType dtype;
  TensorRole role;
  int ndim;
  int64_t shape[IR_MAX_DIMS]; /* outermost first; unused dims are 1 */
  int producer;               /* op that first writes it; -1 for persistent tensors and inputs */
  int of;                     /* GRAD/MASTER/OPTIM/ACT_GRAD/PARAM_FP8: the tensor it belongs to; else -1 */
  IrInit init;                /* persistent tensors: how to initialize */
  double init_std;            /* IR_INIT_NORMAL: standard deviation */
  /* tensor parallelism (a per-rank lowering, compiler/lower/lower.c): a parameter that is one
   * rank's shard of the one-rank tensor. tp_nseg 0: whole (replicated on every rank). Else, along
   * dim tp_dim the one-rank tensor is cut into tp_nseg segments of tp_seg[k] rows (or columns),
   * each split evenly over tp_size ranks, and the shard is the concatenation of its rank's part of
   * every segment: Megatron's column-parallel linear_qkv ([Q | K | V]: three segments) and gated
   * linear_fc1 ([gate | up]: two), a Mamba mixer's in_proj ([z | x | B | C | dt]: five) and conv1d
   * ([x | B | C]), row-parallel linear_proj / linear_fc2 / out_proj (dim 1, one segment),
   * vocab-parallel embedding and output layer (dim 0, one). tensor_tp_full_index maps it.
   * tp_ep 1: the shard is over the expert-parallel group instead (tp_size = EP; the routed
   * experts' weights, dim 0: rank r holds experts [r E/EP, (r+1) E/EP), ir/ops/ep.c).
   * tp_rep[k] > 1: segment k is split over tp_size / tp_rep[k] ranks only, each part replicated on
   * tp_rep[k] consecutive ranks (rank r holds part r / tp_rep[k]): linear_qkv's K and V segments
   * when there are fewer key/value groups G than TP ranks (tp_rep = TP / G, one group a rank, as
   * Megatron replicates them). 0 or 1: split over every rank. The replicated rows' gradients are
   * summed over the ranks sharing them by the optimizer (TP_REP_PACK / TP_REP_UNPACK, ir/ops/tp.c). */
  int32_t tp_dim, tp_nseg, tp_size, tp_ep;
#define IR_TP_MAX_SEGS 5
  int64_t tp_seg[IR_TP_MAX_SEGS];
  int32_t tp_rep[IR_TP_MAX_SEGS];
  /* storage, written by a memory plan */
  int buffer;
  int64_t offset;
  int64_t bytes;
} Tensor;

/* Op attributes: their meaning per kind is documented in the op family's file. */
/* FLASH_ATTN(_DV)(_BWD)'s a.i[2]: which kernels run it on CUDA (the CPU reference ignores it):
 * stepc's flash kernels, cuDNN's fused attention, or auto = cuDNN where the machine has it and the
 * shape is cuDNN's, else flash (the executor decides at open). a.i[3]: 1 = a deterministic backward
 * is required (model.deterministic_mode). */
enum { ATTN_IMPL_FLASH = 0, ATTN_IMPL_CUDNN = 1, ATTN_IMPL_AUTO = 2 };

typedef struct {
  int64_t i[IR_MAX_IATTR];
  double f[IR_MAX_FATTR];
} OpAttrs;

/* The tags stamped on each op as it is added (Graph.cur). */
typedef struct {
  Phase phase;
  int layer;                  /* -1 outside the transformer layers */
  char module[IR_MODULE_MAX]; /* "layers.3.self_attention.core_attention", "embedding", "loss" */
  uint32_t labels;            /* IR_LABEL_* whose recompute boundary contains the op */
  uint32_t scopes;            /* IR_SCOPE_* that would capture the op */
  int fwd;                    /* backward / replay ops: the forward op they come from; else -1 */
} IrTags;

typedef struct {
  OpKind kind;
  int nin, nout;
  int in[IR_MAX_IN];   /* tensor ids */
  int out[IR_MAX_OUT]; /* tensor ids; an op may write a persistent tensor in place (ACCUM, ADAMW) */
  OpAttrs a;
  IrTags tags;
} Op;

typedef struct Graph {
  Tensor *t;
  int nt, capt;
  Op *op;
  int nop, capop;
  IrTags cur; /* tags for the next op added */
  int nbuffers;
  int64_t buffer_bytes[IR_MAX_BUFFERS]; /* arena sizes written by the memory plan */
  /* step-level facts, set by lowering/autodiff/optimizer builders */
  int tokens, targets;  /* ROLE_INPUT (B, T) int32 */
  int loss;             /* scalar fp32, mean over the micro-batch's tokens */
  int grad_norm, lr;    /* ROLE_OPTIM scalars the trainer reports; -1 if absent */
  int num_microbatches; /* forward+backward runs per optimizer step */
  char err[256];
} Graph;

/* The op table row (defined in ir/ops/<family>.c, collected in ops/optable.c). */
typedef struct OpOut {
  DType dtype;
  TensorRole role; /* ROLE_ACT unless the op says otherwise (ROLE_ACT_GRAD in backward ops) */
  int ndim;
  int64_t shape[IR_MAX_DIMS];
  const char *suffix; /* default name: "<module>.<suffix>" */
} OpOut;

/* ---- op facts: what the compiler's passes read about an op kind, set in its ir/ops/<family>.c
 * row. Value 0 of each fact is "unset", which no row may leave (tests/unit/test_op_facts.c), so
 * that a new op states every fact instead of falling through a pass's default. ---- */

/* Op classes of the cost model and the profile (compiler/plan/cost.c; one calibrated scale each). A
 * fused group counts in the class of its main work: LINEAR+ADD as a GEMM, ADD+norm as a norm. */
typedef enum {
  COST_UNSET,
  COST_GEMM,
  COST_ATTN_FWD, /* stepc's flash kernels; cost.c moves them to the cuDNN classes below */
  COST_ATTN_BWD,
  COST_ATTN_FWD_CUDNN, /* attention run by cuDNN (attention_backend fused or auto) */
  COST_ATTN_BWD_CUDNN,
  COST_GROUPED_GEMM, /* MoE expert GEMMs (stepc's grouped kernels) */
  COST_MOE_ROUTING,  /* router top-k, aux loss, dispatch, permute / unpermute, MLA head split/concat */
  COST_NORM,
  COST_ACTIVATION,
  COST_ROPE_QKV,
  COST_EMBEDDING,
  COST_LOSS,
  COST_ELEMENTWISE,
  COST_GRAD_NORM,
  COST_OPTIMIZER,
  COST_MAMBA_FWD,       /* the Mamba-2 mixer forward (conv1d, dt, the chunked SSD, the D skip) */
  COST_MAMBA_BWD,       /* its backward */
  COST_MAMBA_GATE_NORM, /* the mixer's gate and gated group norm, forward and backward */
  COST_GEMM_FP8,        /* fp8 products (ir/ops/fp8.c: LINEAR_FP8 with its input's cast, FP8_GEMM) */
  COST_FP8_CAST,        /* current-scaling casts to fp8 (FP8_QUANT: amax, then the cast) */
  COST_OTHER,
  COST_NCLASS
} CostClass;

/* The compute ceiling of its roofline time (compiler/plan/cost.c): DRAM alone, or its FLOPs against
 * the GEMM, the attention or the fp8 GEMM ceiling as well. */
typedef enum { CEIL_UNSET, CEIL_DRAM, CEIL_GEMM, CEIL_ATTN, CEIL_GEMM_FP8 } OpCeiling;

/* Which input output 0 may overwrite in place when that input dies at the op (the memory plan):
 * its CPU and CUDA kernels compute element i from input element i only, read first. */
typedef enum { INPLACE_UNSET, INPLACE_NONE, INPLACE_IN0, INPLACE_IN1 } OpInPlace;

/* Whether it draws random numbers (a replay inside a CUDA graph may not; scope.c, recompute.c). */
typedef enum {
  RNG_UNSET,
  RNG_NONE,
  RNG_ALWAYS,
  RNG_ATTN_DROPOUT, /* when its attention dropout a.f[1] > 0 */
} OpRng;

/* Whether its weight-gradient kernel may accumulate straight into the fp32 main gradient, so the
 * fusion pass drops the ACCUM after it (compiler/passes/fuse.c). */
typedef enum { SINK_UNSET, SINK_NO, SINK_YES } OpSink;

/* Its part in a linear layer's weight product (y = x W^T, dx = dy W, dW = dy^T x), dense or
 * grouped: what Transformer Engine's fp8 linears quantize and save (compiler/plan/memrank.c). */
typedef enum { MATMUL_UNSET, MATMUL_NONE, MATMUL_FWD, MATMUL_DGRAD, MATMUL_WGRAD } OpMatmul;

/* Its member row in a generated elementwise chain (compiler/passes/ew_fuse.c, templates/elementwise.cu.in):
 * its device code. `#` is replaced by the op's position in the chain, $0/$1 by its inputs' fp32
 * values. The expressions are the hand-written kernels' own, so a chain writes the bits the ops
 * write one by one.
 *   nval    the inputs the expression reads (in[0 .. nval-1])
 *   scalars the kernel parameters the op adds (f a.f[0], S seed slot, U a.i[0])
 *   setup   once per thread;  group  once per group of 4 elements;  expr  the value
 * &OP_EW_NONE: the op never joins a chain. */
typedef struct OpEw {
  int nval;
  const char *scalars, *setup, *group, *expr;
} OpEw;
extern const OpEw OP_EW_NONE;

/* The facts of one op kind: its row's `.facts = {.cost = ..., ...}`, every field named. */
typedef struct OpFacts {
  CostClass cost;
  OpCeiling ceiling;
  OpInPlace inplace;
  OpRng rng;
  OpSink sink;
  OpMatmul matmul;
  const OpEw *ew;
} OpFacts;

struct CpuCtx;
typedef void (*OpCpuFn)(const struct CpuCtx *c, const Op *op, void *const *in, void *const *out);

typedef struct OpInfo {
  const char *name; /* "linear" */
  int nin_min, nin_max, nout;
  /* Output shapes/dtypes from the inputs; 0 ok, -1 with a message in err. Not called for ops
   * built with graph_op_into (in-place). */
  int (*infer)(const Graph *g, const Op *op, OpOut *out, char *err, size_t nerr);
  /* FLOPs of one execution (bytes moved: op_bytes, from `bytes` below or the tensors). */
  double (*flops)(const Graph *g, const Op *op);
  /* Emits the backward ops of graph op `op` given the gradients of its outputs (dout[i], -1 =
   * none) and returns the gradients of its inputs in din[j] (-1 = none). The inputs of the ops it
   * emits are exactly the forward tensors backward reads. NULL: not differentiable. */
  int (*backward)(Graph *g, int op, const int *dout, int *din);
  OpCpuFn cpu[2]; /* [0] fp32, [1] fp64 reference */
  OpFacts facts;  /* what the passes read (above), each set by name in every row */
  /* Bytes one execution's kernels read and write at nominal dtypes, where that is not every input
   * and output once (op_bytes); NULL: it is. */
  double (*bytes)(const Graph *g, const Op *op);
} OpInfo;

/* ---- op table ---- */
const OpInfo *op_info(OpKind k);
const char *op_name(OpKind k);
/* Bytes read + written by one execution, at nominal dtypes: the kind's bytes function, else
 * every input and output once (op_tensor_bytes). */
double op_bytes(const Graph *g, const Op *op);
double op_tensor_bytes(const Graph *g, const Op *op);
double op_flops(const Graph *g, const Op *op);
/* The op as an evaluation (a forward with no update: stepc_eval) runs it: every dropout off (DROPOUT's
 * p a.f[0] and attention's a.f[1] set to 0, which keeps every element with scale 1), a delayed-scaling
 * fp8 cast recording no amax (ir/ops/fp8.c), else unchanged.
 * 0, or -1 for an op that draws random numbers in a way this does not know how to turn off. */
int op_for_eval(Op *op);

/* ---- dtypes, roles, tags ---- */
size_t dtype_size(DType d);
bool dtype_is_float(DType d);
const char *dtype_name(DType d);
const char *role_name(TensorRole r);
bool role_is_persistent(TensorRole r);
const char *phase_name(Phase p);
const char *ir_label_name(int bit_index);   /* 0 -> "core_attn" */
uint32_t ir_label_from_name(const char *s); /* 0 when unknown */
const char *ir_scope_name(int bit_index);   /* 0 -> "layer" */
uint32_t ir_scope_from_name(const char *s);
int64_t tensor_numel(const Tensor *t);
/* Whether tensor t is, or belongs to (Tensor.of: a gradient, master, moment), an expert-parallel shard
 * (Tensor.tp_ep): expert parallelism's state, owned within the expert-data-parallel group. */
bool graph_expert_state(const Graph *g, int t);
/* Whether param t is an fp8 primary weight's fp32 param (model.fp8_param): its master, the source of
 * the ROLE_PARAM_FP8 copies the step reads (under the distributed optimizer sharded like a master). */
bool graph_fp8_master(const Graph *g, int t);
/* A tensor-parallel shard (Tensor.tp_nseg > 0) held by TP rank `rank`: the one-rank tensor's shape
 * into full[], and the flat index in it of the shard's flat element j. Whole tensors: their own
 * shape, j itself. */
void tensor_tp_full_shape(const Tensor *t, int64_t full[IR_MAX_DIMS]);
int64_t tensor_tp_full_index(const Tensor *t, int rank, int64_t j);
/* Segment k's replication (Tensor.tp_rep: the ranks holding each of its parts, 1 when split over
 * every rank) and the rows (along tp_dim) of its part in the shard: tp_seg[k] * rep / tp_size. */
int tensor_tp_rep(const Tensor *t, int k);
int64_t tensor_tp_part(const Tensor *t, int k);
/* FNV-1a 64, continued from `h` (start with IR_FNV_OFFSET): the content hashes of plans,
 * artifacts and kernel lists. */
/* s as a JSON string literal, quotes included (the compiler's reports, checkpoint state files);
 * bytes that are not valid UTF-8 become U+FFFD. */
void json_write_string(FILE *out, const char *s);
/* Bytes of the valid UTF-8 sequence that starts at s (1 for ASCII, NUL included); 0 when the
 * bytes there are not valid UTF-8. */
size_t text_utf8_len(const char *s);
#define IR_FNV_OFFSET 0xcbf29ce484222325ull
uint64_t ir_fnv1a(uint64_t h, const void *data, size_t n);

/* ---- building ---- */
Graph *graph_new(void);
void graph_free(Graph *g);
/* Tag context for the ops that follow. graph_module takes a printf format. */
void graph_set_phase(Graph *g, Phase p);
void graph_set_layer(Graph *g, int layer);
void graph_module(Graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void graph_set_labels(Graph *g, uint32_t labels);
void graph_set_scopes(Graph *g, uint32_t scopes);
/* A tensor with no producer (params, optimizer state, inputs, accumulators); returns its id or -1. */
int graph_tensor(Graph *g, const char *name, DType dt, TensorRole role, int ndim, const int64_t *shape);
/* A parameter with its init; name is the full parameter path. */
int graph_param(Graph *g, const char *name, DType dt, int ndim, const int64_t *shape, IrInit init,
                double std);
/* Appends an op over `in`, creates its outputs from the kind's infer() and returns the op id (-1
 * on error). out (may be NULL) receives the output tensor ids; names (may be NULL, or entries NULL)
 * overrides the "<module>.<suffix>" default output names. */
int graph_op(Graph *g, OpKind kind, const int *in, int nin, const OpAttrs *a, int *out,
             const char *const *names);
/* Convenience: graph_op returning output 0's tensor id (-1 on error). */
int graph_op1(Graph *g, OpKind kind, const int *in, int nin, const OpAttrs *a, const char *name);
/* Appends an op that writes existing tensors (in place: accumulators, optimizer state). */
int graph_op_into(Graph *g, OpKind kind, const int *in, int nin, const int *out, int nout, const OpAttrs *a);
/* Records the first error; returns -1 so callers can `return graph_fail(...)`. */
int graph_fail(Graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- queries ---- */
int graph_find_tensor(const Graph *g, const char *name); /* -1 if absent */
/* The first op of `kind` whose module is `module` and phase is `phase`; -1 if none. */
int graph_find_op(const Graph *g, OpKind kind, const char *module, Phase phase);
/* The forward op of the language-model loss: the one CROSS_ENTROPY or LINEAR_CROSS_ENTROPY whose
 * out[1] has a value per token (the log-sum-exp, or on CUDA the token's loss; the token's loss),
 * or -1 when there is none or more than one. */
int graph_lm_loss_op(const Graph *g);
/* Writes "{layer,attn}" style lists. */
void ir_labels_str(uint32_t labels, char *buf, size_t n);
void ir_scopes_str(uint32_t scopes, char *buf, size_t n);
/* One line per op: id, kind, phase, layer, module, labels, scopes, inputs -> outputs. */
void graph_dump(const Graph *g, void *FILE_out);

/* ---- memory ---- */
/* The trivial plan: every tensor its own 64-byte-aligned slot in buffer 0. Floating tensors are
 * sized at `float_bytes` per element (4 or 8 for the CPU executor, 0 = nominal dtype size);
 * integer tensors at their nominal size. Returns the arena size in bytes. */
int64_t graph_plan_trivial(Graph *g, int float_bytes);

#endif
