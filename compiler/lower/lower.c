/* lower.c — Spec -> forward Graph for the dense decoder (see lower.h).
 *
 * One builder per block (lower_embedding, lower_attention, lower_mlp, lower_head); each sets the
 * tags of the ops it emits: module path, recompute labels and CUDA-graph scopes per
 * docs/megatron-rules.md §2.2 (scopes) and §3.2 (label boundaries):
 *   input_layernorm                 scopes {layer, attn}; no label (see below; local spec: layernorm)
 *   self_attention.* (qkv, RoPE)    scopes {layer, attn}
 *   self_attention.core_attention   label core_attn (after RoPE, before linear_proj), {layer, attn}
 *   self_attn_bda (dropout + add)   scopes {layer, attn}
 *   pre_mlp_layernorm               scopes {layer, mlp} (dense layers); no label (see below; local:
 * layernorm) mlp.* (fc1, act, fc2)           label mlp, scopes {layer, mlp} mlp_bda scopes {layer, mlp} MLA,
 * MoE and Mamba get their own builders (lower_mla, lower_moe, lower_mamba); a hybrid model's layers follow
 * hybrid_override_pattern (lower_layer). These two norms carry no layernorm label: Megatron's TE layer specs
 * fuse them into the linear that follows (TELayerNormColumnParallelLinear for linear_qkv and for the dense
 * linear_fc1, the layer's own norm an IdentityOp: gpt_layer_specs.py, and hybrid_layer_specs.py's
 * attention_layer and mlp_layer at Megatron-LM 24bad8e677), and TransformerLayer sets
 * recompute_input_layernorm / recompute_pre_mlp_layernorm only for a norm that is not an IdentityOp
 * (transformer_layer.py,
 * __init__), so `layernorm` discards nothing there: TE keeps the fused norm's output for the
 * linear's wgrad. (MCORE-60 says so to the user.) With model.transformer_impl = "local" (Megatron's
 * local spec: separate norm modules) both carry `layernorm` again. The MLA input norm and the MoE pre-MLP
 * norm, TENorm modules, keep the label (lower_mla.c, lower_moe.c). Parallelism fields do not change this
 * graph: it is the single-rank math. */
#include "lower/lower.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lower/lower_blocks.h"
#include "passes/autodiff.h"
#include "validate/validate.h"

typedef struct {
  Graph *g;
  const Spec *s;
  DType dt; /* compute dtype of weights and activations */
  int64_t b, t, c, h, gq, d, f, v;
  double std, out_std; /* Megatron's init_method_std and the scaled init of output projections */
  int stream;          /* next dropout RNG stream */
  int wte;             /* word embeddings, kept for a tied output layer */
  int64_t tp;          /* tensor parallelism executed (Spec.per_rank): this rank's shard; 1 none */
  bool tp_on;          /* its ops lowered (spec_lowers_tp: TP > 1, or forced at TP 1) */
  bool sp;             /* sequence parallelism: the residual stream is this rank's T/TP rows */
  const LowerBlock *B; /* the same state for the shared builders (lower_blocks.h), TP helpers included */
} Lower;

static void tags(Lower *L, int layer, uint32_t labels, uint32_t scopes, const char *fmt, const char *sub) {
  graph_set_layer(L->g, layer);
  graph_set_labels(L->g, labels);
  graph_set_scopes(L->g, scopes);
  if (layer >= 0)
    graph_module(L->g, fmt, layer, sub);
  else
    graph_module(L->g, "%s", sub);
}

static int param(Lower *L, const char *suffix, int ndim, int64_t d0, int64_t d1, IrInit init, double std) {
  char name[IR_NAME_MAX];
  snprintf(name, sizeof name, "%s.%s", L->g->cur.module, suffix);
  int64_t sh[2] = {d0, d1};
  return graph_param(L->g, name, L->dt, ndim, sh, init, std);
}

static int norm(Lower *L, int x) {
  bool ln = strcmp(L->s->model.normalization, "LayerNorm") == 0;
  int in[3] = {x, param(L, "weight", 1, L->c, 1, IR_INIT_ONES, 0),
               ln ? param(L, "bias", 1, L->c, 1, IR_INIT_ZEROS, 0) : -1};
  OpAttrs a = {.f = {L->s->model.layernorm_epsilon}};
  return graph_op1(L->g, ln ? OP_LAYERNORM : OP_RMSNORM, in, ln ? 3 : 2, &a, NULL);
}

