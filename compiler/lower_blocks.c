/* lower_blocks.c — building helpers shared by the MLA and MoE builders (see lower_blocks.h).
 * They mirror lower.c's own helpers, which are static there; the parameter names and inits are
 * the same so that both paths name weights alike. */
#include "lower_blocks.h"

#include <stdio.h>
#include <string.h>

void lb_tags(const LowerBlock *L, int l, uint32_t labels, uint32_t scopes, const char *sub) {
  graph_set_layer(L->g, l);
  graph_set_labels(L->g, labels);
  graph_set_scopes(L->g, scopes);
  graph_module(L->g, "layers.%d.%s", l, sub);
}

int lb_param(const LowerBlock *L, const char *suffix, int ndim, const int64_t *shape, IrInit init,
             double std) {
  char name[IR_NAME_MAX];
  snprintf(name, sizeof name, "%s.%s", L->g->cur.module, suffix);
  return graph_param(L->g, name, L->dt, ndim, shape, init, std);
}

int lb_linear(const LowerBlock *L, int x, int64_t n_out, int64_t n_in, double std) {
  int64_t ws[2] = {n_out, n_in};
  int in[3] = {x, lb_param(L, "weight", 2, ws, IR_INIT_NORMAL, std), -1};
  if (L->s->model.add_bias_linear) in[2] = lb_param(L, "bias", 1, &n_out, IR_INIT_ZEROS, 0);
  return graph_op1(L->g, OP_LINEAR, in, L->s->model.add_bias_linear ? 3 : 2, NULL, NULL);
}

int lb_norm(const LowerBlock *L, int x, int64_t width) {
  bool ln = strcmp(L->s->model.normalization, "LayerNorm") == 0;
  int in[3] = {x, lb_param(L, "weight", 1, &width, IR_INIT_ONES, 0),
               ln ? lb_param(L, "bias", 1, &width, IR_INIT_ZEROS, 0) : -1};
  OpAttrs a = {.f = {L->s->model.layernorm_epsilon}};
  return graph_op1(L->g, ln ? OP_LAYERNORM : OP_RMSNORM, in, ln ? 3 : 2, &a, NULL);
}

int lb_dropout(const LowerBlock *L, int x, double p) {
  if (p <= 0) return x;
  OpAttrs a = {.f = {p}, .i = {(*L->stream)++}};
  return graph_op1(L->g, OP_DROPOUT, &x, 1, &a, NULL);
}
