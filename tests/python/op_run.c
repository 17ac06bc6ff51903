/* op_run.c — one op of the op table through its fp64 CPU reference (tests/gpu/op_ref.c), on raw
 * little-endian float64 files, for tests that check an op against an independent NumPy version
 * (tests/python/test_ops_numpy.py):
 *
 *   op_run OP IN:D0xD1... [IN:...] -- OUT:D0xD1... [OUT:...]
 *
 * OP is the op's table name (ir/ops, e.g. geglu_bwd); each IN file holds its tensor's values
 * (float inputs only), each OUT file receives an output's. Exit 0, or 2 with a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gpu/op_ref.h"

static int parse(const char *arg, char *path, size_t n, int64_t sh[4]) {
  const char *colon = strrchr(arg, ':');
  if (!colon || (size_t)(colon - arg) >= n) return -1;
  memcpy(path, arg, (size_t)(colon - arg));
  path[colon - arg] = 0;
  sh[0] = sh[1] = sh[2] = sh[3] = 0;
  const char *p = colon + 1;
  for (int d = 0; d < 4 && *p; d++) {
    char *end;
    sh[d] = strtoll(p, &end, 10);
    if (end == p || sh[d] <= 0 || (*end && *end != 'x')) return -1;
    p = *end ? end + 1 : end;
  }
  return *p ? -1 : 0;
}

static long numel(const int64_t sh[4]) {
  long n = 1;
  for (int d = 0; d < 4 && sh[d]; d++)
    n *= (long)sh[d];
  return n;
}

int main(int argc, char **argv) {
  if (argc < 4) return fprintf(stderr, "usage: op_run OP IN:SHAPE... -- OUT:SHAPE...\n"), 2;
  int kind = -1;
  for (int k = 0; k < OP_COUNT; k++)
    if (strcmp(op_name((OpKind)k), argv[1]) == 0) kind = k;
  if (kind < 0) return fprintf(stderr, "op_run: no op named %s\n", argv[1]), 2;
  RefT in[IR_MAX_IN], out[IR_MAX_OUT];
  char opath[IR_MAX_OUT][512];
  int nin = 0, nout = 0, outs = 0;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) {
      outs = 1;
      continue;
    }
    char path[512];
    int64_t sh[4];
    if (parse(argv[i], path, sizeof path, sh) || (outs ? nout >= IR_MAX_OUT : nin >= IR_MAX_IN))
      return fprintf(stderr, "op_run: bad argument %s\n", argv[i]), 2;
    double *d = calloc((size_t)numel(sh), sizeof *d);
    if (outs) {
      snprintf(opath[nout], sizeof opath[nout], "%s", path);
      out[nout++] = ref_f(d, sh[0], sh[1], sh[2], sh[3]);
      continue;
    }
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(d, sizeof *d, (size_t)numel(sh), f) : 0;
    if (f) fclose(f);
    if (got != (size_t)numel(sh))
      return fprintf(stderr, "op_run: %s does not hold %ld doubles\n", path, numel(sh)), 2;
    in[nin++] = ref_f(d, sh[0], sh[1], sh[2], sh[3]);
  }
  ref_op((OpKind)kind, NULL, in, nin, out, nout, 0);
  for (int i = 0; i < nout; i++) {
    FILE *f = fopen(opath[i], "wb");
    if (!f || fwrite(out[i].d, sizeof(double), (size_t)numel(out[i].shape), f) != (size_t)numel(out[i].shape))
      return fprintf(stderr, "op_run: cannot write %s\n", opath[i]), 2;
    fclose(f);
  }
  for (int i = 0; i < nin; i++) free(in[i].d);
  for (int i = 0; i < nout; i++) free(out[i].d);
  return 0;
}
