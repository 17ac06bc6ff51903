/* step.c — gpu_step: whole training steps on the GPU against the CPU reference executor.
 *
 *   gpu_step grads  SPEC [KEY=VALUE ...]  first-step loss and every parameter's main gradient,
 *                                         GPU (bf16 compute) vs CPU (fp32), one line per tensor
 *   gpu_step masked SPEC [KEY=VALUE ...]  the same with loss masks: the recipe's targets with
 *                                         about 1 in m + 2 kept in micro-batch m (the others
 *                                         -100), so the micro-batches keep different counts and
 *                                         the loss divides by the step's total (ir/ops/loss.c)
 *   gpu_step train  SPEC STEPS CPU.json [KEY=VALUE ...]
 *                                         STEPS steps on the GPU beside the CPU's loss curve (a
 *                                         `stepc run --device cpu --json` output)
 *   gpu_step replay SPEC STEPS [KEY=VALUE ...]
 *                                         eager twice and full_iteration once: losses and every
 *                                         final parameter, master and moment bitwise equal
 *   gpu_step scoped SPEC STEPS IMPL:MODULES[;IMPL:MODULES...] [KEY=VALUE ...]
 *                                         per setting (e.g. "transformer_engine:[attn];local:[]"):
 *                                         the recipe eagerly and with its scoped graphs, bitwise
 *                                         equal; the graph and node counts are printed. One
 *                                         warm-up step unless K=V says otherwise; a run that
 *                                         captured no graph fails
 *   gpu_step optim  SPEC STEPS [KEY=VALUE ...]
 *                                         the multi-tensor optimizer launches against the
 *                                         per-tensor ones (bitwise with clipping off), replay ==
 *                                         eager, the first step's norm against the CPU (cmd_optim)
 *   gpu_step dump   SPEC OUTDIR [--device cuda|cpu] [KEY=VALUE ...]
 *                                         the first step's weights, batch, losses and main
 *                                         gradients as files for tests/gpu/torch_ref.py (dump.c)
 * Exit 0 pass, 1 fail, 77 no GPU (ctest: skipped). --cache DIR sets NVRTC's cubin cache.
 *
 * Tolerances (grads). The GPU runs bf16 weights and activations with fp32 accumulation; the CPU
 * runs everything in fp32 from the same fp32 initial weights (the GPU's compute copy is their
 * bf16 rounding). bf16 has an 8-bit significand: each rounding is up to 2^-9 = 0.2% relative,
 * and a gradient passes through ~10 rounded tensors per layer, with errors that add in
 * quadrature, so ~1% relative (L2 over the tensor) is the expected size for a 4-layer model and
 * a gradient that is wrong (a missing term, a wrong head or transpose) is off by O(1). We require
 * the relative L2 error of every gradient <= 5e-2 and its cosine to the CPU's >= 0.998, and the
 * first loss within 1e-2 relative (the loss is a mean over many tokens: its rounding averages
 * out). The measured values are printed beside the limits. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cpu_train.h"
#include "frontend/frontend.h"
#include "lower/lower.h"
#include "ops/ops.h"
#include "runtime/cpu/exec.h"
#include "trainer.h"
#include "validate/diag.h"
#include "validate/validate.h"

#define SKIP 77

int cmd_dump(const Spec *s, const char *outdir, int cuda, const char *cache); /* dump.c */
#define GRAD_REL_L2 5e-2
#define GRAD_COS 0.998
#define LOSS_REL 1e-2

static int load_spec(const char *path, const char *const *ov, int nov, Spec *out) {
  Spec raw;
  DiagList d;
  diag_init(&d);
  int rc = frontend_load(path, ov, nov, NULL, &raw, &d) != 0 || validate_spec(&raw, out, &d) != 0;
  if (rc) diag_print(&d, stderr);
  diag_free(&d);
  return rc;
}

/* A GPU trainer, or the exit code (SKIP without a GPU). */
static RtTrainer *gpu_trainer(const Spec *s, CpuData *data, const char *cache, int mode, int *code) {
  RtTrainStatus st;
  char err[1024];
  RtTrainer *tr = rt_trainer_new(s, data, cache, mode, &st, err, sizeof err);
  if (!tr) {
    printf("%s: %s\n", st == RT_TRAIN_NO_DEVICE ? "SKIP" : "FAIL", err);
    *code = st == RT_TRAIN_NO_DEVICE ? SKIP : 1;
  }
  return tr;
}

/* The recipe's data with masked targets (gpu_step masked): micro-batch m keeps the targets whose
 * hash is 0 mod m + 2, every other one becomes -100 (PyTorch's ignore_index). */
typedef struct {
  CpuData base; /* first: the trainer calls base.fill */
  CpuData *inner;
} MaskedData;

static int masked_fill(CpuData *d, int64_t step, int64_t micro, int64_t b, int64_t t, int32_t *tok,
                       int32_t *tg) {
  MaskedData *m = (MaskedData *)d;
  if (m->inner->fill(m->inner, step, micro, b, t, tok, tg)) return -1;
  for (int64_t i = 0; i < b * t; i++)
    if (ops_mix64(((uint64_t)step << 40) ^ ((uint64_t)micro << 24) ^ (uint64_t)i) % (uint64_t)(micro + 2))
      tg[i] = -100;
  return 0;
}

