/* validate.c — the rule checklist's entry point, its shared helpers, and Megatron's normalizations.
 *
 * Normalizations run first, on `out`, so that every later check sees the setting Megatron would
 * actually run with; whenever one silently changes what the recipe says, it warns. */
#include "validate/validate.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "validate/validate_internal.h"

/* ---- diagnostics ---- */

static Diag *v_emit(VCtx *v, DiagSeverity sev, const char *rule, int field, const char *fmt, va_list ap) {
  char msg[640], where[160];
  vsnprintf(msg, sizeof msg, fmt, ap);
  if (v->s->where[field][0])
    snprintf(where, sizeof where, "%s", v->s->where[field]);
  else
    snprintf(where, sizeof where, "%s (default)", v->s->recipe_path);
  return diag_add(v->d, sev, rule, spec_fields[field].path, where, "%s", msg);
}

Diag *v_error(VCtx *v, const char *rule, int field, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  Diag *g = v_emit(v, DIAG_ERROR, rule, field, fmt, ap);
  va_end(ap);
  return g;
}

Diag *v_warn(VCtx *v, const char *rule, int field, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  Diag *g = v_emit(v, DIAG_WARNING, rule, field, fmt, ap);
  va_end(ap);
  return g;
}

const char *v_at(const VCtx *v, int field) { return v->s->where[field][0] ? v->s->where[field] : "default"; }

bool v_set_in(const VCtx *v, int field) { return v->in->where[field][0] != 0; }

int v_pick(const VCtx *v, int a, int b) { return !v_set_in(v, a) && v_set_in(v, b) ? b : a; }

/* ---- predicates ---- */

bool v_str_is(const Spec *s, int field, const char *value) {
  return s->present[field] && strcmp((const char *)spec_field_cptr(s, field), value) == 0;
}

bool v_full(const Spec *s) { return v_str_is(s, SPEC_F_model_recompute_granularity, "full"); }
bool v_selective(const Spec *s) { return v_str_is(s, SPEC_F_model_recompute_granularity, "selective"); }
bool v_graph_impl(const Spec *s, const char *impl) { return v_str_is(s, SPEC_F_model_cuda_graph_impl, impl); }

bool v_label(const Spec *s, const char *label) {
  return s->present[SPEC_F_model_recompute_modules] && spec_list_has(&s->model.recompute_modules, label);
}

bool v_module(const Spec *s, const char *module) {
  return s->present[SPEC_F_model_cuda_graph_modules] && spec_list_has(&s->model.cuda_graph_modules, module);
}

bool v_is_hybrid(const Spec *s) { return s->present[SPEC_F_model_hybrid_override_pattern]; }

static bool pattern_has(const Spec *s, char c) { return strchr(s->model.hybrid_override_pattern, c) != NULL; }

bool v_has_attention(const Spec *s) { return !v_is_hybrid(s) || pattern_has(s, '*'); }
bool v_has_mamba(const Spec *s) { return v_is_hybrid(s) && pattern_has(s, 'M'); }

bool v_has_moe_layer(const Spec *s) {
  if (!spec_is_moe(s)) return false;
  if (v_is_hybrid(s)) return pattern_has(s, 'E');
  for (int64_t i = 0; i < s->model.num_layers && i < SPEC_MAX_LAYERS; i++)
    if (spec_layer_is_moe(s, (int)i)) return true;
  return false;
}

bool v_has_dense_mlp(const Spec *s) {
  if (v_is_hybrid(s)) return pattern_has(s, '-');
  for (int64_t i = 0; i < s->model.num_layers && i < SPEC_MAX_LAYERS; i++)
    if (!spec_layer_is_moe(s, (int)i)) return true;
  return false;
}

int64_t v_layers_per_chunk(const Spec *s) {
  int64_t pp = s->model.pipeline_model_parallel_size;
  int64_t vpp = s->present[SPEC_F_model_virtual_pipeline_model_parallel_size]
                    ? s->model.virtual_pipeline_model_parallel_size
                    : 1;
  if (pp < 1 || vpp < 1 || s->model.num_layers % (pp * vpp) != 0) return 0;
  return s->model.num_layers / (pp * vpp);
}

/* ---- normalizations ---- */

static void list_remove(SpecList *l, const char *item) {
  int k = 0;
  for (int i = 0; i < l->n; i++)
    if (strcmp(l->items[i], item) != 0) memmove(l->items[k++], l->items[i], sizeof l->items[i]);
  l->n = k;
}

static void list_add(SpecList *l, const char *item) {
  if (l->n < SPEC_MAX_LIST && !spec_list_has(l, item))
    snprintf(l->items[l->n++], sizeof l->items[0], "%s", item);
}

/* MCORE-1: recompute_modules None means [core_attn], whatever the granularity. */
static void normalize_modules(VCtx *v) {
  Spec *s = v->s;
  if (s->present[SPEC_F_model_recompute_modules]) return;
  s->model.recompute_modules.n = 0;
  list_add(&s->model.recompute_modules, "core_attn");
  s->present[SPEC_F_model_recompute_modules] = true;
  if (v_selective(s))
    diag_hint(v_warn(v, "MCORE-1", SPEC_F_model_recompute_modules,
                     "recompute_granularity=selective (%s) with recompute_modules left null: Megatron "
                     "silently recomputes [core_attn]",
                     v_at(v, SPEC_F_model_recompute_granularity)),
              "write the labels you mean, e.g. model.recompute_modules=[core_attn], or [] for a matched "
              "no-recompute control");
}

