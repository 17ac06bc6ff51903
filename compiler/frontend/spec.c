/* spec.c — the field table generated from spec.h, lookups, derived sizes, the reference page. */
#include "frontend/spec.h"

#include <stdio.h>
#include <string.h>

const char *const spec_section_names[SPEC_NSECTIONS] = {"model", "train", "optimizer", "ddp", "data"};

#define SPEC_ROW(sec, secname, structname, name, type, def, flags, choices, doc)                             \
  {sec,           #name, secname "." #name,                                                                  \
   SPEC_T_##type, def,   SPEC_FLAG_##flags,                                                                  \
   choices,       doc,   offsetof(Spec, structname) + offsetof(Spec##structname##_t, name)},
#define SPEC_FLAG_MC true
#define SPEC_FLAG_SC false

/* offsetof needs type names; alias the section structs. */
typedef SpecModel Specmodel_t;
typedef SpecTrain Spectrain_t;
typedef SpecOptimizer Specoptimizer_t;
typedef SpecDdp Specddp_t;
typedef SpecData Specdata_t;

#define ROW_MODEL(name, ...) SPEC_ROW(SPEC_SEC_MODEL, "model", model, name, __VA_ARGS__)
#define ROW_TRAIN(name, ...) SPEC_ROW(SPEC_SEC_TRAIN, "train", train, name, __VA_ARGS__)
#define ROW_OPTIMIZER(name, ...) SPEC_ROW(SPEC_SEC_OPTIMIZER, "optimizer", optimizer, name, __VA_ARGS__)
#define ROW_DDP(name, ...) SPEC_ROW(SPEC_SEC_DDP, "ddp", ddp, name, __VA_ARGS__)
#define ROW_DATA(name, ...) SPEC_ROW(SPEC_SEC_DATA, "data", data, name, __VA_ARGS__)

const SpecField spec_fields[SPEC_NFIELDS] = {SPEC_MODEL_FIELDS(ROW_MODEL) SPEC_TRAIN_FIELDS(
    ROW_TRAIN) SPEC_OPTIMIZER_FIELDS(ROW_OPTIMIZER) SPEC_DDP_FIELDS(ROW_DDP) SPEC_DATA_FIELDS(ROW_DATA)};

int spec_field_find_in(SpecSection sec, const char *name) {
  for (int i = 0; i < SPEC_NFIELDS; i++)
    if (spec_fields[i].section == sec && strcmp(spec_fields[i].name, name) == 0) return i;
  return -1;
}

size_t spec_edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return 64;
  size_t prev[64], cur[64];
  for (size_t j = 0; j <= lb; j++)
    prev[j] = j;
  for (size_t i = 1; i <= la; i++) {
    cur[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
      size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
      cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
    memcpy(prev, cur, sizeof(size_t) * (lb + 1));
  }
  return prev[lb];
}

const char *spec_suggest(SpecSection sec, const char *name) {
  const char *best = NULL;
  size_t best_d = (size_t)-1;
  for (int i = 0; i < SPEC_NFIELDS; i++) {
    if (spec_fields[i].section != sec) continue;
    size_t d = spec_edit_distance(name, spec_fields[i].name);
    if (d < best_d) best_d = d, best = spec_fields[i].name;
  }
  size_t len = strlen(name);
  size_t limit = len < 6 ? 2 : len / 3 + 1;
  return best_d <= limit ? best : NULL;
}

void *spec_field_ptr(Spec *s, int id) { return (char *)s + spec_fields[id].offset; }
const void *spec_field_cptr(const Spec *s, int id) { return (const char *)s + spec_fields[id].offset; }

bool spec_choice_ok(const SpecField *f, const char *v) {
  if (!f->choices[0]) return true;
  size_t n = strlen(v);
  for (const char *p = f->choices; *p;) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && strncmp(p, v, n) == 0) return true;
    if (!bar) break;
    p = bar + 1;
  }
  return false;
}

bool spec_list_has(const SpecList *l, const char *item) {
  for (int i = 0; i < l->n; i++)
    if (strcmp(l->items[i], item) == 0) return true;
  return false;
}

int64_t spec_num_query_groups(const Spec *s) {
  return s->present[SPEC_F_model_num_query_groups] ? s->model.num_query_groups : s->model.num_attention_heads;
}

int64_t spec_kv_channels(const Spec *s) {
  if (s->present[SPEC_F_model_kv_channels]) return s->model.kv_channels;
  return s->model.num_attention_heads > 0 ? s->model.hidden_size / s->model.num_attention_heads : 0;
}

int64_t spec_ffn_hidden_size(const Spec *s) {
  return s->present[SPEC_F_model_ffn_hidden_size] ? s->model.ffn_hidden_size : 4 * s->model.hidden_size;
}

int64_t spec_moe_ffn_hidden_size(const Spec *s) {
  return s->present[SPEC_F_model_moe_ffn_hidden_size] ? s->model.moe_ffn_hidden_size
                                                      : spec_ffn_hidden_size(s);
}

