/* validate_sizes.c — STEPC-32: every size that the plan multiplies out fits in int64, within stepc's
 * bounds.
 *
 * The frontend range-checks integer fields one by one (each at most 2^40), but a tensor's element
 * count is a product of several of them: micro_batch_size 2^40 times seq_length 2^24 wraps int64
 * to 0, and the plan then reports a tiny arena that the CPU executor writes past. So every product
 * that lowering forms (compiler/lower*.c) is recomputed here with checked arithmetic, before any
 * other rule or stage multiplies sizes, and compared with bounds that leave every later sum in
 * int64 with room to spare (docs/rules.md, STEPC-32):
 *
 *   SZ_MAX_RANKS   2^20  world_size and each parallel size: products of three stay below 2^60
 *   SZ_MAX_ELEMS   2^40  elements of any one tensor (2 TiB in bf16, ~16 H200s for one tensor)
 *   SZ_MAX_PARAMS  2^48  parameters of the model (18 bytes each stays below 2^53)
 *
 * The arena is a sum of at most IR_MAX_TENSORS tensors (ir/ir.h), each at most SZ_MAX_ELEMS
 * elements of at most 8 bytes, so it cannot overflow either; ir/ir.c refuses a graph that would.
 * Lowering calls validate_sizes_ok() first, so a caller that skips the validator cannot plan
 * wrapped sizes either. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ir.h"
#include "validate/validate.h"
#include "validate/validate_internal.h"

#define SZ_MAX_RANKS ((int64_t)1 << 20)
#define SZ_MAX_ELEMS IR_MAX_NUMEL
#define SZ_MAX_PARAMS ((int64_t)1 << 48)
#define SZ_MAX_FAULTS 8

_Static_assert(IR_MAX_NUMEL == (int64_t)1 << 40, "docs/rules.md states STEPC-32's tensor bound as 2^40");

/* One factor of a size: its value and the field it comes from (-1: a constant such as the 2 of a
 * gated MLP). A derived width (kv_channels null) names the field the recipe actually set. */
typedef struct {
  int64_t v;
  int field;        /* blamed when the product is too large */
  const char *name; /* as shown; NULL: the field's name */
} Term;

typedef struct {
  int field; /* the field blamed: the largest factor that the recipe set */
  char msg[480];
} SizeFault;

typedef struct {
  const Spec *s;
  SizeFault f[SZ_MAX_FAULTS];
  int n;
} Sz;

/* a*b; -1 when either is -1 (an earlier overflow) or the product leaves int64. */
static int64_t mul(int64_t a, int64_t b) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return -1;
  return r;
}

static int64_t add(int64_t a, int64_t b) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r)) return -1;
  return r;
}

/* Rank of where a field was set: an override (what the user just changed) before the recipe before
 * a default. */
static int set_rank(const Sz *z, int field) {
  const char *w = z->s->where[field];
  return !w[0] ? 0 : strncmp(w, "override ", 9) == 0 ? 2 : 1;
}

static int blame(const Sz *z, int n, const Term *t) {
  int best = -1;
  for (int i = 0; i < n; i++) {
    if (t[i].field < 0) continue;
    int r = set_rank(z, t[i].field), br = best < 0 ? -1 : set_rank(z, t[best].field);
    if (r > br || (r == br && t[i].v > t[best].v)) best = i;
  }
  return best < 0 ? SPEC_F_model_hidden_size : t[best].field;
}