/* MCORE-6, MCORE-7, MCORE-12, STEPC-24: cuda_graph_modules as Megatron normalizes it. */
static void normalize_graph_modules(VCtx *v) {
  Spec *s = v->s;
  SpecList *cgm = &s->model.cuda_graph_modules;
  const int F = SPEC_F_model_cuda_graph_modules;
  if (spec_list_has(cgm, "full")) {
    if (cgm->n > 1)
      diag_hint(
          v_error(v, "MCORE-6", F, "cuda_graph_modules value \"full\" cannot be used with other modules"),
          "use model.cuda_graph_modules=[] for whole-layer graphs, or list only the modules to capture");
    else
      diag_hint(v_warn(v, "MCORE-6", F,
                       "cuda_graph_modules=[full] is the deprecated spelling of [] (whole-layer graphs); "
                       "treated as []"),
                "write model.cuda_graph_modules=[]");
    list_remove(cgm, "full");
  }
  if (spec_list_has(cgm, "full_iteration")) {
    if (v_graph_impl(s, "transformer_engine")) {
      diag_hint(v_error(v, "MCORE-7", F,
                        "cuda_graph_modules value \"full_iteration\" cannot be combined with "
                        "cuda_graph_impl=transformer_engine (%s)",
                        v_at(v, SPEC_F_model_cuda_graph_impl)),
                "for a full-iteration graph set model.cuda_graph_impl=full_iteration and "
                "model.cuda_graph_modules=[]");
    } else {
      diag_hint(v_warn(v, "MCORE-7", F,
                       "cuda_graph_modules value \"full_iteration\" is deprecated; Megatron moves it to "
                       "cuda_graph_impl=full_iteration (was %s)",
                       s->model.cuda_graph_impl),
                "write model.cuda_graph_impl=full_iteration and leave cuda_graph_modules=[]");
      snprintf(s->model.cuda_graph_impl, sizeof s->model.cuda_graph_impl, "full_iteration");
      s->present[SPEC_F_model_cuda_graph_impl] = true;
      snprintf(s->where[SPEC_F_model_cuda_graph_impl], sizeof s->where[0], "%s", s->where[F]);
    }
    list_remove(cgm, "full_iteration");
  }
  if (v_graph_impl(s, "none") && cgm->n > 0) {
    diag_hint(v_warn(v, "STEPC-24", F,
                     "cuda_graph_modules is set but cuda_graph_impl=none (%s): no graph is captured and the "
                     "modules are ignored (Megatron-Bridge clears them)",
                     v_at(v, SPEC_F_model_cuda_graph_impl)),
              "set model.cuda_graph_impl=transformer_engine to capture them, or drop cuda_graph_modules");
    cgm->n = 0;
  }
  if (v_graph_impl(s, "local") &&
      (spec_list_has(cgm, "moe_router") != spec_list_has(cgm, "moe_preprocess"))) {
    const char *added = spec_list_has(cgm, "moe_router") ? "moe_preprocess" : "moe_router";
    diag_hint(v_warn(v, "MCORE-12", F,
                     "with cuda_graph_impl=local, moe_router and moe_preprocess are captured together: "
                     "Megatron adds %s",
                     added),
              "list both: add %s to model.cuda_graph_modules", added);
    list_add(cgm, "moe_router");
    list_add(cgm, "moe_preprocess");
  }
}

/* MCORE-22 (Megatron-LM's arguments.py): sequence parallelism needs TP > 1; TP = 1 turns it off. */
static void normalize_sequence_parallel(VCtx *v) {
  Spec *s = v->s;
  /* train.force_parallel_lowering keeps it: the sequence-parallel ops run over a group of one */
  if (!s->model.sequence_parallel || s->model.tensor_model_parallel_size != 1 ||
      s->train.force_parallel_lowering)
    return;
  diag_hint(v_warn(v, "MCORE-22", SPEC_F_model_sequence_parallel,
                   "sequence_parallel=true with tensor_model_parallel_size=1 has nothing to split; Megatron "
                   "turns it off"),
            "drop model.sequence_parallel, or raise model.tensor_model_parallel_size");
  s->model.sequence_parallel = false;
}

void validate_normalize(VCtx *v) {
  normalize_modules(v);
  normalize_graph_modules(v);
  normalize_sequence_parallel(v);
}

int validate_spec(const Spec *in, Spec *out, DiagList *diags) {
  if (out != in) *out = *in;
  int before = diag_count(diags, DIAG_ERROR);
  /* When out == in, the "as loaded" view must be a copy taken before normalization. */
  Spec *orig = NULL;
  Spec copy;
  if (out == in) {
    copy = *in;
    orig = &copy;
  }
  VCtx v = {.in = orig ? orig : in, .s = out, .d = diags};
  validate_normalize(&v);
  /* sizes first: every later rule and stage multiplies them, which is meaningless once one overflows */
  if (validate_sizes(&v) > 0) return diag_count(diags, DIAG_ERROR) - before;
  validate_model(&v);
  validate_parallel(&v);
  validate_recompute(&v);
  validate_graphs(&v);
  return diag_count(diags, DIAG_ERROR) - before;
}
