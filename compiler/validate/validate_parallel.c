/* validate_parallel.c — parallel sizes that must divide (STEPC-2..12, 26, 27), the optimizer's
 * precision fields (STEPC-45), the MoE
 * expert-parallel and overlap rules (docs/megatron-rules.md §1.H–I; MCORE-62, 63, 68) and the MoE
 * capacity and padding fields (STEPC-46..48).
 *
 * Megatron checks most divisions with `divide()` asserts deep inside module construction; stepc
 * checks them up front, naming the field. */
#include <string.h>

#include "passes/pipesplit.h"
#include "validate/validate_internal.h"

#define M(s) (&(s)->model)
#define F_TP SPEC_F_model_tensor_model_parallel_size

static const char *tp_hint = "choose model.tensor_model_parallel_size among the divisors";

/* STEPC-2..5, STEPC-26, STEPC-27: what tensor parallelism splits. */
static void check_tensor_parallel(VCtx *v) {
  const Spec *s = v->s;
  const SpecModel *m = M(s);
  int64_t tp = m->tensor_model_parallel_size;
  if (m->num_attention_heads % tp)
    diag_hint(v_error(v, "STEPC-2", SPEC_F_model_num_attention_heads,
                      "num_attention_heads=%lld is not divisible by tensor_model_parallel_size=%lld",
                      (long long)m->num_attention_heads, (long long)tp),
              "%s of %lld", tp_hint, (long long)m->num_attention_heads);
  int64_t g = spec_num_query_groups(s);
  if (!m->multi_latent_attention) {
    /* Fewer key/value heads than TP ranks is legal: Megatron's Attention gives each rank one
     * replicated kv head (attention.py, num_query_groups < world_size), which needs the ranks to
     * share the heads evenly. */
    if (g >= tp ? g % tp : tp % g)
      diag_hint(
          v_error(v, "STEPC-3", v_pick(v, SPEC_F_model_num_query_groups, F_TP),
                  "num_query_groups=%lld (key/value heads) and tensor_model_parallel_size=%lld: neither "
                  "divides the other, so the key/value heads can be neither split nor replicated evenly",
                  (long long)g, (long long)tp),
          "%s or multiples of %lld, or change model.num_query_groups", tp_hint, (long long)g);
    if (g > m->num_attention_heads || m->num_attention_heads % g)
      diag_hint(
          v_error(v, "STEPC-4", SPEC_F_model_num_query_groups,
                  "num_attention_heads=%lld is not a multiple of num_query_groups=%lld: every key/value "
                  "head must serve the same number of query heads",
                  (long long)m->num_attention_heads, (long long)g),
          "choose model.num_query_groups among the divisors of %lld", (long long)m->num_attention_heads);
    if (!s->present[SPEC_F_model_kv_channels] && m->hidden_size % m->num_attention_heads)
      diag_hint(
          v_error(v, "STEPC-5", SPEC_F_model_hidden_size,
                  "hidden_size=%lld is not divisible by num_attention_heads=%lld, and kv_channels is null "
                  "(the head dim is hidden_size / num_attention_heads)",
                  (long long)m->hidden_size, (long long)m->num_attention_heads),
          "set model.kv_channels to the head dim, or change hidden_size or num_attention_heads");
  }
  int64_t ffn = spec_ffn_hidden_size(s);
  if (v_has_dense_mlp(s) && ffn % tp)
    diag_hint(v_error(v, "STEPC-27", SPEC_F_model_ffn_hidden_size,
                      "ffn_hidden_size=%lld is not divisible by tensor_model_parallel_size=%lld",
                      (long long)ffn, (long long)tp),
              "%s of %lld", tp_hint, (long long)ffn);
  int64_t etp = s->present[SPEC_F_model_expert_tensor_parallel_size] ? m->expert_tensor_parallel_size : tp;
  int64_t mffn = spec_moe_ffn_hidden_size(s);
  if (v_has_moe_layer(s) && mffn % etp)
    diag_hint(v_error(v, "STEPC-27", SPEC_F_model_moe_ffn_hidden_size,
                      "moe_ffn_hidden_size=%lld is not divisible by the expert tensor-parallel size %lld",
                      (long long)mffn, (long long)etp),
              "change model.expert_tensor_parallel_size or model.moe_ffn_hidden_size");
  if (v_has_mamba(s)) {
    /* Megatron's Mamba mixer: heads = mamba_num_heads, or d_inner / head_dim with d_inner =
     * 2 * hidden_size (expand 2); the heads split into mamba_num_groups groups (MambaMixer
     * asserts nheads % ngroups == 0), and heads and groups over TP. */
    int64_t d_inner = 2 * m->hidden_size, hd = m->mamba_head_dim, heads = m->mamba_num_heads;
    bool given = s->present[SPEC_F_model_mamba_num_heads];
    if (!given && d_inner % hd)
      diag_hint(v_error(v, "STEPC-26", SPEC_F_model_mamba_head_dim,
                        "the Mamba inner width 2*hidden_size=%lld is not divisible by mamba_head_dim=%lld",
                        (long long)d_inner, (long long)hd),
                "choose model.mamba_head_dim among the divisors of %lld, or set model.mamba_num_heads",
                (long long)d_inner);
    else {
      if (!given) heads = d_inner / hd;
      if (heads < 1 || heads % tp)
        diag_hint(v_error(v, "STEPC-26", given ? SPEC_F_model_mamba_num_heads : F_TP,
                          "the %lld Mamba heads are not divisible by tensor_model_parallel_size=%lld",
                          (long long)heads, (long long)tp),
                  "%s of %lld", tp_hint, (long long)heads);
      if (m->mamba_num_groups < 1 || (heads > 0 && heads % m->mamba_num_groups))
        diag_hint(v_error(v, "STEPC-26", SPEC_F_model_mamba_num_groups,
                          "the %lld Mamba heads do not split into mamba_num_groups=%lld groups",
                          (long long)heads, (long long)m->mamba_num_groups),
                  "choose model.mamba_num_groups among the divisors of %lld", (long long)heads);
    }
    if (m->mamba_num_groups % tp)
      diag_hint(v_error(v, "STEPC-26", SPEC_F_model_mamba_num_groups,
                        "mamba_num_groups=%lld is not divisible by tensor_model_parallel_size=%lld",
                        (long long)m->mamba_num_groups, (long long)tp),
                "%s of %lld", tp_hint, (long long)m->mamba_num_groups);
  }
}