static void fault(Sz *z, int field, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fault(Sz *z, int field, const char *fmt, ...) {
  if (z->n == SZ_MAX_FAULTS) return;
  SizeFault *f = &z->f[z->n++];
  f->field = field;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(f->msg, sizeof f->msg, fmt, ap);
  va_end(ap);
}

/* The product of t[0..n) must be at most `bound`; returns it, or -1 after recording a fault. */
static int64_t need(Sz *z, const char *what, int64_t bound, const char *bound_text, int n, const Term *t) {
  int64_t p = 1;
  double approx = 1;
  for (int i = 0; i < n; i++) {
    p = mul(p, t[i].v);
    approx *= (double)t[i].v;
  }
  if (p >= 0 && p <= bound) return p;
  char shown[400] = "";
  size_t k = 0;
  for (int i = 0; i < n && k < sizeof shown; i++) {
    const char *nm = t[i].name ? t[i].name : t[i].field >= 0 ? spec_fields[t[i].field].name : "";
    k += (size_t)snprintf(shown + k, sizeof shown - k, "%s%s%s%lld", i ? " x " : "", nm, nm[0] ? "=" : "",
                          (long long)t[i].v);
  }
  if (p < 0)
    fault(z, blame(z, n, t), "%s: %s = %.3g does not fit in a 64-bit integer", what, shown, approx);
  else
    fault(z, blame(z, n, t), "%s: %s = %.3g; stepc plans at most %s", what, shown, approx, bound_text);
  return -1;
}

#define T(value, fld) ((Term){(value), (fld), NULL})
#define TN(value, fld, nm) ((Term){(value), (fld), (nm)})
#define NEED(z, what, bound, text, ...)                                                                      \
  need((z), (what), (bound), (text), (int)(sizeof((Term[]){__VA_ARGS__}) / sizeof(Term)),                    \
       (Term[]){__VA_ARGS__})
#define TENSOR(z, what, ...) NEED((z), (what), SZ_MAX_ELEMS, "2^40 elements in one tensor", __VA_ARGS__)

static void check_ranks(Sz *z) {
  const Spec *s = z->s;
  static const int F[] = {SPEC_F_train_world_size,
                          SPEC_F_model_tensor_model_parallel_size,
                          SPEC_F_model_pipeline_model_parallel_size,
                          SPEC_F_model_virtual_pipeline_model_parallel_size,
                          SPEC_F_model_context_parallel_size,
                          SPEC_F_model_expert_model_parallel_size,
                          SPEC_F_model_expert_tensor_parallel_size};
  for (size_t i = 0; i < sizeof F / sizeof F[0]; i++) {
    if (!s->present[F[i]] && spec_fields[F[i]].def[0] == 'n') continue; /* null */
    int64_t v = *(const int64_t *)spec_field_cptr(s, F[i]);
    if (v > SZ_MAX_RANKS)
      fault(z, F[i], "%s=%lld ranks; stepc plans jobs of at most 2^20 (1048576) ranks",
            spec_fields[F[i]].name, (long long)v);
  }
}

/* Layers of each kind, without walking num_layers (it may be up to 2^40 before STEPC-30 refuses). */
typedef struct {
  int64_t attn, dense, moe;
} Layers;

static Layers count_layers(const Spec *s) {
  const SpecModel *m = &s->model;
  Layers n = {0, 0, 0};
  if (v_is_hybrid(s)) {
    for (const char *p = m->hybrid_override_pattern; *p; p++) {
      n.attn += *p == '*';
      n.dense += *p == '-';
      n.moe += *p == 'E' && spec_is_moe(s);
    }
    return n;
  }
  n.attn = m->num_layers;
  if (spec_is_moe(s)) {
    const SpecFreq *f = &m->moe_layer_freq;
    if (f->every > 0)
      n.moe = (m->num_layers + f->every - 1) / f->every;
    else
      for (int i = 0; i < f->n && i < m->num_layers; i++)
        n.moe += f->pattern[i] != 0;
  }
  n.dense = m->num_layers - n.moe;
  return n;
}

/* The tensors of one attention layer and their parameters (lower.c, lower_mla.c). */
static int64_t check_attention(Sz *z, Term B, Term S) {
  const Spec *s = z->s;
  const SpecModel *m = &s->model;
  const Term C = T(m->hidden_size, SPEC_F_model_hidden_size),
             A = T(m->num_attention_heads, SPEC_F_model_num_attention_heads);
  bool unfused = strcmp(m->attention_backend, "unfused") == 0;
  int64_t p = 0;
  if (unfused) TENSOR(z, "the attention scores (micro_batch x heads x seq x seq)", B, A, S, S);
  if (!m->multi_latent_attention) {
    int gf = s->present[SPEC_F_model_num_query_groups] ? SPEC_F_model_num_query_groups
                                                       : SPEC_F_model_num_attention_heads;
    int df = s->present[SPEC_F_model_kv_channels] ? SPEC_F_model_kv_channels : SPEC_F_model_hidden_size;
    const Term D = TN(spec_kv_channels(s), df, "kv_channels");
    /* heads + 2 x groups; both at most 2^40, so the sum fits */
    const Term QKV =
        TN(m->num_attention_heads + 2 * spec_num_query_groups(s), gf, "(heads + 2 x query groups)");
    p = add(p, TENSOR(z, "the qkv weight ((heads + 2 x query groups) x kv_channels x hidden)", QKV, D, C));
    TENSOR(z, "the qkv activation (micro_batch x seq x (heads + 2 x query groups) x kv_channels)", B, S, QKV,
           D);
    p = add(p, TENSOR(z, "the attention output weight (hidden x heads x kv_channels)", C, A, D));
    TENSOR(z, "the attention context (micro_batch x seq x heads x kv_channels)", B, S, A, D);
    return p;
  }
  const Term DN = T(m->qk_head_dim, SPEC_F_model_qk_head_dim),
             DR = T(m->qk_pos_emb_head_dim, SPEC_F_model_qk_pos_emb_head_dim),
             DV = T(m->v_head_dim, SPEC_F_model_v_head_dim),
             KVL = T(m->kv_lora_rank, SPEC_F_model_kv_lora_rank);
  /* head dims are at most 2^40 each: their sums fit */
  const Term QK = TN(m->qk_head_dim + m->qk_pos_emb_head_dim, SPEC_F_model_qk_head_dim,
                     "(qk_head_dim + qk_pos_emb_head_dim)");
  const Term KV = TN(m->qk_head_dim + m->v_head_dim, SPEC_F_model_v_head_dim, "(qk_head_dim + v_head_dim)");
  Term QIN = C;
  if (s->present[SPEC_F_model_q_lora_rank]) {
    QIN = T(m->q_lora_rank, SPEC_F_model_q_lora_rank);
    p = add(p, TENSOR(z, "the MLA q down-projection weight (q_lora_rank x hidden)", QIN, C));
    TENSOR(z, "the MLA compressed query (micro_batch x seq x q_lora_rank)", B, S, QIN);
  }
  p = add(
      p, TENSOR(z, "the MLA query weight (heads x (qk_head_dim + qk_pos_emb_head_dim) x input)", A, QK, QIN));
  TENSOR(z, "the MLA query (micro_batch x seq x heads x (qk_head_dim + qk_pos_emb_head_dim))", B, S, A, QK);
  p = add(p, TENSOR(z, "the MLA kv down-projection weight ((kv_lora_rank + qk_pos_emb_head_dim) x hidden)",
                    TN(m->kv_lora_rank + m->qk_pos_emb_head_dim, SPEC_F_model_kv_lora_rank,
                       "(kv_lora_rank + qk_pos_emb_head_dim)"),
                    C));
  p = add(p, TENSOR(z, "the MLA kv up-projection weight (heads x (qk_head_dim + v_head_dim) x kv_lora_rank)",
                    A, KV, KVL));
  TENSOR(z, "the MLA keys and values (micro_batch x seq x heads x (qk_head_dim + v_head_dim))", B, S, A, KV);
  if (!unfused && m->v_head_dim > QK.v) /* flash pads q and k to the larger head dim */
    TENSOR(z, "the MLA padded query (micro_batch x seq x heads x v_head_dim)", B, S, A, DV);
  p = add(p, TENSOR(z, "the MLA output weight (hidden x heads x v_head_dim)", C, A, DV));
  (void)DN, (void)DR;
  return p;
}

/* A dense MLP of width f: fc1 is f (gated: 2f) x h, fc2 is h x f. Returns its parameters. */
static int64_t check_mlp(Sz *z, const char *what, Term B, Term S, Term F) {
  const SpecModel *m = &z->s->model;
  const Term C = T(m->hidden_size, SPEC_F_model_hidden_size), GLU = T(m->gated_linear_unit ? 2 : 1, -1);
  char w[160], a[160];
  snprintf(w, sizeof w, "the %s's first weight (width x hidden, x2 when gated)", what);
  snprintf(a, sizeof a, "the %s's activation (micro_batch x seq x width, x2 when gated)", what);
  TENSOR(z, a, B, S, GLU, F);
  int64_t fc1 = TENSOR(z, w, GLU, F, C);
  return add(fc1, mul(F.v, C.v));
}

static int64_t check_moe(Sz *z, Term B, Term S) {
  const Spec *s = z->s;
  const SpecModel *m = &s->model;
  const Term C = T(m->hidden_size, SPEC_F_model_hidden_size),
             E = T(m->num_moe_experts, SPEC_F_model_num_moe_experts),
             K = T(m->moe_router_topk, SPEC_F_model_moe_router_topk);
  int ff = s->present[SPEC_F_model_moe_ffn_hidden_size] ? SPEC_F_model_moe_ffn_hidden_size
           : s->present[SPEC_F_model_ffn_hidden_size]   ? SPEC_F_model_ffn_hidden_size
                                                        : SPEC_F_model_hidden_size;
  const Term F = TN(spec_moe_ffn_hidden_size(s), ff, "moe_ffn_hidden_size"),
             GLU = T(m->gated_linear_unit ? 2 : 1, -1);
  int64_t p = TENSOR(z, "the router weight (experts x hidden)", E, C);
  TENSOR(z, "the router logits (micro_batch x seq x experts)", B, S, E);
  /* rows of the permuted token buffer: tokens x top-k, or experts x capacity (lower_moe.c) */
  int64_t rows = TENSOR(z, "the routed tokens (micro_batch x seq x moe_router_topk)", B, S, K);
  Term N = TN(rows, SPEC_F_model_moe_router_topk, "routed rows");
  if (rows >= 0 && s->present[SPEC_F_model_moe_expert_capacity_factor]) {
    double cap = (double)rows / (double)m->num_moe_experts * m->moe_expert_capacity_factor;
    if (!(cap * (double)m->num_moe_experts <= (double)SZ_MAX_ELEMS)) {
      fault(z, SPEC_F_model_moe_expert_capacity_factor,
            "moe_expert_capacity_factor=%g gives each of %lld experts a capacity of %.3g tokens; stepc plans "
            "at "
            "most 2^40 routed rows",
            m->moe_expert_capacity_factor, (long long)m->num_moe_experts, cap);
      return -1;
    }
    N = TN((int64_t)(cap + 1) * m->num_moe_experts, SPEC_F_model_moe_expert_capacity_factor, "routed rows");
  }
  if (N.v >= 0) {
    TENSOR(z, "the permuted tokens (routed rows x hidden)", N, C);
    TENSOR(z, "the expert activations (routed rows x moe_ffn_hidden_size, x2 when gated)", N, GLU, F);
  }
  int64_t w1 = TENSOR(z, "the experts' first weight (experts x moe_ffn_hidden_size x hidden, x2 when gated)",
                      E, GLU, F, C);
  p = add(p, add(w1, mul(E.v, mul(F.v, C.v))));
  if (s->present[SPEC_F_model_moe_shared_expert_intermediate_size])
    p = add(p, check_mlp(z, "shared experts", B, S,
                         T(m->moe_shared_expert_intermediate_size,
                           SPEC_F_model_moe_shared_expert_intermediate_size)));
  return p;
}

/* Whole-model parameters: the per-layer counts times the layers of each kind, plus embeddings. */
static void check_params(Sz *z, const Layers *n, int64_t attn, int64_t dense, int64_t moe, int64_t embed) {
  const Spec *s = z->s;
  if (attn < 0 || dense < 0 || moe < 0 || embed < 0) return; /* already reported */
  int64_t per[3] = {attn, dense, moe}, cnt[3] = {n->attn, n->dense, n->moe};
  const char *kind[3] = {"attention", "MLP", "MoE"};
  int64_t total = embed;
  int worst = -1;
  for (int i = 0; i < 3; i++) {
    int64_t t = mul(per[i], cnt[i]);
    if (worst < 0 || (t < 0 || t > mul(per[worst], cnt[worst]))) worst = i;
    total = add(total, t);
  }
  if (total >= 0 && total <= SZ_MAX_PARAMS) return;
  double approx = (double)embed;
  for (int i = 0; i < 3; i++)
    approx += (double)per[i] * (double)cnt[i];
  int field = s->where[SPEC_F_model_num_layers][0] ? SPEC_F_model_num_layers : SPEC_F_model_hidden_size;
  fault(z, field,
        "the model has %.3g parameters (largest part: %lld %s layers of %lld); stepc plans at most 2^48 "
        "(%.3g)%s",
        approx, (long long)cnt[worst], kind[worst], (long long)per[worst], (double)SZ_MAX_PARAMS,
        total < 0 ? ", and this count does not even fit in a 64-bit integer" : "");
}

static void sizes_run(Sz *z) {
  const Spec *s = z->s;
  const SpecModel *m = &s->model;
  check_ranks(z);
  const Term B = T(s->train.micro_batch_size, SPEC_F_train_micro_batch_size),
             S = T(m->seq_length, SPEC_F_model_seq_length), C = T(m->hidden_size, SPEC_F_model_hidden_size),
             V = T(m->vocab_size, SPEC_F_model_vocab_size);
  if (TENSOR(z, "a micro-batch's tokens (micro_batch_size x seq_length)", B, S) < 0) return;
  TENSOR(z, "the hidden states (micro_batch x seq x hidden)", B, S, C);
  TENSOR(z, "the logits (micro_batch x seq x vocab)", B, S, V);
  int64_t embed = TENSOR(z, "the word embeddings (vocab x hidden)", V, C);
  if (!m->share_embeddings_and_output_weights) embed = mul(embed, 2);
  if (strcmp(m->position_embedding_type, "learned_absolute") == 0)
    embed = add(embed, TENSOR(z, "the position embeddings (seq x hidden)", S, C));
  Layers n = count_layers(s);
  int64_t attn = n.attn ? check_attention(z, B, S) : 0, dense = 0, moe = 0;
  if (n.dense) {
    int ff =
        s->present[SPEC_F_model_ffn_hidden_size] ? SPEC_F_model_ffn_hidden_size : SPEC_F_model_hidden_size;
    dense = check_mlp(z, "MLP", B, S, TN(spec_ffn_hidden_size(s), ff, "ffn_hidden_size"));
  }
  if (n.moe) moe = check_moe(z, B, S);
  check_params(z, &n, attn, dense, moe, embed);
}

int validate_sizes(VCtx *v) {
  Sz z = {.s = v->s};
  sizes_run(&z);
  for (int i = 0; i < z.n; i++)
    diag_hint(v_error(v, "STEPC-32", z.f[i].field, "%s", z.f[i].msg),
              "lower %s: stepc's bounds are 2^40 elements per tensor, 2^48 parameters and 2^20 ranks "
              "(docs/rules.md)",
              spec_fields[z.f[i].field].path);
  return z.n;
}

int validate_sizes_ok(const Spec *s, char *err, size_t nerr) {
  Sz z = {.s = s};
  sizes_run(&z);
  if (!z.n) return 0;
  snprintf(err, nerr, "%s: %s (STEPC-32)", spec_fields[z.f[0].field].path, z.f[0].msg);
  return -1;
}
