/* validate_model.c — stepc's own consistency rules on the architecture and the data
 * (STEPC-13..18, STEPC-20, STEPC-30, STEPC-31, STEPC-49, STEPC-50, STEPC-52..56): what Megatron would reject
 * while building the model, or what stepc cannot plan or run. */
#include <string.h>

#include "validate/validate_internal.h"

/* STEPC-13, STEPC-14: the hybrid layer pattern. */
static void check_hybrid(VCtx *v) {
  const Spec *s = v->s;
  const SpecModel *m = &s->model;
  if (!v_is_hybrid(s)) return;
  const int F = SPEC_F_model_hybrid_override_pattern;
  const char *p = m->hybrid_override_pattern;
  size_t n = strlen(p);
  if ((int64_t)n != m->num_layers)
    diag_hint(v_error(v, "STEPC-13", SPEC_F_model_num_layers,
                      "num_layers=%lld but hybrid_override_pattern has %zu layers (%s)",
                      (long long)m->num_layers, n, v_at(v, F)),
              "set model.num_layers=%zu: in a hybrid model the pattern lists every layer", n);
  size_t bad = strspn(p, "M*-E");
  if (bad < n)
    diag_hint(
        v_error(v, "STEPC-14", F,
                "hybrid_override_pattern has '%c' at position %zu; the letters are M (Mamba), * (attention), "
                "- (MLP) and E (MoE)",
                p[bad], bad),
        "write the pattern with the letters M * - E only");
  if (strchr(p, 'E') && !spec_is_moe(s))
    diag_hint(v_error(v, "STEPC-14", F,
                      "hybrid_override_pattern has MoE layers (E) but num_moe_experts is %s",
                      s->present[SPEC_F_model_num_moe_experts] ? "1" : "null"),
              "set model.num_moe_experts, or replace E by - (a dense MLP)");
}

/* STEPC-15: multi-latent attention. */
static void check_mla(VCtx *v) {
  const Spec *s = v->s;
  if (!s->model.multi_latent_attention) return;
  const int F = SPEC_F_model_multi_latent_attention;
  if (s->present[SPEC_F_model_experimental_attention_variant])
    diag_hint(
        v_error(v, "STEPC-15", F,
                "multi_latent_attention cannot be combined with experimental_attention_variant=%s (%s): a "
                "layer has one attention",
                s->model.experimental_attention_variant,
                v_at(v, SPEC_F_model_experimental_attention_variant)),
        "choose one of them");
  if (s->model.qk_pos_emb_head_dim > 0 && !v_str_is(s, SPEC_F_model_position_embedding_type, "rope"))
    diag_hint(
        v_error(v, "STEPC-15", SPEC_F_model_position_embedding_type,
                "multi_latent_attention with qk_pos_emb_head_dim=%lld applies RoPE to that part of each "
                "head, but position_embedding_type=%s",
                (long long)s->model.qk_pos_emb_head_dim, s->model.position_embedding_type),
        "set model.position_embedding_type=rope");
}

/* STEPC-52: RoPE scaling scales the frequencies of GPTModel's RoPE; elsewhere it would be a silent
 * no-op: Megatron reads rope_scaling only where GPTModel builds its RotaryEmbedding, for
 * position_embedding_type rope and not for multi-latent attention (whose attention builds its own,
 * unscaled). The factor's range (> 0) is checked when the recipe loads. */
static void check_rope_scaling(VCtx *v) {
  const Spec *s = v->s;
  if (!s->model.rope_scaling) return;
  if (!v_str_is(s, SPEC_F_model_position_embedding_type, "rope"))
    diag_hint(v_error(v, "STEPC-52", SPEC_F_model_rope_scaling,
                      "rope_scaling=true scales RoPE's frequencies, but position_embedding_type=%s",
                      s->model.position_embedding_type),
              "set model.position_embedding_type=rope, or drop model.rope_scaling");
  else if (s->model.multi_latent_attention)
    diag_hint(v_error(v, "STEPC-52", SPEC_F_model_rope_scaling,
                      "rope_scaling=true with multi_latent_attention: Megatron's MLA builds its own RoPE, "
                      "which GPTModel's rope_scaling does not reach"),
              "drop model.rope_scaling");
}

