/* test_fp8_grouped.c — the routed experts' grouped fp8 linears (ir/ops/fp8.c: FP8_QUANT_GROUPED,
 * GROUPED_LINEAR_FP8, GROUPED_FP8_DGRAD, GROUPED_FP8_WGRAD) on the CPU device, checked against a
 * reference written here from Transformer Engine's rule for GroupedLinear under per-tensor fp8: every
 * expert's GEMM has its own quantizers, so expert e's input rows, its weight and its output-gradient
 * rows are each cast with their own scale (current scaling: fp8_max / amax of that expert's part
 * alone, ir/ops/fp8.h fp8_scale; delayed: the expert's own column of the state), products in fp32
 * times both dequantizing factors. Four experts over 12 rows: expert 0 rows 0-2, expert 1 rows 3-6,
 * expert 2 no rows, expert 3 rows 7-10, row 11 in no segment (an empty capacity slot).
 *
 *   - forward, dgrad and wgrad against the reference (fp64 sums of the same quantized values, 1e-5
 *     relative), E4M3 forward, E5M2 gradients;
 *   - per-expert scaling: expert 1's input rows x1000 (then expert 3's output-gradient rows x1000)
 *     leave every other expert's outputs, input gradients and weight gradients bit for bit as they
 *     were (a shared scale would move them all: it is another scale); at x1e5 (E4M3) and x1e11 (E5M2)
 *     the same step with one scale shared by all rows (what a single quantizer would do) is shown to
 *     lose the other experts' values to the format's subnormals (its error on them is many times the
 *     per-expert one; at x1000 both formats still hold them, and the two errors are alike);
 *   - an expert without rows: scale_inv 1 for its rows' casts, a zero weight gradient; the row of no
 *     segment: zero output, zero input gradient;
 *   - delayed scaling: each expert casts with its own column's scale (distinct scales set in the
 *     state) and records its own amax there, from column i[3]; the other columns untouched; an
 *     evaluation's op (op_for_eval) records nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/fp8.h"
#include "ops/ops.h"
#include "runtime/cpu/exec.h"

static int failures;
#define CHECK(c, ...)                                                                                        \
  do {                                                                                                       \
    if (!(c)) {                                                                                              \
      fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                                        \
      fprintf(stderr, __VA_ARGS__);                                                                          \
      fprintf(stderr, "\n");                                                                                 \
      failures++;                                                                                            \
    }                                                                                                        \
  } while (0)

enum { E = 4, R = 12, K = 16, N = 8, LEN = 2, NCOL = E + 2, COL = 1 };
static const int SEG[E][2] = {{0, 3}, {3, 4}, {7, 0}, {7, 4}};

static int expert_of(int r) {
  for (int e = 0; e < E; e++)
    if (r >= SEG[e][0] && r < SEG[e][0] + SEG[e][1]) return e;
  return -1;
}

/* Values of magnitude up to about 1, spread over a few binades (so that small ones matter). */
static float val(int i, int salt) {
  double u = (double)((i * 37 + salt * 101) % 97) / 96.0 * 2.0 - 1.0;
  return (float)(u * pow(2.0, -(double)((i * 7 + salt) % 6)));
}

typedef struct {
  Graph *g;
  CpuExec *e;
  int x, w, seg, dy, st_x, st_dy, st_w;
  int wq[3], fwd, fwd_out[4], dq[3], dgrad, wgrad, qop, dqop;
} Net;

