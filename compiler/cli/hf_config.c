/* hf_config.c — a Hugging Face Llama config.json held against the recipe (hf_config.h). */
#include "cli/hf_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/json_read.h"
#include "ops/ops.h"
#include "runtime/safe_file.h"

enum { HF_CONFIG_MAX_BYTES = 1 << 20 };

/* The file's text (NUL-terminated, malloc'd), or NULL with err: a regular file of at most 1 MiB,
 * opened as the runtime opens the files it reads (never blocking on a FIFO or a device). */
static char *read_small(const char *path, size_t *n, char *err, size_t nerr) {
  uint64_t size = 0;
  FILE *f = rt_open_regular(path, RT_FOLLOW, HF_CONFIG_MAX_BYTES, &size, err, nerr);
  if (!f) return NULL;
  char *text = malloc((size_t)size + 1);
  if (!text)
    snprintf(err, nerr, "out of memory");
  else if (fread(text, 1, (size_t)size, f) != (size_t)size) {
    snprintf(err, nerr, "cannot read %s", path);
    free(text), text = NULL;
  } else
    text[size] = 0, *n = (size_t)size;
  fclose(f);
  return text;
}

int hf_json_file(const char *path, char **text, JsonSpan *root, char *err, size_t nerr) {
  size_t n = 0;
  if (!(*text = read_small(path, &n, err, nerr))) return -1;
  if (json_value(*text, n, root) != 0 || !json_is_object(*root)) {
    free(*text), *text = NULL;
    return snprintf(err, nerr, "%s is not a JSON object", path), -1;
  }
  return 0;
}

/* One config key against one recipe value: the key's default when absent (HF's LlamaConfig). */
typedef struct {
  const char *key;
  int field;   /* the recipe field it must equal (SPEC_F_*), -1 a fixed expectation */
  double want; /* the recipe's value (numbers and booleans as 0/1) */
  double dflt; /* HF's default; NAN: required */
  bool is_bool;
} Expect;

/* Key x->key of the object `obj` (named `prefix` in messages: "" or "rope_scaling.") against x. */
static int check_number(const char *path, JsonSpan obj, const char *prefix, const Expect *x, const Spec *s,
                        char *err, size_t nerr) {
  JsonSpan v;
  double got = x->dflt;
  bool b;
  int rc = json_member(obj, x->key, &v);
  if (rc < 0) return snprintf(err, nerr, "%s is malformed JSON", path), -1;
  if (rc == 1 && (x->is_bool ? json_bool(v, &b) : json_number(v, &got)) != 0)
    return snprintf(err, nerr, "%s: %s%s is not a %s", path, prefix, x->key,
                    x->is_bool ? "boolean" : "number"),
           -1;
  if (rc == 1 && x->is_bool) got = b;
  if (rc == 0 && isnan(x->dflt)) return snprintf(err, nerr, "%s has no %s%s", path, prefix, x->key), -1;
  if (got == x->want || fabs(got - x->want) <= 1e-12 * fabs(x->want)) return 0;
  char g[32], w[32];
  if (x->is_bool)
    snprintf(g, sizeof g, "%s", got ? "true" : "false"),
        snprintf(w, sizeof w, "%s", x->want ? "true" : "false");
  else
    snprintf(g, sizeof g, "%.10g", got), snprintf(w, sizeof w, "%.10g", x->want);
  if (x->field < 0) /* a fixed expectation: the biases stepc's Llama has not, Megatron's scaling constants */
    return snprintf(err, nerr,
                    "%s: %s%s is %s; stepc's Llama has %s, so the import would train another model", path,
                    prefix, x->key, g, w),
           -1;
  const char *where = s->where[x->field][0] ? s->where[x->field] : "its default";
  return snprintf(err, nerr,
                  "%s: %s%s is %s where the recipe's %s is %s (%s): the import would train another model; "
                  "set %s=%s",
                  path, prefix, x->key, g, spec_fields[x->field].path, w, where, spec_fields[x->field].path,
                  g),
         -1;
}

/* rope_scaling: absent or null without model.rope_scaling; with it, Llama 3's ("rope_type":
 * "llama3", or the older "type") with the recipe's factor and Megatron's fixed low_freq_factor,
 * high_freq_factor and original_max_position_embeddings (ops.h ROPE_LLAMA3_*). */
