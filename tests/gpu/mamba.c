/* mamba.c — GPU tests of the Mamba-2 kernels (kernels/mamba.cuh) against ir/ops/mamba.c's own
 * reference, run in fp64 by the CPU executor on the same bf16 inputs: MAMBA_MIXER and its
 * backward (every gradient: dxBC, the packed conv weight/bias, dt_raw, the packed dt_bias/A_log/D),
 * MAMBA_GATE and MAMBA_GROUP_NORM with their backwards; the backward twice, bitwise.
 *
 * Shapes: T not a multiple of the 32-row chunk (a partial last chunk); heads per group 2 and 8;
 * 10 chunks (the states passed between chunks both ways); Nemotron's head dim 64 and state 128
 * (the chunk kernels' largest shared-memory tiles).
 *
 * Tolerances. The kernels keep every intermediate in fp32 (the conv output, dt, the states and
 * chunk products) and round once, to the bf16 output: that rounding is 2^-9 relative, fp32 sums
 * of ~10^3 terms add ~10^-5 of the terms' magnitude. Elementwise |got - ref| <= atol + rtol |ref|
 * with rtol = 2^-7 (one bf16 ulp) and atol = 2^-8 of the output's largest magnitude, for values
 * that cancel towards zero (sums of many signed terms: the gradients of B and C, the conv weights
 * and the per-head parameters). A wrong term (a missing decay, a transposed index, a head summed
 * into the wrong group) is off by O(1) of the scale. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/launch.h"
#include "ops/ops.h"
#include "runtime/cpu/exec.h"

#define MB_RTOL (1.0 / 128)
#define MB_ATOL (1.0 / 256)

typedef struct {
  int ndim;
  int64_t shape[4];
  double amp; /* inputs: uniform in [-amp, amp) */
  double *v;  /* exact values (bf16 representable for inputs) */
  uint16_t *h;
  long n;
} Arr;

static void arr_shape(Arr *a, int ndim, int64_t d0, int64_t d1, int64_t d2) {
  memset(a, 0, sizeof *a);
  a->ndim = ndim, a->shape[0] = d0, a->shape[1] = d1, a->shape[2] = d2, a->shape[3] = 1;
  a->n = (long)(d0 * (ndim > 1 ? d1 : 1) * (ndim > 2 ? d2 : 1));
}

static void arr_rand(Arr *a, Rng *r, double amp) {
  a->h = malloc(2 * (size_t)a->n), a->v = malloc(sizeof *a->v * (size_t)a->n);
  rand_bf16(r, a->h, a->v, a->n, amp);
}

static void arr_free(Arr *a) { free(a->v), free(a->h); }

/* The reference: one op of ir/ops/mamba.c in fp64 over inputs `in`, outputs into out[i].v. */
static int reference(OpKind kind, const OpAttrs *at, Arr *in, int nin, Arr *out, int nout) {
  Graph *g = graph_new();
  int ids[8], oid[4];
  for (int i = 0; i < nin; i++) {
    char name[16];
    snprintf(name, sizeof name, "in%d", i);
    ids[i] = graph_param(g, name, DT_F32, in[i].ndim, in[i].shape, IR_INIT_NONE, 0);
  }
  if (graph_op(g, kind, ids, nin, at, oid, NULL) < 0) {
    printf("FAIL reference %s: %s\n", op_name(kind), g->err);
    graph_free(g);
    return -1;
  }
  graph_plan_trivial(g, 8);
  char err[256];
  CpuExec *e = cpu_exec_new(g, CPU_F64, 1, err, sizeof err);
  if (!e) {
    printf("FAIL reference %s: %s\n", op_name(kind), err);
    graph_free(g);
    return -1;
  }
  for (int i = 0; i < nin; i++)
    for (long j = 0; j < in[i].n; j++)
      cpu_exec_set(e, ids[i], j, in[i].v[j]);
  cpu_exec_run(e, ~0u);
  for (int o = 0; o < nout; o++) {
    const Tensor *t = &g->t[oid[o]];
    arr_shape(&out[o], t->ndim, t->shape[0], t->shape[1], t->shape[2]);
    out[o].v = malloc(sizeof(double) * (size_t)out[o].n);
    for (long j = 0; j < out[o].n; j++)
      out[o].v[j] = cpu_exec_get(e, oid[o], j);
  }
  cpu_exec_free(e);
  graph_free(g);
  return 0;
}