/* The weight cast, the forward, dy's cast and both gradient products; delayed: with the states. */
static int build(Net *t, int delayed) {
  Graph *g = t->g = graph_new();
  int64_t xs[2] = {R, K}, ws[3] = {E, N, K}, ss[2] = {E, 2}, ds[2] = {R, N}, sts[2] = {1 + LEN, NCOL};
  t->x = graph_tensor(g, "x", DT_F32, ROLE_ACT, 2, xs);
  t->w = graph_tensor(g, "w", DT_F32, ROLE_PARAM, 3, ws);
  t->seg = graph_tensor(g, "seg", DT_I32, ROLE_ACT, 2, ss);
  t->dy = graph_tensor(g, "dy", DT_F32, ROLE_ACT, 2, ds);
  t->st_x = graph_tensor(g, "st_x", DT_F32, ROLE_OPTIM, 2, sts);
  t->st_dy = graph_tensor(g, "st_dy", DT_F32, ROLE_OPTIM, 2, sts);
  t->st_w = graph_tensor(g, "st_w", DT_F32, ROLE_OPTIM, 2, sts);
  OpAttrs wa = {.i = {FP8_E4M3, delayed, COL}}, la = {.i = {FP8_E4M3, FP8_E5M2, delayed, COL, COL}},
          da = {.i = {FP8_E5M2, delayed, COL, 0, 1}}, ga = {.i = {DT_F32}};
  int win[2] = {t->w, t->st_w};
  t->qop = graph_op(g, OP_FP8_QUANT_GROUPED, win, delayed ? 2 : 1, &wa, t->wq, NULL);
  int lin[7] = {t->x, t->wq[0], t->wq[1], t->wq[2], t->seg, t->st_x, t->st_dy};
  t->fwd = graph_op(g, OP_GROUPED_LINEAR_FP8, lin, delayed ? 7 : 5, &la, t->fwd_out, NULL);
  int din[3] = {t->dy, t->seg, t->st_dy};
  t->dqop = graph_op(g, OP_FP8_QUANT_GROUPED, din, delayed ? 3 : 2, &da, t->dq, NULL);
  int dg[5] = {t->dq[0], t->wq[1], t->dq[2], t->wq[2], t->seg},
      wg[5] = {t->dq[1], t->fwd_out[1], t->dq[2], t->fwd_out[2], t->seg};
  int o1, o2;
  t->dgrad = graph_op(g, OP_GROUPED_FP8_DGRAD, dg, 5, &ga, &o1, NULL);
  t->wgrad = graph_op(g, OP_GROUPED_FP8_WGRAD, wg, 5, &ga, &o2, NULL);
  if (t->qop < 0 || t->fwd < 0 || t->dqop < 0 || t->dgrad < 0 || t->wgrad < 0) {
    CHECK(0, "the graph does not build: %s", g->err);
    return -1;
  }
  graph_plan_trivial(g, 4);
  char err[256] = "";
  if (!(t->e = cpu_exec_new(g, CPU_F32, 1, err, sizeof err))) {
    CHECK(0, "cpu_exec_new: %s", err);
    return -1;
  }
  int32_t *sg = cpu_exec_ptr(t->e, t->seg);
  for (int e = 0; e < E; e++)
    sg[2 * e] = SEG[e][0], sg[2 * e + 1] = SEG[e][1];
  memset(cpu_exec_ptr(t->e, t->st_x), 0, sizeof(float) * (1 + LEN) * NCOL);
  memset(cpu_exec_ptr(t->e, t->st_dy), 0, sizeof(float) * (1 + LEN) * NCOL);
  memset(cpu_exec_ptr(t->e, t->st_w), 0, sizeof(float) * (1 + LEN) * NCOL);
  return 0;
}

static void fill(Net *t, double xbig[E], double dybig[E]) {
  float *x = cpu_exec_ptr(t->e, t->x), *w = cpu_exec_ptr(t->e, t->w), *dy = cpu_exec_ptr(t->e, t->dy);
  for (int r = 0; r < R; r++) {
    int e = expert_of(r);
    for (int k = 0; k < K; k++)
      x[r * K + k] = (float)(val(r * K + k, 1) * (e >= 0 ? xbig[e] : 1.0));
    for (int n = 0; n < N; n++)
      dy[r * N + n] = (float)(val(r * N + n, 2) * 1e-3 * (e >= 0 ? dybig[e] : 1.0));
  }
  for (int i = 0; i < E * N * K; i++)
    w[i] = (float)(val(i, 3) * 0.05 * (1 + i / (N * K)));
}

static void run(Net *t) {
  int ops[5] = {t->qop, t->fwd, t->dqop, t->dgrad, t->wgrad};
  for (int i = 0; i < 5; i++)
    cpu_exec_run_op(t->e, ops[i]);
}

/* The reference: v's rows [r0, r0 + m) (row length k) cast with scale `scale` (or, scale 0, their
 * own amax's current scale), into q; returns the scale used. */
