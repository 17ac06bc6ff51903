/* hf_config.h — a Hugging Face Llama directory's config.json against the recipe, so that `stepc
 * import` never loads weights into another model than they were trained for: every architecture
 * key stepc's Llama depends on must equal the recipe's field (model_type llama, sizes, heads, KV
 * heads, head_dim, vocabulary, rms_norm_eps, rope_theta, tie_word_embeddings), and what stepc's
 * Llama lacks must be absent (hidden_act other than silu, attention_bias, mlp_bias), rope_scaling
 * Llama 3's with the recipe's factor or absent as the recipe says (model.rope_scaling).
 * An absent key takes HF LlamaConfig's default; a key without one is required. */
#ifndef STEPC_HF_CONFIG_H
#define STEPC_HF_CONFIG_H

#include <stddef.h>

#include "cli/json_read.h"
#include "frontend/spec.h"

/* 0, or -1 with err naming the file, the key, both values and the recipe field's location. */
int hf_config_check(const Spec *s, const char *dir, char *err, size_t nerr);

/* A small JSON file (≤ 1 MiB, a regular file) as an object: *text malloc'd (the caller frees it),
 * root its span. 0, or -1 with err. */
int hf_json_file(const char *path, char **text, JsonSpan *root, char *err, size_t nerr);

/* A stepc Lua recipe for the Llama of DIR/config.json (hf_recipe.c) into out (NUL-terminated):
 * the architecture fields hf_config_check reads, LlamaConfig's defaults where a key is absent,
 * Llama 3's rope_scaling as model.rope_scaling; a config stepc's Llama cannot express is refused
 * as the import refuses it (the derived recipe passes hf_config_check). 0, or -1 with err. */
int hf_config_recipe(const char *dir, char *out, size_t nout, char *err, size_t nerr);

#endif
