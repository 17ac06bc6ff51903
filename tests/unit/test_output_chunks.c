/* test_output_chunks.c — the output layer and loss in chunks (model.output_layer_chunks,
 * ir/ops/linear_loss.c) on the CPU reference executor and in the plan:
 *   the same training as the whole logits: tiny (untied head, 2 micro-batches a step) and
 *     gpt3_tiny (tied embeddings, dropout), several chunk counts, some targets ignored (outside the
 *     vocabulary): every step's loss and gradient norm within fp32 round-off of the unchunked
 *     step's (the weight gradient's sum over the tokens runs in another order, so not bitwise);
 *   the chunked step is itself deterministic: bitwise the same losses on a rerun and with 1 or 2
 *     threads;
 *   the default: chunks only where one micro-batch's logits exceed 512 MiB, the fewest that divide
 *     the tokens; the plan's peak drops by (chunks - 1) / chunks of the logits on
 *     moonlight_mha_7l (two micro-batches) and bench_m (within 1% of the logits), and the plan still
 *     verifies. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli/cpu_train.h"
#include "frontend/frontend.h"
#include "plan/plan.h"
#include "validate/validate.h"

static int fails;

/* Counts and prints a failed check. */
__attribute__((format(printf, 2, 3))) static void CHECK(int ok, const char *fmt, ...) {
  if (ok) return;
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL: ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fails++;
}

#define STEPS 3

static int load(const char *path, const char *const *ov, int nov, Spec *spec) {
  static Spec raw;
  DiagList d;
  diag_init(&d);
  int rc = frontend_load(path, ov, nov, NULL, &raw, &d) != 0 || validate_spec(&raw, spec, &d) != 0;
  if (rc) diag_print(&d, stdout);
  diag_free(&d);
  return rc;
}

/* The recipe's data with every 7th target outside the vocabulary (ignored by the loss). */
typedef struct {
  CpuData d;
  CpuData inner;
} Ignoring;

static int fill_ignoring(CpuData *d, int64_t step, int64_t micro, int64_t b, int64_t t, int32_t *tokens,
                         int32_t *targets) {
  Ignoring *w = (Ignoring *)d;
  int rc = w->inner.fill(&w->inner, step, micro, b, t, tokens, targets);
  for (int64_t i = 3; i < b * t; i += 7)
    targets[i] = i % 2 ? -100 : (int32_t)d->vocab;
  return rc;
}

/* Trains STEPS steps of path + ov + "model.output_layer_chunks=C" (C 0: the field left null). */
static int train(const char *path, const char *const *ov, int nov, int chunks, int threads, double *loss,
                 double *norm) {
  const char *kv[16];
  char c[64];
  int n = 0;
  for (int i = 0; i < nov; i++)
    kv[n++] = ov[i];
  snprintf(c, sizeof c, "model.output_layer_chunks=%d", chunks);
  if (chunks) kv[n++] = c;
  static Spec s;
  if (load(path, kv, n, &s)) return -1;
  Ignoring w;
  char err[256];
  if (cpu_data_open_spec(&s, &w.inner, err, sizeof err) != 0) return printf("%s\n", err), -1;
  w.d = w.inner;
  w.d.fill = fill_ignoring;
  w.d.free = NULL;
  int lrc, rc = 0;
  CpuTrainer *tr = cpu_trainer_new(&s, &w.d, threads, &lrc, err, sizeof err);
  if (!tr) return printf("%s\n", err), -1;
  int lce = 0;
  const Graph *g = cpu_trainer_graph(tr);
  for (int o = 0; o < g->nop; o++)
    lce += g->op[o].kind == OP_LINEAR_CROSS_ENTROPY;
  CHECK(lce == (chunks > 1), "%s chunks %d: %d chunked output layers", path, chunks, lce);
  for (int i = 0; i < STEPS && rc == 0; i++) {
    CpuStepStats st;
    rc = cpu_trainer_step(tr, &st, err, sizeof err);
    loss[i] = st.loss, norm[i] = st.grad_norm;
  }
  if (rc) printf("%s\n", err);
  cpu_trainer_free(tr);
  if (w.inner.free) w.inner.free(&w.inner);
  return rc;
}

static double rel(double a, double b) { return fabs(a - b) / (fabs(b) > 1e-30 ? fabs(b) : 1e-30); }