static float ref_cast(const float *v, int r0, int m, int k, int fmt, float scale, double *q) {
  double amax = 0;
  for (int i = r0 * k; i < (r0 + m) * k; i++)
    amax = fmax(amax, fabs((double)v[i]));
  if (scale == 0) scale = fp8_scale((float)amax, fmt);
  for (int i = r0 * k; i < (r0 + m) * k; i++)
    q[i] = fp8_round((double)(float)(v[i] * scale), fmt);
  return scale;
}

typedef struct {
  double y[R * N], dx[R * K], dw[E * N * K];
} Ref;

/* TE's grouped fp8 linear, expert by expert, or (shared) with one scale for all rows of x and dy */
static void reference(Net *t, Ref *o, int shared) {
  const float *x = cpu_exec_ptr(t->e, t->x), *w = cpu_exec_ptr(t->e, t->w), *dy = cpu_exec_ptr(t->e, t->dy);
  static double qx[R * K], qw[E * N * K], qd[R * N];
  float sx[E], sw[E], sd[E];
  memset(qx, 0, sizeof qx), memset(qd, 0, sizeof qd), memset(o, 0, sizeof *o);
  float shx = 0, shd = 0;
  if (shared) {
    double q2[R * K > R * N ? R * K : R * N];
    shx = ref_cast(x, 0, SEG[E - 1][0] + SEG[E - 1][1], K, FP8_E4M3, 0, q2);
    shd = ref_cast(dy, 0, SEG[E - 1][0] + SEG[E - 1][1], N, FP8_E5M2, 0, q2);
  }
  for (int e = 0; e < E; e++) {
    sw[e] = ref_cast(w + e * N * K, 0, N, K, FP8_E4M3, 0, qw + e * N * K);
    sx[e] = ref_cast(x, SEG[e][0], SEG[e][1], K, FP8_E4M3, shx, qx);
    sd[e] = ref_cast(dy, SEG[e][0], SEG[e][1], N, FP8_E5M2, shd, qd);
  }
  for (int r = 0; r < R; r++) {
    int e = expert_of(r);
    if (e < 0) continue;
    for (int n = 0; n < N; n++) {
      double s = 0;
      for (int k = 0; k < K; k++)
        s += qx[r * K + k] * qw[(e * N + n) * K + k];
      o->y[r * N + n] = s / sx[e] / sw[e];
    }
    for (int k = 0; k < K; k++) {
      double s = 0;
      for (int n = 0; n < N; n++)
        s += qd[r * N + n] * qw[(e * N + n) * K + k];
      o->dx[r * K + k] = s / sd[e] / sw[e];
    }
    for (int n = 0; n < N; n++)
      for (int k = 0; k < K; k++)
        o->dw[(e * N + n) * K + k] += qd[r * N + n] * qx[r * K + k] / sd[e] / sx[e];
  }
}

/* The relative L2 distance of the op's output from the reference over the rows of expert `only` (-1
 * every row; wgrad: expert `only`'s tile). */
static double rel(const float *got, const double *want, int r0, int r1, int width) {
  double d = 0, n = 0;
  for (int i = r0 * width; i < r1 * width; i++)
    d += (got[i] - want[i]) * (got[i] - want[i]), n += want[i] * want[i];
  return n > 0 ? sqrt(d / n) : sqrt(d);
}

static float *outp(Net *t, int op, int i) { return cpu_exec_ptr(t->e, t->g->op[op].out[i]); }

static void check_reference(Net *t, const char *what) {
  Ref ref;
  reference(t, &ref, 0);
  const float *y = outp(t, t->fwd, 0), *dx = outp(t, t->dgrad, 0), *dw = outp(t, t->wgrad, 0);
  double ey = rel(y, ref.y, 0, R, N), ex = rel(dx, ref.dx, 0, R, K), ew = rel(dw, ref.dw, 0, E * N, K);
  CHECK(ey < 1e-5 && ex < 1e-5 && ew < 1e-5, "%s: y %.2e, dx %.2e, dw %.2e from the reference", what, ey, ex,
        ew);
  for (int i = 0; i < N; i++)
    CHECK(y[(R - 1) * N + i] == 0, "%s: the row of no segment has output %g", what, y[(R - 1) * N + i]);
  for (int i = 0; i < K; i++)
    CHECK(dx[(R - 1) * K + i] == 0, "%s: the row of no segment has input gradient %g", what,
          dx[(R - 1) * K + i]);
  for (int i = 0; i < N * K; i++)
    CHECK(dw[2 * N * K + i] == 0, "%s: the expert without rows has weight gradient %g", what,
          dw[2 * N * K + i]);
  const float *sx = outp(t, t->fwd, 2), *sd = outp(t, t->dqop, 2);
  CHECK(sx[2] == 1.0f && sd[2] == 1.0f, "%s: the expert without rows: scale_inv %g, %g (1 expected)", what,
        (double)sx[2], (double)sd[2]);
  printf("ok: %s: y, dx, dw within %.1e, %.1e, %.1e of the per-expert reference\n", what, ey, ex, ew);
}

