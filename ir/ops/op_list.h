/* op_list.h — the op table's rows: one X(ENUM, symbol) per op kind.
 *
 * X(NAME, sym) makes the enum value OP_NAME and points the table entry at `const OpInfo sym_info`,
 * defined in the op family's file under ir/ops/ (shape inference, cost, gradient rule, CPU
 * reference, the facts the passes read). Adding an op = one row here + its OpInfo in its family
 * file, then its kernel and launch (docs/adding-an-op.md). Rows are grouped by
 * family; backward-only ops (no gradient rule of their own) sit beside their forward op. */
#ifndef STEPC_OP_LIST_H
#define STEPC_OP_LIST_H

/* MLA and MoE (mla.c, moe_router.c, moe_dispatch.c, moe_experts.c): a block of their own, kept
 * apart to ease merges; listed first in OP_LIST. */
#define OP_LIST_MLA_MOE(X)                                                                                   \
  /* mla.c */                                                                                                \
  X(HEAD_SPLIT, op_head_split)   /* [p1 | p2] per head -> p1, p2 (p2 shared: summed) */                      \
  X(HEAD_CONCAT, op_head_concat) /* p1, p2 -> [p1 | p2] per head (p2 shared: broadcast) */                   \
  /* moe_router.c */                                                                                         \
  X(ROUTER_TOPK, op_router_topk) /* probs, idx = top-k (softmax over the k, or gathered) */                  \
  X(ROUTER_TOPK_BWD, op_router_topk_bwd)                                                                     \
  X(MOE_AUX_LOSS, op_moe_aux_loss) /* coeff E sum_e f_e P_e (switch load balancing) */                       \
  X(MOE_AUX_LOSS_BWD, op_moe_aux_loss_bwd)                                                                   \
  /* moe_dispatch.c */                                                                                       \
  X(MOE_DISPATCH, op_moe_dispatch) /* routing map -> row_of, expert segments, counts */                      \
  X(MOE_PERMUTE, op_moe_permute)   /* tokens, probs -> expert-sorted rows */                                 \
  X(MOE_PERMUTE_BWD, op_moe_permute_bwd)                                                                     \
  X(MOE_UNPERMUTE, op_moe_unpermute) /* expert rows -> tokens, summed over the k slots */                    \
  X(MOE_UNPERMUTE_BWD, op_moe_unpermute_bwd)                                                                 \
  /* moe_experts.c */                                                                                        \
  X(GROUPED_LINEAR, op_grouped_linear) /* per-expert y = x W_e^T over the expert's rows */                   \
  X(GROUPED_LINEAR_DGRAD, op_grouped_linear_dgrad)                                                           \
  X(GROUPED_LINEAR_WGRAD, op_grouped_linear_wgrad)                                                           \
  X(MOE_ACT, op_moe_act) /* act(h) * routing prob (the moe_act label's op) */                                \
  X(MOE_ACT_BWD, op_moe_act_bwd)

/* tp.c: tensor parallelism's collectives (Megatron's mappings), a block of their own, listed last */
#define OP_LIST_TP(X)                                                                                        \
  X(TP_COPY, op_tp_copy)           /* y = x; backward all-reduce (copy to the TP region) */                  \
  X(TP_ALLREDUCE, op_tp_allreduce) /* y = sum over the TP group; backward identity */                        \
  X(TP_GATHER, op_tp_gather)       /* all-gather along the sequence; backward TP_SCATTER */                  \
  X(TP_SCATTER, op_tp_scatter)     /* reduce-scatter along the sequence; backward TP_GATHER */

/* ep.c: expert parallelism's token exchange (Megatron's alltoall dispatcher), after the TP block */
#define OP_LIST_EP(X)                                                                                        \
  X(EP_COUNTS, op_ep_counts)     /* seg -> every EP rank's seg, this rank's receive segments */              \
  X(EP_DISPATCH, op_ep_dispatch) /* all-to-all of expert rows to their owners; backward EP_COMBINE */        \
  X(EP_COMBINE, op_ep_combine)   /* all-to-all back to the sources; backward EP_DISPATCH */

/* fp8.c: fp8 linears with current or delayed scaling (Transformer Engine's recipes), after the EP block */
#define OP_LIST_FP8(X)                                                                                       \
  X(FP8_QUANT, op_fp8_quant)   /* x -> q, qT, scale_inv (current or delayed scaling) */                      \
  X(LINEAR_FP8, op_linear_fp8) /* y = cast(x) wq^T sx sw; saves x's fp8 transpose */                         \
  X(FP8_GEMM, op_fp8_gemm)     /* c = a b^T sa sb, both fp8 and K-contiguous (dgrad, wgrad) */

