/* lower_blocks.h — the MLA attention and MoE MLP builders that lower.c calls for the layers that
 * have them, and the few building helpers they share.
 *
 * Each builder appends one sub-layer, from its input norm to its residual add, and tags every op
 * it emits (module path, recompute labels per docs/megatron-rules.md §3.2, graph
 * scopes per §2.2); the tag table is at the top of lower_mla.c and lower_moe.c. */
#ifndef STEPC_LOWER_BLOCKS_H
#define STEPC_LOWER_BLOCKS_H

#include <stdint.h>

#include "frontend/spec.h"
#include "ir.h"

/* What the builders need from lower.c's state. */
typedef struct {
  Graph *g;
  const Spec *s;
  DType dt;            /* compute dtype of weights and activations */
  int64_t b, t, c;     /* micro-batch, sequence, hidden size */
  double std, out_std; /* init_method_std and the scaled init of output projections */
  int *stream;         /* next dropout RNG stream, shared with lower.c */
  int64_t tp;          /* tensor parallelism executed (Spec.per_rank): this rank's shard; 1 none */
  bool tp_on;          /* its ops lowered (spec_lowers_tp: TP > 1, or forced at TP 1) */
  bool sp;             /* sequence parallelism: the residual stream is this rank's T/TP rows */
} LowerBlock;

/* MLA self-attention of layer `l` on the residual stream x (B, T, C): input_layernorm through
 * self_attn_bda. Returns the new residual stream, -1 on error (message in g->err). */
int lower_mla(const LowerBlock *L, int l, int x);

/* The MoE MLP of layer `l` on x (B, T, C): pre_mlp_layernorm, router, dispatch, grouped experts,
 * combine, shared experts, mlp_bda. Returns the new residual stream or -1. When the recipe has
 * moe_aux_loss_coeff > 0, the layer's load-balancing loss is added into *aux (a (1) fp32 tensor,
 * -1 before the first MoE layer), which lower.c adds to the language-model loss. */
int lower_moe(const LowerBlock *L, int l, int x, int *aux);

/* A Mamba-2 layer `l` of a hybrid model on x (B, T, C): norm, mixer, residual add (lower_mamba.c).
 * Returns the new residual stream or -1. */
int lower_mamba(const LowerBlock *L, int l, int x);
/* Mamba heads: mamba_num_heads, or 2 * hidden_size / mamba_head_dim when null (expand = 2). */
int64_t lower_mamba_heads(const Spec *s);

/* ---- helpers shared by lower_mla.c, lower_moe.c and lower_mamba.c (lower_blocks.c) ---- */
/* Sets layer, labels, scopes and the module "layers.<l>.<sub>" for the ops that follow. */
void lb_tags(const LowerBlock *L, int l, uint32_t labels, uint32_t scopes, const char *sub);
/* A parameter "<current module>.<suffix>" of the compute dtype (ndim 1..3). */
int lb_param(const LowerBlock *L, const char *suffix, int ndim, const int64_t *shape, IrInit init,
             double std);
/* y = x W^T (+ b when add_bias_linear) with W (n_out, n_in) in the current module. */
int lb_linear(const LowerBlock *L, int x, int64_t n_out, int64_t n_in, double std);
/* The op of a linear layer's product over in[0..nin) (x, W [, b]): LINEAR, or, for a transformer
 * layer's linear in a build that executes the recipe (Spec.per_rank) where spec_layer_fp8 holds
 * (model.fp8 with the tensorwise or delayed recipe — compiler/codegen/executes.c refuses the others — outside
 * the layers first_last_layers_bf16 keeps), W's cast and LINEAR_FP8 (ir/ops/fp8.c).
 * The output layer and the MoE router stay LINEAR, as in Megatron (not Transformer Engine modules).
 * Its output tensor, or -1 with g->err. */
int lb_linear_op(Graph *g, const Spec *s, const int *in, int nin);
/* The routed experts' grouped product of x (R, K) by W (E, N, K) over the expert segments seg (E, 2):
 * GROUPED_LINEAR, or, where lb_linear_op would make an fp8 linear, Transformer Engine's grouped fp8
 * linear: every expert's weight cast with its own scale (FP8_QUANT_GROUPED), then GROUPED_LINEAR_FP8,
 * which casts each expert's rows with their own (ir/ops/fp8.c); under delayed scaling, E columns in
 * each state. Its output tensor, or -1 with g->err. */