/* Expert `big`'s rows x1000 in x (fwd) or dy: the other experts' outputs and gradients bitwise
 * unchanged; then the shared-scale reference's error on them against the per-expert one. */
static void check_isolation(int big, int in_dy, double factor) {
  Net t;
  if (build(&t, 0)) return;
  double one[E] = {1, 1, 1, 1}, scaled[E] = {1, 1, 1, 1};
  scaled[big] = factor;
  fill(&t, one, one);
  run(&t);
  static float y0[R * N], dx0[R * K], dw0[E * N * K];
  memcpy(y0, outp(&t, t.fwd, 0), sizeof y0), memcpy(dx0, outp(&t, t.dgrad, 0), sizeof dx0);
  memcpy(dw0, outp(&t, t.wgrad, 0), sizeof dw0);
  fill(&t, in_dy ? one : scaled, in_dy ? scaled : one);
  run(&t);
  const char *what = in_dy ? "output-gradient rows" : "input rows";
  char name[96];
  snprintf(name, sizeof name, "expert %d's %s x%g", big, what, factor);
  check_reference(&t, name);
  const float *y = outp(&t, t.fwd, 0), *dx = outp(&t, t.dgrad, 0), *dw = outp(&t, t.wgrad, 0);
  int moved = 0;
  for (int e = 0; e < E; e++) {
    if (e == big) continue;
    int r0 = SEG[e][0], r1 = r0 + SEG[e][1];
    moved += memcmp(y + r0 * N, y0 + r0 * N, sizeof(float) * (size_t)(r1 - r0) * N) != 0;
    moved += memcmp(dx + r0 * K, dx0 + r0 * K, sizeof(float) * (size_t)(r1 - r0) * K) != 0;
    moved += memcmp(dw + e * N * K, dw0 + e * N * K, sizeof(float) * N * K) != 0;
  }
  CHECK(moved == 0, "%s: %d outputs of the other experts moved", name, moved);
  /* what one shared scale would give the other experts: compare both to the fp64 step without fp8 */
  Ref per, sh;
  reference(&t, &per, 0);
  reference(&t, &sh, 1);
  const float *x = cpu_exec_ptr(t.e, t.x), *w = cpu_exec_ptr(t.e, t.w), *dyv = cpu_exec_ptr(t.e, t.dy);
  double d_per = 0, d_sh = 0, nrm = 0;
  for (int e = 0; e < E; e++) {
    if (e == big) continue;
    for (int r = SEG[e][0]; r < SEG[e][0] + SEG[e][1]; r++)
      for (int j = 0; j < (in_dy ? K : N); j++) {
        double exact = 0;
        if (in_dy)
          for (int n = 0; n < N; n++)
            exact += (double)dyv[r * N + n] * w[(e * N + n) * K + j];
        else
          for (int k = 0; k < K; k++)
            exact += (double)x[r * K + k] * w[(e * N + j) * K + k];
        double p = in_dy ? per.dx[r * K + j] : per.y[r * N + j],
               s = in_dy ? sh.dx[r * K + j] : sh.y[r * N + j];
        d_per += (p - exact) * (p - exact), d_sh += (s - exact) * (s - exact), nrm += exact * exact;
      }
  }
  d_per = sqrt(d_per / nrm), d_sh = sqrt(d_sh / nrm);
  /* from where the others fall below the format's normal range under the big expert's scale */
  CHECK(factor < 1e4 || d_sh > 4 * d_per,
        "%s: a shared scale's error on the other experts %.3f is not far above the per-expert %.3f", name,
        d_sh, d_per);
  printf("ok: %s: the other experts' outputs and gradients bitwise unchanged; their error from the exact "
         "product %.4f per expert, %.4f with one shared scale\n",
         name, d_per, d_sh);
  cpu_exec_free(t.e);
  graph_free(t.g);
}

