/* validate_graphs.c — CUDA graphs: which modules a per-layer graph may capture, and which recompute
 * settings may run under which graphs (docs/megatron-rules.md §1.F–G; MCORE-44..61, 70).
 *
 * These are Megatron's field rules. They are necessary, not sufficient: the check that every
 * checkpoint region lies wholly inside or wholly outside a graph scope is made on the scheduled
 * graph by the planner (compiler/passes/scope.c). A few placements that pass the field rules but do nothing
 * are warned about here (MCORE-61, STEPC-29). */
#include <string.h>

#include "validate/validate_internal.h"

#define F_IMPL SPEC_F_model_cuda_graph_impl
#define F_CGM SPEC_F_model_cuda_graph_modules
#define F_MODULES SPEC_F_model_recompute_modules

static bool per_layer(const Spec *s) {
  return v_graph_impl(s, "local") || v_graph_impl(s, "transformer_engine");
}

/* Megatron's `full_cudagraph`: the whole iteration, or whole-layer per-layer graphs. */
static bool full_cudagraph(const Spec *s) {
  return v_graph_impl(s, "full_iteration") || (per_layer(s) && s->model.cuda_graph_modules.n == 0);
}

static bool drop_and_pad(const Spec *s) {
  return s->present[SPEC_F_model_moe_expert_capacity_factor] && s->model.moe_pad_expert_input_to_capacity;
}

/* MCORE-44..48, STEPC-28: the modules a per-layer graph may name. */
static void check_modules(VCtx *v) {
  const Spec *s = v->s;
  if (!per_layer(s)) return;
  if (v_module(s, "moe") && v_module(s, "moe_router"))
    diag_hint(v_error(v, "MCORE-44", F_CGM, "cuda_graph_modules must not contain both moe and moe_router"),
              "keep moe (the whole MoE block, needs drop-and-pad) or moe_router (the router only)");
  if (v_module(s, "moe_preprocess") && !v_module(s, "moe_router"))
    diag_hint(
        v_error(v, "MCORE-45", F_CGM, "the moe_preprocess graph is only supported with the moe_router graph"),
        "add moe_router to model.cuda_graph_modules");
  if (!spec_is_moe(s) && (v_module(s, "moe") || v_module(s, "moe_router")))
    diag_hint(v_error(v, "MCORE-46", F_CGM,
                      "moe and moe_router graphs are only supported for MoE models "
                      "(num_moe_experts is null or 1)"),
              "drop moe/moe_router from model.cuda_graph_modules");
  if (v_module(s, "mlp") && !v_has_dense_mlp(s))
    diag_hint(v_error(v, "MCORE-47", F_CGM,
                      "the mlp graph is only supported for dense MLP layers, and this model has none"),
              "capture the MoE part with moe or moe_router instead of mlp");
  if (spec_is_moe(s) && !drop_and_pad(s)) {
    if (v_module(s, "moe"))
      diag_hint(
          v_error(v, "MCORE-48", F_CGM,
                  "the moe graph is only supported with drop-and-pad MoE (moe_expert_capacity_factor set "
                  "and moe_pad_expert_input_to_capacity=true): token counts must be static"),
          "use moe_router (+ moe_preprocess) instead, or set model.moe_expert_capacity_factor=1.0 and "
          "model.moe_pad_expert_input_to_capacity=true");
    if (v_module(s, "moe_preprocess") && v_str_is(s, SPEC_F_model_moe_token_dispatcher_type, "alltoall") &&
        (s->present[SPEC_F_model_moe_expert_capacity_factor] || s->model.moe_router_padding_for_fp8))
      diag_hint(v_error(v, "MCORE-48", F_CGM,
                        "the moe_preprocess graph is not supported with the alltoall dispatcher when the "
                        "preprocess step copies to the host and synchronizes (capacity factor or fp8 router "
                        "padding without drop-and-pad)"),
                "drop moe_preprocess, or enable drop-and-pad (model.moe_pad_expert_input_to_capacity=true)");
  }
  if (v_module(s, "attn") && !v_has_attention(s))
    diag_hint(v_warn(v, "STEPC-28", F_CGM, "the attn graph captures nothing: no layer has attention"),
              "drop attn from model.cuda_graph_modules");
  if (v_module(s, "mamba") && !v_has_mamba(s))
    diag_hint(v_warn(v, "STEPC-28", F_CGM, "the mamba graph captures nothing: no layer is a Mamba layer"),
              "drop mamba from model.cuda_graph_modules");
}

