/* lower_mla.c — multi-latent attention (DeepSeek-V2/V3, Megatron's MLASelfAttention) for one
 * layer, from the input layernorm to the residual add. All of it is in the `attn` graph scope
 * (and `layer`); labels per docs/megatron-rules.md §3.2:
 *   input_layernorm                           layernorm
 *   linear_q_down_proj, q_layernorm           -          (the compressed latents are kept)
 *   linear_kv_down_proj, kv split, kv_layernorm -
 *   linear_q_up_proj (or linear_q_proj without q_lora_rank), linear_kv_up_proj, the q / kv
 *   splits, RoPE on q_pe and k_pe, the q and k concats            mla_up_proj
 *   core_attention                            core_attn
 *   linear_proj, self_attn_bda                 -
 *
 * Shapes (H heads, dn = qk_head_dim, dr = qk_pos_emb_head_dim, dv = v_head_dim):
 *   q          (B,T,H*(dn+dr)) -> q_nope (B,T,H,dn), q_pe (B,T,H,dr)
 *   kv_down    (B,T,kv_lora_rank+dr) -> kv_c (B,T,kv_lora_rank), k_pe (B,T,1,dr) shared by all heads
 *   kv_up      (B,T,H*(dn+dv)) -> k_nope (B,T,H,dn), v (B,T,H,dv)
 *   q, k       (B,T,H,dn+dr) after RoPE on the rope parts; the softmax scale is 1/sqrt(dn+dr)
 *   context    (B,T,H*dv)
 * The fused backend is Transformer Engine's fused (cuDNN) attention, which takes dv != dn+dr as
 * is: FLASH_ATTN_DV, no copies (Megatron pads V only for packed THD batches,
 * multi_latent_attention.py, _prepare_mla_core_attention_value). stepc's own flash kernel (flash,
 * auto) wants one head dim: the narrower side is zero padded (zero columns change neither q.k nor
 * the output) and the context sliced back; those copies are core_attn internals that Megatron's
 * run does not have.
 *
 * Tensor parallelism (Megatron's MLASelfAttention with its TE spec, multi_latent_attention.py):
 * the down projections and their norms are duplicated (whole weights on every rank), the up
 * projections column-parallel by heads (each head's rows [dn + dr] / [dn + dv] are contiguous, so a
 * rank's heads are one block of rows), linear_proj row-parallel. The compressed latents enter the TP
 * region (lb_tp_enter: TP_COPY, whose gradient is the group's sum over every rank's heads), and so
 * does the shared k_pos_emb before its RoPE. Each rank runs its H/TP heads. Under sequence
 * parallelism the down projections and the norms run on the rank's sequence rows (their weight
 * gradients summed over the group by the optimizer, as every replicated parameter's under SP), and
 * entering the region gathers the rows (TP_GATHER): Megatron's column-parallel up projections gather
 * their input, and it gathers k_pos_emb. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lower/lower_blocks.h"

/* HEAD_SPLIT / HEAD_CONCAT layout flags (ops/mla.c) */
enum { JOINED_FLAT = 1, PART1_FLAT = 2 };

static int split(const LowerBlock *L, int x, int64_t h, int64_t a, int64_t b, int flags, const char *n1,
                 const char *n2, int *p1, int *p2) {
  char b1[IR_NAME_MAX], b2[IR_NAME_MAX];
  snprintf(b1, sizeof b1, "%s.%s", L->g->cur.module, n1);
  snprintf(b2, sizeof b2, "%s.%s", L->g->cur.module, n2);
  const char *names[2] = {b1, b2};
  OpAttrs at = {.i = {h, a, b, h, flags}};
  int out[2];
  if (graph_op(L->g, OP_HEAD_SPLIT, &x, 1, &at, out, names) < 0) return -1;
  *p1 = out[0], *p2 = out[1];
  return 0;
}