/* Delayed scaling: expert e casts x with column COL + e's scale, records its amax there. */
static void check_delayed(void) {
  Net t;
  if (build(&t, 1)) return;
  double one[E] = {1, 1, 1, 1}, big[E] = {1, 1000, 1, 1};
  fill(&t, big, one);
  float *stx = cpu_exec_ptr(t.e, t.st_x), *std_ = cpu_exec_ptr(t.e, t.st_dy);
  for (int c = 0; c < NCOL; c++) /* distinct scales, powers of two (so 1 / scale is exact) */
    stx[c] = (float)ldexp(1.0, c - 2), std_[c] = (float)ldexp(1.0, c + 3);
  stx[NCOL] = 7.0f, stx[NCOL + NCOL - 1] = 9.0f; /* the columns outside the experts': untouched */
  run(&t);
  const float *sx = outp(&t, t.fwd, 2), *sd = outp(&t, t.dqop, 2), *x = cpu_exec_ptr(t.e, t.x),
              *dy = cpu_exec_ptr(t.e, t.dy), *xq = outp(&t, t.fwd, 3);
  for (int e = 0; e < E; e++) {
    double ax = 0, ad = 0;
    for (int i = SEG[e][0] * K; i < (SEG[e][0] + SEG[e][1]) * K; i++)
      ax = fmax(ax, fabs((double)x[i]));
    for (int i = SEG[e][0] * N; i < (SEG[e][0] + SEG[e][1]) * N; i++)
      ad = fmax(ad, fabs((double)dy[i]));
    CHECK(sx[e] == 1.0f / stx[COL + e] && sd[e] == 1.0f / std_[COL + e],
          "delayed: expert %d's scale_inv %g, %g; its columns' scales %g, %g", e, (double)sx[e],
          (double)sd[e], (double)stx[COL + e], (double)std_[COL + e]);
    CHECK(stx[NCOL + COL + e] == (float)ax && std_[NCOL + COL + e] == (float)ad,
          "delayed: expert %d recorded amaxes %g, %g; its rows' %g, %g", e, (double)stx[NCOL + COL + e],
          (double)std_[NCOL + COL + e], ax, ad);
    for (int i = SEG[e][0] * K; i < (SEG[e][0] + SEG[e][1]) * K; i++)
      CHECK(xq[i] == (float)fp8_round((double)(float)(x[i] * stx[COL + e]), FP8_E4M3),
            "delayed: expert %d element %d cast %g", e, i, (double)xq[i]);
  }
  CHECK(stx[NCOL] == 7.0f && stx[NCOL + NCOL - 1] == 9.0f && std_[NCOL] == 0 && std_[2 * NCOL - 1] == 0,
        "delayed: a column outside the experts' moved");
  /* an evaluation's forward records nothing */
  memset(stx + NCOL, 0, sizeof(float) * NCOL);
  CHECK(cpu_exec_run_op_eval(t.e, t.fwd) == 0, "delayed: the evaluation's op does not run");
  for (int c = 0; c < NCOL; c++)
    CHECK(stx[NCOL + c] == 0, "delayed: an evaluation recorded an amax in column %d", c);
  printf("ok: delayed: each expert cast with its own column's scale (columns %d-%d), recorded its own amax; "
         "an evaluation records none\n",
         COL, COL + E - 1);
  cpu_exec_free(t.e);
  graph_free(t.g);
}

int main(void) {
  Net t;
  if (build(&t, 0) == 0) {
    double one[E] = {1, 1, 1, 1};
    fill(&t, one, one);
    run(&t);
    check_reference(&t, "current scaling");
    cpu_exec_free(t.e);
    graph_free(t.g);
  }
  check_isolation(1, 0, 1000);
  check_isolation(3, 1, 1000);
  check_isolation(1, 0, 1e5);  /* E4M3: the others' amax ~ 448 / 1e5, E4M3's subnormals below 2^-6 */
  check_isolation(3, 1, 1e11); /* E5M2: subnormals below 2^-14 */
  check_delayed();
  if (failures) fprintf(stderr, "%d failures\n", failures);
  return failures != 0;
}
