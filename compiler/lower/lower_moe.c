/* lower_moe.c — the MoE MLP of one layer (Megatron's MoELayer on a single rank), from the pre-MLP
 * layernorm to the residual add.
 *
 * Tags (docs/megatron-rules.md §2.2 scopes, §3.2 labels); every op is in scopes `layer` and `moe`:
 *   pre_mlp_layernorm                  layernorm          + moe_router, moe_preprocess
 *   mlp.router (linear, top-k, aux)    moe                + moe_router, moe_preprocess
 *   mlp.shared_experts.*               moe, shared_experts + moe_router, moe_preprocess unless
 *                                                          moe_shared_expert_overlap
 *   mlp.token_dispatcher (dispatch map, permute)  moe     + moe_preprocess for the alltoall
 *                                      dispatcher, whose dispatch_preprocess permutes; allgather
 *                                      and flex permute after the dispatch, outside that graph
 *   mlp.experts.linear_fc1 / linear_fc2 moe
 *   mlp.experts.act                    moe, moe_act
 *   mlp.token_dispatcher (unpermute), mlp (shared-expert add)   moe
 *   mlp_bda                            -
 * A graph scope that holds moe_router also holds moe_preprocess (which needs moe_router), so
 * router ops carry both bits.
 *
 * Routing follows Megatron's defaults: score function softmax, moe_router_pre_softmax=False
 * (top-k of the logits, softmax over the k: a token's probabilities sum to 1), token drop policy
 * by position when a capacity factor is set (the earliest tokens of each expert are kept; see
 * ops/moe_dispatch.c for why the buffers are T*k or E*capacity rows). The routing probabilities
 * scale each row in the expert activation, as Megatron's grouped experts do, so the combine is a
 * plain sum. The load-balancing loss of each MoE layer is added to the training loss.
 *
 * Expert parallelism (a per-rank step, Spec.per_rank with EP > 1; docs/parallelism.md): the rank
 * holds experts [r E/EP, (r+1) E/EP); after the permute, EP_COUNTS / EP_DISPATCH (ops/ep.c, tagged
 * mlp.token_dispatcher) send each expert's rows to its owner, the grouped GEMMs run over the rows
 * received, and EP_COMBINE returns them before the unpermute.
 *
 * With the allgather dispatcher (Megatron's MoEAllGatherTokenDispatcher, its default; dropless, TP 1,
 * ETP 1) the rank instead all-gathers the hidden states, the top-k probabilities and the expert
 * indices over the EP group (TP_GATHER with i[1] = 1, along the sequence), dispatches and permutes
 * the gathered tokens for its own experts only (MOE_DISPATCH's local range i[4] = E/EP; a static
 * bound of EP B*T min(k, E/EP) rows, as the alltoall receive bound), runs its experts, unpermutes
 * (each gathered token's sum over its local-expert slots; zero for none) and reduce-scatters the
 * result over the EP group back to its own tokens (TP_SCATTER, i[1] = 1). The backward is the
 * adjoints' (the gather's is a reduce-scatter and back; the indices have no gradient).
 *
 * Tensor parallelism (with sequence parallelism; expert-tensor parallelism 1): each rank routes its
 * sequence rows over every expert; the router and, without EP, the experts are replicated (their
 * gradients summed over the group as every replicated parameter's under SP); the EP group is the
 * expert grid's (EP consecutive ranks of the TP x DP job); the shared experts are tensor-parallel;
 * the load-balancing loss counts the group's tokens (MOE_AUX_LOSS i[2]). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lower/lower_blocks.h"

static int act_kind(const char *f) { /* MOE_ACT's i[1] (ops/moe_experts.c) */
  if (strcmp(f, "silu") == 0) return 0;
  if (strcmp(f, "gelu") == 0) return 1;
  if (strcmp(f, "relu") == 0) return 2;
  if (strcmp(f, "squared_relu") == 0) return 3;
  return -1;
}

