/* hf_recipe.c — a stepc Lua recipe derived from a Hugging Face Llama config.json (hf_config.h),
 * for `stepc import --print-recipe HF_DIR`. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/hf_config.h"

/* Number key `key` of obj, or dflt when absent (NAN: required); 0, or -1 with err. */
static int num(const char *path, JsonSpan obj, const char *key, double dflt, double *out, char *err,
               size_t nerr) {
  JsonSpan v;
  bool b;
  int rc = json_member(obj, key, &v);
  if (rc < 0) return snprintf(err, nerr, "%s is malformed JSON", path), -1;
  if (rc == 0 || json_is_null(v)) {
    if (isnan(dflt)) return snprintf(err, nerr, "%s has no %s", path, key), -1;
    return *out = dflt, 0;
  }
  if (json_bool(v, &b) == 0) return *out = b, 0;
  if (json_number(v, out) != 0) return snprintf(err, nerr, "%s: %s is not a number", path, key), -1;
  return 0;
}

static int put(char *buf, size_t n, size_t *at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int put(char *buf, size_t n, size_t *at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(buf + *at, *at < n ? n - *at : 0, fmt, ap);
  va_end(ap);
  if (k < 0 || *at + (size_t)k >= n) return -1;
  *at += (size_t)k;
  return 0;
}

int hf_config_recipe(const char *dir, char *out, size_t nout, char *err, size_t nerr) {
  char path[1100];
  snprintf(path, sizeof path, "%s/config.json", dir);
  char *text;
  JsonSpan root, rs;
  if (hf_json_file(path, &text, &root, err, nerr) != 0) return -1;
  /* LlamaConfig's defaults where a key is absent, as hf_config_check reads them */
  double L = 0, h = 0, a = 0, g = 0, d = 0, f = 0, V = 0, eps = 0, theta = 0, tie = 0, maxpos = 0, factor = 0,
         adrop = 0;
  int rc = num(path, root, "num_hidden_layers", NAN, &L, err, nerr) ||
                   num(path, root, "hidden_size", NAN, &h, err, nerr) ||
                   num(path, root, "num_attention_heads", NAN, &a, err, nerr) ||
                   num(path, root, "intermediate_size", NAN, &f, err, nerr) ||
                   num(path, root, "vocab_size", NAN, &V, err, nerr) ||
                   num(path, root, "num_key_value_heads", a, &g, err, nerr) ||
                   num(path, root, "head_dim", a > 0 ? floor(h / a) : 0, &d, err, nerr) ||
                   num(path, root, "rms_norm_eps", 1e-6, &eps, err, nerr) ||
                   num(path, root, "rope_theta", 10000, &theta, err, nerr) ||
                   num(path, root, "tie_word_embeddings", 0, &tie, err, nerr) ||
                   num(path, root, "max_position_embeddings", 2048, &maxpos, err, nerr) ||
                   num(path, root, "attention_dropout", 0, &adrop, err, nerr)
               ? -1
               : 0;
  int64_t sizes[] = {(int64_t)L, (int64_t)h, (int64_t)a, (int64_t)g, (int64_t)d, (int64_t)f, (int64_t)V};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes && !rc; i++)
    if (sizes[i] <= 0 || sizes[i] > (1LL << 40)) {
      snprintf(err, nerr, "%s: a size is not a positive whole number", path);
      rc = -1;
    }
  if (!rc && json_member(root, "rope_scaling", &rs) == 1 && json_is_object(rs) &&
      num(path, rs, "factor", NAN, &factor, err, nerr) != 0)
    rc = -1;
  free(text);
  if (rc) return -1;
  /* the derived Spec must pass the import's own check: what stepc's Llama cannot express (another
   * activation, biases, another scaling) is refused here as there */
  Spec *s = calloc(1, sizeof *s);
  if (!s) return snprintf(err, nerr, "out of memory"), -1;
  SpecModel *m = &s->model;
  m->num_layers = (int64_t)L, m->hidden_size = (int64_t)h, m->num_attention_heads = (int64_t)a;
  m->num_query_groups = (int64_t)g, m->kv_channels = (int64_t)d, m->ffn_hidden_size = (int64_t)f;
  m->vocab_size = (int64_t)V, m->layernorm_epsilon = eps, m->rotary_base = theta;
  m->share_embeddings_and_output_weights = tie != 0;
  m->rope_scaling = factor > 0, m->rope_scaling_factor = factor > 0 ? factor : 8.0;
  s->present[SPEC_F_model_num_query_groups] = s->present[SPEC_F_model_kv_channels] =
      s->present[SPEC_F_model_ffn_hidden_size] = true;
  rc = hf_config_check(s, dir, err, nerr);
  free(s);
  if (rc) return -1;
  /* the sequence length is a training choice, not the model's: the context it was trained for,
   * at most 4096 (a longer one is an override away) */
  int64_t T = maxpos >= 1 && maxpos < 4096 ? (int64_t)maxpos : 4096;
  size_t at = 0;
  rc = put(
      out, nout, &at,
      "-- Derived by `stepc import --print-recipe %s` from its config.json (Hugging Face Llama):\n"
      "-- `stepc import` with this recipe passes the config check. seq_length and the train / optimizer\n"
      "-- sections are training choices, not the checkpoint's: edit them or override them.\n"
      "return {\n  model = {\n"
      "    num_layers = %lld,\n    hidden_size = %lld,\n    num_attention_heads = %lld,\n"
      "    num_query_groups = %lld,\n    kv_channels = %lld,\n    ffn_hidden_size = %lld,\n"
      "    normalization = \"RMSNorm\",\n    layernorm_epsilon = %.17g,\n    gated_linear_unit = true,\n"
      "    activation_func = \"silu\",\n    add_bias_linear = false,\n    position_embedding_type = "
      "\"rope\",\n"
      "    rotary_base = %.17g,\n",
      dir, (long long)L, (long long)h, (long long)a, (long long)g, (long long)d, (long long)f, eps, theta);
  if (!rc && factor > 0)
    rc = put(out, nout, &at, "    rope_scaling = true,\n    rope_scaling_factor = %.17g,\n", factor);
  if (!rc)
    rc = put(out, nout, &at,
             "    attention_dropout = %.17g,\n    hidden_dropout = 0.0,\n    "
             "share_embeddings_and_output_weights = %s,\n"
             "    vocab_size = %lld,\n    seq_length = %lld,\n    bf16 = true,\n  },\n"
             "  train = { micro_batch_size = 1, global_batch_size = 8, train_iters = 100, seed = 1234 },\n"
             "  optimizer = { lr = 1e-5, min_lr = 1e-6, lr_warmup_iters = 10, weight_decay = 0.1,\n"
             "                adam_beta1 = 0.9, adam_beta2 = 0.95, adam_eps = 1e-8, clip_grad = 1.0 },\n"
             "  data = {}, -- mock tokens from train.seed; data.path=FILE trains on a text file instead\n}\n",
             adrop, tie != 0 ? "true" : "false", (long long)V, (long long)T);
  if (rc) return snprintf(err, nerr, "the recipe does not fit %zu bytes", nout), -1;
  return 0;
}
