/* test_fp8_train.c — fp8 training (model.fp8 with fp8_recipe = "tensorwise", ir/ops/fp8.c) on the CPU
 * reference executor, models/tiny.lua (4 layers, 16 fp8 linears):
 *
 *   lowering   every layer linear is FP8_QUANT + LINEAR_FP8, the output layer stays LINEAR; with
 *              first_last_layers_bf16 the first and last layers' linears are LINEAR again (Megatron's
 *              is_first_last_bf16_layer), and num_layers_at_start_in_bf16 = 2 keeps two.
 *   gradients  the first step's main gradients against the same step without fp8 (fp32 on the CPU),
 *              within the bound derived below; a bug that drops a scale or a transpose gives errors
 *              of order 1 or more.
 *   micro      2 micro-batches of 2 sequences against 1 of 4: each micro-batch takes its own scales,
 *              so not bitwise, but within the same bound.
 *   loss       ten steps' losses beside the run without fp8, within LOSS_TOL.
 *
 * The gradient bound. An fp8 value is x (1 + d) with |d| <= u: u = 2^-4 for E4M3 (3 mantissa bits,
 * round to nearest), 2^-3 for E5M2 (2 bits); current scaling maps each tensor's amax to the
 * format's max, so every element but those 2^-6 (E4M3) / 2^-14 (E5M2) below the amax is normal
 * and has this relative error. A dot product of quantized a and b is then
 *   sum_k a_k b_k (1 + d_ak)(1 + d_bk),  error <= (u_a + u_b + u_a u_b) sum_k |a_k b_k|
 * (products and fp32 sums being exact to far less). That worst case grows with the cancellation in
 * the sum; round-to-nearest errors are, however, unbiased and independent between elements, so the
 * error of the sum has a standard deviation of at most sqrt(u_a^2 + u_b^2) times sqrt(sum (a_k b_k)^2),
 * which for a sum of independent signs is the size of the sum itself: a GEMM's output moves by a
 * relative (Frobenius) error of at most e_i = sqrt(u_a^2 + u_b^2), whatever K. Through the chain of
 * layers the errors of different GEMMs are independent too and, to first order, add in quadrature
 * (residual connections and normalisations keep the gain of each path near 1): a gradient that
 * depends on n quantized GEMMs is within sqrt(sum_i e_i^2) of its unquantized value. The first
 * step's gradients depend on every forward GEMM (16, E4M3 x E4M3: e^2 = 2 * 2^-8), every backward
 * data-gradient GEMM (16, E5M2 x E4M3: e^2 = 2^-6 + 2^-8) and their own weight-gradient GEMM (one
 * more of those): bound = sqrt(16 * 2^-7 + 17 * (2^-6 + 2^-8)) = 0.676, the relative Frobenius error
 * of each parameter's main gradient and of all of them together. Measured (hybrid): 0.088 over all, 0.115
 * at worst (a norm weight); e4m3 (every GEMM E4M3 x E4M3, bound sqrt(33 * 2^-7) = 0.51): 0.072. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cpu_train.h"
#include "frontend/frontend.h"
#include "lower/lower.h"
#include "plan/plan.h"
#include "runtime/cpu/program.h"
#include "validate/validate.h"

#define LOSS_STEPS 10
/* The loss is a function of the forward alone: the logits' relative error is within
 * sqrt(16 * 2^-7) = 0.35 by the argument above, and tiny's logits at initialisation are about
 * 0.1 in size (hidden 128, init std 0.02, after the final norm), so the first loss moves by at most
 * ~0.035 nats; ten steps of Adam, whose update size is set by the learning rate and not by the
 * gradient's size, keep the curves as close. 0.05 nats is under 1% of the loss (ln 256 = 5.5). */
#define LOSS_TOL 0.05

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