/* One CPU reference step (forward and backward of every micro-batch, the first step's data) of the
 * recipe lowered with Spec.per_rank = per_rank, in fp32: its graph, executor and mean loss. */
typedef struct {
  Graph *g;
  CpuExec *e;
  double loss;
} CpuRef;

static int cpu_ref(const Spec *s, bool per_rank, CpuData *src, int nmb, CpuRef *r) {
  static Spec cs;
  char err[1024];
  cs = *s;
  cs.per_rank = per_rank;
  r->g = NULL, r->e = NULL, r->loss = 0;
  if (lower_step(&cs, &r->g, err, sizeof err) != LOWER_OK) return printf("FAIL lower: %s\n", err), 1;
  graph_plan_trivial(r->g, 4);
  if (!(r->e = cpu_exec_new(r->g, CPU_F32, 0, err, sizeof err))) return printf("FAIL %s\n", err), 1;
  cpu_exec_init_params(r->e, (uint64_t)s->train.seed);
  const Tensor *tt = &r->g->t[r->g->tokens];
  int64_t n = tensor_numel(tt), kept = 0, k = 0;
  /* the loss denominator: the step's kept targets over its micro-batches (ir/ops/loss.c) */
  for (int mb = 0; mb < nmb; mb++, kept += k)
    if (cpu_data_kept(src, 1, &(int64_t){mb}, 1, tt->shape[0], tt->shape[1], cpu_exec_ptr(r->e, r->g->tokens),
                      cpu_exec_ptr(r->e, r->g->targets), &k))
      return printf("FAIL the data source\n"), 1;
  if (per_rank)
    printf("INFO %lld of %lld targets kept over %d micro-batches\n", (long long)kept, (long long)(n * nmb),
           nmb);
  cpu_exec_set_loss_den(r->e, (double)kept / nmb);
  for (int mb = 0; mb < nmb; mb++) {
    src->fill(src, 1, mb, tt->shape[0], tt->shape[1], cpu_exec_ptr(r->e, r->g->tokens),
              cpu_exec_ptr(r->e, r->g->targets));
    cpu_exec_set_key(r->e, (uint64_t)s->train.seed, 1, mb);
    cpu_exec_run(r->e, IR_PHASE_BIT(IR_PHASE_FORWARD) | IR_PHASE_BIT(IR_PHASE_BACKWARD));
    r->loss += cpu_exec_get(r->e, r->g->loss, 0);
  }
  r->loss /= nmb;
  return 0;
}

static void cpu_ref_free(CpuRef *r) {
  cpu_exec_free(r->e);
  graph_free(r->g);
}

