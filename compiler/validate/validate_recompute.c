/* validate_recompute.c — activation recompute: granularity, method and layer count, selective labels
 * and what each needs, and CPU offloading (docs/megatron-rules.md §1.B–D; MCORE-15..37). Also warns where
 * Megatron silently ignores a recompute setting, since a setting that does nothing is a tuning run
 * wasted. */
#include <string.h>

#include "validate/validate_internal.h"

#define F_GRAN SPEC_F_model_recompute_granularity
#define F_METHOD SPEC_F_model_recompute_method
#define F_NLAYERS SPEC_F_model_recompute_num_layers
#define F_MODULES SPEC_F_model_recompute_modules

/* STEPC-1: the layer count of full recompute. Megatron checks no lower bound (transformer_config.py
 * only asks for a value); core/recompute.py's uniform loop advances by the count, so 0 or less never
 * ends, while block checkpoints layers below the count, so 0 or less recomputes nothing. */
static void check_layer_count(VCtx *v) {
  const Spec *s = v->s;
  int64_t n = s->model.recompute_num_layers;
  if (!v_full(s) || !s->present[F_NLAYERS] || n >= 1) return;
  if (v_str_is(s, F_METHOD, "block"))
    diag_hint(v_warn(v, "STEPC-1", F_NLAYERS,
                     "recompute_num_layers=%lld with recompute_method=block recomputes no layer (Megatron "
                     "accepts it; the run keeps every activation)",
                     (long long)n),
              "set model.recompute_num_layers=1 or more, or drop full recompute");
  else
    diag_hint(v_error(v, "STEPC-1", F_NLAYERS,
                      "recompute_num_layers=%lld must be at least 1 (Megatron's uniform method advances by "
                      "it and loops forever)",
                      (long long)n),
              "set model.recompute_num_layers=1 or more, or drop full recompute");
}

/* MCORE-15..19, STEPC-1, STEPC-19: the full-recompute knobs. */
static void check_granularity(VCtx *v) {
  const Spec *s = v->s;
  const SpecModel *m = &s->model;
  if (v_full(s) && !s->present[F_METHOD])
    diag_hint(v_error(v, "MCORE-15", F_GRAN,
                      "recompute_granularity=full needs recompute_method \"uniform\" or \"block\""),
              "add model.recompute_method=uniform (groups of recompute_num_layers layers) or block (only the "
              "first recompute_num_layers layers of each chunk)");
  if (v_full(s) && !s->present[F_NLAYERS])
    diag_hint(v_error(v, "MCORE-16", F_GRAN, "recompute_granularity=full needs recompute_num_layers"),
              "add model.recompute_num_layers=1 (one checkpoint per layer)");
  check_layer_count(v);
  if (v_selective(s) && s->present[F_NLAYERS])
    diag_hint(v_error(v, "MCORE-18", F_NLAYERS,
                      "recompute_granularity=selective needs recompute_num_layers to be null (it is %lld)",
                      (long long)m->recompute_num_layers),
              "write model.recompute_num_layers=null, or use recompute_granularity=full");
  if (v_selective(s) && s->present[F_METHOD])
    diag_hint(v_error(v, "MCORE-19", F_METHOD,
                      "recompute_method=%s is not supported under selective granularity (Megatron-LM's "
                      "validate_args asserts recompute_method is None)",
                      m->recompute_method),
              "write model.recompute_method=null");
  int64_t chunk = v_layers_per_chunk(s);
  if (v_full(s) && s->present[F_NLAYERS] && chunk > 0 && m->recompute_num_layers > chunk)
    diag_hint(
        v_warn(v, "STEPC-19", F_NLAYERS,
               "recompute_num_layers=%lld is more than the %lld layers of a model chunk; it acts as all "
               "%lld layers",
               (long long)m->recompute_num_layers, (long long)chunk, (long long)chunk),
        "set model.recompute_num_layers=%lld to say what happens", (long long)chunk);
}

/* MCORE-20, MCORE-21: distribute_saved_activations. */
static void check_distribute(VCtx *v) {
  const Spec *s = v->s;
  if (!s->model.distribute_saved_activations) return;
  const int F = SPEC_F_model_distribute_saved_activations;
  if (s->present[F_GRAN] && s->model.sequence_parallel)
    diag_hint(
        v_error(v, "MCORE-20", F,
                "distribute_saved_activations must be false when sequence_parallel is on (%s): the saved "
                "input is already split over TP",
                v_at(v, SPEC_F_model_sequence_parallel)),
        "drop model.distribute_saved_activations");
  /* megatron/training/arguments.py validate_args asserts both (TP > 1, full granularity). */
  if (!v_full(s))
    diag_hint(v_error(v, "MCORE-21", F,
                      "distribute_saved_activations needs recompute_granularity=full (Megatron-LM's "
                      "validate_args asserts it; Megatron Core would ignore it)"),
              "drop model.distribute_saved_activations, or use full recompute");
  if (s->model.tensor_model_parallel_size == 1)
    diag_hint(v_error(v, "MCORE-21", F,
                      "distribute_saved_activations splits saved layer inputs over TP ranks, but "
                      "tensor_model_parallel_size=1 (Megatron-LM's validate_args asserts TP > 1)"),
              "drop model.distribute_saved_activations, or raise model.tensor_model_parallel_size");
}