static int load(const char *const *ov, int nov, Spec *spec) {
  static Spec raw;
  DiagList d;
  diag_init(&d);
  int rc =
      frontend_load("models/tiny.lua", ov, nov, NULL, &raw, &d) != 0 || validate_spec(&raw, spec, &d) != 0;
  if (rc) diag_print(&d, stderr);
  diag_free(&d);
  spec->per_rank = true; /* lower what a build executes: fp8 linears (lb_linear_op) */
  return rc;
}

/* One step's main gradients (by parameter name) after its micro-batches, on the trivial plan. */
typedef struct {
  int n;
  char (*name)[IR_NAME_MAX];
  float **g;
  int64_t *numel;
} Grads;

static int first_step_grads(const Spec *s, Grads *out) {
  Graph *g;
  char err[512];
  Schedule sc;
  if (lower_step(s, &g, err, sizeof err) != LOWER_OK || schedule_build(g, s, &sc, err, sizeof err) != 0)
    return fprintf(stderr, "%s\n", err), -1;
  graph_plan_trivial(g, 4);
  PlanProgram prog;
  if (plan_program_build(g, &sc, NULL, &prog) != 0) return -1;
  PlanExec *x = plan_exec_new(g, &prog.p, 2, err, sizeof err);
  CpuData d;
  if (!x || cpu_data_open_spec(s, &d, err, sizeof err) != 0) return fprintf(stderr, "%s\n", err), -1;
  cpu_exec_init_params(plan_exec_cpu(x), (uint64_t)s->train.seed);
  for (int m = 0; m < sc.nmicro; m++) {
    double loss;
    if (plan_exec_micro(x, &d, (uint64_t)s->train.seed, 1, m, &loss, err, sizeof err) != 0)
      return fprintf(stderr, "%s\n", err), -1;
  }
  memset(out, 0, sizeof *out);
  for (int t = 0; t < g->nt; t++)
    out->n += g->t[t].role == ROLE_GRAD;
  out->name = calloc((size_t)out->n, sizeof *out->name);
  out->g = calloc((size_t)out->n, sizeof *out->g);
  out->numel = calloc((size_t)out->n, sizeof *out->numel);
  for (int t = 0, k = 0; t < g->nt; t++) {
    if (g->t[t].role != ROLE_GRAD) continue;
    int64_t n = tensor_numel(&g->t[t]);
    snprintf(out->name[k], IR_NAME_MAX, "%s", g->t[t].name);
    out->g[k] = malloc((size_t)n * sizeof(float));
    memcpy(out->g[k], cpu_exec_ptr(plan_exec_cpu(x), t), (size_t)n * sizeof(float));
    out->numel[k++] = n;
  }
  if (d.free) d.free(&d);
  plan_exec_free(x);
  plan_program_free(&prog);
  schedule_free(&sc);
  graph_free(g);
  return 0;
}

static void grads_free(Grads *a) {
  for (int i = 0; i < a->n; i++)
    free(a->g[i]);
  free(a->g), free(a->name), free(a->numel);
}

/* The relative Frobenius error of b against a, per tensor (worst) and over all; -1 when the
 * parameters differ. */
static double compare(const Grads *a, const Grads *b, double *all, const char **worst_name) {
  if (a->n != b->n) return -1;
  double worst = 0, d2 = 0, r2 = 0;
  for (int i = 0; i < a->n; i++) {
    if (strcmp(a->name[i], b->name[i]) || a->numel[i] != b->numel[i]) return -1;
    double dd = 0, rr = 0;
    for (int64_t j = 0; j < a->numel[i]; j++) {
      double e = (double)b->g[i][j] - (double)a->g[i][j];
      dd += e * e, rr += (double)a->g[i][j] * a->g[i][j];
    }
    double rel = rr > 0 ? sqrt(dd / rr) : (dd > 0 ? INFINITY : 0);
    if (!(rel <= worst)) worst = rel, *worst_name = a->name[i];
    d2 += dd, r2 += rr;
  }
  *all = sqrt(d2 / r2);
  return worst;
}

