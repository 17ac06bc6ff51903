/* autodiff.c — reverse-mode differentiation over the op table's gradient rules.
 *
 * Nothing here knows a model: which forward tensors the backward reads follows from the inputs
 * of the ops each rule emits. Backward ops carry their forward op's tags (layer, module, labels,
 * scopes) with phase backward and tags.fwd pointing back. */
#include "passes/autodiff.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int main_grad_of(Graph *g, int *main_grad, int param) {
  if (main_grad[param] >= 0) return main_grad[param];
  char name[IR_NAME_MAX];
  snprintf(name, sizeof name, "%s.main_grad", g->t[param].name);
  Tensor p = g->t[param];
  int id = graph_tensor(g, name, DT_F32, ROLE_GRAD, p.ndim, p.shape);
  if (id < 0) return -1;
  g->t[id].of = param;
  return main_grad[param] = id;
}

/* Adds gradient contribution `d` to tensor `x`. */
static int contribute(Graph *g, int *grad, int *main_grad, int x, int d) {
  if (g->t[x].role == ROLE_PARAM_FP8) x = g->t[x].of; /* an fp8 primary weight: its fp32 param's */
  if (g->t[x].role == ROLE_PARAM) {
    int mg = main_grad_of(g, main_grad, x);
    if (mg < 0) return -1;
    return graph_op_into(g, OP_ACCUM, &d, 1, &mg, 1, NULL) < 0 ? -1 : 0;
  }
  if (grad[x] < 0) {
    grad[x] = d;
    return 0;
  }
  char name[IR_NAME_MAX];
  snprintf(name, sizeof name, "%s.grad_sum", g->t[x].name);
  int in[2] = {grad[x], d};
  int s = graph_op1(g, OP_ADD, in, 2, NULL, name);
  if (s < 0) return -1;
  g->t[s].role = ROLE_ACT_GRAD;
  g->t[s].of = x;
  grad[x] = s;
  return 0;
}

int autodiff_build(Graph *g, const int *outs, const int *seeds, int n) {
  int nfwd = g->nop, nt0 = g->nt;
  /* Tensors created during the build get ids >= nt0; the maps only cover forward tensors. */
  int *grad = malloc((size_t)nt0 * sizeof *grad), *main_grad = malloc((size_t)nt0 * sizeof *main_grad);
  char *needs = calloc((size_t)nt0, 1);
  if (!grad || !main_grad || !needs) {
    free(grad), free(main_grad), free(needs);
    return graph_fail(g, "out of memory");
  }
  for (int i = 0; i < nt0; i++)
    grad[i] = main_grad[i] = -1, needs[i] = g->t[i].role == ROLE_PARAM || g->t[i].role == ROLE_PARAM_FP8;
  /* Which tensors depend on a parameter: only their gradients are worth computing. */
  for (int o = 0; o < nfwd; o++) {
    const Op *op = &g->op[o];
    if (op->tags.phase != IR_PHASE_FORWARD) continue;
    bool any = false;
    for (int i = 0; i < op->nin; i++)
      any |= needs[op->in[i]] != 0;
    for (int i = 0; i < op->nout; i++)
      if (any && dtype_is_float(g->t[op->out[i]].dtype)) needs[op->out[i]] = 1;
  }
  for (int i = 0; i < n; i++)
    grad[outs[i]] = seeds[i];
  IrTags saved = g->cur;
  int rc = 0;
  for (int o = nfwd - 1; o >= 0 && rc == 0; o--) {
    Op op = g->op[o];
    if (op.tags.phase != IR_PHASE_FORWARD) continue;
    int dout[IR_MAX_OUT], din[IR_MAX_IN];
    bool any = false;
    for (int i = 0; i < op.nout; i++)
      any |= (dout[i] = grad[op.out[i]]) >= 0;
    bool wanted = false;
    for (int i = 0; i < op.nin; i++)
      wanted |= needs[op.in[i]] != 0;
    if (!any || !wanted) continue;
    const OpInfo *info = op_info(op.kind);
    if (!info->backward) {
      rc = graph_fail(g, "%s in %s has no gradient rule", info->name, op.tags.module);
      break;
    }
    for (int i = 0; i < IR_MAX_IN; i++)
      din[i] = -1;
    g->cur = op.tags;
    g->cur.phase = IR_PHASE_BACKWARD;
    g->cur.fwd = o;
    if (info->backward(g, o, dout, din) != 0) {
      rc = graph_fail(g, "gradient rule of %s in %s failed", info->name, op.tags.module);
      break;
    }
    for (int i = 0; i < op.nin && rc == 0; i++)
      if (din[i] >= 0 && needs[op.in[i]]) rc = contribute(g, grad, main_grad, op.in[i], din[i]);
  }
  g->cur = saved;
  free(grad), free(main_grad), free(needs);
  return rc;
}

int autodiff_build_loss(Graph *g) {
  if (g->loss < 0) return graph_fail(g, "the graph has no loss");
  IrTags saved = g->cur;
  g->cur = (IrTags){.phase = IR_PHASE_BACKWARD, .layer = -1, .fwd = g->t[g->loss].producer};
  snprintf(g->cur.module, sizeof g->cur.module, "loss");
  int64_t one = 1;
  int seed = graph_tensor(g, "loss.grad", DT_F32, ROLE_ACT_GRAD, 1, &one);
  OpAttrs a = {.f = {1.0 / (double)(g->num_microbatches > 0 ? g->num_microbatches : 1)}};
  if (seed < 0 || graph_op_into(g, OP_FILL, NULL, 0, &seed, 1, &a) < 0) return -1;
  g->t[seed].of = g->loss;
  g->cur = saved;
  return autodiff_build(g, &g->loss, &seed, 1);
}