/* STEPC-16, STEPC-17: MoE routing and layer placement. */
static void check_moe(VCtx *v) {
  const Spec *s = v->s;
  const SpecModel *m = &s->model;
  if (!spec_is_moe(s)) return;
  if (m->moe_router_topk > m->num_moe_experts)
    diag_hint(v_error(v, "STEPC-16", SPEC_F_model_moe_router_topk,
                      "moe_router_topk=%lld is more than num_moe_experts=%lld", (long long)m->moe_router_topk,
                      (long long)m->num_moe_experts),
              "set model.moe_router_topk to at most %lld", (long long)m->num_moe_experts);
  const SpecFreq *f = &m->moe_layer_freq;
  if (!v_is_hybrid(s) && f->every == 0 && f->n != m->num_layers)
    diag_hint(v_error(v, "STEPC-17", SPEC_F_model_moe_layer_freq,
                      "moe_layer_freq lists %d layers but num_layers=%lld", f->n, (long long)m->num_layers),
              "give one 0/1 entry per layer (%lld entries)", (long long)m->num_layers);
}

/* STEPC-18: where the tokens come from. */
static void check_data(VCtx *v) {
  const Spec *s = v->s;
  bool mock_set = s->present[SPEC_F_data_mock], path = s->present[SPEC_F_data_path];
  if (mock_set && s->data.mock && path)
    diag_hint(v_error(v, "STEPC-18", SPEC_F_data_mock,
                      "data.mock=true and data.path=%s (%s) contradict each other: mock tokens or the file?",
                      s->data.path, v_at(v, SPEC_F_data_path)),
              "drop data.mock to read the file, or drop data.path for mock tokens");
  if (mock_set && !s->data.mock && !path)
    diag_hint(
        v_error(v, "STEPC-18", SPEC_F_data_mock, "data.mock=false but data.path is null: there is no data"),
        "set data.path to a text file, or data.mock=true");
}

/* STEPC-20: fp8 executes with delayed scaling (fp8_recipe "delayed", Transformer Engine's DelayedScaling)
 * or current scaling ("tensorwise"), ir/ops/fp8.c, in what a build runs; `stepc plan` plans that fp8
 * step where the recipe shards no tensors or experts (compiler/plan/plan.c), else the recipe's
 * single-rank step in bf16, beside the per-rank report of what Transformer Engine keeps in fp8; a
 * build refuses the other recipes (compiler/codegen/executes.c).
 * STEPC-51: fp8 weights need fp8 (TransformerConfig.__post_init__ raises, transformer_config.py:1566).
 * STEPC-56: the delayed recipe's amax history holds at least one entry (Transformer Engine's
 * DelayedScaling keeps amax_history_len rows, the newest first) and at most 2^20 (a history of 1024,
 * TE's own default, is the longest in use); its margin keeps fp8_max / 2^margin a normal fp32 number. */
