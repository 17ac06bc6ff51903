/* test_fp8_delayed.c — Transformer Engine's delayed scaling (DelayedScaling; Megatron's fp8_recipe =
 * "delayed") as ir/ops/fp8.c runs it on the CPU, against a reference written here from TE's rule
 * (transformer_engine/common/recipe/delayed_scaling.cu, amax_and_scale_update) and not from stepc's
 * code:
 *
 *   - a tensor cast in step t uses the scale S(t-1) that the updates before step t left: S(0) = 1;
 *     its bytes are fp8(x * S) (fp32 product, then the format's rounding: ir/ops/fp8.h, checked bit
 *     for bit against CUDA by unit.fp8_rounding) and its dequantizing factor 1 / S in fp32;
 *   - every cast between two updates folds max |x| into the current amax (TE's casts atomicMax
 *     into amax_history[0]): two casts of one step record the larger;
 *   - an update with a current amax a = 0 records nothing and keeps the scale; else a enters the
 *     history, which keeps the last `len` recorded amaxes; the amax used is a (most_recent) or the
 *     largest of those `len` (max; entries never recorded count 0); the new scale is
 *     fp8_max / 2^margin / amax in fp32 when amax is finite and positive, else the previous scale,
 *     and the fp32 maximum where the quotient overflows;
 *   - the state the update leaves is TE's: the current entry 0, then the recorded amaxes oldest
 *     first, the newest last, zeros where fewer were recorded.
 *
 * Over ten steps with amaxes that rise, fall, are 0 (an all-zero tensor: the scale stays), infinite
 * (the scale stays; under max it stays while the inf is in the window), tiny (the scale overflows
 * to the fp32 maximum) and two casts in one step; for history lengths 1 to 5, both algorithms,
 * margins -1 to 2, both formats; the cast's column among three of its state, the other two
 * untouched. Every value compared bitwise. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/fp8.h"
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

enum { M = 8, K = 16, N = M * K, NCOL = 3, COL = 1, NSTEP = 10 };

typedef struct {
  int fmt, len, algo, margin;
} Case;

/* The amax of each step's casts (0 or 2 a step: a second value means a second cast before the
 * update; -1 none). */
static const double AMAX[NSTEP][2] = {{3.0, -1},      {0.75, -1}, {0, -1},     {40.0, 0.5}, {1e-3, -1},
                                      {INFINITY, -1}, {5.0, -1},  {1e-38, -1}, {2.0, 7.0},  {2.5, -1}};

/* x with max |x| = a: a spread of values in [-a, a], one of them -a or a (or an inf). */
static void fill(float *x, double a, int step, int which) {
  for (int i = 0; i < N; i++) {
    double u = (double)((i * 37 + step * 11 + which * 5) % 61) / 60.0 * 2.0 - 1.0; /* in [-1, 1] */
    x[i] = isinf(a) ? (float)(u * 3.0) : (float)(a * u * 0.999);
  }
  x[(step * 7 + which) % N] = (float)((step + which) % 2 ? -a : a);
}

/* The reference's state: the scale and the recorded amaxes, newest last. */
typedef struct {
  float scale;
  double rec[64];
  int nrec;
} Ref;

static void ref_update(Ref *r, const Case *c, double cur) {
  float top = (float)ldexp(c->fmt ? 57344.0 : 448.0, -c->margin);
  double amax = 0;
  if (cur != 0) {
    r->rec[r->nrec++] = cur;
    if (c->algo == FP8_AMAX_MOST_RECENT)
      amax = cur;
    else
      for (int k = 0; k < c->len && k < r->nrec; k++)
        amax = fmax(amax, r->rec[r->nrec - 1 - k]);
  }
  if (isfinite(amax) && amax > 0) {
    float s = top / (float)amax;
    r->scale = isinf(s) ? FLT_MAX : s;
  }
}

/* The history entry i (0 the current one) the reference expects after an update. */
static double ref_hist(const Ref *r, const Case *c, int i) {
  if (i == 0) return 0;
  int back = c->len - 1 - i; /* 0: the newest */
  return back < r->nrec ? r->rec[r->nrec - 1 - back] : 0;
}

static float as_f(double v) { return (float)v; }