static int cmd_grads(const Spec *s, const char *cache, int masked) {
  CpuData inner, *src = &inner;
  MaskedData md;
  char err[1024];
  if (cpu_data_open_spec(s, &inner, err, sizeof err)) return printf("FAIL %s\n", err), 1;
  if (masked) {
    md.base = inner, md.base.fill = masked_fill, md.base.free = NULL, md.inner = &inner;
    src = &md.base;
  }
  CpuData data = inner; /* for its free */
  int code = 0;
  RtTrainer *tr = gpu_trainer(s, src, cache, RT_MODE_EAGER, &code);
  if (!tr) return code;
  RtTrainer *x = tr;
  const Graph *g = rt_trainer_graph(tr);
  int nmb = g->num_microbatches;
  float gl[64] = {0};
  if (nmb > 64 || rt_trainer_stage(tr, 1, err, sizeof err)) return printf("FAIL stage: %s\n", err), 1;
  for (int mb = 0; mb < nmb; mb++)
    if (rt_trainer_enqueue_micro(x, mb))
      return printf("FAIL micro %d: %s\n", mb, rt_trainer_device(tr)->err), 1;
  if (rt_trainer_read_losses(x, gl)) return printf("FAIL %s\n", rt_trainer_device(tr)->err), 1;
  /* the CPU reference: the step the GPU trainer runs (Spec.per_rank: tests/gpu/trainer.c), planned
   * for fp32 — under fp8 its linears emulated on the CPU with the same casts and scales
   * (ir/ops/fp8.c) — and, under fp8, the fp32 step without fp8 as well */
  bool fp8 = s->present[SPEC_F_model_fp8];
  CpuRef emu, f32;
  if (cpu_ref(s, true, src, nmb, &emu)) return 1;
  if (fp8 && cpu_ref(s, false, src, nmb, &f32)) return 1;
  double gsum = 0;
  for (int mb = 0; mb < nmb; mb++)
    gsum += gl[mb];
  gsum /= nmb;
  int fails = 0;
  double lrel = fabs(gsum - emu.loss) / fabs(emu.loss);
  printf("%s loss gpu %.6f cpu %.6f rel %.2e (limit %.0e)\n", lrel <= LOSS_REL ? "PASS" : "FAIL", gsum,
         emu.loss, lrel, LOSS_REL);
  if (fp8) printf("INFO loss of the fp32 step without fp8 %.6f\n", f32.loss);
  fails += lrel > LOSS_REL;
  /* Under fp8 the GPU and the CPU emulation cast slightly different values (bf16 activations against
   * fp32 ones, so other amaxes and other elements on a rounding boundary): their gradients are two fp8
   * roundings of one step, not one. Checked instead: each gradient points the emulation's way (cosine
   * >= FP8_COS) and lies no farther from the fp32 step's than the emulation does (its relative L2
   * error against fp32 at most FP8_NOISIER times the emulation's, + 0.01): the GPU's fp8 is no
   * noisier than the reference's. Where fp8 itself takes a gradient far from fp32 (delayed scaling's
   * first step casts with scale 1, so small gradients fall to E5M2's subnormals: the emulation 77% off
   * fp32 on tiny_mla_moe_fp8's first q_down_proj, H100 2026-12-05), two roundings of it cannot agree
   * to FP8_COS: two gradients f + e1, f + e2 with uncorrelated errors of relative sizes g and e have the
   * cosine 1 / sqrt((1 + g^2)(1 + e^2)); the floor is the lower of FP8_COS and that. */
  const double FP8_COS = 0.95, FP8_NOISIER = 1.5;
  double worst = 0, worst_cos = 1, worst_floor = FP8_COS, worst_ratio = 0;
  int ngrad = 0;
  for (int i = 0; i < g->nt; i++) {
    if (g->t[i].role != ROLE_GRAD) continue;
    int ci = graph_find_tensor(emu.g, g->t[i].name), fi = fp8 ? graph_find_tensor(f32.g, g->t[i].name) : -1;
    int64_t m = tensor_numel(&g->t[i]);
    double *a = malloc((size_t)m * sizeof *a);
    if (!a || ci < 0 || (fp8 && fi < 0) || rt_trainer_read(x, i, a))
      return printf("FAIL reading %s\n", g->t[i].name), 1;
    double dd = 0, rr = 0, ab = 0, aa = 0, gf = 0, ef = 0, ff = 0;
    for (int64_t j = 0; j < m; j++) {
      double r = cpu_exec_get(emu.e, ci, j);
      dd += (a[j] - r) * (a[j] - r), rr += r * r, ab += a[j] * r, aa += a[j] * a[j];
      if (fp8) {
        double f = cpu_exec_get(f32.e, fi, j);
        gf += (a[j] - f) * (a[j] - f), ef += (r - f) * (r - f), ff += f * f;
      }
    }
    double rel = sqrt(dd / (rr > 0 ? rr : 1)), cs = rr > 0 && aa > 0 ? ab / sqrt(aa * rr) : 1;
    int ok;
    if (fp8) {
      double g32 = sqrt(gf / (ff > 0 ? ff : 1)), e32 = sqrt(ef / (ff > 0 ? ff : 1));
      double cos_floor = fmin(FP8_COS, 1.0 / sqrt((1.0 + g32 * g32) * (1.0 + e32 * e32)));
      ok = cs >= cos_floor && g32 <= FP8_NOISIER * e32 + 0.01 && isfinite(rel);
      if (cs - cos_floor < worst_cos - worst_floor) worst_cos = cs, worst_floor = cos_floor;
      if (g32 / (e32 + 0.01) > worst_ratio) worst_ratio = g32 / (e32 + 0.01);
      printf("%s %-56s n=%-8lld vs emulation rel_l2 %.3e cos %.6f | vs fp32: gpu %.3e emulation %.3e\n",
             ok ? "PASS" : "FAIL", g->t[i].name, (long long)m, rel, cs, g32, e32);
    } else {
      ok = rel <= GRAD_REL_L2 && cs >= GRAD_COS && isfinite(rel);
      printf("%s %-56s n=%-8lld rel_l2 %.3e cos %.6f |cpu| %.3e\n", ok ? "PASS" : "FAIL", g->t[i].name,
             (long long)m, rel, cs, sqrt(rr));
    }
    fails += !ok;
    if (rel > worst || !isfinite(rel)) worst = rel;
    if (!fp8 && cs < worst_cos) worst_cos = cs;
    ngrad++;
    free(a);
  }
  if (fp8)
    printf(
        "%s %d gradients (fp8): closest cos vs the emulation to its floor %.6f (floor %.6f: %.2f, or lower where fp8 "
        "itself is far from fp32), worst rel_l2 vs it %.3e; worst (gpu vs fp32) / (emulation vs fp32 + 0.01) %.3f "
        "(limit %.1f)\n",
        fails ? "FAIL" : "PASS", ngrad, worst_cos, worst_floor, FP8_COS, worst, worst_ratio, FP8_NOISIER);
  else
    printf("%s %d gradients: worst rel_l2 %.3e (limit %.0e), worst cos %.6f (limit %.3f)\n",
           fails ? "FAIL" : "PASS", ngrad, worst, GRAD_REL_L2, worst_cos, GRAD_COS);
  cpu_ref_free(&emu);
  if (fp8) cpu_ref_free(&f32);
  rt_trainer_free(tr);
  if (data.free) data.free(&data);
  return fails ? 1 : 0;
}