#define OP_LIST(X)                                                                                           \
  OP_LIST_MLA_MOE(X)                                                                                         \
  /* elementwise.c */                                                                                        \
  X(ADD, op_add)     /* y = a + b (same shape) */                                                            \
  X(ACCUM, op_accum) /* acc += x, in place (gradient accumulation) */                                        \
  X(ZERO, op_zero)   /* t = 0, in place */                                                                   \
  X(FILL, op_fill)   /* t = f[0], in place (the loss gradient seed) */                                       \
  /* linear.c */                                                                                             \
  X(LINEAR, op_linear)             /* y = x W^T (+ b) */                                                     \
  X(LINEAR_DGRAD, op_linear_dgrad) /* dx = dy W */                                                           \
  X(LINEAR_WGRAD, op_linear_wgrad) /* dW = dy^T x */                                                         \
  X(LINEAR_BGRAD, op_linear_bgrad) /* db = sum over rows of dy */                                            \
  /* embedding.c */                                                                                          \
  X(EMBED, op_embed)             /* y[b,t] = W[tok[b,t]] */                                                  \
  X(EMBED_BWD, op_embed_bwd)     /* dW = scatter-add of dy by token */                                       \
  X(POS_ADD, op_pos_add)         /* y = x + P[t] (learned absolute positions) */                             \
  X(POS_ADD_BWD, op_pos_add_bwd) /* dP = sum over batch of dy */                                             \
  /* norm.c */                                                                                               \
  X(RMSNORM, op_rmsnorm)                                                                                     \
  X(RMSNORM_BWD, op_rmsnorm_bwd)                                                                             \
  X(LAYERNORM, op_layernorm)                                                                                 \
  X(LAYERNORM_BWD, op_layernorm_bwd)                                                                         \
  /* rope.c */                                                                                               \
  X(ROPE, op_rope) /* rotate pairs; the backward is ROPE with the angle negated */                           \
  /* dropout.c */                                                                                            \
  X(DROPOUT, op_dropout) /* y = x * mask / (1 - p), mask from a counter-based RNG */                         \
  X(DROPOUT_BWD, op_dropout_bwd)                                                                             \
  /* activation.c */                                                                                         \
  X(SWIGLU, op_swiglu) /* y = silu(a) * b, [a | b] = x */                                                    \
  X(SWIGLU_BWD, op_swiglu_bwd)                                                                               \
  X(GELU, op_gelu) /* exact (erf) GELU, as torch.nn.functional.gelu */                                       \
  X(GELU_BWD, op_gelu_bwd)                                                                                   \
  /* attention.c: the unfused backend and the QKV split */                                                   \
  X(SPLIT_QKV, op_split_qkv) /* (B,T,(H+2G)D) -> q (B,T,H,D), k, v (B,T,G,D) */                              \
  X(CONCAT_QKV, op_concat_qkv)                                                                               \
  X(ATTN_SCORES, op_attn_scores) /* s = q k^T * scale (B,H,T,T) */                                           \
  X(ATTN_SCORES_BWD, op_attn_scores_bwd)                                                                     \
  X(CAUSAL_MASK, op_causal_mask) /* s[i,j>i] = fill */                                                       \
  X(SOFTMAX, op_softmax)         /* over the last dim */                                                     \
  X(SOFTMAX_BWD, op_softmax_bwd)                                                                             \
  X(ATTN_PV, op_attn_pv) /* o = p v -> (B,T,H*D) */                                                          \
  X(ATTN_PV_BWD, op_attn_pv_bwd)                                                                             \
  /* flash.c */                                                                                              \
  X(FLASH_ATTN, op_flash_attn) /* o, lse = attention(q, k, v); nothing else survives */                      \
  X(FLASH_ATTN_BWD, op_flash_attn_bwd)                                                                       \
  /* loss.c */                                                                                               \
  X(CROSS_ENTROPY, op_cross_entropy) /* mean over tokens of -log softmax(logits)[target] */                  \
  X(CROSS_ENTROPY_BWD, op_cross_entropy_bwd)                                                                 \
  /* optim.c: the optimizer step as ops (phase optimizer) */                                                 \
  X(GRAD_SUMSQ, op_grad_sumsq) /* acc += sum g^2, in place */                                                \
  X(CLIP_COEF, op_clip_coef)   /* norm, coef = sqrt(acc), min(1, max / (norm + 1e-6)) */                     \
  X(LR_SCHED, op_lr_sched)     /* step += 1; lr = schedule(step) */                                          \
  X(ADAMW, op_adamw)           /* decoupled-decay Adam on the fp32 master */                                 \
  /* flash.c: attention whose value head dim differs from q/k's (MLA under fused attention) */               \
  X(FLASH_ATTN_DV, op_flash_attn_dv)                                                                         \
  X(FLASH_ATTN_DV_BWD, op_flash_attn_dv_bwd)                                                                 \
  /* mamba.c: the Mamba-2 mixer's conv, dt, SSD scan, D skip, gate and group norm */                         \
  X(MAMBA_CONV, op_mamba_conv) /* silu(causal depthwise conv1d + bias) */                                    \
  X(MAMBA_CONV_BWD, op_mamba_conv_bwd)                                                                       \
  X(MAMBA_DT, op_mamba_dt) /* softplus(dt + dt_bias) */                                                      \
  X(MAMBA_DT_BWD, op_mamba_dt_bwd)                                                                           \
  X(MAMBA_SCAN, op_mamba_scan) /* the SSD recurrence; backward replays the states */                         \
  X(MAMBA_SCAN_BWD, op_mamba_scan_bwd)                                                                       \
  X(MAMBA_SKIP, op_mamba_skip) /* y + D x */                                                                 \
  X(MAMBA_SKIP_BWD, op_mamba_skip_bwd)                                                                       \
  X(MAMBA_GATE, op_mamba_gate) /* y silu(z) */                                                               \
  X(MAMBA_GATE_BWD, op_mamba_gate_bwd)                                                                       \
  X(MAMBA_GROUP_NORM, op_mamba_group_norm) /* RMSNorm per group of the last dim */                           \
  X(MAMBA_GROUP_NORM_BWD, op_mamba_group_norm_bwd)                                                           \
  X(MAMBA_MIXER, op_mamba_mixer) /* conv, dt, scan and D skip in one (mamba_ssm's fused path) */             \
  X(MAMBA_MIXER_BWD, op_mamba_mixer_bwd)                                                                     \
  /* activation.c: relu and squared relu (Nemotron's squared_relu MLPs) */                                   \
  X(RELU_ACT, op_relu_act) /* relu(x), or relu(x)^2 with i[0] = 1 */                                         \
  X(RELU_ACT_BWD, op_relu_act_bwd)                                                                           \
  /* linear_loss.c: the output layer and its cross-entropy over chunks of the tokens */                      \
  X(LINEAR_CROSS_ENTROPY, op_linear_cross_entropy) /* loss of (x W^T, targets), one chunk at a time */       \
  X(LINEAR_CROSS_ENTROPY_BWD, op_linear_cross_entropy_bwd)                                                   \
  /* activation.c: the gated GELU (Megatron's gelu with gated_linear_unit) */                                \
  X(GEGLU, op_geglu) /* y = gelu(a) * b, [a | b] = x (exact erf GELU) */                                     \
  X(GEGLU_BWD, op_geglu_bwd)                                                                                 \
  OP_LIST_TP(X)                                                                                              \
  OP_LIST_EP(X)                                                                                              \
  OP_LIST_FP8(X)                                                                                             \
  /* tp.c: a row-parallel linear's bias, added after its reduction */                                        \
  X(BIAS_ADD, op_bias_add) /* y = x + b over the rows; backward dx = dy, db = LINEAR_BGRAD(dy) */            \
  /* tp.c: replicated shard rows' gradients through a zero-padded buffer (all-reduced between) */            \
  X(TP_REP_PACK, op_tp_rep_pack)     /* g's replicated rows -> buf at their one-rank rows; g's zeroed */     \
  X(TP_REP_UNPACK, op_tp_rep_unpack) /* buf's rows of this rank -> g's replicated rows */                    \
  /* fp8.c: delayed scaling's update of the amax histories and scales (in place) */                          \
  X(FP8_SCALE_UPDATE, op_fp8_scale_update)                                                                   \
  /* fp8.c: the routed experts' grouped fp8 linears (per-expert scales; CPU device only) */                  \
  X(FP8_QUANT_GROUPED, op_fp8_quant_grouped)   /* each expert's weight, or rows, cast with its own scale */  \
  X(GROUPED_LINEAR_FP8, op_grouped_linear_fp8) /* y[r] = cast_e(x[r]) wq_e^T sx[e] sw[e] */                  \
  X(GROUPED_FP8_DGRAD, op_grouped_fp8_dgrad)   /* dx[r] = dyq[r] wq_e sdy[e] sw[e] */                        \
  X(GROUPED_FP8_WGRAD, op_grouped_fp8_wgrad)   /* dW_e = dyq_e^T xq_e sdy[e] sx[e] */

#endif
