/* mamba.c — GPU tests of the Mamba-2 kernels (kernels/mamba.cuh) against ir/ops/mamba.c's own
 * reference, run in fp64 by the CPU executor on the same bf16 inputs: MAMBA_MIXER and its
 * backward (every gradient: dxBC, the packed conv weight/bias, dt_raw, the packed dt_bias/A_log/D),
 * MAMBA_GATE and MAMBA_GROUP_NORM with their backwards; the backward twice, bitwise.
 *
 * Shapes: T not a multiple of the 32-row chunk (a partial last chunk); heads per group 2 and 8;
 * 10 chunks; Nemotron's head dim 64 and state 128 (the kernels' largest shared-memory tiles); a
 * head dim not a multiple of the scans' 16-row slice. The first, third and last take their groups
 * in passes (kernels/launch.h: a group a pass), as a long sequence does. With A_log uniform in
 * [-1, 1) a chunk's decay exp(l_L) is ~1e-9, so the states passed between chunks (both ways) carry
 * weight only in the last mixer, whose heads decay slowly (A_log -3, -4: exp(l_L) ~ 0.3).
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
  int ids[IR_MAX_IN], oid[IR_MAX_OUT];
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

/* The mixer's launches, as compiler/codegen/launch/op_mamba.c makes them, over device buffers:
 * in[0] dout, in[1] xBC, in[2] conv, in[3] dt_raw, in[4] ssm; y; out[0..3] dxBC, dconv, ddt_raw,
 * dssm; one workspace laid out as kernels/launch.h stepc_mamba_ws says (the backward's, which
 * holds the forward's: its conv output u is the backward's, at gpre). Each launch is a function of
 * (Gpu *, Mixer *) so the bench times it alone. */
typedef struct {
  int B, T, H, P, G, N, K, C, nc, segs, nparam, gpp, Hp, g0;
  CUdeviceptr in[5], y, out[4], ws, st, dst, u, gpre, hpart, cpart, cb;
} Mixer;

/* passes: the groups in that many passes (kernels/launch.h), 0 as the runtime takes them. */
static void mixer_init(Gpu *g, Mixer *m, int B, int T, int H, int P, int G, int N, int K, int passes) {
  memset(m, 0, sizeof *m);
  m->B = B, m->T = T, m->H = H, m->P = P, m->G = G, m->N = N, m->K = K, m->C = H * P + 2 * G * N;
  m->nc = (T + STEPC_MAMBA_CHUNK - 1) / STEPC_MAMBA_CHUNK, m->segs = stepc_mamba_segs(T);
  m->nparam = m->C * (K + 1) + 3 * H;
  if (passes == 0) passes = stepc_mamba_passes(B, T, H, P, N, G);
  StepcMambaWs w = stepc_mamba_ws_passes(B, T, H, P, N, G, m->C, K, 1, passes);
  m->gpp = w.gpp, m->Hp = w.hp;
  long ncb =
      stepc_mamba_align((long)B * G * m->nc * STEPC_MAMBA_CHUNK * STEPC_MAMBA_CHUNK); /* the forward's C.B */
  m->ws = gpu_alloc(g, 4 * (size_t)(w.floats + ncb));
  m->cb = m->ws + 4 * (CUdeviceptr)w.floats;
  m->st = m->ws + 4 * (CUdeviceptr)w.st, m->dst = m->ws + 4 * (CUdeviceptr)w.dst;
  m->u = m->ws + 4 * (CUdeviceptr)w.u, m->gpre = m->ws + 4 * (CUdeviceptr)w.gpre;
  m->hpart = m->ws + 4 * (CUdeviceptr)w.hpart, m->cpart = m->ws + 4 * (CUdeviceptr)w.cpart;
}

static unsigned mx_slices(const Mixer *m) {
  return (unsigned)((m->P + STEPC_MAMBA_SLICE - 1) / STEPC_MAMBA_SLICE);
}