static void check_precision(VCtx *v) {
  const Spec *s = v->s;
  const SpecModel *m = &s->model;
  if (m->fp8_param && !s->present[SPEC_F_model_fp8])
    diag_hint(v_error(v, "STEPC-51", SPEC_F_model_fp8_param,
                      "fp8_param keeps the weights in fp8, but fp8 is null (Megatron's TransformerConfig "
                      "raises: fp8_param must be used together with fp8 mode)"),
              "set model.fp8 (e4m3 or hybrid), or drop model.fp8_param");
  if (m->fp8_amax_history_len < 1 || m->fp8_amax_history_len > (1 << 20))
    diag_hint(v_error(v, "STEPC-56", SPEC_F_model_fp8_amax_history_len,
                      "fp8_amax_history_len=%lld: the delayed recipe's amax history holds 1 to 2^20 entries",
                      (long long)m->fp8_amax_history_len),
              "set model.fp8_amax_history_len to 1 (Megatron's default) or 1024 (Transformer Engine's)");
  if (m->fp8_margin < -100 || m->fp8_margin > 100)
    diag_hint(v_error(v, "STEPC-56", SPEC_F_model_fp8_margin,
                      "fp8_margin=%lld: the delayed recipe's scale fp8_max / amax / 2^margin needs a margin "
                      "within [-100, 100]",
                      (long long)m->fp8_margin),
              "set model.fp8_margin to 0 (Megatron's default)");
  if (s->present[SPEC_F_model_fp8] && spec_one_rank_step(s) && spec_fp8_executes(s))
    diag_hint(v_warn(v, "STEPC-20", SPEC_F_model_fp8,
                     "fp8=%s (recipe %s): the transformer layers' linears run in fp8, and this plan is the "
                     "fp8 step a build runs (the artifact's plan.json); the per-rank report counts what "
                     "Transformer Engine keeps in fp8",
                     m->fp8, m->fp8_recipe),
              "stepc build RECIPE -o DIR builds it; docs/fp8.md says what runs in fp8 and how");
  else if (s->present[SPEC_F_model_fp8])
    diag_hint(
        v_warn(v, "STEPC-20", SPEC_F_model_fp8,
               "fp8=%s (recipe %s): a build runs the transformer layers' linears in fp8 with delayed or "
               "current scaling (fp8_recipe=delayed or tensorwise; other recipes refuse at build), but this "
               "single-rank plan is the bf16 step; the per-rank report counts what Transformer Engine keeps "
               "in fp8, and a build's plan.json the fp8 step stepc runs",
               m->fp8, m->fp8_recipe),
        "stepc build RECIPE -o DIR writes DIR/plan.json, the plan of the fp8 step");
}

/* STEPC-30, STEPC-31: sizes the planner answers in seconds. Its best-fit placement is quadratic in
 * the transient tensors (~35 per layer): 1000 layers plan in about 7 s on a 2-core machine, 4000
 * in two minutes; today's largest models have under 130 layers. Micro-batch counts are ints. */
static void check_limits(VCtx *v) {
  const Spec *s = v->s;
  if (s->model.num_layers > 1024)
    diag_hint(v_error(v, "STEPC-30", SPEC_F_model_num_layers,
                      "num_layers=%lld: stepc plans models of up to 1024 layers",
                      (long long)s->model.num_layers),
              "plan a shorter model of the same layer shape and scale the per-layer numbers");
  int64_t per = s->train.micro_batch_size * spec_data_parallel_size(s);
  if (per > 0 && spec_global_batch_size(s) / per > 65536)
    diag_hint(v_error(v, "STEPC-31", SPEC_F_train_global_batch_size,
                      "global_batch_size=%lld makes %lld micro-batches per step; stepc plans up to 65536",
                      (long long)spec_global_batch_size(s), (long long)(spec_global_batch_size(s) / per)),
              "raise train.micro_batch_size or lower train.global_batch_size");
}

/* STEPC-49: the output layer's chunks split a micro-batch's tokens evenly. */
static void check_output_chunks(VCtx *v) {
  const Spec *s = v->s;
  const int F = SPEC_F_model_output_layer_chunks;
  if (!s->present[F]) return;
  int64_t c = s->model.output_layer_chunks, tokens = s->train.micro_batch_size * s->model.seq_length;
  if (c < 1)
    diag_hint(v_error(v, "STEPC-49", F, "output_layer_chunks=%lld: the output layer runs in at least 1 chunk",
                      (long long)c),
              "write 1 for the whole logits at once, or leave the field null for stepc's choice");
  else if (tokens > 0 && tokens % c)
    diag_hint(
        v_error(
            v, "STEPC-49", F,
            "output_layer_chunks=%lld does not divide a micro-batch's %lld tokens (micro_batch_size %lld x "
            "seq_length %lld)",
            (long long)c, (long long)tokens, (long long)s->train.micro_batch_size,
            (long long)s->model.seq_length),
        "choose a divisor of %lld, or leave the field null for stepc's choice", (long long)tokens);
}