static int count_kind(const Graph *g, OpKind k, int layer) {
  int n = 0;
  for (int o = 0; o < g->nop; o++)
    n += g->op[o].kind == k && g->op[o].tags.phase == IR_PHASE_FORWARD &&
         (layer < -1 || g->op[o].tags.layer == layer);
  return n;
}

static void test_lowering(void) {
  const char *fp8[] = {"model.fp8=hybrid", "model.fp8_recipe=tensorwise"};
  const char *fl[] = {"model.fp8=hybrid", "model.fp8_recipe=tensorwise", "model.first_last_layers_bf16=true"};
  const char *fl2[] = {"model.fp8=hybrid", "model.fp8_recipe=tensorwise", "model.first_last_layers_bf16=true",
                       "model.num_layers_at_start_in_bf16=2", "model.num_layers_at_end_in_bf16=0"};
  static Spec s;
  Graph *g;
  char err[256];
  /* per layer: the fp8 linears (want[l] of 4: qkv, proj, fc1, fc2) */
  const struct {
    const char *const *ov;
    int nov, want[4];
  } cases[] = {{fp8, 2, {4, 4, 4, 4}}, {fl, 3, {0, 4, 4, 0}}, {fl2, 5, {0, 0, 4, 4}}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    if (load(cases[c].ov, cases[c].nov, &s) || lower_step(&s, &g, err, sizeof err) != LOWER_OK) {
      CHECK(0, "case %zu does not lower: %s", c, err);
      continue;
    }
    for (int l = 0; l < 4; l++) {
      int f = count_kind(g, OP_LINEAR_FP8, l), q = count_kind(g, OP_FP8_QUANT, l),
          b = count_kind(g, OP_LINEAR, l);
      CHECK(f == cases[c].want[l] && q == f && b == 4 - f,
            "case %zu layer %d: %d LINEAR_FP8, %d FP8_QUANT, %d LINEAR", c, l, f, q, b);
    }
    CHECK(count_kind(g, OP_LINEAR, -1) == 1 && count_kind(g, OP_LINEAR_FP8, -1) == 0,
          "case %zu: the output layer is not one bf16 LINEAR", c);
    printf("lowering %zu: fp8 linears per layer %d %d %d %d\n", c, count_kind(g, OP_LINEAR_FP8, 0),
           count_kind(g, OP_LINEAR_FP8, 1), count_kind(g, OP_LINEAR_FP8, 2), count_kind(g, OP_LINEAR_FP8, 3));
    graph_free(g);
  }
}

