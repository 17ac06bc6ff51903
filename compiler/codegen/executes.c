/* executes.c — the recipe fields stepc checks and plans but does not execute yet. A build of such a
 * recipe (and so `stepc run SPEC`) refuses, naming the field and where it was set: an artifact
 * that trained a different step than the recipe asks for (bf16 under fp8, one full replica under
 * tensor or expert parallelism) would be a silent no-op. `stepc check`, `plan`, `sweep` and
 * `trace` still take these fields: the per-rank report models them. */
#include "codegen/artifact.h"

#include <stdio.h>
#include <string.h>

static bool above_one(const Spec *s, int f, int64_t v) { return s->present[f] && v > 1; }

/* The first field whose value asks for something the step does not execute (its id in *field and
 * what it asks for), or NULL. */
static const char *first_unexecuted(const Spec *s, int *field) {
  const SpecModel *m = &s->model;
  const SpecOptimizer *o = &s->optimizer;
  bool low_precision_state = o->use_precision_aware_optimizer &&
                             (strcmp(o->main_grads_dtype, "fp32") || strcmp(o->main_params_dtype, "fp32") ||
                              strcmp(o->exp_avg_dtype, "fp32") || strcmp(o->exp_avg_sq_dtype, "fp32"));
  const struct {
    bool asks;
    int field;
    const char *what;
  } rows[] = {
      {above_one(s, SPEC_F_model_tensor_model_parallel_size, m->tensor_model_parallel_size),
       SPEC_F_model_tensor_model_parallel_size, "tensor parallelism"},
      {above_one(s, SPEC_F_model_pipeline_model_parallel_size, m->pipeline_model_parallel_size),
       SPEC_F_model_pipeline_model_parallel_size, "pipeline parallelism"},
      {above_one(s, SPEC_F_model_virtual_pipeline_model_parallel_size,
                 m->virtual_pipeline_model_parallel_size),
       SPEC_F_model_virtual_pipeline_model_parallel_size, "virtual pipeline stages"},
      {above_one(s, SPEC_F_model_context_parallel_size, m->context_parallel_size),
       SPEC_F_model_context_parallel_size, "context parallelism"},
      {above_one(s, SPEC_F_model_expert_model_parallel_size, m->expert_model_parallel_size),
       SPEC_F_model_expert_model_parallel_size, "expert parallelism"},
      {above_one(s, SPEC_F_model_expert_tensor_parallel_size, m->expert_tensor_parallel_size),
       SPEC_F_model_expert_tensor_parallel_size, "expert tensor parallelism"},
      {s->present[SPEC_F_model_fp8], SPEC_F_model_fp8, "fp8 training (the step would run bf16)"},
      {m->fp8_param, SPEC_F_model_fp8_param, "fp8 primary weights"},
      {m->cpu_offloading, SPEC_F_model_cpu_offloading, "activation offloading to the host"},
      {low_precision_state, SPEC_F_optimizer_use_precision_aware_optimizer,
       "low-precision main gradients, master weights or moments (the step keeps them in fp32)"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    if (rows[i].asks) return *field = rows[i].field, rows[i].what;
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
