/* rope_dump.c — stepc's CPU reference RoPE (ir/ops/rope.c) on a fixed input, printed as JSON for
 * tests/python/test_rope_scaling.py, which holds it against its own NumPy implementation of
 * Hugging Face's Llama 3 RoPE. Usage: rope_dump B T H D BASE FACTOR (FACTOR 0: no scaling).
 * Prints {"x": [...], "f64": [...], "f32": [...]}: the input and the forward output of the fp64
 * and the fp32 reference, row-major (B, T, H, D). */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cpu_train.h"
#include "ops/ops.h"

static double input(int64_t i) { return sin(0.37 * (double)i) + 0.25 * cos(1.3 * (double)i); }

/* The forward output of the reference in `prec`, into y; 0 or -1 with the message printed. */
static int run(CpuPrecision prec, int64_t sh[4], double base, double factor, double *y) {
  Graph *g = graph_new();
  int x = graph_param(g, "x", DT_F32, 4, sh, IR_INIT_NORMAL, 1.0);
  OpAttrs a = {.f = {base, factor}, .i = {1}};
  int out = graph_op1(g, OP_ROPE, &x, 1, &a, "y");
  if (out < 0 || g->err[0]) return fprintf(stderr, "rope_dump: %s\n", g->err), graph_free(g), -1;
  graph_plan_trivial(g, prec == CPU_F64 ? 8 : 4);
  char err[256];
  CpuExec *e = cpu_exec_new(g, prec, 1, err, sizeof err);
  if (!e) return fprintf(stderr, "rope_dump: %s\n", err), graph_free(g), -1;
  int64_t n = tensor_numel(&g->t[x]);
  for (int64_t i = 0; i < n; i++)
    cpu_exec_set(e, x, i, input(i));
  cpu_exec_run(e, IR_PHASE_BIT(IR_PHASE_FORWARD));
  for (int64_t i = 0; i < n; i++)
    y[i] = cpu_exec_get(e, out, i);
  cpu_exec_free(e);
  graph_free(g);
  return 0;
}

static void row(const char *key, const double *v, int64_t n, const char *end) {
  printf("\"%s\": [", key);
  for (int64_t i = 0; i < n; i++)
    printf("%s%.17g", i ? ", " : "", v[i]);
  printf("]%s", end);
}

int main(int argc, char **argv) {
  if (argc != 7) return fprintf(stderr, "usage: rope_dump B T H D BASE FACTOR\n"), 3;
  int64_t sh[4] = {atoll(argv[1]), atoll(argv[2]), atoll(argv[3]), atoll(argv[4])};
  double base = atof(argv[5]), factor = atof(argv[6]);
  int64_t n = sh[0] * sh[1] * sh[2] * sh[3];
  if (n <= 0 || n > (1 << 24)) return fprintf(stderr, "rope_dump: bad shape\n"), 3;
  double *x = malloc(sizeof *x * n), *y64 = malloc(sizeof *y64 * n), *y32 = malloc(sizeof *y32 * n);
  for (int64_t i = 0; i < n; i++)
    x[i] = input(i);
  int rc = run(CPU_F64, sh, base, factor, y64) || run(CPU_F32, sh, base, factor, y32);
  if (!rc) {
    printf("{");
    row("x", x, n, ", ");
    row("f64", y64, n, ", ");
    row("f32", y32, n, "}\n");
  }
  free(x), free(y64), free(y32);
  return rc ? 1 : 0;
}
