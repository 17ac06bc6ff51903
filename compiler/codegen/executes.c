/* executes.c — the recipe fields stepc checks and plans but does not execute yet (fp8 executes
 * with current and delayed scaling on dense, MLA, Mamba and shared-expert linears, under tensor
 * parallelism too: ir/ops/fp8.c, and with fp8 primary weights, model.fp8_param, with the distributed
 * optimizer too: compiler/lower/lower_blocks.h lb_fp8_param_casts; on MoE routed experts as grouped
 * fp8 linears with per-expert scales, lb_grouped_linear_op, with fp8_param too, on CUDA through
 * compiler/codegen/launch/op_fp8.c, whose kernels take widths that are multiples of 16: a step whose
 * fp8 operands are not has no launch program, its program.txt and the image say why, and
 * `--device cuda` refuses it at open). A
 * build of such a recipe (and so `stepc run SPEC`) refuses, naming the field and where it was set: an
 * artifact that trained a different step than the recipe asks for (bf16 under fp8, one full replica
 * under expert parallelism) would be a silent no-op. `stepc check`, `plan`, `sweep` and `trace` still
 * take these fields: the per-rank report models them.
 *
 * Tensor parallelism (with or without sequence parallelism) is executed for the dense GPT, MLA and
 * Mamba layers (docs/parallelism.md), expert parallelism for MoE layers (the alltoall dispatcher,
 * alone or under TP with expert-tensor parallelism 1; the allgather one at TP 1: ir/ops/ep.c), and
 * the distributed optimizer under either or both (on cuda too: runtime/zero_coll.h); what they do not
 * cover yet is refused here with the field that asks. */
#include "codegen/artifact.h"

#include <stdio.h>
#include <string.h>

#include "lower/lower_blocks.h"

static bool above_one(const Spec *s, int f, int64_t v) { return s->present[f] && v > 1; }

/* Under TP > 1: the first field whose value the tensor-parallel lowering (compiler/lower/lower.c)
 * does not cover, or NULL. */