/* The residual stream's (B, T, C) dropout: under sequence parallelism a rank holds T/TP rows. */
static int hidden_dropout(Lower *L, int x) {
  return lb_dropout(L->B, x, L->s->model.hidden_dropout, L->sp ? 1 : 0);
}

static int lower_embedding(Lower *L) {
  tags(L, -1, 0, 0, NULL, "embedding");
  int64_t sh[2] = {L->b, L->t};
  Graph *g = L->g;
  g->tokens = graph_tensor(g, "input.tokens", DT_I32, ROLE_INPUT, 2, sh);
  g->targets = graph_tensor(g, "input.targets", DT_I32, ROLE_INPUT, 2, sh);
  graph_module(g, "embedding.word_embeddings");
  L->wte = lb_shard(L->B, param(L, "weight", 2, L->v / L->tp, L->c, IR_INIT_NORMAL, L->std), 0, 1, &L->v);
  int in[2] = {g->tokens, L->wte};
  OpAttrs ea = {.i = {L->tp_on}}; /* vocab-parallel: this rank's rows, then the sum over TP */
  int x = lb_tp_leave(L->B, graph_op1(g, OP_EMBED, in, 2, &ea, NULL));
  if (strcmp(L->s->model.position_embedding_type, "learned_absolute") == 0) {
    graph_module(g, "embedding.position_embeddings");
    int pos[2] = {x, param(L, "weight", 2, L->s->model.seq_length, L->c, IR_INIT_NORMAL, L->std)};
    OpAttrs pa = {.i = {L->sp}}; /* under SP the rank's block of each sequence */
    x = graph_op1(g, OP_POS_ADD, pos, 2, &pa, NULL);
  }
  graph_module(g, "embedding");
  return hidden_dropout(L, x);
}

/* The label of the two norms Megatron's TE spec fuses into the next linear: none there (above);
 * `layernorm` under model.transformer_impl = "local", whose norms are modules of their own. */
static uint32_t fused_norm_label(const Lower *L) {
  return strcmp(L->s->model.transformer_impl, "local") == 0 ? IR_LABEL_LAYERNORM : 0;
}