/* The "loss" values of a `stepc run --json` file, in order. */
static int read_cpu_losses(const char *path, double *out, int max) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  int k = 0;
  for (char *p = strstr(buf, "\"loss\": "); p && k < max; p = strstr(p + 1, "\"loss\": "))
    out[k++] = atof(p + 8);
  return k;
}

static double mean(const double *v, int lo, int hi) {
  double s = 0;
  for (int i = lo; i < hi; i++)
    s += v[i];
  return s / (hi - lo);
}

static int cmd_train(const Spec *s, int steps, const char *cpu_json, const char *cache) {
  double *cpu = calloc((size_t)steps, sizeof *cpu), *gpu = calloc((size_t)steps, sizeof *gpu);
  int nc = read_cpu_losses(cpu_json, cpu, steps);
  if (nc < steps) return printf("FAIL %s has %d losses, want %d\n", cpu_json, nc, steps), 1;
  CpuData data;
  char err[1024];
  if (cpu_data_open_spec(s, &data, err, sizeof err)) return printf("FAIL %s\n", err), 1;
  int code = 0;
  RtTrainer *tr = gpu_trainer(s, &data, cache, -1, &code);
  if (!tr) return code;
  for (int i = 0; i < steps; i++) {
    RtStepStats st;
    if (rt_trainer_step(tr, &st, err, sizeof err)) return printf("FAIL %s\n", err), 1;
    gpu[i] = st.loss;
    if (i < 5 || i % 20 == 19) printf("step %4d  gpu %.4f  cpu %.4f\n", i + 1, gpu[i], cpu[i]);
  }
  int w = steps >= 40 ? 20 : steps / 2;
  double g0 = gpu[0], ge = mean(gpu, steps - w, steps), ce = mean(cpu, steps - w, steps);
  /* The loss must fall as the CPU's does: the same drop to within 10% of the CPU's drop. bf16
   * rounding moves the trajectory a little; a broken gradient or optimizer leaves the loss flat
   * or diverging. */
  double drop_g = g0 - ge, drop_c = cpu[0] - ce;
  int ok = drop_c > 0 && fabs(drop_g - drop_c) <= 0.1 * drop_c && fabs(g0 - cpu[0]) <= LOSS_REL * cpu[0];
  printf("%s loss first %.4f (cpu %.4f), mean of the last %d steps %.4f (cpu %.4f): drop %.4f vs cpu %.4f "
         "(limit 10%%)\n",
         ok ? "PASS" : "FAIL", g0, cpu[0], w, ge, ce, drop_g, drop_c);
  rt_trainer_free(tr);
  if (data.free) data.free(&data);
  free(cpu), free(gpu);
  return ok ? 0 : 1;
}

/* Runs `steps` steps and keeps the losses (as float bits) and the final persistent state; with
 * gnorm, each step's gradient norm and, in *gn_at, where the norm's 4 bytes lie in the state. */
static int run_capture_gn(const Spec *s, int steps, int mode, const char *cache, double *loss,
                          unsigned char **state, size_t *nstate, int *code, int *ngraphs, double *gnorm,
                          size_t *gn_at) {
  CpuData data;
  char err[1024];
  if (cpu_data_open_spec(s, &data, err, sizeof err)) return printf("FAIL %s\n", err), *code = 1, -1;
  RtTrainer *tr = gpu_trainer(s, &data, cache, mode, code);
  if (!tr) {
    if (data.free) data.free(&data);
    return -1;
  }
  for (int i = 0; i < steps; i++) {
    RtStepStats st;
    if (rt_trainer_step(tr, &st, err, sizeof err)) return printf("FAIL %s\n", err), *code = 1, -1;
    loss[i] = st.loss;
    if (gnorm) gnorm[i] = st.grad_norm;
  }
  const Graph *g = rt_trainer_graph(tr);
  RtTrainer *x = tr;
  size_t total = 0;
  for (int i = 0; i < g->nt; i++)
    if (role_is_persistent(g->t[i].role)) total += (size_t)g->t[i].bytes;
  unsigned char *buf = malloc(total ? total : 1), *p = buf;
  RtDevice *d = rt_trainer_device(tr);
  for (int i = 0; i < g->nt && buf; i++)
    if (role_is_persistent(g->t[i].role)) {
      if (gn_at && i == g->grad_norm) *gn_at = (size_t)(p - buf);
      if (rt_copy_d2h(d, p, rt_player_tensor(rt_trainer_player(x), i), (size_t)g->t[i].bytes))
        return printf("FAIL %s\n", d->err), *code = 1, -1;
      p += g->t[i].bytes;
    }
  RtMode m = rt_trainer_mode(tr);
  printf("ran %d steps (%s, %d graphs, %d graph nodes)\n", steps,
         m == RT_MODE_EAGER            ? "eager"
         : m == RT_MODE_FULL_ITERATION ? "full_iteration"
                                       : "scoped",
         rt_trainer_graph_count(tr), rt_trainer_graph_nodes(tr));
  if (ngraphs) *ngraphs = rt_trainer_graph_count(tr);
  RtScopedStats sst;
  if (rt_trainer_scoped_stats(tr, &sst) == 0)
    printf("scoped: %d graphs (%d forward, %d backward), %ld nodes, %d ops graphed and %d eager per "
           "micro-batch\n",
           sst.graphs, sst.forward, sst.backward, sst.nodes, sst.graphed_ops, sst.eager_ops);
  *state = buf;
  *nstate = total;
  rt_trainer_free(tr);
  if (data.free) data.free(&data);
  return 0;
}