/* STEPC-6 for hybrid (Mamba) stacks: stepc has no `|` segment syntax, and Megatron-LM's validate_args
 * (training/arguments.py, the hybrid_layer_pattern block) asserts that a pipe-free pattern takes no
 * virtual stages and no account_for_* split: its stages come from the pattern alone
 * (core/models/hybrid/hybrid_layer_allocation.py select_pipeline_segment refuses VPP too). */
static void check_hybrid_split(VCtx *v) {
  const Spec *s = v->s;
  if (!v_is_hybrid(s)) return;
  const char *hint = "a hybrid stack splits over pipeline stages by num_layers (or "
                     "num_layers_in_first/last_pipeline_stage) only";
  if (s->present[SPEC_F_model_virtual_pipeline_model_parallel_size])
    diag_hint(v_error(v, "STEPC-6", SPEC_F_model_virtual_pipeline_model_parallel_size,
                      "virtual_pipeline_model_parallel_size is not supported with hybrid_override_pattern "
                      "(Megatron derives a hybrid model's virtual stages from '|' segments of the pattern, "
                      "which stepc does not have)"),
              "write model.virtual_pipeline_model_parallel_size=null; %s", hint);
  struct {
    int field;
    bool on;
  } acc[] = {
      {SPEC_F_model_account_for_embedding_in_pipeline_split, M(s)->account_for_embedding_in_pipeline_split},
      {SPEC_F_model_account_for_loss_in_pipeline_split, M(s)->account_for_loss_in_pipeline_split}};
  for (size_t i = 0; i < 2; i++)
    if (acc[i].on)
      diag_hint(v_error(v, "STEPC-6", acc[i].field,
                        "%s is not supported with hybrid_override_pattern (Megatron-LM's validate_args "
                        "asserts it)",
                        spec_fields[acc[i].field].path),
                "drop it; %s", hint);
}

