/* test_tags.c — the op tags of lowered dense models (what recompute regions and graph scopes are
 * built from): module paths, recompute labels (docs/megatron-rules.md §3.2) and graph scopes (§2.2),
 * on the forward ops and, inherited, on their backward ops. */
#include <stdio.h>
#include <string.h>

#include "frontend/frontend.h"
#include "lower/lower.h"
#include "validate/validate.h"

static int failures;
#define CHECK(c)                                                                                   \
  do {                                                                                             \
    if (!(c)) {                                                                                    \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c);                        \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static Graph *load(const char *path, const char *const *ov, int nov, bool step) {
  static Spec raw, spec;
  DiagList d;
  diag_init(&d);
  if (frontend_load(path, ov, nov, NULL, &raw, &d) != 0 || validate_spec(&raw, &spec, &d) != 0) {
    diag_print(&d, stderr);
    diag_free(&d);
    return NULL;
  }
  diag_free(&d);
  Graph *g = NULL;
  char err[256];
  int rc = step ? lower_step(&spec, &g, err, sizeof err) : lower_forward(&spec, &g, err, sizeof err);
  if (rc != LOWER_OK) fprintf(stderr, "%s: %s\n", path, err);
  return g;
}

static const Op *find(const Graph *g, OpKind k, const char *module, Phase ph) {
  int i = graph_find_op(g, k, module, ph);
  if (i < 0) fprintf(stderr, "no %s op in %s (%s)\n", op_name(k), module, phase_name(ph));
  return i >= 0 ? &g->op[i] : NULL;
}

int main(void) {
  const char *ov[] = {"model.num_layers=3"};
  Graph *g = load("tests/recipes/gpt3_tiny.lua", ov, 1, true);
  CHECK(g != NULL);
  if (!g) return 1;
  const uint32_t LA = IR_SCOPE_LAYER | IR_SCOPE_ATTN, LM = IR_SCOPE_LAYER | IR_SCOPE_MLP;

  const Op *o = find(g, OP_SOFTMAX, "layers.2.self_attention.core_attention", IR_PHASE_FORWARD);
  CHECK(o && o->tags.layer == 2 && o->tags.labels == IR_LABEL_CORE_ATTN && o->tags.scopes == LA);
  o = find(g, OP_ATTN_SCORES, "layers.1.self_attention.core_attention", IR_PHASE_FORWARD);
  CHECK(o && o->tags.labels == IR_LABEL_CORE_ATTN && o->tags.scopes == LA);
  o = find(g, OP_DROPOUT, "layers.1.self_attention.core_attention", IR_PHASE_FORWARD);
  CHECK(o && o->tags.labels == IR_LABEL_CORE_ATTN); /* attention dropout is inside core_attn */
  o = find(g, OP_LINEAR, "layers.2.self_attention.linear_proj", IR_PHASE_FORWARD);
  CHECK(o && o->tags.labels == 0 && o->tags.scopes == LA); /* linear_proj is outside core_attn */
  o = find(g, OP_LINEAR, "layers.2.self_attention.linear_qkv", IR_PHASE_FORWARD);
  CHECK(o && o->tags.labels == 0 && o->tags.scopes == LA);

  o = find(g, OP_LINEAR, "layers.0.mlp.linear_fc1", IR_PHASE_FORWARD);
  CHECK(o && o->tags.layer == 0 && o->tags.labels == IR_LABEL_MLP && o->tags.scopes == LM);
  o = find(g, OP_GELU, "layers.0.mlp.activation_func", IR_PHASE_FORWARD);
  CHECK(o && o->tags.labels == (IR_LABEL_MLP | IR_LABEL_MLP_ACT) && o->tags.scopes == LM);
  o = find(g, OP_LINEAR, "layers.0.mlp.linear_fc2", IR_PHASE_FORWARD);
  CHECK(o && o->tags.labels == IR_LABEL_MLP && o->tags.scopes == LM);
  o = find(g, OP_ADD, "layers.0.mlp_bda", IR_PHASE_FORWARD);
  CHECK(o && o->tags.labels == 0 && o->tags.scopes == LM);
  o = find(g, OP_ADD, "layers.0.self_attn_bda", IR_PHASE_FORWARD);
  CHECK(o && o->tags.labels == 0 && o->tags.scopes == LA);

  /* Megatron's TE spec fuses these two norms into linear_qkv / linear_fc1: `layernorm` does not
   * reach them (lower.c) */
  o = find(g, OP_LAYERNORM, "layers.1.input_layernorm", IR_PHASE_FORWARD);
  CHECK(o && o->tags.labels == 0 && o->tags.scopes == LA);
  o = find(g, OP_LAYERNORM, "layers.1.pre_mlp_layernorm", IR_PHASE_FORWARD);
  CHECK(o && o->tags.labels == 0 && o->tags.scopes == LM);

  o = find(g, OP_EMBED, "embedding.word_embeddings", IR_PHASE_FORWARD);
  CHECK(o && o->tags.layer == -1 && o->tags.scopes == 0 && o->tags.labels == 0);
  o = find(g, OP_LAYERNORM, "final_layernorm", IR_PHASE_FORWARD);
  CHECK(o && o->tags.layer == -1 && o->tags.scopes == 0);
  o = find(g, OP_CROSS_ENTROPY, "loss", IR_PHASE_FORWARD);
  CHECK(o && o->tags.layer == -1);

  /* backward ops inherit the tags and point at their forward op */
  o = find(g, OP_SOFTMAX_BWD, "layers.2.self_attention.core_attention", IR_PHASE_BACKWARD);
  CHECK(o && o->tags.labels == IR_LABEL_CORE_ATTN && o->tags.scopes == LA && o->tags.fwd >= 0 &&
        g->op[o->tags.fwd].kind == OP_SOFTMAX);
  /* the softmax backward reads the probabilities, not the scores */
  CHECK(o && strcmp(g->t[o->in[1]].name, "layers.2.self_attention.core_attention.probs") == 0);
  o = find(g, OP_LINEAR_WGRAD, "layers.0.mlp.linear_fc1", IR_PHASE_BACKWARD);
  CHECK(o && o->tags.labels == IR_LABEL_MLP && o->tags.scopes == LM);
  o = find(g, OP_ADAMW, "optimizer", IR_PHASE_OPTIMIZER);
  CHECK(o && o->tags.layer == -1);

  /* names say what tensors are */
  CHECK(graph_find_tensor(g, "layers.2.self_attention.linear_qkv.weight") >= 0);
  CHECK(graph_find_tensor(g, "layers.2.self_attention.linear_qkv.weight.main_grad") >= 0);
  CHECK(graph_find_tensor(g, "embedding.position_embeddings.weight") >= 0);
  CHECK(graph_find_tensor(g, "output_layer.weight") < 0); /* tied */
  graph_free(g);

  /* flash: the core attention is one op, inside core_attn; RoPE is outside it */
  g = load("models/tiny.lua", NULL, 0, false);
  CHECK(g != NULL);
  if (g) {
    o = find(g, OP_FLASH_ATTN, "layers.3.self_attention.core_attention", IR_PHASE_FORWARD);
    CHECK(o && o->tags.labels == IR_LABEL_CORE_ATTN && o->tags.scopes == LA);
    o = find(g, OP_ROPE, "layers.3.self_attention", IR_PHASE_FORWARD);
    CHECK(o && o->tags.labels == 0 && o->tags.scopes == LA);
    o = find(g, OP_SWIGLU, "layers.3.mlp.activation_func", IR_PHASE_FORWARD);
    CHECK(o && o->tags.labels == (IR_LABEL_MLP | IR_LABEL_MLP_ACT));
    CHECK(graph_find_tensor(g, "output_layer.weight") >= 0); /* untied */
    int n = 0;
    for (int i = 0; i < g->nop; i++) n += g->op[i].kind == OP_DROPOUT;
    CHECK(n == 0); /* tiny has no dropout */
    graph_free(g);
  }
  if (failures) return 1;
  printf("test_tags: ok\n");
  return 0;
}