/* [p1 | p2] per head; p2 < 0: zero padding of width b; h2 = 1 broadcasts p2 to every head */
static int concat(const LowerBlock *L, int p1, int p2, int64_t h, int64_t a, int64_t b, int64_t h2,
                  const char *name) {
  char nb[IR_NAME_MAX];
  snprintf(nb, sizeof nb, "%s.%s", L->g->cur.module, name);
  OpAttrs at = {.i = {h, a, b, h2, 0}};
  int in[2] = {p1, p2};
  return graph_op1(L->g, OP_HEAD_CONCAT, in, p2 < 0 ? 1 : 2, &at, nb);
}

static int rope(const LowerBlock *L, int x, const char *name) {
  char nb[IR_NAME_MAX];
  snprintf(nb, sizeof nb, "%s.%s", L->g->cur.module, name);
  OpAttrs a = {.f = {L->s->model.rotary_base}, .i = {1}};
  return graph_op1(L->g, OP_ROPE, &x, 1, &a, nb);
}

/* Core attention of q, k (B,T,H,dqk) and v (B,T,H,dv) -> context (B,T,H*dv). */
static int core_attention(const LowerBlock *L, int q, int k, int v, int64_t h, int64_t dqk, int64_t dv) {
  const SpecModel *m = &L->s->model;
  Graph *g = L->g;
  double scale = 1.0 / sqrt((double)dqk);
  if (strcmp(m->attention_backend, "unfused") == 0) { /* the unfused path takes dv != dqk as is */
    OpAttrs a = {.f = {scale}};
    int in[2] = {q, k};
    int s = graph_op1(g, OP_ATTN_SCORES, in, 2, &a, NULL);
    OpAttrs ma = {.i = {0}};
    s = graph_op1(g, OP_CAUSAL_MASK, &s, 1, &ma, NULL);
    int p = graph_op1(g, OP_SOFTMAX, &s, 1, NULL, NULL);
    p = lb_dropout(L, p, m->attention_dropout, 1); /* (B, H, T, T): under TP this rank's heads */
    int pv[2] = {p, v};
    return graph_op1(g, OP_ATTN_PV, pv, 2, NULL, NULL);
  }
  OpAttrs a = {.f = {scale, m->attention_dropout},
               .i = {(*L->stream)++, 1, lb_attn_impl(m), m->deterministic_mode, L->tp_on}};
  if (strcmp(m->attention_backend, "fused") == 0) {
    int in[3] = {q, k, v};
    return graph_op1(g, dv == dqk ? OP_FLASH_ATTN : OP_FLASH_ATTN_DV, in, 3, &a, NULL);
  }
  int64_t d = dqk > dv ? dqk : dv;
  if (dqk < d) {
    q = concat(L, q, -1, h, dqk, d - dqk, h, "query_padded");
    k = concat(L, k, -1, h, dqk, d - dqk, h, "key_padded");
  }
  if (dv < d) v = concat(L, v, -1, h, dv, d - dv, h, "value_padded");
  int in[3] = {q, k, v};
  int ctx = graph_op1(g, OP_FLASH_ATTN, in, 3, &a, NULL);
  if (dv < d) {
    int c, pad;
    if (split(L, ctx, h, dv, d - dv, JOINED_FLAT | PART1_FLAT, "context_unpadded", "context_padding", &c,
              &pad) < 0)
      return -1;
    ctx = c;
  }
  return ctx;
}