static void agree(const char *path, const char *const *ov, int nov, const int *chunks, int nchunks) {
  double l1[STEPS], n1[STEPS];
  if (train(path, ov, nov, 1, 2, l1, n1)) {
    CHECK(0, "%s: the unchunked run failed", path);
    return;
  }
  for (int k = 0; k < nchunks; k++) {
    double l[STEPS], n[STEPS], lr[STEPS], nr[STEPS];
    if (train(path, ov, nov, chunks[k], 2, l, n) || train(path, ov, nov, chunks[k], 1, lr, nr)) {
      CHECK(0, "%s: the run in %d chunks failed", path, chunks[k]);
      continue;
    }
    double worst = 0;
    for (int i = 0; i < STEPS; i++) {
      worst = fmax(worst, fmax(rel(l[i], l1[i]), rel(n[i], n1[i])));
      CHECK(rel(l[i], l1[i]) < 1e-5 && rel(n[i], n1[i]) < 1e-4,
            "%s %d chunks step %d: loss %.9g norm %.9g, unchunked %.9g %.9g", path, chunks[k], i + 1, l[i],
            n[i], l1[i], n1[i]);
      CHECK(!memcmp(&l[i], &lr[i], sizeof l[i]) && !memcmp(&n[i], &nr[i], sizeof n[i]),
            "%s %d chunks step %d: 1 and 2 threads differ", path, chunks[k], i + 1);
    }
    printf("%-28s %d chunks: %d steps, worst relative difference from the whole logits %.2e\n", path,
           chunks[k], STEPS, worst);
  }
}

/* The default chunk count and the plan's peak against output_layer_chunks=1. */
static void peak_drop(const char *path, const char *const *ov, int nov, int64_t want_chunks) {
  const char *kv[8];
  int n = 0;
  for (int i = 0; i < nov; i++)
    kv[n++] = ov[i];
  static Spec s, s1;
  if (load(path, kv, n, &s)) {
    CHECK(0, "%s: load", path);
    return;
  }
  kv[n++] = "model.output_layer_chunks=1";
  if (load(path, kv, n, &s1)) {
    CHECK(0, "%s: load", path);
    return;
  }
  int64_t c = spec_output_layer_chunks(&s);
  CHECK(c == want_chunks, "%s: %lld chunks by default, expected %lld", path, (long long)c,
        (long long)want_chunks);
  Plan p, p1;
  char err[512] = "";
  if (plan_build(&s, 0, &p, NULL, err, sizeof err) != PLAN_OK) {
    CHECK(0, "%s: %s", path, err);
    return;
  }
  if (plan_build(&s1, 0, &p1, NULL, err, sizeof err) != PLAN_OK) {
    plan_free(&p);
    CHECK(0, "%s: %s", path, err);
    return;
  }
  double logits =
      (double)s.train.micro_batch_size * (double)s.model.seq_length * (double)s.model.vocab_size * 2;
  double drop = (double)(p1.mp.peak - p.mp.peak), want = logits * (double)(c - 1) / (double)c;
  printf(
      "%-28s peak %.3f GB whole, %.3f GB in %lld chunks: -%.3f GB (logits %.3f GB x %lld/%lld = %.3f GB)\n",
      path, p1.mp.peak / 1e9, p.mp.peak / 1e9, (long long)c, drop / 1e9, logits / 1e9, (long long)(c - 1),
      (long long)c, want / 1e9);
  CHECK(fabs(drop - want) <= 0.01 * logits, "%s: the peak drops by %.0f bytes, expected about %.0f", path,
        drop, want);
  CHECK(memplan_verify(p.g, &p.mp, err, sizeof err) == 0, "%s: %s", path, err);
  plan_free(&p), plan_free(&p1);
}

int main(void) {
  const int tiny_chunks[] = {2, 4, 8, 256}, gpt3_chunks[] = {2, 4, 32};
  agree("models/tiny.lua", NULL, 0, tiny_chunks, 4);
  const char *gpt3[] = {"model.bf16=true"};
  agree("tests/recipes/gpt3_tiny.lua", gpt3, 1, gpt3_chunks, 3);
  /* small logits: no chunks by default */
  Spec s;
  if (!load("models/tiny.lua", NULL, 0, &s))
    CHECK(spec_output_layer_chunks(&s) == 1, "tiny: chunks by default");
  /* 4096 x 163840 bf16 = 1.25 GiB: 3 chunks would do, 4 divide 4096; 2 x 4096 x 128256 = 1.96 GiB: 4 */
  /* two micro-batches: with one, moonlight's main gradients are transient (optimizer.c) and its peak
   * is the end of the backward (the weights, their gradients and the optimizer state), which the
   * chunks do not touch; with two they are pinned and the peak is the output layer's forward */
  const char *ml[] = {"train.global_batch_size=2"};
  peak_drop("models/moonlight_mha_7l.lua", ml, 1, 4);
  peak_drop("models/bench_m.lua", NULL, 0, 4);
  const char *l8[] = {"model.num_layers=8"};
  peak_drop("models/llama3_8b.lua", l8, 1, 4);
  if (fails) return printf("test_output_chunks: %d FAILED\n", fails), 1;
  printf("test_output_chunks: ok\n");
  return 0;
}