static CUdeviceptr up(Gpu *g, const Arr *a) { return gpu_dup(g, a->h, 2 * (size_t)a->n); }

static double *down(Gpu *g, CUdeviceptr p, long n) {
  uint16_t *h = malloc(2 * (size_t)n);
  double *d = malloc(sizeof *d * (size_t)n);
  gpu_get(g, h, p, 2 * (size_t)n);
  bf16_to_double(h, d, n);
  free(h);
  return d;
}

static double maxabs(const double *v, long n) {
  double m = 0;
  for (long i = 0; i < n; i++)
    m = fabs(v[i]) > m ? fabs(v[i]) : m;
  return m;
}

static void check(Gpu *g, const char *what, CUdeviceptr p, const Arr *ref) {
  double *got = down(g, p, ref->n);
  gpu_check(g, what, got, ref->v, ref->n, MB_ATOL * maxabs(ref->v, ref->n), MB_RTOL);
  free(got);
}

static void test_mixer(Gpu *g, Rng *r, int B, int T, int H, int P, int G, int N, int K) {
  int C = H * P + 2 * G * N;
  char what[160];
  OpAttrs at = {.i = {H, P, G, N}};
  Arr in[5], fo[1], bo[4];
  arr_shape(&in[0], 3, B, T, (int64_t)H * P), arr_rand(&in[0], r, 1); /* dout (backward only) */
  arr_shape(&in[1], 3, B, T, C), arr_rand(&in[1], r, 1);              /* xBC */
  arr_shape(&in[2], 2, C, K + 1, 1), arr_rand(&in[2], r, 0.5);        /* conv */
  arr_shape(&in[3], 3, B, T, H), arr_rand(&in[3], r, 1);              /* dt_raw */
  arr_shape(&in[4], 2, H, 3, 1), arr_rand(&in[4], r, 1);              /* dt_bias | A_log | D */
  if (reference(OP_MAMBA_MIXER, &at, in + 1, 4, fo, 1) || reference(OP_MAMBA_MIXER_BWD, &at, in, 5, bo, 4)) {
    g->checks++, g->failed++;
    return;
  }
  CUdeviceptr d[5], y = gpu_alloc(g, 2 * (size_t)fo[0].n), o[4];
  for (int i = 0; i < 5; i++)
    d[i] = up(g, &in[i]);
  for (int i = 0; i < 4; i++)
    o[i] = gpu_alloc(g, 2 * (size_t)bo[i].n);
  StepcMambaWs fw = stepc_mamba_ws(B, T, H, P, N, C, K, 0), bw = stepc_mamba_ws(B, T, H, P, N, C, K, 1);
  CUdeviceptr ws = gpu_alloc(g, 4 * (size_t)bw.floats), none = 0;
  CUdeviceptr st = ws + 4 * (CUdeviceptr)fw.st, dec = ws + 4 * (CUdeviceptr)fw.dec;
  int nc = (T + STEPC_MAMBA_CHUNK - 1) / STEPC_MAMBA_CHUNK, PN = P * N, B2 = B;
  void *sa[] = {&st, &none, &dec, &none, &d[1], &d[2], &d[3], &d[4], &T, &H, &P, &G, &N, &K};
  gpu_launch(g, "mamba_chunk_states", (unsigned)nc, (unsigned)G, (unsigned)B, STEPC_MAMBA_THREADS,
             stepc_mamba_states_smem(P, N), sa);
  void *pa[] = {&st, &none, &dec, &B2, &H, &nc, &PN};
  gpu_launch(g, "mamba_state_pass", (unsigned)((PN + 255) / 256), (unsigned)H, (unsigned)B, 256, 0, pa);
  void *fa[] = {&y, &st, &d[1], &d[2], &d[3], &d[4], &T, &H, &P, &G, &N, &K};
  gpu_launch(g, "mamba_chunk_output", (unsigned)nc, (unsigned)G, (unsigned)B, STEPC_MAMBA_THREADS,
             stepc_mamba_output_smem(P, N), fa);
  snprintf(what, sizeof what, "mamba_mixer forward B%d T%d H%d P%d G%d N%d K%d", B, T, H, P, G, N, K);
  check(g, what, y, &fo[0]);
  /* the backward, as compiler/codegen/launch/op_mamba.c launches it */
  CUdeviceptr dst = ws + 4 * (CUdeviceptr)bw.dst, gpre = ws + 4 * (CUdeviceptr)bw.gpre,
              hpart = ws + 4 * (CUdeviceptr)bw.hpart, cpart = ws + 4 * (CUdeviceptr)bw.cpart;
  int segs = stepc_mamba_segs(T), nparam = C * (K + 1) + 3 * H;
  void *bsa[] = {&st, &dst, &dec, &d[0], &d[1], &d[2], &d[3], &d[4], &T, &H, &P, &G, &N, &K};
  void *bpa[] = {&st, &dst, &dec, &B2, &H, &nc, &PN};
  void *bca[] = {&gpre, &o[2], &hpart, &st, &dst, &d[0], &d[1], &d[2], &d[3], &d[4], &T, &H, &P, &G, &N, &K};
  void *bva[] = {&o[0], &cpart, &gpre, &d[1], &d[2], &T, &C, &K, &segs};
  void *bga[] = {&o[1], &o[3], &cpart, &hpart, &d[4], &B2, &T, &H, &C, &K, &segs};
#define MIXER_BACKWARD()                                                                                     \
  do {                                                                                                       \
    gpu_launch(g, "mamba_chunk_states", (unsigned)nc, (unsigned)G, (unsigned)B, STEPC_MAMBA_THREADS,         \
               stepc_mamba_states_smem(P, N), bsa);                                                          \
    gpu_launch(g, "mamba_state_pass", (unsigned)((PN + 255) / 256), (unsigned)H, (unsigned)(2 * B), 256, 0,  \
               bpa);                                                                                         \
    gpu_launch(g, "mamba_chunk_backward", (unsigned)nc, (unsigned)G, (unsigned)B, STEPC_MAMBA_THREADS,       \
               stepc_mamba_chunk_bwd_smem(P, N), bca);                                                       \
    gpu_launch(g, "mamba_conv_backward", (unsigned)((C + 255) / 256), (unsigned)segs, (unsigned)B, 256, 0,   \
               bva);                                                                                         \
    gpu_launch(g, "mamba_param_grads", (unsigned)((nparam + 255) / 256), 1, 1, 256, 0, bga);                 \
  } while (0)
  MIXER_BACKWARD();
  static const char *names[4] = {"dxBC", "dconv (w | bias)", "ddt_raw", "dssm (dt_bias | A_log | D)"};
  void *first[4];
  for (int i = 0; i < 4; i++) {
    snprintf(what, sizeof what, "mamba_mixer backward %s B%d T%d H%d G%d N%d", names[i], B, T, H, G, N);
    check(g, what, o[i], &bo[i]);
    first[i] = malloc(2 * (size_t)bo[i].n);
    gpu_get(g, first[i], o[i], 2 * (size_t)bo[i].n);
  }
  MIXER_BACKWARD();
#undef MIXER_BACKWARD
  int same = 1;
  for (int i = 0; i < 4; i++) {
    void *again = malloc(2 * (size_t)bo[i].n);
    gpu_get(g, again, o[i], 2 * (size_t)bo[i].n);
    same &= memcmp(first[i], again, 2 * (size_t)bo[i].n) == 0;
    free(again), free(first[i]);
  }
  snprintf(what, sizeof what, "mamba_mixer backward deterministic (twice, bitwise) H%d G%d N%d", H, G, N);
  gpu_check_true(g, what, same, "");
  for (int i = 0; i < 5; i++)
    gpu_free(g, d[i]), arr_free(&in[i]);
  for (int i = 0; i < 4; i++)
    gpu_free(g, o[i]), arr_free(&bo[i]);
  gpu_free(g, y), gpu_free(g, ws), arr_free(&fo[0]);
}