/* The conv output u (both directions: xBC is in[1], its conv in[2]). */
static void mx_conv(Gpu *g, void *c) {
  Mixer *m = c;
  void *a[] = {&m->u, &m->in[1], &m->in[2], &m->T, &m->C, &m->K};
  gpu_launch(g, "mamba_conv_forward", (unsigned)((m->C + 255) / 256),
             (unsigned)((m->T + STEPC_MAMBA_CONV_ROWS - 1) / STEPC_MAMBA_CONV_ROWS), (unsigned)m->B, 256, 0,
             a);
}
static void mx_fwd_cb(Gpu *g, void *c) {
  Mixer *m = c;
  void *a[] = {&m->cb, &m->u, &m->T, &m->H, &m->P, &m->G, &m->N};
  gpu_launch(g, "mamba_chunk_cb", (unsigned)m->nc, (unsigned)m->G, (unsigned)m->B, STEPC_MAMBA_THREADS,
             stepc_mamba_cb_smem(m->N), a);
}
static void mx_fwd_scan(Gpu *g, void *c) {
  Mixer *m = c;
  void *a[] = {&m->y, &m->u, &m->cb, &m->in[3], &m->in[4], &m->T, &m->H, &m->P, &m->G, &m->N};
  gpu_launch(g, "mamba_scan_forward", mx_slices(m), (unsigned)m->H, (unsigned)m->B, STEPC_MAMBA_THREADS,
             stepc_mamba_scan_smem(m->N), a);
}
/* Each launch below is pass m->g0's (groups g0 .. g0 + gpp - 1). */
static void mx_bwd_states(Gpu *g, void *c) {
  Mixer *m = c;
  void *a[] = {&m->st, &m->dst, &m->u, &m->in[0], &m->in[3], &m->in[4],
               &m->T,  &m->H,   &m->P, &m->G,     &m->N,     &m->g0};
  gpu_launch(g, "mamba_scan_states", mx_slices(m), (unsigned)m->Hp, (unsigned)(2 * m->B), STEPC_MAMBA_THREADS,
             stepc_mamba_scan_states_smem(m->N), a);
}
static void mx_bwd_chunk(Gpu *g, void *c) {
  Mixer *m = c;
  void *a[] = {&m->gpre,  &m->out[2], &m->hpart, &m->st, &m->dst, &m->in[0], &m->in[1], &m->in[2], &m->in[3],
               &m->in[4], &m->T,      &m->H,     &m->P,  &m->G,   &m->N,     &m->K,     &m->g0};
  gpu_launch(g, "mamba_chunk_backward", (unsigned)m->nc, (unsigned)m->gpp, (unsigned)m->B,
             STEPC_MAMBA_THREADS, stepc_mamba_chunk_bwd_smem(m->P, m->N), a);
}
static void mx_bwd_conv(Gpu *g, void *c) {
  Mixer *m = c;
  void *a[] = {&m->out[0], &m->cpart, &m->gpre, &m->in[1], &m->in[2], &m->T, &m->C, &m->K, &m->segs};
  gpu_launch(g, "mamba_conv_backward", (unsigned)((m->C + 255) / 256), (unsigned)m->segs, (unsigned)m->B, 256,
             0, a);
}
static void mx_bwd_params(Gpu *g, void *c) {
  Mixer *m = c;
  void *a[] = {&m->out[1], &m->out[3], &m->cpart, &m->hpart, &m->in[4], &m->B,
               &m->T,      &m->H,      &m->C,     &m->K,     &m->segs};
  gpu_launch(g, "mamba_param_grads", (unsigned)((m->nparam + 255) / 256), 1, 1, 256, 0, a);
}

/* A per-pass kernel in every pass: what the bench times as that kernel. */
static void mx_all_passes(Gpu *g, void *c, void (*fn)(Gpu *, void *)) {
  Mixer *m = c;
  for (m->g0 = 0; m->g0 < m->G; m->g0 += m->gpp)
    fn(g, m);
  m->g0 = 0;
}
#define MX_ALL(name, fn)                                                                                     \
  static void name(Gpu *g, void *c) { mx_all_passes(g, c, fn); }