static int run_capture(const Spec *s, int steps, int mode, const char *cache, double *loss,
                       unsigned char **state, size_t *nstate, int *code, int *ngraphs) {
  return run_capture_gn(s, steps, mode, cache, loss, state, nstate, code, ngraphs, NULL, NULL);
}

static int same(const char *what, const double *la, const double *lb, int steps, const unsigned char *sa,
                const unsigned char *sb, size_t n) {
  int losses = memcmp(la, lb, (size_t)steps * sizeof *la) == 0;
  size_t diff = 0;
  for (size_t i = 0; i < n; i++)
    diff += sa[i] != sb[i];
  printf("%s %-40s losses %s, persistent state %zu bytes, %zu differ (last loss %.9g vs %.9g)\n",
         losses && !diff ? "PASS" : "FAIL", what, losses ? "bitwise equal" : "DIFFER", n, diff, la[steps - 1],
         lb[steps - 1]);
  return losses && !diff;
}

static int cmd_replay(const Spec *s, int steps, const char *cache) {
  double *l1 = calloc((size_t)steps, sizeof *l1), *l2 = calloc((size_t)steps, sizeof *l2),
         *l3 = calloc((size_t)steps, sizeof *l3);
  unsigned char *s1 = NULL, *s2 = NULL, *s3 = NULL;
  size_t n1 = 0, n2 = 0, n3 = 0;
  int code = 0;
  int ok = 0;
  if (run_capture(s, steps, RT_MODE_EAGER, cache, l1, &s1, &n1, &code, NULL) ||
      run_capture(s, steps, RT_MODE_EAGER, cache, l2, &s2, &n2, &code, NULL) ||
      run_capture(s, steps, RT_MODE_FULL_ITERATION, cache, l3, &s3, &n3, &code, NULL)) {
    free(l1), free(l2), free(l3), free(s1), free(s2), free(s3);
    return code; /* 77 without a GPU: nothing may leak on the way out (the sanitizer build runs this) */
  }
  ok = same("two eager runs", l1, l2, steps, s1, s2, n1) &
       same("full_iteration replay vs eager", l1, l3, steps, s1, s3, n1);
  free(l1), free(l2), free(l3), free(s1), free(s2), free(s3);
  return ok ? 0 : 1;
}

/* Scoped graphs against eager, per setting: the same spec (so the same plan, static graph outputs
 * pinned in both) run eagerly and with one graph per scope instance after the warm-up; two
 * micro-batches per step in tiny, so a graph replayed for the second micro-batch must read that
 * micro-batch's inputs and dropout seed. */
static int cmd_scoped(const char *path, const char *settings, const char *const *ov, int nov, int steps,
                      const char *cache) {
  static Spec spec;
  const char *all[64];
  int n = 0;
  all[n++] =
      "model.cuda_graph_warmup_steps=1"; /* every step after the first graphed; K=V below may change it */
  for (int i = 0; i < nov && n < 60; i++)
    all[n++] = ov[i];
  double *l0 = calloc((size_t)steps, sizeof *l0), *l1 = calloc((size_t)steps, sizeof *l1);
  if (!l0 || !l1) return 1;
  int ok = 1, code = 0;
  char buf[512];
  snprintf(buf, sizeof buf, "%s", settings);
  for (char *save = NULL, *set = strtok_r(buf, ";", &save); set; set = strtok_r(NULL, ";", &save)) {
    char *colon = strchr(set, ':');
    if (!colon) return fprintf(stderr, "gpu_step scoped: setting '%s' is not IMPL:MODULES\n", set), 2;
    *colon = 0;
    char impl[96], mods[160];
    snprintf(impl, sizeof impl, "model.cuda_graph_impl=%s", set);
    snprintf(mods, sizeof mods, "model.cuda_graph_modules=%s", colon + 1);
    all[n] = impl, all[n + 1] = mods;
    if (load_spec(path, all, n + 2, &spec)) return 1;
    unsigned char *s0 = NULL, *s1 = NULL;
    size_t n0 = 0, n1 = 0;
    int ngraphs = 0;
    if (run_capture(&spec, steps, RT_MODE_EAGER, cache, l0, &s0, &n0, &code, NULL) ||
        run_capture(&spec, steps, -1, cache, l1, &s1, &n1, &code, &ngraphs)) {
      free(s0), free(s1), free(l0), free(l1); /* 77 without a GPU: leak nothing (ASan build) */
      return code ? code : 1;
    }
    char what[200];
    snprintf(what, sizeof what, "%s %s vs eager", set, colon + 1);
    if (ngraphs == 0) { /* all steps were warm-up: nothing was compared */
      printf("FAIL %-40s no graph was captured in %d steps (cuda_graph_warmup_steps %lld)\n", what, steps,
             (long long)spec.model.cuda_graph_warmup_steps);
      ok = 0;
    } else
      ok &= n1 == n0 && same(what, l0, l1, steps, s0, s1, n0);
    free(s0), free(s1);
  }
  free(l0), free(l1);
  return ok ? 0 : 1;
}