/* Self-attention from the input layernorm to the residual add (the `attn` graph scope). */
static int lower_attention(Lower *L, int l, int x) {
  const uint32_t S = IR_SCOPE_LAYER | IR_SCOPE_ATTN;
  const SpecModel *m = &L->s->model;
  Graph *g = L->g;
  tags(L, l, fused_norm_label(L), S, "layers.%d.%s", "input_layernorm"); /* fused into linear_qkv (above) */
  int h = lb_tp_enter(L->B, norm(L, x));
  tags(L, l, 0, S, "layers.%d.%s", "self_attention.linear_qkv");
  int64_t qkv_seg[3] = {L->h * L->d, L->gq * L->d, L->gq * L->d}; /* [all Q | all K | all V] */
  /* fewer key/value groups than TP ranks (TP % G == 0): each rank one group, the one its H/TP query
   * heads use (rank r: group r / (TP/G)), its K and V rows replicated on the TP/G ranks sharing it
   * (Megatron's Attention with num_query_groups < world size); the optimizer sums their gradients */
  int64_t kv_rep = L->gq < L->tp ? L->tp / L->gq : 1;
  if (L->h % L->tp || (L->gq * kv_rep) % L->tp)
    return graph_fail(g, "%lld heads and %lld key/value groups do not split over TP %lld (STEPC-3)",
                      (long long)L->h, (long long)L->gq, (long long)L->tp);
  int qkv_rep[3] = {1, (int)kv_rep, (int)kv_rep};
  int qkv = lb_linear_col_rep(L->B, h, (L->h + 2 * L->gq) * L->d, L->c, L->std, 3, qkv_seg, qkv_rep);
  tags(L, l, 0, S, "layers.%d.%s", "self_attention");
  OpAttrs sa = {.i = {L->h / L->tp, L->gq * kv_rep / L->tp, L->d}}; /* this rank's heads and groups */
  int qkvs[3];
  if (graph_op(g, OP_SPLIT_QKV, &qkv, 1, &sa, qkvs, NULL) < 0) return -1;
  int q = qkvs[0], k = qkvs[1], v = qkvs[2];
  if (strcmp(m->position_embedding_type, "rope") == 0) {
    OpAttrs ra = {.f = {m->rotary_base, m->rope_scaling ? m->rope_scaling_factor : 0}, .i = {1}};
    char qn[IR_NAME_MAX], kn[IR_NAME_MAX];
    snprintf(qn, sizeof qn, "layers.%d.self_attention.query_rope", l);
    snprintf(kn, sizeof kn, "layers.%d.self_attention.key_rope", l);
    q = graph_op1(g, OP_ROPE, &q, 1, &ra, qn);
    k = graph_op1(g, OP_ROPE, &k, 1, &ra, kn);
  }
  tags(L, l, IR_LABEL_CORE_ATTN, S, "layers.%d.%s", "self_attention.core_attention");
  double scale = 1.0 / sqrt((double)L->d);
  int ctx;
  if (strcmp(m->attention_backend, "unfused") == 0) {
    OpAttrs a = {.f = {scale}};
    int in[2] = {q, k};
    int s = graph_op1(g, OP_ATTN_SCORES, in, 2, &a, NULL);
    OpAttrs ma = {.i = {0}};
    s = graph_op1(g, OP_CAUSAL_MASK, &s, 1, &ma, NULL);
    int p = graph_op1(g, OP_SOFTMAX, &s, 1, NULL, NULL);
    p = lb_dropout(L->B, p, m->attention_dropout, 1); /* (B, H, T, T): this rank's heads */
    int pv[2] = {p, v};
    ctx = graph_op1(g, OP_ATTN_PV, pv, 2, NULL, NULL);
  } else { /* flash, fused, auto: one op keeping q, k, v, o and the log-sum-exp */
    OpAttrs a = {.f = {scale, m->attention_dropout},
                 .i = {L->stream++, 1, lb_attn_impl(m), m->deterministic_mode, L->tp_on}};
    int in[3] = {q, k, v};
    ctx = graph_op1(g, OP_FLASH_ATTN, in, 3, &a, NULL);
  }
  tags(L, l, 0, S, "layers.%d.%s", "self_attention.linear_proj");
  int64_t hd = L->h * L->d;
  int o = lb_linear_row(L->B, ctx, L->c, hd, L->out_std);
  tags(L, l, 0, S, "layers.%d.%s", "self_attn_bda");
  o = hidden_dropout(L, o);
  int add[2] = {x, o};
  return graph_op1(g, OP_ADD, add, 2, NULL, NULL);
}

/* Dense MLP from the pre-MLP layernorm to the residual add (the `mlp` graph scope). */
static int lower_mlp(Lower *L, int l, int x) {
  const uint32_t S = IR_SCOPE_LAYER | IR_SCOPE_MLP;
  const SpecModel *m = &L->s->model;
  bool glu = m->gated_linear_unit;
  tags(L, l, fused_norm_label(L), S, "layers.%d.%s", "pre_mlp_layernorm"); /* fused into linear_fc1 (above) */
  int h = lb_tp_enter(L->B, norm(L, x));
  tags(L, l, IR_LABEL_MLP, S, "layers.%d.%s", "mlp.linear_fc1");
  int64_t fc1_seg[2] = {L->f, L->f}; /* gated: [gate | up], each rank its slice of both halves */
  int u = lb_linear_col(L->B, h, glu ? 2 * L->f : L->f, L->c, L->std, glu ? 2 : 1, fc1_seg);
  tags(L, l, IR_LABEL_MLP | IR_LABEL_MLP_ACT, S, "layers.%d.%s", "mlp.activation_func");
  if ((u = lb_mlp_act(L->g, m, u)) < 0) return -1;
  tags(L, l, IR_LABEL_MLP, S, "layers.%d.%s", "mlp.linear_fc2");
  int o = lb_linear_row(L->B, u, L->c, L->f, L->out_std);
  tags(L, l, 0, S, "layers.%d.%s", "mlp_bda");
  o = hidden_dropout(L, o);
  int add[2] = {x, o};
  return graph_op1(L->g, OP_ADD, add, 2, NULL, NULL);
}