int lb_grouped_linear_op(Graph *g, const Spec *s, int x, int w, int seg);
/* Under fp8_recipe "delayed" the linears' casts read and record their tensors' persistent state
 * (ir/ops/fp8.h), one ROLE_OPTIM tensor per kind, a column per fp8 linear: */
#define LB_FP8_STATE_INPUTS "fp8_delayed.inputs"
#define LB_FP8_STATE_WEIGHTS "fp8_delayed.weights"
#define LB_FP8_STATE_GRADS "fp8_delayed.grad_outputs"
/* Appends the states' updates (FP8_SCALE_UPDATE), once the backward is built and before the
 * optimizer: the inputs' and output gradients' as the last ops of the micro-batch's backward (after
 * every replay, so that a recomputed cast reuses the forward's scale), the weights' once a step in
 * the optimizer phase. Nothing without delayed fp8 linears. 0, or -1 with g->err. */
int lb_fp8_delayed_updates(Graph *g, const Spec *s);
/* model.fp8_param (fp8 primary weights): each fp8 linear's weight param is its fp32 master, and its
 * fp8 data, transpose and scale_inv (ROLE_PARAM_FP8, named "<weight>.fp8", ".fp8_t", ".scale_inv")
 * are written by an FP8_QUANT of the master appended here (for the routed experts' grouped linears an
 * FP8_QUANT_GROUPED: a transpose and a scale_inv an expert), after the optimizer's update, as the last
 * ops of the step (delayed scaling: with the weights' state). The runtime runs the same ops after an
 * init or a load (runtime/api.c api_fp8_param_casts), so that the first step has them. Nothing
 * without fp8_param. 0, or -1 with g->err. */
int lb_fp8_param_casts(Graph *g, const Spec *s);
/* The recipe's normalization over the last dim (width), weights in the current module. */
int lb_norm(const LowerBlock *L, int x, int64_t width);
/* The activation of a dense MLP or shared expert (fc1 output u, 2F wide when gated), chosen by
 * activation_func and gated_linear_unit (MLP_ACTS in lower_blocks.c); -1 with g->err for a
 * combination it does not lower. */
int lb_mlp_act(Graph *g, const SpecModel *m, int u);
/* Dropout with the next RNG stream; x itself when p <= 0. split: the dimension along which x is this
 * rank's tensor-parallel slice (ir/ops/dropout.c's i[1]; 0 when whole or without TP). */
int lb_dropout(const LowerBlock *L, int x, double p, int split);

/* ---- tensor parallelism (Megatron's megatron/core/tensor_parallel; docs/parallelism.md) ---- */
/* Param `id` (its one-rank shape already cut to this rank's) is the shard of Tensor.tp_* (ir.h):
 * along `dim`, segments seg[0..nseg) of the one-rank tensor, each split over TP. id without TP. */
int lb_shard(const LowerBlock *L, int id, int dim, int nseg, const int64_t *seg);
/* y = x W^T with W (n_out, n_in) of the one-rank layer; under TP column-parallel: W's rows and the
 * bias split in segments seg[0..nseg) (the caller brings x into the TP region: lb_tp_enter). */
int lb_linear_col(const LowerBlock *L, int x, int64_t n_out, int64_t n_in, double std, int nseg,
                  const int64_t *seg);
/* lb_linear_col with segment k's parts replicated on rep[k] ranks (Tensor.tp_rep; 1 or 0: split over
 * every rank): segment k is split over TP / rep[k] ranks, rank r holding part r / rep[k] —
 * linear_qkv's K and V rows with fewer key/value groups than TP ranks. */
int lb_linear_col_rep(const LowerBlock *L, int x, int64_t n_out, int64_t n_in, double std, int nseg,
                      const int64_t *seg, const int *rep);
/* A row-parallel linear out of the TP region: each rank's partial product reduced (lb_tp_leave),
 * then the bias, a whole parameter, added once (BIAS_ADD); one rank: the plain linear. */
int lb_linear_row(const LowerBlock *L, int x, int64_t n_out, int64_t n_in, double std);
/* Into the TP region (copy_to_tensor_model_parallel_region; under SP gather_from_sequence_parallel_
 * region) and out of it (reduce_from_..., under SP reduce_scatter_to_...); x itself without TP. */
int lb_tp_enter(const LowerBlock *L, int x);
int lb_tp_leave(const LowerBlock *L, int x);
/* FLASH_ATTN's a.i[2] (ir.h's ATTN_IMPL_*) for model.attention_backend flash, fused or auto. */
int lb_attn_impl(const SpecModel *m);

#endif