/* STEPC-50: the Transformer Engine release reads as a version (the per-rank report compares it). */
static void check_te_version(VCtx *v) {
  int a, b, c;
  if (spec_te_version(v->s, &a, &b, &c)) return;
  diag_hint(v_error(v, "STEPC-50", SPEC_F_model_transformer_engine_version,
                    "transformer_engine_version=\"%s\" is not MAJOR.MINOR or MAJOR.MINOR.PATCH",
                    v->s->model.transformer_engine_version),
            "write the release as pip shows it, for example model.transformer_engine_version=2.17.1");
}

/* STEPC-53..55: which job the per-rank report predicts (train.megatron_job), and the fields only
 * its Megatron local-spec model reads. */
static void check_megatron_job(VCtx *v) {
  const Spec *s = v->s;
  const SpecModel *m = &s->model;
  bool mj = spec_megatron_job(s), local = strcmp(m->transformer_impl, "local") == 0;
  if (s->present[SPEC_F_train_megatron_job] && !s->train.megatron_job && s->train.world_size > 1)
    diag_hint(v_error(v, "STEPC-53", SPEC_F_train_megatron_job,
                      "megatron_job=false with world_size=%lld: the per-rank report of a multi-GPU layout is "
                      "Megatron's",
                      (long long)s->train.world_size),
              "leave train.megatron_job null (or true) for a multi-GPU layout");
  /* Megatron's local spec builds DotProductAttention whatever attention_backend says
   * (models/gpt/gpt_layer_specs.py, get_gpt_layer_local_submodules: core_attention=DotProductAttention);
   * left at its default the backend is implied unfused (spec_imply), so only an explicit other one
   * reaches here */
  if (mj && local && strcmp(m->attention_backend, "unfused") != 0)
    diag_hint(
        v_error(
            v, "STEPC-54", SPEC_F_model_attention_backend,
            "attention_backend=%s with transformer_impl=local in a Megatron job: Megatron's local layer spec "
            "always runs its own unfused DotProductAttention",
            m->attention_backend),
        "set model.attention_backend=unfused (what Megatron runs), or transformer_impl=transformer_engine");
  /* a value away from the default that nothing would read */
  const int F[] = {SPEC_F_model_attention_softmax_in_fp32, SPEC_F_model_bias_activation_fusion};
  const bool moved[] = {!m->attention_softmax_in_fp32, m->bias_activation_fusion};
  for (size_t i = 0; i < sizeof F / sizeof *F; i++)
    if (moved[i] && !(mj && local))
      diag_hint(v_error(v, "STEPC-55", F[i],
                        "%s is read only by the per-rank report of a Megatron job with the local layer spec; "
                        "this recipe is %s",
                        F[i] == SPEC_F_model_bias_activation_fusion ? "bias_activation_fusion=true"
                                                                    : "attention_softmax_in_fp32=false",
                        mj ? "a Megatron job with transformer_impl=transformer_engine" : "stepc's own step"),
                "drop the field, or describe a Megatron job: model.transformer_impl=local and "
                "train.megatron_job=true "
                "(or world_size > 1)");
}

void validate_model(VCtx *v) {
  check_limits(v);
  check_hybrid(v);
  check_mla(v);
  check_rope_scaling(v);
  check_moe(v);
  check_data(v);
  check_precision(v);
  check_output_chunks(v);
  check_te_version(v);
  check_megatron_job(v);
}