static void run_case(const Case *c) {
  Graph *g = graph_new();
  int64_t xs[2] = {M, K}, ss[2] = {1 + c->len, NCOL};
  int x[2] = {graph_tensor(g, "x0", DT_F32, ROLE_ACT, 2, xs), graph_tensor(g, "x1", DT_F32, ROLE_ACT, 2, xs)};
  int st = graph_tensor(g, "state", DT_F32, ROLE_OPTIM, 2, ss);
  OpAttrs qa = {.i = {c->fmt, 1, COL}}, ua = {.i = {c->fmt, c->algo, c->margin}};
  int q[2][3], cast[2];
  for (int k = 0; k < 2; k++) {
    int in[2] = {x[k], st};
    cast[k] = graph_op(g, OP_FP8_QUANT, in, 2, &qa, q[k], NULL);
  }
  int upd = graph_op_into(g, OP_FP8_SCALE_UPDATE, NULL, 0, &st, 1, &ua);
  char err[256] = "";
  CpuExec *e = NULL;
  if (cast[0] >= 0 && cast[1] >= 0 && upd >= 0) {
    graph_plan_trivial(g, 4);
    e = cpu_exec_new(g, CPU_F32, 1, err, sizeof err);
  }
  if (!e) {
    CHECK(0, "the graph does not build: %s %s", g->err, err);
    graph_free(g);
    return;
  }
  float *state = cpu_exec_ptr(e, st);
  memset(state, 0, sizeof(float) * (size_t)(1 + c->len) * NCOL);
  Ref r = {.scale = 1.0f};
  char what[96];
  snprintf(what, sizeof what, "%s len %d %s margin %d", c->fmt ? "E5M2" : "E4M3", c->len,
           c->algo == FP8_AMAX_MAX ? "max" : "most_recent", c->margin);
  int bad = 0;
  for (int s = 0; s < NSTEP && !bad; s++) {
    double cur = 0;
    for (int k = 0; k < 2 && AMAX[s][k] >= 0; k++) {
      float *xv = cpu_exec_ptr(e, x[k]);
      fill(xv, AMAX[s][k], s, k);
      cpu_exec_run_op(e, cast[k]);
      const float *qv = cpu_exec_ptr(e, q[k][0]), *qt = cpu_exec_ptr(e, q[k][1]),
                  *sinv = cpu_exec_ptr(e, q[k][2]);
      float want_inv = 1.0f / r.scale;
      if (memcmp(sinv, &want_inv, 4)) {
        CHECK(0, "%s step %d cast %d: scale_inv %a, the rule's 1 / %a = %a", what, s, k, (double)*sinv,
              (double)r.scale, (double)want_inv);
        bad = 1;
      }
      for (int i = 0; i < N && !bad; i++) {
        float want = as_f(fp8_round((double)(xv[i] * r.scale), c->fmt));
        int row = i / K, col = i % K;
        if (memcmp(&qv[i], &want, 4) || memcmp(&qt[col * M + row], &want, 4)) {
          CHECK(0, "%s step %d cast %d: element %d %a x %a -> %a, the rule's %a", what, s, k, i,
                (double)xv[i], (double)r.scale, (double)qv[i], (double)want);
          bad = 1;
        }
      }
      double a = 0;
      for (int i = 0; i < N; i++)
        a = fmax(a, fabs((double)xv[i]));
      cur = fmax(cur, a);
    }
    float want_cur = (float)cur;
    if (memcmp(&state[NCOL + COL], &want_cur, 4)) {
      CHECK(0, "%s step %d: current amax %a before the update, the casts' max %a", what, s,
            (double)state[NCOL + COL], cur);
      bad = 1;
    }
    cpu_exec_run_op(e, upd);
    ref_update(&r, c, cur);
    if (memcmp(&state[COL], &r.scale, 4)) {
      CHECK(0, "%s step %d: scale %a after the update, the rule's %a", what, s, (double)state[COL],
            (double)r.scale);
      bad = 1;
    }
    for (int i = 0; i < c->len && !bad; i++) {
      float want = (float)ref_hist(&r, c, i);
      if (memcmp(&state[(1 + i) * NCOL + COL], &want, 4)) {
        CHECK(0, "%s step %d: history entry %d %a, the rule's %a", what, s, i,
              (double)state[(1 + i) * NCOL + COL], (double)want);
        bad = 1;
      }
    }
    for (int j = 0; j < NCOL && !bad; j += 2) /* the other columns: never cast, scale 1, no history */
      for (int i = 0; i <= c->len; i++)
        if (i == 0 ? fp8_delayed_scale(state[j]) != 1.0f : state[i * NCOL + j] != 0.0f) {
          CHECK(0, "%s step %d: column %d moved (row %d %a)", what, s, j, i, (double)state[i * NCOL + j]);
          bad = 1;
          break;
        }
  }
  printf("%-4s %s: %d steps, scale after the last %a (%g)\n", bad ? "FAIL" : "ok", what, NSTEP,
         (double)r.scale, (double)r.scale);
  cpu_exec_free(e);
  graph_free(g);
}

int main(void) {
  static const Case cases[] = {
      {FP8_E4M3, 1, FP8_AMAX_MOST_RECENT, 0}, /* Megatron's defaults */
      {FP8_E4M3, 1, FP8_AMAX_MAX, 0},          {FP8_E4M3, 4, FP8_AMAX_MAX, 0},
      {FP8_E4M3, 4, FP8_AMAX_MOST_RECENT, 1},  {FP8_E5M2, 3, FP8_AMAX_MAX, 2},
      {FP8_E5M2, 1, FP8_AMAX_MOST_RECENT, -1}, {FP8_E5M2, 5, FP8_AMAX_MAX, 0},
      {FP8_E4M3, 2, FP8_AMAX_MAX, -1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    run_case(&cases[i]);
  /* the stored 0 is the initial scale 1 */
  CHECK(fp8_delayed_scale(0.0f) == 1.0f && fp8_delayed_scale(2.5f) == 2.5f, "fp8_delayed_scale");
  return failures ? 1 : 0;
}