/* STEPC-22, STEPC-23: recompute settings that the granularity makes meaningless. */
static void check_ignored(VCtx *v) {
  const Spec *s = v->s;
  bool listed = v_set_in(v, F_MODULES) && v->in->present[F_MODULES] && v->in->model.recompute_modules.n > 0;
  if (v_full(s) && listed)
    diag_hint(
        v_warn(v, "STEPC-22", F_MODULES,
               "recompute_modules is ignored under recompute_granularity=full: full recompute supersedes "
               "the selective labels, they do not compose"),
        "drop model.recompute_modules, or use recompute_granularity=selective");
  if (s->present[F_GRAN]) return;
  const char *hint = "set model.recompute_granularity (selective or full), or drop this setting";
  if (listed)
    diag_hint(v_warn(v, "STEPC-23", F_MODULES,
                     "recompute_modules is set but recompute_granularity is null: nothing is recomputed"),
              "%s", hint);
  if (s->present[F_METHOD])
    diag_hint(v_warn(v, "STEPC-23", F_METHOD,
                     "recompute_method is set but recompute_granularity is null: nothing is recomputed"),
              "%s", hint);
  if (s->present[F_NLAYERS])
    diag_hint(v_warn(v, "STEPC-23", F_NLAYERS,
                     "recompute_num_layers is set but recompute_granularity is null: nothing is recomputed"),
              "%s", hint);
}

/* MCORE-24..29, MCORE-60 (fused norms), STEPC-21: what each selective label needs and acts on. */
static void check_labels(VCtx *v) {
  const Spec *s = v->s;
  const SpecModel *m = &s->model;
  if (!v_selective(s)) return;
  if (v_label(s, "moe_act") && !m->moe_grouped_gemm)
    diag_hint(v_error(v, "MCORE-24", F_MODULES, "moe_act recompute is only supported with moe_grouped_gemm"),
              "set model.moe_grouped_gemm=true, or drop moe_act from recompute_modules");
  if (v_label(s, "mla_up_proj") && !m->multi_latent_attention)
    diag_hint(v_error(v, "MCORE-25", F_MODULES,
                      "mla_up_proj recompute is only supported with multi_latent_attention"),
              "drop mla_up_proj from model.recompute_modules (the model has standard attention)");
  if (v_label(s, "gdn_norm_out") && !v_str_is(s, SPEC_F_model_experimental_attention_variant, "gdn") &&
      !v_str_is(s, SPEC_F_model_experimental_attention_variant, "gdn2"))
    diag_hint(
        v_error(v, "MCORE-26", F_MODULES,
                "gdn_norm_out recompute is only supported with experimental_attention_variant gdn or gdn2"),
        "drop gdn_norm_out from model.recompute_modules, or set model.experimental_attention_variant=gdn");
  if (v_label(s, "core_attn") && v_has_attention(s) &&
      !v_str_is(s, SPEC_F_model_attention_backend, "unfused"))
    diag_hint(
        v_warn(v, "MCORE-27", F_MODULES,
               "core_attn recompute with attention_backend=%s saves almost nothing: the fused kernel keeps "
               "no scores, and linear_proj still saves the attention output",
               m->attention_backend),
        "compare against model.recompute_modules=[] with `stepc plan`; core_attn pays with "
        "attention_backend=unfused");
  bool shared = s->present[SPEC_F_model_moe_shared_expert_intermediate_size];
  if (v_label(s, "shared_experts") && shared && m->moe_shared_expert_overlap)
    diag_hint(
        v_error(v, "MCORE-28", F_MODULES,
                "shared_experts recompute cannot work with moe_shared_expert_overlap (%s)",
                v_at(v, SPEC_F_model_moe_shared_expert_overlap)),
        "drop shared_experts from model.recompute_modules, or set model.moe_shared_expert_overlap=false");
  if (s->present[SPEC_F_model_fp8] && (v_label(s, "moe_act") || v_label(s, "layernorm")) &&
      v_str_is(s, SPEC_F_model_fp8_recipe, "delayed"))
    diag_hint(v_error(v, "MCORE-29", F_MODULES,
                      "fp8 delayed scaling does not support moe_act and layernorm recompute (fp8_recipe is "
                      "\"delayed\", %s)",
                      v_at(v, SPEC_F_model_fp8_recipe)),
              "set model.fp8_recipe=tensorwise (or mxfp8, blockwise), or drop moe_act/layernorm");
  /* In the TE layer spec the input LN of standard attention and the pre-MLP LN of dense MLPs are
   * fused into the next linear (IdentityOp), which layernorm recompute skips (not in the local spec). */
  if (v_label(s, "layernorm") && !m->multi_latent_attention && !v_has_moe_layer(s) &&
      strcmp(m->transformer_impl, "local") != 0)
    diag_hint(v_warn(v, "MCORE-60", F_MODULES,
                     "layernorm recompute does nothing here: the attention input norm and the dense pre-MLP "
                     "norm are fused into the following linear; only the MLA input norm and the MoE pre-MLP "
                     "norm can be recomputed"),
              "drop layernorm from model.recompute_modules");
  struct {
    const char *label;
    bool target;
    const char *what;
  } targets[] = {
      {"mlp", v_has_dense_mlp(s), "no layer has a dense MLP (mlp recompute is a no-op on MoE layers)"},
      {"moe", v_has_moe_layer(s), "no layer is MoE"},
      {"moe_act", v_has_moe_layer(s), "no layer is MoE"},
      {"mlp_act", v_has_dense_mlp(s), "no layer has a dense MLP"},
      {"shared_experts", v_has_moe_layer(s) && shared, "the model has no shared experts"},
      {"core_attn", v_has_attention(s), "no layer has attention"},
  };
  for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
    if (v_label(s, targets[i].label) && !targets[i].target)
      diag_hint(v_warn(v, "STEPC-21", F_MODULES, "%s recompute acts on nothing in this model: %s",
                       targets[i].label, targets[i].what),
                "drop %s from model.recompute_modules", targets[i].label);
}