MX_ALL(mxa_bwd_states, mx_bwd_states)
MX_ALL(mxa_bwd_chunk, mx_bwd_chunk)
/* The bench times mamba_scan_states after mamba_conv_forward (u in place) and before
 * mamba_chunk_backward, which overwrites u with the conv-output gradient. */
static void (*const mx_forward[])(Gpu *, void *) = {mx_conv, mx_fwd_cb, mx_fwd_scan};
static void (*const mx_backward[])(Gpu *, void *) = {mx_conv, mxa_bwd_states, mxa_bwd_chunk, mx_bwd_conv,
                                                     mx_bwd_params};
static const char *const mx_forward_name[] = {"mamba_conv_forward", "mamba_chunk_cb", "mamba_scan_forward"};
static const char *const mx_backward_name[] = {"mamba_conv_forward", "mamba_scan_states (both)",
                                               "mamba_chunk_backward", "mamba_conv_backward",
                                               "mamba_param_grads"};
#define MX_NFWD (int)(sizeof mx_forward / sizeof mx_forward[0])
#define MX_NBWD (int)(sizeof mx_backward / sizeof mx_backward[0])
/* The mixer as op_mamba.c runs it (the backward pass by pass: the states of one pass at a time). */
static void mx_run_forward(Gpu *g, void *c) { mx_conv(g, c), mx_fwd_cb(g, c), mx_fwd_scan(g, c); }
static void mx_run_backward(Gpu *g, void *c) {
  Mixer *m = c;
  mx_conv(g, c);
  for (m->g0 = 0; m->g0 < m->G; m->g0 += m->gpp)
    mx_bwd_states(g, c), mx_bwd_chunk(g, c);
  m->g0 = 0;
  mx_bwd_conv(g, c), mx_bwd_params(g, c);
}

/* passes: the groups' passes (kernels/launch.h), 0 the runtime's choice (1 at these sizes). slow:
 * A_log -3 and -4 (a = -0.05, -0.018) instead of uniform in [-1, 1), so that a chunk's decay
 * exp(l_L) is ~0.3 rather than ~1e-9 and the states passed between chunks carry weight. */
