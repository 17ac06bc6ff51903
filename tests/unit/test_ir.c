/* test_ir.c — graph building API: tensors, ops, tags stamped from the context, errors, the
 * trivial memory plan. Lowered-model tags are tested in test_tags.c. */
#include <stdio.h>
#include <string.h>

#include "ir.h"

static int failures;
#define CHECK(c)                                                                                   \
  do {                                                                                             \
    if (!(c)) {                                                                                    \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c);                        \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

int main(void) {
  Graph *g = graph_new();
  int64_t sh[3] = {2, 8, 16};
  int x = graph_tensor(g, "x", DT_BF16, ROLE_ACT, 3, sh);
  int y = graph_tensor(g, "y", DT_BF16, ROLE_ACT, 3, sh);
  CHECK(x == 0 && y == 1);

  graph_set_layer(g, 2);
  graph_module(g, "layers.%d.self_attn_bda", 2);
  graph_set_scopes(g, IR_SCOPE_LAYER | IR_SCOPE_ATTN);
  graph_set_labels(g, 0);
  int in[2] = {x, y}, out[1];
  int op = graph_op(g, OP_ADD, in, 2, NULL, out, NULL);
  CHECK(op == 0);
  CHECK(strcmp(g->t[out[0]].name, "layers.2.self_attn_bda.out") == 0);
  CHECK(g->t[out[0]].producer == op && g->t[out[0]].dtype == DT_BF16 && g->t[out[0]].shape[2] == 16);
  CHECK(g->op[op].tags.layer == 2 && g->op[op].tags.scopes == (IR_SCOPE_LAYER | IR_SCOPE_ATTN));
  CHECK(g->op[op].tags.phase == IR_PHASE_FORWARD && g->op[op].tags.fwd == -1);
  CHECK(graph_find_op(g, OP_ADD, "layers.2.self_attn_bda", IR_PHASE_FORWARD) == op);
  CHECK(graph_find_tensor(g, "layers.2.self_attn_bda.out") == out[0]);

  char buf[128];
  ir_scopes_str(IR_SCOPE_LAYER | IR_SCOPE_MLP, buf, sizeof buf);
  CHECK(strcmp(buf, "{layer,mlp}") == 0);
  ir_labels_str(IR_LABEL_CORE_ATTN | IR_LABEL_LAYERNORM, buf, sizeof buf);
  CHECK(strcmp(buf, "{core_attn,layernorm}") == 0);
  CHECK(ir_label_from_name("mla_up_proj") == IR_LABEL_MLA_UP_PROJ && ir_label_from_name("nope") == 0);
  CHECK(ir_scope_from_name("moe_router") == IR_SCOPE_MOE_ROUTER);

  /* shape mismatch: an error message, no op, later building refused */
  int64_t sh2[3] = {2, 8, 8};
  int z = graph_tensor(g, "z", DT_BF16, ROLE_ACT, 3, sh2);
  int bad[2] = {x, z};
  int nop = g->nop;
  CHECK(graph_op(g, OP_ADD, bad, 2, NULL, NULL, NULL) == -1);
  CHECK(g->nop == nop && strstr(g->err, "differ in shape") != NULL);
  CHECK(graph_op(g, OP_ADD, in, 2, NULL, NULL, NULL) == -1);

  /* trivial plan: disjoint 64-byte aligned slots, fp32 storage on request */
  int64_t total = graph_plan_trivial(g, 4);
  CHECK(g->t[x].bytes == 2 * 8 * 16 * 4 && g->t[x].offset == 0);
  for (int i = 1; i < g->nt; i++) CHECK(g->t[i].offset % 64 == 0 && g->t[i].offset >= g->t[i - 1].offset + g->t[i - 1].bytes);
  CHECK(total >= g->t[g->nt - 1].offset + g->t[g->nt - 1].bytes);
  graph_plan_trivial(g, 0);
  CHECK(g->t[x].bytes == 2 * 8 * 16 * 2);
  CHECK(op_bytes(g, &g->op[op]) == 3 * 2 * 8 * 16 * 2);
  graph_free(g);

  /* STEPC-32's backstop: a shape whose element count leaves int64, or passes 2^40, is refused */
  g = graph_new();
  int64_t wrap[2] = {(int64_t)1 << 40, (int64_t)1 << 24}; /* 2^64: wraps to 0 unchecked */
  CHECK(graph_tensor(g, "wrap", DT_BF16, ROLE_ACT, 2, wrap) == -1 && strstr(g->err, "STEPC-32") != NULL);
  graph_free(g);
  g = graph_new();
  int64_t big[3] = {(int64_t)1 << 20, (int64_t)1 << 20, 2};
  CHECK(graph_tensor(g, "big", DT_BF16, ROLE_ACT, 3, big) == -1 && strstr(g->err, "2^40") != NULL);
  int64_t edge[2] = {(int64_t)1 << 20, (int64_t)1 << 20};
  graph_free(g);
  g = graph_new();
  CHECK(graph_tensor(g, "edge", DT_BF16, ROLE_ACT, 2, edge) == 0);
  graph_free(g);
  if (failures) return 1;
  printf("test_ir: ok\n");
  return 0;
}