int lower_mla(const LowerBlock *L, int l, int x) {
  const uint32_t S = IR_SCOPE_LAYER | IR_SCOPE_ATTN, UP = IR_LABEL_MLA_UP_PROJ;
  const SpecModel *m = &L->s->model;
  Graph *g = L->g;
  int64_t H = m->num_attention_heads, dn = m->qk_head_dim, dr = m->qk_pos_emb_head_dim, dv = m->v_head_dim;
  int64_t h = H / L->tp; /* this rank's heads */
  int64_t kvl = m->kv_lora_rank, c = L->c;
  bool q_lora = L->s->present[SPEC_F_model_q_lora_rank];
  int64_t ql = q_lora ? m->q_lora_rank : 0;
  if (h < 1 || H % L->tp || dn < 1 || dr < 2 || dr % 2 || dv < 1 || kvl < 1 || (q_lora && ql < 1))
    return graph_fail(
        g,
        "MLA sizes cannot be lowered (heads %lld, qk_head_dim %lld, qk_pos_emb_head_dim %lld (even), "
        "v_head_dim %lld, kv_lora_rank %lld, q_lora_rank %lld)",
        (long long)h, (long long)dn, (long long)dr, (long long)dv, (long long)kvl, (long long)ql);

  lb_tags(L, l, IR_LABEL_LAYERNORM, S, "input_layernorm");
  int hn = lb_norm(L, x, c); /* (B,T,C) */

  int q; /* (B,T,H*(dn+dr)) */
  if (q_lora) {
    lb_tags(L, l, 0, S, "self_attention.linear_q_down_proj");
    int qc = lb_linear(L, hn, ql, c, L->std); /* (B,T,ql) */
    lb_tags(L, l, 0, S, "self_attention.q_layernorm");
    qc = lb_tp_enter(L, lb_norm(L, qc, ql));
    lb_tags(L, l, UP, S, "self_attention.linear_q_up_proj");
    int64_t seg = H * (dn + dr);
    q = lb_linear_col(L, qc, seg, ql, L->std, 1, &seg);
  } else {
    lb_tags(L, l, UP, S, "self_attention.linear_q_proj");
    int64_t seg = H * (dn + dr);
    q = lb_linear_col(L, lb_tp_enter(L, hn), seg, c, L->std, 1, &seg);
  }

  lb_tags(L, l, 0, S, "self_attention.linear_kv_down_proj");
  int kv = lb_linear(L, hn, kvl + dr, c, L->std); /* (B,T,kvl+dr) */
  int kvc, kpe;                                   /* (B,T,kvl), (B,T,1,dr) */
  if (split(L, kv, 1, kvl, dr, JOINED_FLAT | PART1_FLAT, "kv_compressed", "k_pos_emb", &kvc, &kpe) < 0)
    return -1;
  lb_tags(L, l, 0, S, "self_attention.kv_layernorm");
  kvc = lb_tp_enter(L, lb_norm(L, kvc, kvl));

  lb_tags(L, l, UP, S, "self_attention.linear_kv_up_proj");
  int64_t kv_seg = H * (dn + dv);
  int kvu = lb_linear_col(L, kvc, kv_seg, kvl, L->std, 1, &kv_seg); /* (B,T,h*(dn+dv)) */
  lb_tags(L, l, UP, S, "self_attention");
  int qn, qp, kn, v;
  if (split(L, q, h, dn, dr, JOINED_FLAT, "q_no_pe", "q_pos_emb", &qn, &qp) < 0 ||
      split(L, kvu, h, dn, dv, JOINED_FLAT, "k_no_pe", "value", &kn, &v) < 0)
    return -1;
  qp = rope(L, qp, "q_pos_emb_rope");
  kpe = rope(L, lb_tp_enter(L, kpe), "k_pos_emb_rope");
  q = concat(L, qn, qp, h, dn, dr, h, "query"); /* (B,T,H,dn+dr) */
  int k = concat(L, kn, kpe, h, dn, dr, 1, "key");

  lb_tags(L, l, IR_LABEL_CORE_ATTN, S, "self_attention.core_attention");
  int ctx = core_attention(L, q, k, v, h, dn + dr, dv); /* (B,T,H*dv) */
  if (ctx < 0) return -1;

  lb_tags(L, l, 0, S, "self_attention.linear_proj");
  int o = lb_linear_row(L, ctx, c, H * dv, L->out_std);
  lb_tags(L, l, 0, S, "self_attn_bda");
  o = lb_dropout(L, o, m->hidden_dropout, L->sp ? 1 : 0); /* under SP: this rank's sequence rows */
  int add[2] = {x, o};
  return graph_op1(g, OP_ADD, add, 2, NULL, NULL);
}
