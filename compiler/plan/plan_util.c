/* plan_util.c — small graph utilities the planning passes share (see plan.h): op reordering that
 * keeps every op id in the graph consistent, and per-op readings of the op table's facts (ir.h)
 * that depend on the op's attributes or output. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "plan/plan.h"

int graph_reorder(Graph *g, const int *order) {
  int n = g->nop;
  Op *ops = malloc((size_t)(n ? n : 1) * sizeof *ops);
  int *newid = malloc((size_t)(n ? n : 1) * sizeof *newid);
  if (!ops || !newid) {
    free(ops), free(newid);
    return graph_fail(g, "out of memory");
  }
  for (int i = 0; i < n; i++)
    newid[i] = -1;
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
  OpRng r = op_info(op->kind)->facts.rng;
  return r == RNG_ALWAYS || (r == RNG_ATTN_DROPOUT && op->a.f[1] > 0); /* f[1] = attention dropout */
}

/* The bitwise recompute tests run on plans that use the table's in-place facts and would catch a
 * kernel that stops being alias-safe. */
int plan_op_inplace_input(const Op *op, int out) {
  if (out != 0) return -1;
  OpInPlace p = op_info(op->kind)->facts.inplace;
  return p == INPLACE_IN0 ? 0 : p == INPLACE_IN1 ? 1 : -1;
}

int64_t plan_parse_bytes(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || !(v >= 0) || !isfinite(v)) return -1;
  while (isspace((unsigned char)*end))
    end++;
  double mul = 1;
  if (!*end || strcasecmp(end, "b") == 0)
    mul = 1;
  else if (strcasecmp(end, "KiB") == 0)
    mul = 1024.0;
  else if (strcasecmp(end, "MiB") == 0)
    mul = 1024.0 * 1024;
  else if (strcasecmp(end, "GiB") == 0)
    mul = 1024.0 * 1024 * 1024;
  else if (strcasecmp(end, "KB") == 0)
    mul = 1e3;
  else if (strcasecmp(end, "MB") == 0)
    mul = 1e6;
  else if (strcasecmp(end, "GB") == 0)
    mul = 1e9;
  else
    return -1;
  return (int64_t)(v * mul);
}