/* STEPC-6..12: layers, ranks, sequence and batch. */
static void check_layout(VCtx *v) {
  const Spec *s = v->s;
  const SpecModel *m = M(s);
  int64_t tp = m->tensor_model_parallel_size, pp = m->pipeline_model_parallel_size;
  int64_t cp = m->context_parallel_size, world = s->train.world_size;
  bool has_vpp = s->present[SPEC_F_model_virtual_pipeline_model_parallel_size];
  int64_t vpp = has_vpp ? m->virtual_pipeline_model_parallel_size : 1;
  /* Megatron's own refusals of the layer split (pipesplit.c names the source): it places no
   * remainder; an uneven split is written with num_layers_in_first/last_pipeline_stage or
   * account_for_embedding/loss_in_pipeline_split. */
  PipeSplit ps;
  pipe_split_from_spec(s, &ps);
  char why[256];
  if (pipe_split_check(&ps, why, sizeof why)) {
    bool uneven = ps.first >= 0 || ps.last >= 0;
    int field = uneven ? (ps.first >= 0 ? SPEC_F_model_num_layers_in_first_pipeline_stage
                                        : SPEC_F_model_num_layers_in_last_pipeline_stage)
                : (ps.num_layers + ps.embed + ps.loss) % pp
                    ? SPEC_F_model_pipeline_model_parallel_size
                    : SPEC_F_model_virtual_pipeline_model_parallel_size;
    diag_hint(v_error(v, "STEPC-6", field, "%s", why),
              "Megatron splits the layers evenly over the pipeline stages and their virtual chunks; for "
              "an uneven split set model.num_layers_in_first_pipeline_stage and/or "
              "model.num_layers_in_last_pipeline_stage (each divisible by the VPP size, the rest even over "
              "the middle stages)");
  }
  if (has_vpp && vpp > 1 && pp == 1)
    diag_hint(v_error(v, "STEPC-6", SPEC_F_model_virtual_pipeline_model_parallel_size,
                      "virtual_pipeline_model_parallel_size=%lld needs pipeline_model_parallel_size > 1 (the "
                      "interleaved schedule splits pipeline stages)",
                      (long long)vpp),
              "write model.virtual_pipeline_model_parallel_size=null, or raise pipeline_model_parallel_size");
  int64_t mp = tp * pp * cp;
  bool world_ok = world % mp == 0;
  if (!world_ok)
    diag_hint(v_error(v, "STEPC-7", SPEC_F_train_world_size,
                      "world_size=%lld is not divisible by TP*PP*CP = %lld*%lld*%lld = %lld",
                      (long long)world, (long long)tp, (long long)pp, (long long)cp, (long long)mp),
              "set train.world_size to a multiple of %lld (the data-parallel size is world_size / %lld)",
              (long long)mp, (long long)mp);
  int64_t ep = m->expert_model_parallel_size;
  int64_t etp = s->present[SPEC_F_model_expert_tensor_parallel_size] ? m->expert_tensor_parallel_size : tp;
  if (!spec_is_moe(s) && ep > 1)
    diag_hint(v_error(v, "STEPC-8", SPEC_F_model_expert_model_parallel_size,
                      "expert_model_parallel_size=%lld needs a MoE model (num_moe_experts is null or 1)",
                      (long long)ep),
              "set model.expert_model_parallel_size=1, or model.num_moe_experts");
  if (spec_is_moe(s) && m->num_moe_experts % ep)
    diag_hint(v_error(v, "STEPC-8", SPEC_F_model_expert_model_parallel_size,
                      "num_moe_experts=%lld is not divisible by expert_model_parallel_size=%lld",
                      (long long)m->num_moe_experts, (long long)ep),
              "choose model.expert_model_parallel_size among the divisors of %lld",
              (long long)m->num_moe_experts);
  if (spec_is_moe(s) && world % (etp * ep * pp))
    diag_hint(v_error(v, "STEPC-9", SPEC_F_train_world_size,
                      "world_size=%lld is not divisible by ETP*EP*PP = %lld*%lld*%lld (the expert layout)",
                      (long long)world, (long long)etp, (long long)ep, (long long)pp),
              "set train.world_size to a multiple of %lld, or change EP/ETP", (long long)(etp * ep * pp));
  if (cp > 1 && m->seq_length % (2 * cp))
    diag_hint(v_error(v, "STEPC-10", SPEC_F_model_seq_length,
                      "seq_length=%lld is not divisible by 2*context_parallel_size=%lld (context parallelism "
                      "splits the sequence into 2*CP chunks for load balance)",
                      (long long)m->seq_length, (long long)(2 * cp)),
              "make model.seq_length a multiple of %lld", (long long)(2 * cp));
  if (m->sequence_parallel && (m->seq_length / cp) % tp)
    diag_hint(
        v_error(v, "STEPC-11", SPEC_F_model_seq_length,
                "with sequence_parallel, the %lld tokens per context-parallel rank are not divisible by "
                "tensor_model_parallel_size=%lld",
                (long long)(m->seq_length / cp), (long long)tp),
        "make model.seq_length a multiple of %lld", (long long)(tp * cp));
  if (world_ok) {
    int64_t dp = world / mp, mbs = s->train.micro_batch_size, gbs = spec_global_batch_size(s);
    if (gbs % (mbs * dp))
      diag_hint(v_error(v, "STEPC-12",
                        v_pick(v, SPEC_F_train_global_batch_size, SPEC_F_train_micro_batch_size),
                        "global_batch_size=%lld is not divisible by micro_batch_size*DP = %lld*%lld",
                        (long long)gbs, (long long)mbs, (long long)dp),
                "set train.global_batch_size to a multiple of %lld", (long long)(mbs * dp));
  }
}