static int check_rope_scaling(const char *path, JsonSpan root, const Spec *s, char *err, size_t nerr) {
  JsonSpan rs, v;
  const SpecModel *m = &s->model;
  const char *where =
      s->where[SPEC_F_model_rope_scaling][0] ? s->where[SPEC_F_model_rope_scaling] : "its default";
  int rc = json_member(root, "rope_scaling", &rs);
  if (rc < 0) return snprintf(err, nerr, "%s is malformed JSON", path), -1;
  if (rc == 0 || json_is_null(rs)) {
    if (!m->rope_scaling) return 0;
    return snprintf(err, nerr,
                    "%s: rope_scaling is null where the recipe's model.rope_scaling is true (%s): the import "
                    "would "
                    "train with other RoPE frequencies than the model was trained with; set "
                    "model.rope_scaling=false",
                    path, where),
           -1;
  }
  if (!json_is_object(rs)) return snprintf(err, nerr, "%s: rope_scaling is not an object", path), -1;
  char type[32] = "";
  if ((rc = json_member(rs, "rope_type", &v)) == 0) rc = json_member(rs, "type", &v);
  if (rc < 0 || (rc == 1 && json_string(v, type, sizeof type) != 0))
    return snprintf(err, nerr, "%s: rope_scaling.rope_type is not a short string", path), -1;
  if (strcmp(type, "llama3"))
    return snprintf(
               err, nerr,
               "%s: rope_scaling.rope_type is \"%s\"; stepc's RoPE scaling (model.rope_scaling) is Llama 3's "
               "(\"llama3\") only",
               path, type),
           -1;
  if (!m->rope_scaling) {
    double f = NAN;
    if (json_member(rs, "factor", &v) == 1) json_number(v, &f);
    return snprintf(err, nerr,
                    "%s: rope_scaling is llama3 with factor %.10g where the recipe's model.rope_scaling is "
                    "false (%s): "
                    "the import would train with other RoPE frequencies than the model was trained with; set "
                    "model.rope_scaling=true model.rope_scaling_factor=%.10g",
                    path, f, where, f),
           -1;
  }
  const Expect ex[] = {
      {"factor", SPEC_F_model_rope_scaling_factor, m->rope_scaling_factor, NAN, false},
      {"low_freq_factor", -1, ROPE_LLAMA3_LOW_FREQ_FACTOR, NAN, false},
      {"high_freq_factor", -1, ROPE_LLAMA3_HIGH_FREQ_FACTOR, NAN, false},
      {"original_max_position_embeddings", -1, ROPE_LLAMA3_ORIGINAL_MAX_POS, NAN, false},
  };
  rc = 0;
  for (size_t i = 0; i < sizeof ex / sizeof ex[0] && rc == 0; i++)
    rc = check_number(path, rs, "rope_scaling.", &ex[i], s, err, nerr);
  return rc;
}

static int check_strings(const char *path, JsonSpan root, char *err, size_t nerr) {
  const struct {
    const char *key, *want, *dflt;
  } str[] = {{"model_type", "llama", NULL}, {"hidden_act", "silu", "silu"}};
  for (size_t i = 0; i < sizeof str / sizeof str[0]; i++) {
    JsonSpan v;
    char got[64];
    int rc = json_member(root, str[i].key, &v);
    if (rc < 0) return snprintf(err, nerr, "%s is malformed JSON", path), -1;
    if (rc == 0 && !str[i].dflt) return snprintf(err, nerr, "%s has no %s", path, str[i].key), -1;
    if (rc == 1 && json_string(v, got, sizeof got) != 0)
      return snprintf(err, nerr, "%s: %s is not a string", path, str[i].key), -1;
    if (strcmp(rc == 1 ? got : str[i].dflt, str[i].want))
      return snprintf(err, nerr, "%s: %s is \"%s\"; stepc reads %s \"%s\" only", path, str[i].key, got,
                      str[i].key, str[i].want),
             -1;
  }
  return 0;
}

int hf_config_check(const Spec *s, const char *dir, char *err, size_t nerr) {
  char path[1100];
  snprintf(path, sizeof path, "%s/config.json", dir);
  char *text;
  JsonSpan root;
  if (hf_json_file(path, &text, &root, err, nerr) != 0) return -1;
  const SpecModel *m = &s->model;
  double heads = (double)m->num_attention_heads;
  const Expect ex[] = {
      {"hidden_size", SPEC_F_model_hidden_size, (double)m->hidden_size, NAN, false},
      {"intermediate_size", SPEC_F_model_ffn_hidden_size, (double)spec_ffn_hidden_size(s), NAN, false},
      {"num_hidden_layers", SPEC_F_model_num_layers, (double)m->num_layers, NAN, false},
      {"num_attention_heads", SPEC_F_model_num_attention_heads, heads, NAN, false},
      {"num_key_value_heads", SPEC_F_model_num_query_groups, (double)spec_num_query_groups(s), heads, false},
      {"head_dim", SPEC_F_model_kv_channels, (double)spec_kv_channels(s), (double)m->hidden_size / heads,
       false},
      {"vocab_size", SPEC_F_model_vocab_size, (double)m->vocab_size, NAN, false},
      {"rms_norm_eps", SPEC_F_model_layernorm_epsilon, m->layernorm_epsilon, 1e-6, false},
      {"rope_theta", SPEC_F_model_rotary_base, m->rotary_base, 10000, false},
      {"tie_word_embeddings", SPEC_F_model_share_embeddings_and_output_weights,
       m->share_embeddings_and_output_weights, 0, true},
      {"attention_bias", -1, 0, 0, true},
      {"mlp_bias", -1, 0, 0, true},
  };
  int rc = check_strings(path, root, err, nerr);
  for (size_t i = 0; i < sizeof ex / sizeof ex[0] && rc == 0; i++)
    rc = check_number(path, root, "", &ex[i], s, err, nerr);
  if (rc == 0) rc = check_rope_scaling(path, root, s, err, nerr);
  free(text);
  return rc;
}
