/* export_hf.h — stepc's parameters to and from a Hugging Face Llama directory (config.json +
 * model.safetensors with HF's names and layout), for Llama-style recipes: RMSNorm, SwiGLU, RoPE
 * (rotate_half, HF's own convention, so no permutation), no biases, dense MLP.
 *
 * The layouts differ only in two fused weights: stepc's linear_qkv is [q | k | v] rows (all query
 * heads, then the key heads, then the value heads) and HF has q_proj, k_proj, v_proj; stepc's
 * linear_fc1 is [gate | up] rows and HF has gate_proj and up_proj. Names map one to one otherwise
 * (pre_mlp_layernorm is post_attention_layernorm). Tensors keep their dtype. */
#ifndef STEPC_EXPORT_HF_H
#define STEPC_EXPORT_HF_H

#include <stddef.h>

#include "frontend/spec.h"

/* src: a stepc parameters file (stepc_save_params) or a checkpoint directory (its
 * model.safetensors); dir: created (mkdir -p), config.json and model.safetensors written. 0, or -1
 * with err. */
int export_hf(const Spec *s, const char *src, const char *dir, char *err, size_t nerr);
/* dir: an HF Llama directory (its model.safetensors); out: a stepc parameters file that
 * stepc_load_params takes. The recipe's shapes must be the directory's. 0, or -1 with err. */
int import_hf(const Spec *s, const char *dir, const char *out, char *err, size_t nerr);

#endif