bool spec_is_moe(const Spec *s) {
  return s->present[SPEC_F_model_num_moe_experts] && s->model.num_moe_experts > 1;
}

bool spec_layer_is_moe(const Spec *s, int layer) {
  if (!spec_is_moe(s)) return false;
  if (s->present[SPEC_F_model_hybrid_override_pattern]) {
    const char *p = s->model.hybrid_override_pattern;
    return layer >= 0 && (size_t)layer < strlen(p) && p[layer] == 'E';
  }
  const SpecFreq *f = &s->model.moe_layer_freq;
  if (f->every > 0) return layer % f->every == 0;
  return layer >= 0 && layer < f->n && f->pattern[layer];
}

bool spec_fp8_delayed(const Spec *s) {
  return s->present[SPEC_F_model_fp8] && strcmp(s->model.fp8_recipe, "delayed") == 0;
}

bool spec_fp8_executes(const Spec *s) {
  return strcmp(s->model.fp8_recipe, "tensorwise") == 0 || strcmp(s->model.fp8_recipe, "delayed") == 0;
}

bool spec_layer_fp8(const Spec *s, int layer) {
  const SpecModel *m = &s->model;
  if (!s->present[SPEC_F_model_fp8] || !spec_fp8_executes(s) || layer < 0 || layer >= m->num_layers)
    return false;
  if (!m->first_last_layers_bf16) return true;
  return layer >= m->num_layers_at_start_in_bf16 && layer < m->num_layers - m->num_layers_at_end_in_bf16;
}

int64_t spec_data_parallel_size(const Spec *s) {
  int64_t mp = s->model.tensor_model_parallel_size * s->model.pipeline_model_parallel_size *
               s->model.context_parallel_size;
  return mp > 0 ? s->train.world_size / mp : 0;
}

int64_t spec_global_batch_size(const Spec *s) {
  if (s->present[SPEC_F_train_global_batch_size]) return s->train.global_batch_size;
  return s->train.micro_batch_size * spec_data_parallel_size(s);
}

bool spec_lowers_tp(const Spec *s) {
  return s->per_rank && (s->model.tensor_model_parallel_size > 1 || s->train.force_parallel_lowering);
}

bool spec_one_rank_step(const Spec *s) {
  return s->model.tensor_model_parallel_size <= 1 && s->model.expert_model_parallel_size <= 1 &&
         !s->train.force_parallel_lowering;
}

bool spec_lowers_ep(const Spec *s) {
  return s->per_rank && spec_is_moe(s) &&
         (s->model.expert_model_parallel_size > 1 || s->train.force_parallel_lowering);
}

bool spec_megatron_job(const Spec *s) {
  return s->present[SPEC_F_train_megatron_job] ? s->train.megatron_job : s->train.world_size > 1;
}

void spec_imply(Spec *s) {
  /* Megatron's local layer spec builds its own DotProductAttention whatever the backend says
   * (models/gpt/gpt_layer_specs.py, get_gpt_layer_local_submodules): a Megatron job with
   * transformer_impl=local runs unfused attention: "auto" (the default: the best the job has) means
   * that there; flash or fused is refused (STEPC-54) */
  int ab = SPEC_F_model_attention_backend;
  if (spec_megatron_job(s) && strcmp(s->model.transformer_impl, "local") == 0 &&
      strcmp(s->model.attention_backend, "auto") == 0) {
    snprintf(s->model.attention_backend, sizeof s->model.attention_backend, "unfused");
    snprintf(s->where[ab], sizeof s->where[ab], "implied by model.transformer_impl=local in a Megatron job");
  }
}

int64_t spec_output_layer_chunks(const Spec *s) {
  if (s->present[SPEC_F_model_output_layer_chunks]) return s->model.output_layer_chunks;
  if (spec_megatron_job(s)) return 1; /* the per-rank report models Megatron's, which does not chunk */
  if (s->train.force_parallel_lowering) return 1; /* the tensor-parallel output layer, which runs whole */
  int64_t tokens = s->train.micro_batch_size * s->model.seq_length, bytes = s->model.bf16 ? 2 : 4;
  if (tokens <= 0 || s->model.vocab_size <= 0 || s->model.vocab_size > SPEC_LOGITS_CHUNK_BYTES / bytes)
    return 1;
  int64_t rows = SPEC_LOGITS_CHUNK_BYTES / (bytes * s->model.vocab_size); /* rows a chunk may have */
  int64_t c0 = (tokens + rows - 1) / rows; /* below it a chunk has too many rows */
  for (int64_t c = c0; c <= tokens && c - c0 < ((int64_t)1 << 20); c++)
    if (tokens % c == 0) return c;
  return tokens; /* one row a chunk */
}