static void test_gate_norm(Gpu *g, Rng *r) {
  int B = 2, T = 77, G = 4, gs = 96, C = G * gs;
  long n = (long)B * T * C, rows = (long)B * T;
  float eps = 1e-5f;
  Arr in[3], fo[1], bo[2];
  arr_shape(&in[0], 3, B, T, C), arr_rand(&in[0], r, 1);
  arr_shape(&in[1], 3, B, T, C), arr_rand(&in[1], r, 2);
  arr_shape(&in[2], 3, B, T, C), arr_rand(&in[2], r, 2);
  /* gate: in (y, z); backward in (dout, y, z) */
  if (reference(OP_MAMBA_GATE, NULL, in + 1, 2, fo, 1) || reference(OP_MAMBA_GATE_BWD, NULL, in, 3, bo, 2)) {
    g->checks++, g->failed++;
    return;
  }
  CUdeviceptr d0 = up(g, &in[0]), d1 = up(g, &in[1]), d2 = up(g, &in[2]), o0 = gpu_alloc(g, 2 * (size_t)n),
              o1 = gpu_alloc(g, 2 * (size_t)n);
  void *ga[] = {&o0, &d1, &d2, &n};
  gpu_launch(g, "mamba_gate_forward", gpu_grid1d(g, n), 1, 1, 256, 0, ga);
  check(g, "mamba_gate_forward", o0, &fo[0]);
  void *gb[] = {&o0, &o1, &d0, &d1, &d2, &n};
  gpu_launch(g, "mamba_gate_backward", gpu_grid1d(g, n), 1, 1, 256, 0, gb);
  check(g, "mamba_gate_backward dy", o0, &bo[0]);
  check(g, "mamba_gate_backward dz", o1, &bo[1]);
  arr_free(&fo[0]), arr_free(&bo[0]), arr_free(&bo[1]);
  /* group norm: in (x, w); backward in (dout, x, w) */
  Arr w;
  arr_shape(&w, 1, C, 1, 1), arr_rand(&w, r, 1);
  Arr fin[2] = {in[1], w}, bin[3] = {in[0], in[1], w};
  OpAttrs na = {.f = {eps}, .i = {G}};
  if (reference(OP_MAMBA_GROUP_NORM, &na, fin, 2, fo, 1) ||
      reference(OP_MAMBA_GROUP_NORM_BWD, &na, bin, 3, bo, 2)) {
    g->checks++, g->failed++;
    return;
  }
  CUdeviceptr dw = up(g, &w), odw = gpu_alloc(g, 2 * (size_t)C);
  unsigned grid = (unsigned)((rows * G + 7) / 8);
  void *na1[] = {&o0, &d1, &dw, &rows, &C, &G, &eps};
  gpu_launch(g, "mamba_group_norm_forward", grid, 1, 1, 256, 0, na1);
  check(g, "mamba_group_norm_forward", o0, &fo[0]);
  void *na2[] = {&o0, &d0, &d1, &dw, &rows, &C, &G, &eps};
  gpu_launch(g, "mamba_group_norm_backward_input", grid, 1, 1, 256, 0, na2);
  check(g, "mamba_group_norm_backward_input", o0, &bo[0]);
  CUdeviceptr nacc = 0;
  void *na3[] = {&odw, &nacc, &d0, &d1, &rows, &C, &G, &eps};
  gpu_launch(g, "mamba_group_norm_backward_weight", (unsigned)((C + 31) / 32), 1, 1, 256, 0, na3);
  check(g, "mamba_group_norm_backward_weight", odw, &bo[1]);
  arr_free(&fo[0]), arr_free(&bo[0]), arr_free(&bo[1]), arr_free(&w);
  for (int i = 0; i < 3; i++)
    arr_free(&in[i]);
  gpu_free(g, d0), gpu_free(g, d1), gpu_free(g, d2), gpu_free(g, o0), gpu_free(g, o1), gpu_free(g, dw),
      gpu_free(g, odw);
}

void test_mamba(Gpu *g) {
  Rng r = {0x6d616d6261ull};
  test_mixer(g, &r, 2, 100, 6, 16, 3, 8, 4);  /* 2 heads a group, a partial last chunk */
  test_mixer(g, &r, 1, 300, 8, 32, 1, 64, 4); /* 8 heads a group, 10 chunks: the state passing */
  test_mixer(g, &r, 1, 200, 4, 64, 2, 128,
             4);                            /* Nemotron's head dim and state (64, 128): the largest tiles */
  test_mixer(g, &r, 2, 64, 4, 32, 2, 8, 4); /* tests/recipes/tiny_hybrid.lua's mixer at T 64 */
  test_gate_norm(g, &r);
}