static int lower_head(Lower *L, int x) {
  Graph *g = L->g;
  tags(L, -1, 0, 0, NULL, "final_layernorm");
  x = lb_tp_enter(L->B, norm(L, x));
  tags(L, -1, 0, 0, NULL, "output_layer");
  int w =
      L->s->model.share_embeddings_and_output_weights
          ? L->wte
          : lb_shard(L->B, param(L, "weight", 2, L->v / L->tp, L->c, IR_INIT_NORMAL, L->std), 0, 1, &L->v);
  int64_t chunks = spec_output_layer_chunks(L->s);
  if (chunks > 1) { /* one op over the chunks: only one chunk's logits at a time (ir/ops/linear_loss.c) */
    OpAttrs a = {.i = {chunks}};
    int in[3] = {x, w, g->targets}, out[3];
    if (graph_op(g, OP_LINEAR_CROSS_ENTROPY, in, 3, &a, out, NULL) < 0) return -1;
    g->loss = out[0];
    return 0;
  }
  int in[2] = {x, w};
  int logits = graph_op1(g, OP_LINEAR, in, 2, NULL, "output_layer.logits");
  tags(L, -1, 0, 0, NULL, "loss");
  int ce[2] = {logits, g->targets}, out[2];
  OpAttrs ca = {.i = {L->tp_on}}; /* vocab-parallel: no rank holds a row's whole logits */
  if (graph_op(g, OP_CROSS_ENTROPY, ce, 2, &ca, out, NULL) < 0) return -1;
  g->loss = out[0];
  return 0;
}

/* The layer kind not lowered yet ("GDN"), with the field that asks for it in *field. */
static const char *unsupported(const Spec *s, const char **field) {
  if (s->present[SPEC_F_model_experimental_attention_variant])
    return *field = "experimental_attention_variant", "GDN";
  return NULL;
}

/* Layer l: a GPT layer (attention, then the dense or MoE MLP), or in a hybrid model the one block
 * its letter in hybrid_override_pattern names (Megatron's MambaStack: M a MambaLayer, * a
 * TransformerLayer with attention only, - with a dense MLP only, E with a MoE MLP only). */
static int lower_layer(Lower *L, LowerBlock *B, int l, int x, int *aux) {
  const SpecModel *m = &L->s->model;
  char kind = L->s->present[SPEC_F_model_hybrid_override_pattern] && m->hybrid_override_pattern[0]
                  ? m->hybrid_override_pattern[l]
                  : 0;
  if (kind == 'M') return lower_mamba(B, l, x);
  if (kind == 0 || kind == '*') x = m->multi_latent_attention ? lower_mla(B, l, x) : lower_attention(L, l, x);
  if (x >= 0 && kind != '*') x = spec_layer_is_moe(L->s, l) ? lower_moe(B, l, x, aux) : lower_mlp(L, l, x);
  return x;
}