static void test_mixer(Gpu *g, Rng *r, int B, int T, int H, int P, int G, int N, int K, int passes,
                       int slow) {
  int C = H * P + 2 * G * N;
  char what[160];
  OpAttrs at = {.i = {H, P, G, N}};
  Arr in[5], fo[1], bo[4];
  arr_shape(&in[0], 3, B, T, (int64_t)H * P), arr_rand(&in[0], r, 1); /* dout (backward only) */
  arr_shape(&in[1], 3, B, T, C), arr_rand(&in[1], r, 1);              /* xBC */
  arr_shape(&in[2], 2, C, K + 1, 1), arr_rand(&in[2], r, 0.5);        /* conv */
  arr_shape(&in[3], 3, B, T, H), arr_rand(&in[3], r, 1);              /* dt_raw */
  arr_shape(&in[4], 2, H, 3, 1), arr_rand(&in[4], r, 1);              /* dt_bias | A_log | D */
  for (int h = 0; slow && h < H; h++)
    in[4].h[h * 3 + 1] = h % 2 ? 0xC080 : 0xC040, in[4].v[h * 3 + 1] = h % 2 ? -4.0 : -3.0; /* bf16 -4, -3 */
  if (reference(OP_MAMBA_MIXER, &at, in + 1, 4, fo, 1) || reference(OP_MAMBA_MIXER_BWD, &at, in, 5, bo, 4)) {
    g->checks++, g->failed++;
    return;
  }
  Mixer m;
  mixer_init(g, &m, B, T, H, P, G, N, K, passes);
  char np[32] = "";
  if (m.gpp < G) snprintf(np, sizeof np, " in %d passes", G / m.gpp);
  for (int i = 0; i < 5; i++)
    m.in[i] = up(g, &in[i]);
  for (int i = 0; i < 4; i++)
    m.out[i] = gpu_alloc(g, 2 * (size_t)bo[i].n);
  m.y = gpu_alloc(g, 2 * (size_t)fo[0].n);
  mx_run_forward(g, &m);
  if (slow) snprintf(np + strlen(np), sizeof np - strlen(np), " slow decay");
  snprintf(what, sizeof what, "mamba_mixer forward B%d T%d H%d P%d G%d N%d K%d%s", B, T, H, P, G, N, K, np);
  check(g, what, m.y, &fo[0]);
  mx_run_backward(g, &m);
  static const char *names[4] = {"dxBC", "dconv (w | bias)", "ddt_raw", "dssm (dt_bias | A_log | D)"};
  void *first[4];
  for (int i = 0; i < 4; i++) {
    snprintf(what, sizeof what, "mamba_mixer backward %s B%d T%d H%d G%d N%d%s", names[i], B, T, H, G, N, np);
    check(g, what, m.out[i], &bo[i]);
    first[i] = malloc(2 * (size_t)bo[i].n);
    gpu_get(g, first[i], m.out[i], 2 * (size_t)bo[i].n);
  }
  mx_run_backward(g, &m);
  int same = 1;
  for (int i = 0; i < 4; i++) {
    void *again = malloc(2 * (size_t)bo[i].n);
    gpu_get(g, again, m.out[i], 2 * (size_t)bo[i].n);
    same &= memcmp(first[i], again, 2 * (size_t)bo[i].n) == 0;
    free(again), free(first[i]);
  }
  snprintf(what, sizeof what, "mamba_mixer backward deterministic (twice, bitwise) H%d G%d N%d%s", H, G, N,
           np);
  gpu_check_true(g, what, same, "");
  for (int i = 0; i < 5; i++)
    gpu_free(g, m.in[i]), arr_free(&in[i]);
  for (int i = 0; i < 4; i++)
    gpu_free(g, m.out[i]), arr_free(&bo[i]);
  gpu_free(g, m.y), gpu_free(g, m.ws), arr_free(&fo[0]);
}

/* Each mixer kernel timed alone at Nemotron 3 Nano's mixer (seq 8192, 64 heads of 64, 8 groups,
 * state 128, conv 4), on random inputs: the median of 10 launches after 2. */
