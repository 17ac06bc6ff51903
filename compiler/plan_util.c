/* plan_util.c — small graph utilities the planning passes share (see plan.h): op reordering that
 * keeps every op id in the graph consistent, and per-kind facts the IR's op table does not carry
 * (randomness, GEMM class, which kernels may write in place). */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "plan.h"

int graph_reorder(Graph *g, const int *order) {
  int n = g->nop;
  Op *ops = malloc((size_t)(n ? n : 1) * sizeof *ops);
  int *newid = malloc((size_t)(n ? n : 1) * sizeof *newid);
  if (!ops || !newid) {
    free(ops), free(newid);
    return graph_fail(g, "out of memory");
  }
  for (int i = 0; i < n; i++) newid[i] = -1;
  for (int i = 0; i < n; i++) {
    if (order[i] < 0 || order[i] >= n || newid[order[i]] >= 0) {
      free(ops), free(newid);
      return graph_fail(g, "graph_reorder: not a permutation");
    }
    newid[order[i]] = i;
  }
  for (int i = 0; i < n; i++) {
    ops[i] = g->op[order[i]];
    if (ops[i].tags.fwd >= 0) ops[i].tags.fwd = newid[ops[i].tags.fwd];
  }
  memcpy(g->op, ops, (size_t)n * sizeof *ops);
  for (int t = 0; t < g->nt; t++)
    if (g->t[t].producer >= 0) g->t[t].producer = newid[g->t[t].producer];
  free(ops), free(newid);
  return 0;
}

bool plan_op_uses_rng(const Graph *g, const Op *op) {
  (void)g;
  switch (op->kind) {
  case OP_DROPOUT: return true;
  case OP_FLASH_ATTN:
  case OP_FLASH_ATTN_DV: return op->a.f[1] > 0; /* f[1] = attention dropout */
  default: return false;
  }
}

bool plan_op_is_gemm(OpKind k) {
  switch (k) {
  case OP_LINEAR:
  case OP_LINEAR_DGRAD:
  case OP_LINEAR_WGRAD:
  case OP_ATTN_SCORES:
  case OP_ATTN_SCORES_BWD:
  case OP_ATTN_PV:
  case OP_ATTN_PV_BWD:
  case OP_FLASH_ATTN:
  case OP_FLASH_ATTN_BWD:
  case OP_FLASH_ATTN_DV:
  case OP_FLASH_ATTN_DV_BWD: return true;
  default: return false;
  }
}

/* Read from the CPU kernels in ir/ops/: each of these computes output element i from input
 * element i only (SWIGLU_BWD: dx[j], dx[j+f] from x[j], x[j+f] of the same row, read first), so
 * the output may take the input's storage when the input dies at this op. The bitwise recompute
 * tests run on plans that use this and would catch a kernel that stops being alias-safe. */
int plan_op_inplace_input(const Op *op, int out) {
  if (out != 0) return -1;
  switch (op->kind) {
  case OP_ADD: return op->nin == 2 ? 0 : -1;
  case OP_GELU:
  case OP_DROPOUT:
  case OP_DROPOUT_BWD: return 0;
  case OP_GELU_BWD: return 0; /* dx over dy */
  case OP_SWIGLU_BWD: return 1; /* dx over x (same shape: rows x 2f) */
  case OP_CROSS_ENTROPY_BWD: return 1; /* dlogits over logits: the CUDA loss kernel writes them in place */
  default: return -1;
  }
}

int64_t plan_parse_bytes(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || !(v >= 0) || !isfinite(v)) return -1;
  while (isspace((unsigned char)*end)) end++;
  double mul = 1;
  if (!*end || strcasecmp(end, "b") == 0) mul = 1;
  else if (strcasecmp(end, "KiB") == 0) mul = 1024.0;
  else if (strcasecmp(end, "MiB") == 0) mul = 1024.0 * 1024;
  else if (strcasecmp(end, "GiB") == 0) mul = 1024.0 * 1024 * 1024;
  else if (strcasecmp(end, "KB") == 0) mul = 1e3;
  else if (strcasecmp(end, "MB") == 0) mul = 1e6;
  else if (strcasecmp(end, "GB") == 0) mul = 1e9;
  else return -1;
  return (int64_t)(v * mul);
}