/* MCORE-49, MCORE-50, MCORE-70: the implementation itself. */
static void check_impl(VCtx *v) {
  const Spec *s = v->s;
  if (v_graph_impl(s, "full_iteration")) {
    if (s->model.cuda_graph_modules.n > 0)
      diag_hint(v_error(v, "MCORE-49", F_CGM,
                        "cuda_graph_modules must be empty when cuda_graph_impl=full_iteration "
                        "(%s)",
                        v_at(v, F_IMPL)),
                "write model.cuda_graph_modules=[]: the full-iteration graph already captures every module");
    if (s->model.check_for_nan_in_loss_and_grad)
      diag_hint(
          v_error(v, "MCORE-50", SPEC_F_model_check_for_nan_in_loss_and_grad,
                  "cuda_graph_impl=full_iteration (%s) needs check_for_nan_in_loss_and_grad=false: the NaN "
                  "check reads the loss on the host inside the captured iteration",
                  v_at(v, F_IMPL)),
          "add model.check_for_nan_in_loss_and_grad=false");
  }
  if (v_graph_impl(s, "local"))
    diag_hint(
        v_warn(v, "MCORE-70", F_IMPL,
               "cuda_graph_impl=local (per-layer graphs by Megatron Core's CudaGraphManager) is valid in "
               "Megatron Core, but Megatron-Bridge rejects it for scoped training graphs"),
        "for a recipe that must also run under Megatron-Bridge use model.cuda_graph_impl=transformer_engine");
}

/* MCORE-54..58: recompute settings under graphs. */
static void check_recompute_under_graphs(VCtx *v) {
  const Spec *s = v->s;
  const SpecModel *m = &s->model;
  if (v_graph_impl(s, "none")) return;
  if (v_full(s) && !v_graph_impl(s, "full_iteration"))
    diag_hint(
        v_error(v, "MCORE-54", v_pick(v, F_IMPL, SPEC_F_model_recompute_granularity),
                "full recompute (%s) is only supported with the full-iteration CUDA graph, not "
                "cuda_graph_impl=%s: a layer checkpoint cannot wrap or be wrapped by a per-layer graph",
                v_at(v, SPEC_F_model_recompute_granularity), m->cuda_graph_impl),
        "set model.cuda_graph_impl=full_iteration (and cuda_graph_modules=[]), or use selective recompute");
  if (!v_selective(s)) return;
  bool fcg = full_cudagraph(s);
  if (v_label(s, "moe") && v_graph_impl(s, "transformer_engine") && v_module(s, "moe_router"))
    diag_hint(
        v_error(v, "MCORE-55", F_MODULES,
                "moe recompute is not supported with the moe_router graph under "
                "cuda_graph_impl=transformer_engine: the recompute region would cover the graph scope"),
        "drop moe_router from model.cuda_graph_modules, or recompute narrower labels (moe_act, layernorm)");
  if (m->attention_dropout != 0 && v_label(s, "core_attn") && (fcg || v_module(s, "attn")))
    diag_hint(
        v_error(v, "MCORE-56", F_MODULES,
                "attention_dropout=%g (%s) is not supported with graphed core_attn recompute: the replay "
                "would draw random numbers inside the graph",
                m->attention_dropout, v_at(v, SPEC_F_model_attention_dropout)),
        "set model.attention_dropout=0, drop core_attn from recompute_modules (write [] if it came "
        "from the null default), or keep attention out of the graph");
  if (m->hidden_dropout != 0) {
    if (v_label(s, "mlp") && (fcg || v_module(s, "mlp")))
      diag_hint(
          v_error(v, "MCORE-57", F_MODULES,
                  "hidden_dropout=%g (%s) is not supported with graphed mlp recompute", m->hidden_dropout,
                  v_at(v, SPEC_F_model_hidden_dropout)),
          "set model.hidden_dropout=0, drop mlp from recompute_modules, or keep the MLP out of the graph");
    if (v_label(s, "moe") && (fcg || v_module(s, "moe")))
      diag_hint(
          v_error(v, "MCORE-57", F_MODULES,
                  "hidden_dropout=%g (%s) is not supported with graphed moe recompute", m->hidden_dropout,
                  v_at(v, SPEC_F_model_hidden_dropout)),
          "set model.hidden_dropout=0, drop moe from recompute_modules, or keep the MoE out of the graph");
  }
  if (s->present[SPEC_F_model_moe_input_jitter_eps] && v_label(s, "moe") && (fcg || v_module(s, "moe")))
    diag_hint(
        v_error(v, "MCORE-58", F_MODULES,
                "moe_input_jitter_eps (%s) is not supported with graphed moe recompute: the router jitter "
                "draws random numbers",
                v_at(v, SPEC_F_model_moe_input_jitter_eps)),
        "set model.moe_input_jitter_eps=null, or drop moe from recompute_modules");
}