static const char *tp_unexecuted(const Spec *s, int *field) {
  const SpecModel *m = &s->model;
  int64_t tp = m->tensor_model_parallel_size;
  const struct {
    bool asks;
    int field;
    const char *what;
  } rows[] = {
      {spec_is_moe(s) &&
           !(s->present[SPEC_F_model_expert_tensor_parallel_size] && m->expert_tensor_parallel_size == 1),
       SPEC_F_model_tensor_model_parallel_size,
       "MoE layers under tensor parallelism with the experts tensor-parallel too "
       "(expert_tensor_parallel_size "
       "null means TP, Megatron's default; model.expert_tensor_parallel_size=1 runs)"},
      {spec_is_moe(s) && s->present[SPEC_F_model_moe_expert_capacity_factor],
       SPEC_F_model_moe_expert_capacity_factor,
       "an expert capacity under tensor parallelism (each rank would drop among its own rows)"},
      {m->multi_latent_attention && m->num_attention_heads % tp != 0, SPEC_F_model_num_attention_heads,
       "multi-latent attention with heads that the tensor-parallel ranks cannot split evenly"},
      {s->present[SPEC_F_model_hybrid_override_pattern] && m->hybrid_override_pattern[0] &&
           (m->mamba_num_groups % tp != 0 || lower_mamba_heads(s) % tp != 0),
       SPEC_F_model_mamba_num_groups,
       "Mamba layers whose heads or groups the tensor-parallel ranks cannot split evenly"},
      {!m->multi_latent_attention && spec_num_query_groups(s) % tp != 0 && tp % spec_num_query_groups(s) != 0,
       SPEC_F_model_num_query_groups,
       "key/value groups that the tensor-parallel ranks can neither split nor replicate evenly (STEPC-3: TP "
       "divides num_query_groups, or is a multiple of it)"},
      {m->vocab_size % tp != 0, SPEC_F_model_vocab_size,
       "a vocabulary that the tensor-parallel ranks cannot split evenly (pad it to a multiple of TP)"},
      {spec_output_layer_chunks(s) > 1, SPEC_F_model_output_layer_chunks,
       "the chunked output layer and loss (LINEAR_CROSS_ENTROPY) under tensor parallelism"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    if (rows[i].asks) return *field = rows[i].field, rows[i].what;
  return NULL;
}

/* Under EP > 1: the first field whose value the expert-parallel lowering (compiler/lower/lower_moe.c,
 * ir/ops/ep.c) does not cover, or NULL. */
static const char *ep_unexecuted(const Spec *s, int *field) {
  const SpecModel *m = &s->model;
  const struct {
    bool asks;
    int field;
    const char *what;
  } rows[] = {
      {strcmp(m->moe_token_dispatcher_type, "alltoall") != 0 &&
           strcmp(m->moe_token_dispatcher_type, "allgather") != 0,
       SPEC_F_model_moe_token_dispatcher_type,
       "expert parallelism through the flex token dispatcher (the alltoall and allgather ones run)"},
      {strcmp(m->moe_token_dispatcher_type, "allgather") == 0 &&
           s->present[SPEC_F_model_moe_expert_capacity_factor],
       SPEC_F_model_moe_expert_capacity_factor,
       "an expert capacity with the allgather token dispatcher under expert parallelism (it runs "
       "dropless; model.moe_token_dispatcher_type=alltoall runs with a capacity)"},
      {strcmp(m->moe_token_dispatcher_type, "allgather") == 0 && m->tensor_model_parallel_size > 1,
       SPEC_F_model_tensor_model_parallel_size,
       "the allgather token dispatcher under tensor and expert parallelism together (it runs at TP 1; "
       "model.moe_token_dispatcher_type=alltoall runs under TP)"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    if (rows[i].asks) return *field = rows[i].field, rows[i].what;
  return NULL;
}

/* The first field whose value asks for something the step does not execute (its id in *field and
 * what it asks for), or NULL. */
static const char *first_unexecuted(const Spec *s, int *field) {
  const SpecModel *m = &s->model;
  const SpecOptimizer *o = &s->optimizer;
  bool fp8 = s->present[SPEC_F_model_fp8];
  bool low_precision_state = o->use_precision_aware_optimizer &&
                             (strcmp(o->main_grads_dtype, "fp32") || strcmp(o->main_params_dtype, "fp32") ||
                              strcmp(o->exp_avg_dtype, "fp32") || strcmp(o->exp_avg_sq_dtype, "fp32"));
  const struct {
    bool asks;
    int field;
    const char *what;
  } rows[] = {
      {above_one(s, SPEC_F_model_pipeline_model_parallel_size, m->pipeline_model_parallel_size),
       SPEC_F_model_pipeline_model_parallel_size, "pipeline parallelism"},
      {above_one(s, SPEC_F_model_virtual_pipeline_model_parallel_size,
                 m->virtual_pipeline_model_parallel_size),
       SPEC_F_model_virtual_pipeline_model_parallel_size, "virtual pipeline stages"},
      {above_one(s, SPEC_F_model_context_parallel_size, m->context_parallel_size),
       SPEC_F_model_context_parallel_size, "context parallelism"},
      {above_one(s, SPEC_F_model_expert_tensor_parallel_size, m->expert_tensor_parallel_size),
       SPEC_F_model_expert_tensor_parallel_size, "expert tensor parallelism"},
      {fp8 && !spec_fp8_executes(s), SPEC_F_model_fp8_recipe,
       "an fp8 scaling recipe other than delayed or current scaling (\"delayed\" and \"tensorwise\" run; "
       "mxfp8, blockwise and custom do not)"},
      {m->cpu_offloading, SPEC_F_model_cpu_offloading, "activation offloading to the host"},
      {low_precision_state, SPEC_F_optimizer_use_precision_aware_optimizer,
       "low-precision main gradients, master weights or moments (the step keeps them in fp32)"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    if (rows[i].asks) return *field = rows[i].field, rows[i].what;
  /* train.force_parallel_lowering lowers both at size 1: what they do not cover refuses there too */
  bool forced = s->train.force_parallel_lowering;
  if (above_one(s, SPEC_F_model_expert_model_parallel_size, m->expert_model_parallel_size) ||
      (forced && spec_is_moe(s))) {
    const char *what = ep_unexecuted(s, field);
    if (what) return what;
  }
  if (above_one(s, SPEC_F_model_tensor_model_parallel_size, m->tensor_model_parallel_size) || forced)
    return tp_unexecuted(s, field);
  return NULL;
}

int artifact_refuse_unexecuted(const Spec *s, char *err, size_t nerr) {
  int field = -1;
  const char *what = first_unexecuted(s, &field);
  if (!what) return ARTIFACT_OK;
  const char *where = s->where[field][0] ? s->where[field] : s->recipe_path;
  char value[64];
  spec_value_str(s, field, value, sizeof value);
  snprintf(err, nerr,
           "%s: %s=%s asks for %s, which stepc checks and plans (stepc plan reports its per-rank memory) but "
           "does not "
           "execute yet; a build or run would train another step, so it refuses",
           where, spec_fields[field].path, value, what);
  return ARTIFACT_UNSUPPORTED;
}