int lower_forward(const Spec *s, Graph **out, char *err, size_t nerr) {
  *out = NULL;
  const char *field = NULL, *why = unsupported(s, &field);
  if (why) {
    snprintf(err, nerr, "%s layers are not lowered yet (the recipe sets model.%s)", why, field);
    return LOWER_UNSUPPORTED;
  }
  if (validate_sizes_ok(s, err, nerr) != 0) return LOWER_ERROR;
  const SpecModel *m = &s->model;
  Lower L = {.s = s,
             .dt = m->bf16 ? DT_BF16 : DT_F32,
             .b = s->train.micro_batch_size,
             .t = m->seq_length,
             .c = m->hidden_size,
             .h = m->num_attention_heads,
             .gq = spec_num_query_groups(s),
             .d = spec_kv_channels(s),
             .f = spec_ffn_hidden_size(s),
             .v = m->vocab_size,
             .std = 0.02,
             .tp = s->per_rank && m->tensor_model_parallel_size > 1 ? m->tensor_model_parallel_size : 1};
  L.tp_on = spec_lowers_tp(s); /* also at TP 1 under train.force_parallel_lowering */
  L.sp = L.tp_on && m->sequence_parallel;
  L.out_std = L.std / sqrt(2.0 * (double)m->num_layers);
  if (L.b <= 0 || L.t <= 0 || L.c <= 0 || L.h <= 0 || L.gq <= 0 || L.d <= 0 || L.f <= 0 || L.v <= 0 ||
      L.h % L.gq) {
    snprintf(err, nerr,
             "the recipe's sizes cannot be lowered (check hidden_size, heads, query groups, kv_channels)");
    return LOWER_ERROR;
  }
  int64_t gbs = spec_global_batch_size(s);
  if (m->num_layers > 1024 ||
      gbs / L.b > 65536) { /* STEPC-30, STEPC-31: beyond what the planner answers in seconds */
    snprintf(err, nerr, "more than 1024 layers or 65536 micro-batches per step (STEPC-30, STEPC-31)");
    return LOWER_ERROR;
  }
  L.g = graph_new();
  if (!L.g) {
    snprintf(err, nerr, "out of memory");
    return LOWER_ERROR;
  }
  /* one rank's share of the global batch: DP ranks each run gbs / (mbs * DP) micro-batches, whose
   * loss gradients are 1 / that count; the runtime averages the ranks' gradients (Megatron's DDP) */
  int64_t dpn = spec_data_parallel_size(s) > 0 ? spec_data_parallel_size(s) : 1;
  L.g->num_microbatches = (int)(gbs / (L.b * dpn) > 0 ? gbs / (L.b * dpn) : 1);
  LowerBlock B = {.g = L.g,
                  .s = s,
                  .dt = L.dt,
                  .b = L.b,
                  .t = L.t,
                  .c = L.c,
                  .std = L.std,
                  .out_std = L.out_std,
                  .stream = &L.stream,
                  .tp = L.tp,
                  .tp_on = L.tp_on,
                  .sp = L.sp};
  L.B = &B;
  int aux = -1; /* the MoE layers' summed load-balancing loss */
  int x = lower_embedding(&L);
  if (s->present[SPEC_F_model_hybrid_override_pattern] &&
      (int64_t)strlen(m->hybrid_override_pattern) != m->num_layers) {
    snprintf(err, nerr, "hybrid_override_pattern does not list num_layers layers (STEPC-13)");
    graph_free(L.g);
    return LOWER_ERROR;
  }
  for (int l = 0; l < m->num_layers && x >= 0; l++)
    x = lower_layer(&L, &B, l, x, &aux);
  if (x >= 0 && lower_head(&L, x) == 0 && aux >= 0) { /* the training loss includes the aux loss */
    tags(&L, -1, 0, 0, NULL, "loss");
    if (L.sp) { /* each rank's aux loss is its rows' part: the loss reports the group's sum (backward
                   identity) */
      OpAttrs ra = {.i = {L.tp}};
      aux = graph_op1(L.g, OP_TP_ALLREDUCE, &aux, 1, &ra, "loss.moe_aux_loss.tp_sum");
    }
    int sum[2] = {L.g->loss, aux};
    L.g->loss = graph_op1(L.g, OP_ADD, sum, 2, NULL, "loss.total");
  }
  if (x < 0 || L.g->loss < 0 || L.g->err[0]) {
    snprintf(err, nerr, "lowering failed: %s", L.g->err[0] ? L.g->err : "unknown error");
    graph_free(L.g);
    return LOWER_ERROR;
  }
  graph_set_layer(L.g, -1);
  graph_set_labels(L.g, 0);
  graph_set_scopes(L.g, 0);
  *out = L.g;
  return LOWER_OK;
}

int lower_step(const Spec *s, Graph **out, char *err, size_t nerr) {
  int rc = lower_forward(s, out, err, nerr);
  if (rc != LOWER_OK) return rc;
  if (autodiff_build_loss(*out) < 0 || lb_fp8_delayed_updates(*out, s) < 0 || optimizer_build(*out, s) < 0 ||
      lb_fp8_param_casts(*out, s) < 0) {
    snprintf(err, nerr, "building the step failed: %s", (*out)->err);
    graph_free(*out);
    *out = NULL;
    return LOWER_ERROR;
  }
  return LOWER_OK;
}