static void test_gradients(void) {
  const double u4 = 1.0 / 16, u5 = 1.0 / 8;
  const double bound = sqrt(16 * (u4 * u4 + u4 * u4) + 17 * (u5 * u5 + u4 * u4));
  const char *ref_ov[] = {"train.global_batch_size=4"};
  const char *fp8_ov[] = {"train.global_batch_size=4", "model.fp8=hybrid", "model.fp8_recipe=tensorwise"};
  const char *mb_ov[] = {"train.global_batch_size=4", "train.micro_batch_size=2", "model.fp8=hybrid",
                         "model.fp8_recipe=tensorwise"};
  const char *mb_ref_ov[] = {"train.global_batch_size=4", "train.micro_batch_size=2"};
  const char *e4_ov[] = {"train.global_batch_size=4", "model.fp8=e4m3", "model.fp8_recipe=tensorwise"};
  static Spec s;
  Grads ref, f8, mb, e4, mbr;
  if (load(ref_ov, 1, &s) || first_step_grads(&s, &ref) || load(fp8_ov, 3, &s) || first_step_grads(&s, &f8) ||
      load(mb_ov, 4, &s) || first_step_grads(&s, &mb) || load(e4_ov, 3, &s) || first_step_grads(&s, &e4) ||
      load(mb_ref_ov, 2, &s) || first_step_grads(&s, &mbr)) {
    CHECK(0, "a step did not run");
    return;
  }
  double all, worst;
  const char *wn = "";
  worst = compare(&ref, &f8, &all, &wn);
  printf(
      "first-step gradients, hybrid fp8 vs fp32: relative error %.4f over all, worst %.4f (%s); bound %.3f\n",
      all, worst, wn, bound);
  CHECK(worst >= 0 && worst <= bound && all <= bound, "fp8 gradients: worst %.4f, all %.4f, bound %.3f",
        worst, all, bound);
  CHECK(all > 0, "the fp8 step's gradients equal the fp32 step's: fp8 did not run");
  /* e4m3: every GEMM E4M3 x E4M3, a smaller bound */
  double b4 = sqrt(33 * 2 * u4 * u4);
  worst = compare(&ref, &e4, &all, &wn);
  printf(
      "first-step gradients, e4m3 fp8 vs fp32: relative error %.4f over all, worst %.4f (%s); bound %.3f\n",
      all, worst, wn, b4);
  CHECK(worst >= 0 && worst <= b4 && all <= b4, "e4m3 gradients: worst %.4f, all %.4f, bound %.3f", worst,
        all, b4);
  /* the same step in 2 micro-batches: against its own fp32 run (the mock batches follow the
   * micro-batch layout), within the bound; and not bitwise the 1-micro-batch fp8 step's relation */
  double plain = compare(&ref, &mbr, &all, &wn);
  printf("fp32, 2 micro-batches vs 1: relative error %.2e over all\n", all);
  worst = compare(&mbr, &mb, &all, &wn);
  printf("2 micro-batches, hybrid fp8 vs fp32: relative error %.4f over all, worst %.4f (%s); bound %.3f\n",
         all, worst, wn, bound);
  CHECK(worst >= 0 && worst <= bound && all > 0, "micro-batches: worst %.4f, bound %.3f", worst, bound);
  (void)plain;
  grads_free(&mbr);
  grads_free(&ref), grads_free(&f8), grads_free(&mb), grads_free(&e4);
}

static int losses(const char *const *ov, int nov, double *out) {
  static Spec s;
  if (load(ov, nov, &s)) return -1;
  CpuData data;
  char err[256];
  int rc;
  if (cpu_data_open_spec(&s, &data, err, sizeof err) != 0) return -1;
  CpuTrainer *tr = cpu_trainer_new(&s, &data, 2, &rc, err, sizeof err);
  if (!tr) return fprintf(stderr, "%s\n", err), -1;
  for (int i = 0; i < LOSS_STEPS; i++) {
    CpuStepStats st;
    if (cpu_trainer_step(tr, &st, err, sizeof err) != 0) return fprintf(stderr, "%s\n", err), -1;
    out[i] = st.loss;
  }
  cpu_trainer_free(tr);
  if (data.free) data.free(&data);
  return 0;
}

static void test_loss(void) {
  const char *fp8[] = {"model.fp8=hybrid", "model.fp8_recipe=tensorwise", "train.global_batch_size=4"};
  double a[LOSS_STEPS], b[LOSS_STEPS];
  if (losses(fp8 + 2, 1, a) || losses(fp8, 3, b)) {
    CHECK(0, "training did not run");
    return;
  }
  double worst = 0;
  for (int i = 0; i < LOSS_STEPS; i++)
    worst = fmax(worst, fabs(a[i] - b[i]));
  printf(
      "loss over %d steps: bf16 %.4f -> %.4f, fp8 %.4f -> %.4f, largest difference %.4f (tolerance %.2f)\n",
      LOSS_STEPS, a[0], a[LOSS_STEPS - 1], b[0], b[LOSS_STEPS - 1], worst, LOSS_TOL);
  CHECK(worst <= LOSS_TOL, "fp8 loss curve differs by %.4f", worst);
}

int main(void) {
  test_lowering();
  test_gradients();
  test_loss();
  return failures ? 1 : 0;
}