/* MCORE-34..37, STEPC-25: CPU activation offloading. */
static void check_offloading(VCtx *v) {
  const Spec *s = v->s;
  const SpecModel *m = &s->model;
  const int F = SPEC_F_model_cpu_offloading;
  if (!m->cpu_offloading) {
    if (m->cpu_offloading_num_layers <= 0) return;
    /* Megatron-LM's validate_args turns offloading on from the layer count, then
     * TransformerConfig applies the offloading rules below; stepc normalizes the same way. */
    diag_hint(v_warn(v, "STEPC-25", SPEC_F_model_cpu_offloading_num_layers,
                     "cpu_offloading_num_layers=%lld turns cpu_offloading on (as Megatron-LM's command "
                     "line does)",
                     (long long)m->cpu_offloading_num_layers),
              "set model.cpu_offloading=true to say so, or drop cpu_offloading_num_layers");
    v->s->model.cpu_offloading = true;
  }
  if (m->cpu_offloading_num_layers >= m->num_layers)
    diag_hint(v_error(v, "MCORE-34", SPEC_F_model_cpu_offloading_num_layers,
                      "CPU offloading can be done only for fewer layers than num_layers=%lld (got %lld)",
                      (long long)m->num_layers, (long long)m->cpu_offloading_num_layers),
              "set model.cpu_offloading_num_layers below %lld", (long long)m->num_layers);
  if (m->pipeline_model_parallel_size > 1)
    diag_hint(v_error(v, "MCORE-35", F, "CPU offloading does not support pipeline parallelism (PP=%lld, %s)",
                      (long long)m->pipeline_model_parallel_size,
                      v_at(v, SPEC_F_model_pipeline_model_parallel_size)),
              "set model.pipeline_model_parallel_size=1, or drop cpu_offloading");
  if (s->present[F_GRAN])
    diag_hint(v_error(v, "MCORE-36", F,
                      "CPU offloading does not work with activation recompute (recompute_granularity=%s, %s)",
                      m->recompute_granularity, v_at(v, F_GRAN)),
              "choose one: drop model.recompute_granularity or model.cpu_offloading");
  if (!v_graph_impl(s, "none") && !v_graph_impl(s, "full_iteration"))
    diag_hint(v_error(v, "MCORE-37", F,
                      "per-layer CUDA graphs (cuda_graph_impl=%s) are not supported with CPU "
                      "offloading",
                      m->cuda_graph_impl),
              "set model.cuda_graph_impl=none or full_iteration, or drop cpu_offloading");
}

void validate_recompute(VCtx *v) {
  check_granularity(v);
  check_distribute(v);
  check_ignored(v);
  check_labels(v);
  check_offloading(v);
}