/* The shared-expert MLP: a dense MLP of moe_shared_expert_intermediate_size; under TP Megatron's
 * SharedExpertMLP, tensor-parallel as a dense MLP (fc1 column-parallel, fc2 row-parallel). */
static int shared_experts(const LowerBlock *L, int l, int hn, int64_t fs, uint32_t scopes) {
  const SpecModel *m = &L->s->model;
  const uint32_t lab = IR_LABEL_MOE | IR_LABEL_SHARED_EXPERTS;
  bool glu = m->gated_linear_unit;
  lb_tags(L, l, lab, scopes, "mlp.shared_experts.linear_fc1");
  int64_t seg[2] = {fs, fs}; /* gated: [gate | up], each rank its slice of both halves */
  int u = lb_linear_col(L, lb_tp_enter(L, hn), glu ? 2 * fs : fs, L->c, L->std, glu ? 2 : 1, seg);
  lb_tags(L, l, lab, scopes, "mlp.shared_experts.act");
  if ((u = lb_mlp_act(L->g, m, u)) < 0) return -1;
  lb_tags(L, l, lab, scopes, "mlp.shared_experts.linear_fc2");
  return lb_linear_row(L, u, L->c, fs, L->out_std);
}

/* Expert parallelism: expert weight `id` (E/EP, ...) is this rank's slice of the one-rank (E, ...)
 * along the experts (ir.h Tensor.tp_ep). */
static int ep_shard(int id, Graph *g, int64_t ne, int64_t ep) {
  if (id < 0 || ep <= 1) return id;
  Tensor *t = &g->t[id];
  t->tp_dim = 0, t->tp_nseg = 1, t->tp_seg[0] = ne, t->tp_size = (int32_t)ep, t->tp_ep = 1;
  return id;
}