/* MCORE-63: one diagnostic per unmet requirement of the EP all-to-all overlap. */
static void ep_overlap_needs(VCtx *v, bool ok, const char *what, const char *hint) {
  if (!ok)
    diag_hint(v_error(v, "MCORE-63", SPEC_F_model_overlap_moe_expert_parallel_comm,
                      "overlap_moe_expert_parallel_comm %s", what),
              "%s", hint);
}

/* STEPC-46..48: TransformerConfig.__post_init__'s MoE capacity and padding checks, which the notes'
 * numbering does not list (found by tests/megatron_diff). */
static void check_moe_padding(VCtx *v) {
  const Spec *s = v->s;
  const SpecModel *m = M(s);
  if (!spec_is_moe(s)) return;
  if (m->moe_pad_expert_input_to_capacity && !s->present[SPEC_F_model_moe_expert_capacity_factor])
    diag_hint(v_error(v, "STEPC-46", SPEC_F_model_moe_pad_expert_input_to_capacity,
                      "moe_pad_expert_input_to_capacity needs moe_expert_capacity_factor: there is no "
                      "capacity to pad to"),
              "set model.moe_expert_capacity_factor (e.g. 1.0), or drop moe_pad_expert_input_to_capacity");
  if (m->moe_pad_expert_input_to_capacity && v_str_is(s, SPEC_F_model_moe_token_dispatcher_type, "flex"))
    diag_hint(v_error(v, "STEPC-47", SPEC_F_model_moe_pad_expert_input_to_capacity,
                      "the flex token dispatcher's default backend (DeepEP) does not pad experts to "
                      "capacity (moe_pad_expert_input_to_capacity)"),
              "set model.moe_token_dispatcher_type=alltoall, or drop moe_pad_expert_input_to_capacity");
  if (m->moe_router_padding_for_fp8) {
    if (!s->present[SPEC_F_model_fp8])
      diag_hint(v_error(v, "STEPC-48", SPEC_F_model_moe_router_padding_for_fp8,
                        "moe_router_padding_for_fp8 pads the routing map for fp8 GEMMs, but fp8 is off"),
                "set model.fp8, or drop moe_router_padding_for_fp8");
    if (v_str_is(s, SPEC_F_model_moe_token_dispatcher_type, "allgather"))
      diag_hint(v_error(v, "STEPC-48", SPEC_F_model_moe_router_padding_for_fp8,
                        "the allgather token dispatcher does not support moe_router_padding_for_fp8"),
                "set model.moe_token_dispatcher_type=alltoall, or drop moe_router_padding_for_fp8");
  }
}