/* Every recompute setting against no recompute, on the planned arena: the same kernels on the same
 * inputs in the same order, so losses and the whole persistent state must be bitwise equal.
 * labels (comma-separated, or NULL for the table below): one selective setting per label, "full"
 * full recompute one layer at a time (fp8 delayed scaling refuses layernorm recompute: MCORE-29). */
static int cmd_recompute(const char *path, const char *const *ov, int nov, int steps, const char *cache,
                         const char *labels) {
  static const char *const settings[][3] = {
      {"model.recompute_granularity=selective", "model.recompute_modules=[core_attn]", NULL},
      {"model.recompute_granularity=selective", "model.recompute_modules=[mlp]", NULL},
      {"model.recompute_granularity=selective", "model.recompute_modules=[layernorm]", NULL},
      {"model.recompute_granularity=selective", "model.recompute_modules=[core_attn,mlp]", NULL},
      {"model.recompute_granularity=selective", "model.recompute_modules=[layernorm,mlp]", NULL},
      {"model.recompute_granularity=selective", "model.recompute_modules=[mlp_act]", NULL},
      {"model.recompute_granularity=selective", "model.recompute_modules=[core_attn,mlp_act]", NULL},
      {"model.recompute_granularity=full", "model.recompute_method=uniform", "model.recompute_num_layers=1"},
      {"model.recompute_granularity=full", "model.recompute_method=uniform", "model.recompute_num_layers=2"},
      {"model.recompute_granularity=full", "model.recompute_method=block", "model.recompute_num_layers=2"}};
  int ns = (int)(sizeof settings / sizeof *settings);
  static char modules[16][96];
  static const char *asked[16][3];
  if (labels) { /* the labels asked for, one at a time */
    char buf[512];
    snprintf(buf, sizeof buf, "%s", labels);
    ns = 0;
    for (char *save = NULL, *l = strtok_r(buf, ",", &save); l && ns < 16;
         l = strtok_r(NULL, ",", &save), ns++) {
      if (strcmp(l, "full") == 0) { /* full recompute, one layer at a time (the table's first) */
        for (int j = 0; j < 3; j++)
          asked[ns][j] = settings[7][j];
        continue;
      }
      snprintf(modules[ns], sizeof modules[ns], "model.recompute_modules=[%s]", l);
      asked[ns][0] = "model.recompute_granularity=selective", asked[ns][1] = modules[ns], asked[ns][2] = NULL;
    }
  }
  static Spec spec;
  const char *all[64];
  int n = 0;
  for (int i = 0; i < nov && n < 60; i++)
    all[n++] = ov[i];
  if (load_spec(path, all, n, &spec)) return 1;
  double *l0 = calloc((size_t)steps, sizeof *l0), *l1 = calloc((size_t)steps, sizeof *l1);
  unsigned char *s0 = NULL;
  size_t n0 = 0;
  int code = 0, ok = 1;
  if (!l0 || !l1 || run_capture(&spec, steps, RT_MODE_EAGER, cache, l0, &s0, &n0, &code, NULL)) {
    free(l0), free(l1), free(s0);
    return code ? code : 1;
  }
  for (int k = 0; k < ns; k++) {
    int m = n;
    const char *const *set = labels ? asked[k] : settings[k];
    for (int j = 0; j < 3 && set[j]; j++)
      all[m++] = set[j];
    unsigned char *s1 = NULL;
    size_t n1 = 0;
    if (load_spec(path, all, m, &spec) ||
        run_capture(&spec, steps, RT_MODE_EAGER, cache, l1, &s1, &n1, &code, NULL)) {
      free(l0), free(l1), free(s0), free(s1);
      return code ? code : 1;
    }
    char what[160];
    snprintf(what, sizeof what, "%s %s %s", set[1], set[2] ? set[2] : "", "vs none");
    ok &= n1 == n0 && same(what, l0, l1, steps, s0, s1, n0);
    free(s1);
  }
  free(l0), free(l1), free(s0);
  return ok ? 0 : 1;
}

/* How many GRAD_SUMSQ and ADAMW ops of the planned step launch anything, of how many gradients. */
static int count_launching(const Spec *s, const char *cache, int *nsum, int *nadam, int *ngrad, int *code) {
  CpuData data;
  char err[1024];
  if (cpu_data_open_spec(s, &data, err, sizeof err)) return printf("FAIL %s\n", err), *code = 1, -1;
  RtTrainer *tr = gpu_trainer(s, &data, cache, RT_MODE_EAGER, code);
  if (tr) {
    const Graph *g = rt_trainer_graph(tr);

    *nsum = *nadam = *ngrad = 0;
    for (int t = 0; t < g->nt; t++)
      *ngrad += g->t[t].role == ROLE_GRAD;
    for (int o = 0; o < g->nop; o++) {
      *nsum += g->op[o].kind == OP_GRAD_SUMSQ && rt_trainer_op_runs(tr, o);
      *nadam += g->op[o].kind == OP_ADAMW && rt_trainer_op_runs(tr, o);
    }
    rt_trainer_free(tr);
  }
  if (data.free) data.free(&data);
  return tr ? 0 : -1;
}