int lower_moe(const LowerBlock *L, int l, int x, int *aux) {
  const Spec *s = L->s;
  const SpecModel *m = &s->model;
  Graph *g = L->g;
  const uint32_t SM = IR_SCOPE_LAYER | IR_SCOPE_MOE, SR = SM | IR_SCOPE_MOE_ROUTER | IR_SCOPE_MOE_PREPROCESS;
  const uint32_t SP =
      strcmp(m->moe_token_dispatcher_type, "alltoall") == 0 ? SM | IR_SCOPE_MOE_PREPROCESS : SM;
  const uint32_t M = IR_LABEL_MOE;
  int64_t ne = m->num_moe_experts, k = m->moe_router_topk, f = spec_moe_ffn_hidden_size(s), c = L->c;
  /* under TP the residual stream is the rank's sequence rows (sequence parallelism, which MoE under TP
   * asks for: compiler/codegen/executes.c): each rank routes its own rows */
  int64_t rows = L->b * (L->sp ? L->t / L->tp : L->t);
  bool glu = m->gated_linear_unit;
  int act = act_kind(m->activation_func);
  bool shared = s->present[SPEC_F_model_moe_shared_expert_intermediate_size] &&
                m->moe_shared_expert_intermediate_size > 0;
  if (ne < 2 || k < 1 || k > ne || f < 1 || act < 0)
    return graph_fail(
        g, "MoE sizes cannot be lowered (experts %lld, top-k %lld, moe_ffn_hidden_size %lld, activation %s)",
        (long long)ne, (long long)k, (long long)f, m->activation_func);
  if (m->add_bias_linear)
    return graph_fail(g, "expert biases (add_bias_linear with MoE) are not lowered yet");
  if (s->present[SPEC_F_model_moe_input_jitter_eps] && m->moe_input_jitter_eps > 0)
    return graph_fail(g, "moe_input_jitter_eps is not lowered yet");
  /* Megatron's get_capacity: ceil(tokens * k / E * factor), over this micro-batch's tokens */
  int64_t cap = 0;
  if (s->present[SPEC_F_model_moe_expert_capacity_factor]) {
    cap = (int64_t)ceil((double)(rows * k) / (double)ne * m->moe_expert_capacity_factor);
    if (cap < 1) cap = 1;
  }
  int64_t n = cap ? ne * cap : rows * k; /* rows of the permuted buffer */
  /* Expert parallelism executed (a per-rank step, ops/ep.c): this rank runs experts
   * [r El, (r+1) El) over the rows every EP rank routed to them, received into a buffer of the
   * static worst case: dropless every routed row of every rank (min(k, El) a token), with a
   * capacity E*cap (each source at most cap rows an expert). */
  int64_t ep = s->per_rank && m->expert_model_parallel_size > 1 ? m->expert_model_parallel_size : 1;
  bool ep_on = spec_lowers_ep(s); /* also at EP 1 under train.force_parallel_lowering */
  int64_t nl = ne / ep, recv = cap ? ne * cap : ep * rows * (k < nl ? k : nl);
  /* the allgather dispatcher (dropless, TP 1: compiler/codegen/executes.c refuses the rest) */
  bool ag = ep_on && strcmp(m->moe_token_dispatcher_type, "allgather") == 0;
  if (ag && cap)
    return graph_fail(g, "the allgather token dispatcher with an expert capacity is not lowered yet");
  if (ag) n = recv;

  lb_tags(L, l, IR_LABEL_LAYERNORM, SR, "pre_mlp_layernorm");
  int hn = lb_norm(L, x, c); /* (B,T,C) */

  lb_tags(L, l, M, SR, "mlp.router");
  /* Megatron keeps the router weight in fp32 whatever the compute dtype */
  int64_t ws[2] = {ne, c};
  char name[IR_NAME_MAX];
  snprintf(name, sizeof name, "%s.weight", g->cur.module);
  int lin[2] = {hn, graph_param(g, name, DT_F32, 2, ws, IR_INIT_NORMAL, L->std)};
  int logits = graph_op1(g, OP_LINEAR, lin, 2, NULL, NULL); /* (B,T,E) */
  OpAttrs ta = {.i = {k, 0}};
  int topk[2]; /* probs (B,T,k), expert idx (B,T,k) */
  if (graph_op(g, OP_ROUTER_TOPK, &logits, 1, &ta, topk, NULL) < 0) return -1;
  int layer_aux = -1;
  if (m->moe_aux_loss_coeff > 0) {
    int scores = graph_op1(g, OP_SOFTMAX, &logits, 1, NULL, NULL); /* (B,T,E) over all experts */
    OpAttrs xa = {.f = {m->moe_aux_loss_coeff}, .i = {k, 0, L->sp ? L->tp : 0}}; /* SP: the group's counts */
    int ai[2] = {scores, topk[1]};
    layer_aux = graph_op1(g, OP_MOE_AUX_LOSS, ai, 2, &xa, NULL); /* (1) */
  }

  int sh = -1;
  if (shared)
    sh = shared_experts(L, l, hn, m->moe_shared_expert_intermediate_size,
                        m->moe_shared_expert_overlap ? SM : SR);

  lb_tags(L, l, M, SP, "mlp.token_dispatcher");
  int dx = hn, dp = topk[0], di = topk[1]; /* the tokens the rank dispatches: its own, or the group's */
  OpAttrs ga = {.i = {ep, 1}};             /* over the EP group */
  if (ag) {                                /* (B, EP T, ...): every EP rank's tokens, rank after rank */
    dx = graph_op1(g, OP_TP_GATHER, &hn, 1, &ga, NULL);
    dp = graph_op1(g, OP_TP_GATHER, &topk[0], 1, &ga, NULL);
    di = graph_op1(g, OP_TP_GATHER, &topk[1], 1, &ga, NULL);
  }
  OpAttrs da = {.i = {ne, cap, cap && m->moe_pad_expert_input_to_capacity, 0, ag ? nl : 0}};
  int disp[3]; /* row_of (B,T,k), expert segments (E or El, 2), tokens per expert (E or El) */
  if (graph_op(g, OP_MOE_DISPATCH, &di, 1, &da, disp, NULL) < 0) return -1;
  OpAttrs pa = {.i = {n}};
  int pin[3] = {dx, dp, disp[0]}, perm[2]; /* tokens (N,C), probs (N) */
  if (graph_op(g, OP_MOE_PERMUTE, pin, 3, &pa, perm, NULL) < 0) return -1;

  int xs = perm[0], ps = perm[1], seg = disp[1], ex[2] = {-1, -1}; /* ex: all_seg, local seg */
  OpAttrs ea = {.i = {ep, recv}};
  if (ep_on && !ag) { /* counts first, then the tokens and their probabilities to the experts' owners */
    if (graph_op(g, OP_EP_COUNTS, &disp[1], 1, &ea, ex, NULL) < 0) return -1;
    int xi[2] = {perm[0], ex[0]}, pi[2] = {perm[1], ex[0]};
    xs = graph_op1(g, OP_EP_DISPATCH, xi, 2, &ea, NULL); /* (R, C) */
    ps = graph_op1(g, OP_EP_DISPATCH, pi, 2, &ea, NULL); /* (R) */
    seg = ex[1];
  }

  lb_tags(L, l, M, SM, "mlp.experts.linear_fc1");
  int64_t w1s[3] = {nl, glu ? 2 * f : f, c}, w2s[3] = {nl, c, f};
  int w1 = ep_shard(lb_param(L, "weight", 3, w1s, IR_INIT_NORMAL, L->std), g, ne, ep);
  int h1 = lb_grouped_linear_op(g, s, xs, w1, seg); /* (N or R, F or 2F) */
  lb_tags(L, l, M | IR_LABEL_MOE_ACT, SM, "mlp.experts.act");
  OpAttrs aa = {.i = {glu, act}};
  int ain[2] = {h1, ps};
  int a = graph_op1(g, OP_MOE_ACT, ain, 2, &aa, NULL); /* (N or R, F) */
  lb_tags(L, l, M, SM, "mlp.experts.linear_fc2");
  int w2 = ep_shard(lb_param(L, "weight", 3, w2s, IR_INIT_NORMAL, L->out_std), g, ne, ep);
  int y = lb_grouped_linear_op(g, s, a, w2, seg); /* (N or R, C) */

  lb_tags(L, l, M, SM, "mlp.token_dispatcher");
  if (ep_on && !ag) { /* the expert outputs back to the ranks their tokens came from */
    OpAttrs ca = {.i = {ep, n}};
    int ci[2] = {y, ex[0]};
    y = graph_op1(g, OP_EP_COMBINE, ci, 2, &ca, NULL); /* (N, C) */
  }
  int uin[2] = {y, disp[0]};
  int out = graph_op1(g, OP_MOE_UNPERMUTE, uin, 2, &pa, NULL); /* (B,T,C); allgather: (B,EP T,C) */
  if (ag) /* each token's sum over the group's experts, back on the rank that routed it */
    out = graph_op1(g, OP_TP_SCATTER, &out, 1, &ga, NULL);
  if (sh >= 0) {
    lb_tags(L, l, M, SM, "mlp");
    int add[2] = {out, sh};
    snprintf(name, sizeof name, "layers.%d.mlp.output", l);
    out = graph_op1(g, OP_ADD, add, 2, NULL, name);
  }

  lb_tags(L, l, 0, SM, "mlp_bda");
  out = lb_dropout(L, out, m->hidden_dropout, L->sp ? 1 : 0);
  int add[2] = {x, out};
  int res = graph_op1(g, OP_ADD, add, 2, NULL, NULL);

  if (layer_aux >= 0) { /* the running sum over layers belongs to the loss, outside any layer */
    graph_set_layer(g, -1);
    graph_set_labels(g, 0);
    graph_set_scopes(g, 0);
    graph_module(g, "loss.moe_aux_loss");
    if (*aux < 0)
      *aux = layer_aux;
    else {
      int sum[2] = {*aux, layer_aux};
      snprintf(name, sizeof name, "loss.moe_aux_loss.through_layer%d", l);
      *aux = graph_op1(g, OP_ADD, sum, 2, NULL, name);
    }
  }
  return g->err[0] ? -1 : res;
}
