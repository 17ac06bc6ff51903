/* validate.c — the rule checklist (first rules; the rest follow). */
#include "validate.h"

#include <string.h>

#define M(s) (&(s)->model)

static Diag *rule_error(DiagList *d, const Spec *s, const char *rule, int id, const char *msg) {
  return diag_add(d, DIAG_ERROR, rule, spec_fields[id].path, s->where[id], "%s", msg);
}

int validate_spec(const Spec *in, Spec *out, DiagList *diags) {
  if (out != in) *out = *in;
  Spec *s = out;
  int before = diag_count(diags, DIAG_ERROR);
  if (!s->present[SPEC_F_model_recompute_modules]) { /* MCORE-1 */
    s->model.recompute_modules.n = 1;
    strcpy(s->model.recompute_modules.items[0], "core_attn");
    s->present[SPEC_F_model_recompute_modules] = true;
  }
  bool full = s->present[SPEC_F_model_recompute_granularity] && strcmp(M(s)->recompute_granularity, "full") == 0;
  if (full && !s->present[SPEC_F_model_recompute_method])
    rule_error(diags, s, "MCORE-15", SPEC_F_model_recompute_granularity,
               "recompute_granularity=full needs recompute_method \"uniform\" or \"block\"");
  if (full && !s->present[SPEC_F_model_recompute_num_layers])
    rule_error(diags, s, "MCORE-16", SPEC_F_model_recompute_granularity,
               "recompute_granularity=full needs recompute_num_layers");
  if (s->present[SPEC_F_model_recompute_num_layers] && M(s)->recompute_num_layers < 1)
    rule_error(diags, s, "STEPC-1", SPEC_F_model_recompute_num_layers,
               "recompute_num_layers must be at least 1 (Megatron loops forever on 0 with uniform)");
  return diag_count(diags, DIAG_ERROR) - before;
}