/* The optimizer's multi-tensor launches (optimizer.multi_tensor, compiler/passes/fuse.c's
 * fuse_optimizer) against the per-tensor ones and the CPU reference:
 *   1. multi-tensor: one GRAD_SUMSQ and one ADAMW op launch; per-tensor: one per gradient;
 *   2. clipping off (the clip factor exactly 1), STEPS eager steps, multi vs per-tensor: losses and
 *      every persistent tensor bitwise equal but the gradient norm (its partials are summed in
 *      another order: within 1e-5 relative), since AdamW's element update is the same code;
 *   3. clipping as the recipe says, multi-tensor: two eager runs and the full_iteration replay
 *      bitwise equal (cmd_replay);
 *   4. the first step's loss and gradient norm against the CPU reference executor (fp32) within
 *      LOSS_REL and GRAD_REL_L2 (the tolerances of `grads`: the norm is an L2 over the gradients). */
static int cmd_optim(const char *path, const char *const *ov, int nov, int steps, const char *cache) {
  static Spec multi, single, noclip;
  const char *all[64];
  int n = 0, code = 0, ok = 1;
  for (int i = 0; i < nov && n < 60; i++)
    all[n++] = ov[i];
  all[n] = "optimizer.clip_grad=0";
  all[n + 1] = "optimizer.multi_tensor=false";
  if (load_spec(path, all, n, &multi) || load_spec(path, all, n + 1, &noclip) ||
      load_spec(path, all, n + 2, &single))
    return 1;
  /* 1 */
  int ms, ma, ss, sa, ng;
  if (count_launching(&multi, cache, &ms, &ma, &ng, &code) ||
      count_launching(&single, cache, &ss, &sa, &ng, &code))
    return code;
  int launches_ok = ms == 1 && ma == 1 && ss == ng && sa == ng;
  printf("%s launching ops for %d gradients: multi-tensor %d GRAD_SUMSQ + %d ADAMW (want 1 + 1), per-tensor "
         "%d + %d (want %d + %d)\n",
         launches_ok ? "PASS" : "FAIL", ng, ms, ma, ss, sa, ng, ng);
  ok &= launches_ok;
  /* 2 */
  double *l0 = calloc((size_t)steps, sizeof *l0), *l1 = calloc((size_t)steps, sizeof *l1);
  double *g0 = calloc((size_t)steps, sizeof *g0), *g1 = calloc((size_t)steps, sizeof *g1);
  unsigned char *s0 = NULL, *s1 = NULL;
  size_t n0 = 0, n1 = 0, at0 = 0, at1 = 0;
  if (!l0 || !l1 || !g0 || !g1 ||
      run_capture_gn(&noclip, steps, RT_MODE_EAGER, cache, l0, &s0, &n0, &code, NULL, g0, &at0) ||
      run_capture_gn(&single, steps, RT_MODE_EAGER, cache, l1, &s1, &n1, &code, NULL, g1, &at1)) {
    free(l0), free(l1), free(g0), free(g1), free(s0), free(s1);
    return code ? code : 1;
  }
  size_t diff = 0;
  for (size_t i = 0; i < n0 && n0 == n1; i++)
    diff += s0[i] != s1[i] && !(i >= at0 && i < at0 + 4);
  double worst = 0;
  for (int i = 0; i < steps; i++) {
    double r = fabs(g0[i] - g1[i]) / (g1[i] > 0 ? g1[i] : 1);
    if (r > worst || !isfinite(r)) worst = r;
  }
  int same_ok =
      n0 == n1 && at0 == at1 && !diff && !memcmp(l0, l1, (size_t)steps * sizeof *l0) && worst <= 1e-5;
  printf("%s clip off, multi-tensor vs per-tensor, %d steps: losses %s, persistent state %zu bytes, %zu "
         "differ outside the grad "
         "norm; grad norm worst rel %.2e (limit 1e-05; last %.9g vs %.9g)\n",
         same_ok ? "PASS" : "FAIL", steps,
         memcmp(l0, l1, (size_t)steps * sizeof *l0) ? "DIFFER" : "bitwise equal", n0, diff, worst,
         g0[steps - 1], g1[steps - 1]);
  ok &= same_ok;
  free(s0), free(s1);
  s0 = NULL;
  /* 4: the multi-tensor step with the recipe's clipping, beside the CPU */
  int rc4 = run_capture_gn(&multi, 1, RT_MODE_EAGER, cache, l0, &s0, &n0, &code, NULL, g0, &at0);
  free(s0);
  if (rc4) {
    free(l0), free(l1), free(g0), free(g1);
    return code ? code : 1;
  }
  CpuData data;
  memset(&data, 0, sizeof data);
  char err[1024] = "";
  int lrc = 0;
  CpuTrainer *ct = NULL;
  CpuStepStats cst;
  if (cpu_data_open_spec(&multi, &data, err, sizeof err) ||
      !(ct = cpu_trainer_new(&multi, &data, 0, &lrc, err, sizeof err)) ||
      cpu_trainer_step(ct, &cst, err, sizeof err)) {
    printf("FAIL the CPU reference: %s\n", err);
    ok = 0;
  } else {
    double lr = fabs(l0[0] - cst.loss) / fabs(cst.loss),
           gr = fabs(g0[0] - cst.grad_norm) / (cst.grad_norm > 0 ? cst.grad_norm : 1);
    int cpu_ok = lr <= LOSS_REL && gr <= GRAD_REL_L2 && isfinite(g0[0]);
    printf("%s first step vs CPU: loss %.6f cpu %.6f rel %.2e (limit %.0e), grad norm %.6f cpu %.6f rel %.2e "
           "(limit %.0e)\n",
           cpu_ok ? "PASS" : "FAIL", l0[0], cst.loss, lr, LOSS_REL, g0[0], cst.grad_norm, gr, GRAD_REL_L2);
    ok &= cpu_ok;
  }
  if (ct) cpu_trainer_free(ct);
  if (data.free) data.free(&data);
  free(l0), free(l1), free(g0), free(g1);
  /* 3 */
  int rc = cmd_replay(&multi, steps, cache);
  if (rc == SKIP) return SKIP;
  return ok && rc == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  const char *cache = NULL;
  int a = 1;
  if (argc > 2 && strcmp(argv[1], "--cache") == 0) cache = argv[2], a = 3;
  if (argc - a < 2) {
    fprintf(stderr, "usage: gpu_step [--cache DIR] grads SPEC [K=V ...] | masked SPEC [K=V ...] | train SPEC "
                    "STEPS CPU.json [K=V ...] | replay SPEC STEPS [K=V ...] | scoped SPEC STEPS "
                    "IMPL:MODULES[;...] [K=V ...] | recompute SPEC STEPS [--labels L1,L2,...] [K=V ...] | "
                    "optim SPEC STEPS [K=V ...] | dump SPEC OUTDIR [--device cuda|cpu] [K=V ...]\n");
    return 2;
  }
  const char *cmd = argv[a], *path = argv[a + 1];
  if (strcmp(cmd, "scoped") == 0) {
    if (argc - a < 4) return fprintf(stderr, "gpu_step scoped: missing STEPS or IMPL:MODULES\n"), 2;
    return cmd_scoped(path, argv[a + 3], (const char *const *)argv + a + 4, argc - a - 4, atoi(argv[a + 2]),
                      cache);
  }
  if (strcmp(cmd, "dump") == 0) {
    if (argc - a < 3) return fprintf(stderr, "gpu_step dump: missing OUTDIR\n"), 2;
    int k = a + 3, cuda = 1;
    if (k + 1 < argc && strcmp(argv[k], "--device") == 0) {
      if (strcmp(argv[k + 1], "cpu") && strcmp(argv[k + 1], "cuda"))
        return fprintf(stderr, "gpu_step dump: --device is cuda or cpu\n"), 2;
      cuda = strcmp(argv[k + 1], "cuda") == 0, k += 2;
    }
    static Spec dspec;
    if (load_spec(path, (const char *const *)argv + k, argc - k, &dspec)) return 1;
    return cmd_dump(&dspec, argv[a + 2], cuda, cache);
  }
  if (strcmp(cmd, "optim") == 0) {
    if (argc - a < 3) return fprintf(stderr, "gpu_step optim: missing STEPS\n"), 2;
    return cmd_optim(path, (const char *const *)argv + a + 3, argc - a - 3, atoi(argv[a + 2]), cache);
  }
  if (strcmp(cmd, "recompute") == 0) {
    if (argc - a < 3) return fprintf(stderr, "gpu_step recompute: missing STEPS\n"), 2;
    int k = a + 3;
    const char *labels = NULL;
    if (k + 1 < argc && strcmp(argv[k], "--labels") == 0) labels = argv[k + 1], k += 2;
    return cmd_recompute(path, (const char *const *)argv + k, argc - k, atoi(argv[a + 2]), cache, labels);
  }
  int extra = strcmp(cmd, "train") == 0 ? 2 : strcmp(cmd, "replay") == 0 ? 1 : 0;
  if (argc - a - 2 < extra) return fprintf(stderr, "gpu_step %s: missing arguments\n", cmd), 2;
  static Spec spec;
  if (load_spec(path, (const char *const *)argv + a + 2 + extra, argc - a - 2 - extra, &spec)) return 1;
  if (strcmp(cmd, "grads") == 0 || strcmp(cmd, "masked") == 0) return cmd_grads(&spec, cache, cmd[0] == 'm');
  if (strcmp(cmd, "train") == 0) return cmd_train(&spec, atoi(argv[a + 2]), argv[a + 3], cache);
  if (strcmp(cmd, "replay") == 0) return cmd_replay(&spec, atoi(argv[a + 2]), cache);
  fprintf(stderr, "gpu_step: unknown command %s\n", cmd);
  return 2;
}