/* MCORE-62, MCORE-63, MCORE-68. */
static void check_moe_parallel(VCtx *v) {
  const Spec *s = v->s;
  const SpecModel *m = M(s);
  bool a2a = v_str_is(s, SPEC_F_model_moe_token_dispatcher_type, "alltoall") ||
             v_str_is(s, SPEC_F_model_moe_token_dispatcher_type, "flex");
  /* transformer_config.py checks the dispatcher only inside `moe_shared_expert_intermediate_size is
   * not None`: without shared experts the overlap flag does nothing. */
  bool shared = s->present[SPEC_F_model_moe_shared_expert_intermediate_size];
  if (m->moe_shared_expert_overlap && !shared)
    diag_hint(v_warn(v, "MCORE-62", SPEC_F_model_moe_shared_expert_overlap,
                     "moe_shared_expert_overlap does nothing: the model has no shared experts "
                     "(moe_shared_expert_intermediate_size is null)"),
              "drop model.moe_shared_expert_overlap");
  else if (m->moe_shared_expert_overlap && !a2a)
    diag_hint(
        v_error(v, "MCORE-62", SPEC_F_model_moe_shared_expert_overlap,
                "moe_shared_expert_overlap only works with the alltoall or flex token dispatcher (it is %s)",
                m->moe_token_dispatcher_type),
        "set model.moe_token_dispatcher_type=alltoall, or drop moe_shared_expert_overlap");
  if (spec_is_moe(s) && m->tensor_model_parallel_size > 1 && !m->sequence_parallel)
    diag_hint(
        v_error(v, "MCORE-68", SPEC_F_model_sequence_parallel,
                "a MoE model with tensor_model_parallel_size=%lld needs sequence_parallel=true (Megatron's "
                "MoE layer raises at run time)",
                (long long)m->tensor_model_parallel_size),
        "add model.sequence_parallel=true");
  if (!m->overlap_moe_expert_parallel_comm) return;
  ep_overlap_needs(v,
                   m->pipeline_model_parallel_size == 1 ||
                       s->present[SPEC_F_model_virtual_pipeline_model_parallel_size],
                   "needs virtual_pipeline_model_parallel_size when pipeline_model_parallel_size > 1",
                   "set model.virtual_pipeline_model_parallel_size");
  ep_overlap_needs(v, m->expert_model_parallel_size > 1, "needs expert_model_parallel_size > 1",
                   "raise model.expert_model_parallel_size, or drop the overlap");
  ep_overlap_needs(v, a2a, "needs the alltoall or flex token dispatcher",
                   "set model.moe_token_dispatcher_type=alltoall");
  ep_overlap_needs(v, !v_full(s), "cannot be combined with full recompute",
                   "use selective recompute (without moe) or none");
  ep_overlap_needs(v, !s->present[SPEC_F_model_recompute_method], "needs recompute_method to be null",
                   "write model.recompute_method=null");
  ep_overlap_needs(v, !s->present[SPEC_F_model_recompute_num_layers], "needs recompute_num_layers to be null",
                   "write model.recompute_num_layers=null");
  ep_overlap_needs(
      v, !v_label(s, "moe"),
      "cannot be combined with moe in recompute_modules (checked whatever the granularity, since "
      "recompute_modules defaults to [core_attn])",
      "drop moe from model.recompute_modules");
  ep_overlap_needs(v, m->bf16, "needs bf16", "set model.bf16=true");
  ep_overlap_needs(v, !m->moe_shared_expert_overlap, "cannot be combined with moe_shared_expert_overlap",
                   "drop model.moe_shared_expert_overlap");
  ep_overlap_needs(v, !v_graph_impl(s, "transformer_engine") || (!v_module(s, "moe") && !v_module(s, "mlp")),
                   "cannot be combined with moe or mlp in cuda_graph_modules under "
                   "cuda_graph_impl=transformer_engine",
                   "capture attn and moe_router only");
}

/* STEPC-45: Megatron's OptimizerConfig.__post_init__ (megatron/core/optimizer/optimizer_config.py)
 * asserts that the precision-aware optimizer runs under the distributed optimizer, and that
 * without it every optimizer dtype stays fp32. Megatron finds it when the optimizer is built. */
static void check_optimizer_precision(VCtx *v) {
  const SpecOptimizer *o = &v->s->optimizer;
  if (o->use_precision_aware_optimizer) {
    if (!o->use_distributed_optimizer)
      diag_hint(v_error(v, "STEPC-45", SPEC_F_optimizer_use_precision_aware_optimizer,
                        "use_precision_aware_optimizer needs use_distributed_optimizer"),
                "set optimizer.use_distributed_optimizer=true");
    return;
  }
  static const struct {
    int field;
    const char *name;
  } dt[] = {{SPEC_F_optimizer_main_grads_dtype, "main_grads_dtype"},
            {SPEC_F_optimizer_main_params_dtype, "main_params_dtype"},
            {SPEC_F_optimizer_exp_avg_dtype, "exp_avg_dtype"},
            {SPEC_F_optimizer_exp_avg_sq_dtype, "exp_avg_sq_dtype"}};
  for (size_t i = 0; i < sizeof dt / sizeof dt[0]; i++) {
    const char *val = (const char *)spec_field_cptr(v->s, dt[i].field);
    if (strcmp(val, "fp32") != 0)
      diag_hint(v_error(v, "STEPC-45", dt[i].field,
                        "%s=%s needs use_precision_aware_optimizer (without it, only fp32)", dt[i].name, val),
                "set optimizer.use_precision_aware_optimizer=true, or optimizer.%s=fp32", dt[i].name);
  }
}

void validate_parallel(VCtx *v) {
  check_optimizer_precision(v);
  check_tensor_parallel(v);
  check_layout(v);
  check_hybrid_split(v);
  check_moe_parallel(v);
  check_moe_padding(v);
}