bool spec_te_version(const Spec *s, int *major, int *minor, int *patch) {
  const char *v = s->model.transformer_engine_version;
  int a = -1, b = -1, c = 0, used = 0;
  if (sscanf(v, "%d.%d%n", &a, &b, &used) != 2 || a < 0 || b < 0) return false;
  if (v[used] == '.') {
    int more = 0;
    if (sscanf(v + used + 1, "%d%n", &c, &more) != 1 || c < 0) return false;
    used += 1 + more;
  }
  if (v[used] != 0) return false;
  *major = a, *minor = b, *patch = c;
  return true;
}

bool spec_te_at_least(const Spec *s, int major, int minor) {
  int a, b, c;
  if (!spec_te_version(s, &a, &b, &c)) return true;
  return a != major ? a > major : b >= minor;
}

void spec_value_str(const Spec *s, int id, char *buf, size_t n) {
  const SpecField *f = &spec_fields[id];
  const void *p = spec_field_cptr(s, id);
  if (!s->present[id]) {
    snprintf(buf, n, "null");
    return;
  }
  switch (f->type) {
  case SPEC_T_INT: snprintf(buf, n, "%lld", (long long)*(const int64_t *)p); break;
  case SPEC_T_NUM: snprintf(buf, n, "%.17g", *(const double *)p); break;
  case SPEC_T_BOOL: snprintf(buf, n, "%s", *(const bool *)p ? "true" : "false"); break;
  case SPEC_T_STR: snprintf(buf, n, "%s", (const char *)p); break;
  case SPEC_T_LIST: {
    const SpecList *l = p;
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < l->n && used < n; i++)
      used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? "," : "", l->items[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
    break;
  }
  case SPEC_T_FREQ: {
    const SpecFreq *fr = p;
    if (fr->every > 0) {
      snprintf(buf, n, "%lld", (long long)fr->every);
      break;
    }
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < fr->n && used < n; i++)
      used += (size_t)snprintf(buf + used, n - used, "%s%d", i ? "," : "", fr->pattern[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
    break;
  }
  }
}

static const char *type_name(SpecType t) {
  static const char *const names[] = {"int",    "number",          "bool",
                                      "string", "list of strings", "int or list of 0/1"};
  return names[t];
}

void spec_write_reference(void *out_) {
  FILE *out = out_;
  fprintf(out, "# Recipe reference\n\n"
               "Generated by `stepc fields --markdown` from compiler/frontend/spec.h; a test keeps this page "
               "equal to the code.\n\n"
               "A recipe is a Lua file that returns `{ model = {...}, train = {...}, optimizer = "
               "{...}, data = {...} }`. Every field below may also be set on the command line as "
               "`section.field=value`. `null` is Megatron's `None`: in Lua, leave the field out or "
               "assign `nil`. *Megatron* says whether the name is Megatron Core's "
               "(`TransformerConfig`, `ModelParallelConfig`, GPTModel/MambaModel arguments, "
               "training arguments); fields marked *stepc* are stepc's own.\n");
  for (int sec = 0; sec < SPEC_NSECTIONS; sec++) {
    fprintf(out, "\n## %s\n\n| field | type | default | Megatron | description |\n|---|---|---|---|---|\n",
            spec_section_names[sec]);
    for (int i = 0; i < SPEC_NFIELDS; i++) {
      const SpecField *f = &spec_fields[i];
      if ((int)f->section != sec) continue;
      fprintf(out, "| `%s` | %s", f->name, type_name(f->type));
      if (f->choices[0]) {
        fprintf(out, ": ");
        for (const char *c = f->choices; *c; c++)
          fputs(*c == '|' ? ", " : (char[]){*c, 0}, out);
      }
      fprintf(out, " | `%s` | %s | %s |\n", f->def, f->megatron ? "yes" : "stepc", f->doc);
    }
  }
  /* no field sets it: what every recipe's loss is (ir/ops/loss.c) */
  fprintf(out, "\n## The loss and its masks\n\n"
               "The training loss is the cross entropy of the next token, normalised as Megatron does: the "
               "sum of the kept tokens' losses over the whole global batch (every micro-batch of the step, "
               "every data-parallel rank) divided by the number of kept tokens in it. A target outside "
               "`[0, vocab_size)` (`-100`, PyTorch's `ignore_index`) masks its token: it adds nothing to the "
               "loss or the gradients and is not counted. With no masked target that is the plain mean "
               "over every token; with half the targets masked it is the mean over the kept half, what "
               "`torch.nn.functional.cross_entropy(..., ignore_index=-100)` gives over the global batch, and "
               "the gradients (and so the global norm that `clip_grad` clips) are those of that mean. The "
               "mock and `data.path` sources mask nothing; masks come with the batches a trainer binds "
               "(docs/c-api.md, docs/python.md). A step whose global batch masks every target is refused "
               "(`STEPC_ERR_ARGUMENT`; nothing changes). The MoE load-balancing loss (`moe_aux_loss_coeff`) "
               "is added to each micro-batch's loss as before. ir/ops/loss.c has the definition.\n");
}