/* MCORE-60 (router graphs), MCORE-61, STEPC-29: placements Megatron accepts that do nothing. */
static void check_silent_noops(VCtx *v) {
  const Spec *s = v->s;
  const SpecModel *m = &s->model;
  if (!v_selective(s) || !per_layer(s)) return;
  bool te = v_graph_impl(s, "transformer_engine"), local = !te;
  bool whole = m->cuda_graph_modules.n == 0;
  bool moe_layers = v_has_moe_layer(s);
  bool shared = s->present[SPEC_F_model_moe_shared_expert_intermediate_size];
  if (te && moe_layers && v_module(s, "moe_router") && v_label(s, "layernorm")) {
    if (shared && m->moe_shared_expert_overlap)
      diag_hint(
          v_warn(v, "MCORE-60", F_MODULES,
                 "layernorm recompute of the MoE pre-MLP norm is disabled with the moe_router graph and "
                 "moe_shared_expert_overlap: the norm output is a static graph output"),
          "drop layernorm from model.recompute_modules, or the moe_router graph");
    else if (!(v_module(s, "moe_preprocess") &&
               v_str_is(s, SPEC_F_model_moe_token_dispatcher_type, "alltoall")))
      diag_hint(
          v_warn(v, "MCORE-60", F_MODULES,
                 "layernorm recompute of the MoE pre-MLP norm is disabled with the moe_router graph unless "
                 "moe_preprocess is graphed too and the dispatcher is alltoall: the norm output is a "
                 "static graph output"),
          "add moe_preprocess to cuda_graph_modules with moe_token_dispatcher_type=alltoall, or drop "
          "layernorm");
  }
  bool partial = v_module(s, "moe_router") || v_module(s, "moe_preprocess");
  bool moe_noop = local && moe_layers && v_label(s, "moe") && !partial;
  if (moe_noop)
    diag_hint(
        v_warn(v, "MCORE-61", F_MODULES,
               "moe recompute does nothing under cuda_graph_impl=local unless moe_router/moe_preprocess "
               "is graphed: Megatron's MoE layer skips the checkpoint there"),
        "use cuda_graph_impl=transformer_engine, add moe_router to cuda_graph_modules, or drop moe");
  /* Megatron's regular checkpoint (core_attn; mlp, moe and shared_experts in bf16) becomes a plain
   * call while a per-layer graph is captured, so a region inside the scope frees nothing. With a
   * local graph on a layer that holds both attention and a dense MLP, attn or mlp captures the
   * whole layer. */
  bool fp8 = s->present[SPEC_F_model_fp8];
  bool gpt_local = local && !v_is_hybrid(s) && (v_module(s, "attn") || v_module(s, "mlp"));
  struct {
    const char *label;
    bool graphed;
  } regular[] = {
      {"core_attn",
       v_has_attention(s) && (whole || v_module(s, "attn") || (gpt_local && v_has_dense_mlp(s)))},
      {"mlp", !fp8 && v_has_dense_mlp(s) && (whole || v_module(s, "mlp") || gpt_local)},
      {"moe", !fp8 && !moe_noop && moe_layers && (whole || v_module(s, "moe"))},
      {"shared_experts", !fp8 && moe_layers && shared && !m->moe_shared_expert_overlap &&
                             (whole || v_module(s, "moe") || v_module(s, "moe_router"))},
  };
  for (size_t i = 0; i < sizeof regular / sizeof regular[0]; i++)
    if (v_label(s, regular[i].label) && regular[i].graphed)
      diag_hint(
          v_warn(v, "STEPC-29", F_MODULES,
                 "%s recompute lies inside a per-layer CUDA graph (cuda_graph_impl=%s): Megatron's regular "
                 "checkpoint runs as a plain call during capture, so it frees nothing",
                 regular[i].label, m->cuda_graph_impl),
          "drop %s from model.recompute_modules, keep its module out of cuda_graph_modules, or use "
          "cuda_graph_impl=full_iteration",
          regular[i].label);
}

void validate_graphs(VCtx *v) {
  check_modules(v);
  check_impl(v);
  check_recompute_under_graphs(v);
  check_silent_noops(v);
}
