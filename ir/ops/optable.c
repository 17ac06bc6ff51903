/* optable.c — the one op table, assembled from the rows of ops/op_list.h. */
#include "ops/ops.h"

#include <stdarg.h>
#include <stdio.h>

#define OPTABLE_EXTERN(NAME, sym) extern const OpInfo sym##_info;
OP_LIST(OPTABLE_EXTERN)
#undef OPTABLE_EXTERN

static const OpInfo *const OP_TABLE[OP_COUNT] = {
#define OPTABLE_ROW(NAME, sym) [OP_##NAME] = &sym##_info,
    OP_LIST(OPTABLE_ROW)
#undef OPTABLE_ROW
};

const OpEw OP_EW_NONE = {0, NULL, NULL, NULL, NULL};

const OpInfo *op_info(OpKind k) { return OP_TABLE[k]; }
const char *op_name(OpKind k) { return k >= 0 && k < OP_COUNT ? OP_TABLE[k]->name : "?"; }

int op_for_eval(Op *op) {
  /* a delayed-scaling cast records no amax (ir/ops/fp8.c): the next step is the one without the evaluation */
  if (op->kind == OP_FP8_QUANT) op->a.i[3] = 1;
  if (op->kind == OP_LINEAR_FP8 || op->kind == OP_GROUPED_LINEAR_FP8) op->a.i[5] = 1;
  if (op->kind == OP_FP8_QUANT_GROUPED) op->a.i[3] = 1;
  switch (op_info(op->kind)->facts.rng) {
  case RNG_NONE: return 0;
  case RNG_ATTN_DROPOUT: op->a.f[1] = 0; return 0; /* ir/ops/flash.c: f[1] = attention-dropout p */
  case RNG_ALWAYS:
    if (op->kind != OP_DROPOUT) return -1;
    op->a.f[0] = 0; /* ir/ops/dropout.c: keep = u >= p, all kept at p = 0, scale 1 / (1 - p) = 1 */
    return 0;
  default: return -1;
  }
}

int ops_err(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return -1;
}

bool ops_same_shape(const Tensor *a, const Tensor *b) {
  if (a->ndim != b->ndim) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d]) return false;
  return true;
}

int ops_grad_op(Graph *g, OpKind kind, const int *in, int nin, const OpAttrs *a, int *out, const int *of) {
  char names[IR_MAX_OUT][IR_NAME_MAX];
  const char *np[IR_MAX_OUT] = {0};
  int nout = op_info(kind)->nout;
  for (int i = 0; i < nout; i++)
    if (of && of[i] >= 0) {
      snprintf(names[i], sizeof names[i], "%s.grad", g->t[of[i]].name);
      np[i] = names[i];
    }
  int id = graph_op(g, kind, in, nin, a, out, np);
  if (id < 0) return -1;
  for (int i = 0; i < nout; i++) {
    Tensor *t = &g->t[out[i]];
    if (t->role == ROLE_WORKSPACE) continue; /* the backward's own workspace (its infer says so) */
    t->role = ROLE_ACT_GRAD;
    if (of && of[i] >= 0) {
      t->of = of[i];
      t->dtype = g->t[of[i]].dtype;
    }
  }
  return id;
}

double ops_flops_elementwise(const Graph *g, const Op *op) {
  double n = 0;
  for (int i = 0; i < op->nout; i++)
    n += (double)tensor_numel(&g->t[op->out[i]]);
  return n;
}