void bench_mamba(Gpu *g) {
  Rng r = {0x62656e63ull};
  int B = 1, T = 8192, H = 64, P = 64, G = 8, N = 128, K = 4, C = H * P + 2 * G * N;
  Mixer m;
  mixer_init(g, &m, B, T, H, P, G, N, K, 0);
  long n[5] = {(long)B * T * H * P, (long)B * T * C, (long)C * (K + 1), (long)B * T * H, 3L * H};
  double amp[5] = {1, 1, 0.5, 1, 1};
  for (int i = 0; i < 5; i++) {
    uint16_t *h = malloc(2 * (size_t)n[i]);
    double *d = malloc(sizeof *d * (size_t)n[i]);
    rand_bf16(&r, h, d, n[i], amp[i]);
    m.in[i] = gpu_dup(g, h, 2 * (size_t)n[i]);
    free(h), free(d);
  }
  long on[4] = {(long)B * T * C, (long)C * (K + 1), (long)B * T * H, 3L * H};
  for (int i = 0; i < 4; i++)
    m.out[i] = gpu_alloc(g, 2 * (size_t)on[i]);
  m.y = gpu_alloc(g, 2 * (size_t)n[0]);
  printf("mamba mixer kernels, B%d T%d H%d P%d G%d N%d K%d (ms, median of 10):\n", B, T, H, P, G, N, K);
  double tf = 0, tb = 0;
  for (int i = 0; i < MX_NFWD; i++) {
    double ms = gpu_time_ms(g, mx_forward[i], &m, 2, 10);
    tf += ms;
    printf("  forward  %-30s %8.3f\n", mx_forward_name[i], ms);
  }
  mx_run_forward(g, &m);
  for (int i = 0; i < MX_NBWD; i++) {
    double ms = gpu_time_ms(g, mx_backward[i], &m, 2, 10);
    tb += ms;
    printf("  backward %-30s %8.3f\n", mx_backward_name[i], ms);
  }
  printf("  forward %.3f ms, backward %.3f ms (sums of the kernels); whole: forward %.3f, backward %.3f (%d "
         "passes)\n",
         tf, tb, gpu_time_ms(g, mx_run_forward, &m, 1, 5), gpu_time_ms(g, mx_run_backward, &m, 1, 5),
         G / m.gpp);
  /* the same in one pass: what the passes cost in time (their workspace is what they save) */
  Mixer one;
  mixer_init(g, &one, B, T, H, P, G, N, K, 1);
  memcpy(one.in, m.in, sizeof one.in), memcpy(one.out, m.out, sizeof one.out), one.y = m.y;
  printf("  whole in one pass: forward %.3f, backward %.3f\n", gpu_time_ms(g, mx_run_forward, &one, 1, 5),
         gpu_time_ms(g, mx_run_backward, &one, 1, 5));
  gpu_free(g, one.ws);
  for (int i = 0; i < 5; i++)
    gpu_free(g, m.in[i]);
  for (int i = 0; i < 4; i++)
    gpu_free(g, m.out[i]);
  gpu_free(g, m.y), gpu_free(g, m.ws);
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
  /* the backward as compiler/codegen/launch/op_mamba.c launches it, through its workspace */
  int segs = stepc_mamba_segs((int)rows);
  CUdeviceptr gws = gpu_alloc(g, 4 * (size_t)stepc_mamba_gnorm_ws(rows, C, G)), rstd = gws,
              part = gws + 4 * (CUdeviceptr)stepc_mamba_align(rows * G);
  void *na2[] = {&o0, &rstd, &d0, &d1, &dw, &rows, &C, &G, &eps};
  gpu_launch(g, "mamba_group_norm_backward_input", grid, 1, 1, 256, 0, na2);
  check(g, "mamba_group_norm_backward_input", o0, &bo[0]);
  CUdeviceptr nacc = 0;
  void *na3[] = {&part, &d0, &d1, &rstd, &rows, &C, &G, &segs};
  gpu_launch(g, "mamba_group_norm_backward_weight", (unsigned)((C + 255) / 256), (unsigned)segs, 1, 256, 0,
             na3);
  void *na4[] = {&odw, &nacc, &part, &C, &segs};
  gpu_launch(g, "mamba_group_norm_weight_reduce", (unsigned)((C + 255) / 256), 1, 1, 256, 0, na4);
  check(g, "mamba_group_norm_backward_weight", odw, &bo[1]);
  gpu_free(g, gws);
  arr_free(&fo[0]), arr_free(&bo[0]), arr_free(&bo[1]), arr_free(&w);
  for (int i = 0; i < 3; i++)
    arr_free(&in[i]);
  gpu_free(g, d0), gpu_free(g, d1), gpu_free(g, d2), gpu_free(g, o0), gpu_free(g, o1), gpu_free(g, dw),
      gpu_free(g, odw);
}

void test_mamba(Gpu *g) {
  Rng r = {0x6d616d6261ull};
  test_mixer(g, &r, 2, 100, 6, 16, 3, 8, 4, 3, 0); /* 2 heads a group, a partial last chunk; a group a pass */
  test_mixer(g, &r, 1, 300, 8, 32, 1, 64, 4, 0, 0); /* 8 heads a group, 10 chunks */
  /* Nemotron's head dim and state (64, 128): the largest tiles; two passes of one group */
  test_mixer(g, &r, 1, 200, 4, 64, 2, 128, 4, 2, 0);
  test_mixer(g, &r, 2, 64, 4, 32, 2, 8, 4, 0, 0); /* tests/recipes/tiny_hybrid.lua's mixer at T 64 */
  test_gate_norm(g, &r);
  /* the state passing: 10 chunks that decay slowly; a head dim of 2.5 scan slices; two passes */
  test_mixer(g, &r, 2, 300, 8, 40, 2, 64, 4, 2, 1);
}
