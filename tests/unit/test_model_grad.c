/* test_model_grad.c — whole-model gradient checks in fp64 (every parameter tensor: a random
 * direction plus its two largest-gradient elements, against central differences):
 *   models/tiny.lua at seq 16, mbs 1 — dense, RMSNorm, RoPE, GQA, SwiGLU, flash, untied head, bf16
 *     params (so masters exist in the step; the check itself differentiates the loss)
 *   tests/recipes/gpt3_tiny.lua — unfused attention, dropout 0.1 (masks fixed), LayerNorm, GELU,
 *     biases, learned positions, tied embeddings
 *   both with attention_backend swapped, and tiny with 4 micro-batches (the 1/num_microbatches
 *   seed); the output layer and loss in chunks (model.output_layer_chunks) on both, and over
 *   micro-batches. Tolerance: GRADCHECK_TOL (1e-4), see train.h and docs/cpu-reference.md; measured worst
 *   errors are ~1e-7. */
#include <stdio.h>
#include <stdlib.h>

#include "frontend/frontend.h"
#include "lower/lower.h"
#include "cli/cpu_train.h"
#include "validate/validate.h"

static int run(const char *path, const char *const *ov, int nov) {
  static Spec raw, spec;
  DiagList d;
  diag_init(&d);
  if (frontend_load(path, ov, nov, NULL, &raw, &d) != 0 || validate_spec(&raw, &spec, &d) != 0) {
    diag_print(&d, stderr);
    diag_free(&d);
    return 1;
  }
  diag_free(&d);
  CpuData data;
  char err[256];
  if (cpu_data_open_spec(&spec, &data, err, sizeof err) != 0) return fprintf(stderr, "%s\n", err), 1;
  GradcheckOptions opt = {.elements = 2, .h = 1e-5};
  GradcheckRow *rows = NULL;
  int n = 0, lrc;
  double worst = cpu_gradcheck_spec(&spec, &data, &opt, 2, &rows, &n, &lrc, err, sizeof err);
  int bad = !(worst >= 0 && worst <= GRADCHECK_TOL) || n == 0;
  printf("%-28s", path);
  for (int i = 0; i < nov; i++) printf(" %s", ov[i]);
  printf(": %d params, worst rel %.2e%s\n", n, worst, bad ? "  FAILED" : "");
  for (int i = 0; bad && i < n; i++) printf("    %-50s %.3e\n", rows[i].name, rows[i].worst_rel);
  if (worst < 0) fprintf(stderr, "%s\n", err);
  free(rows);
  if (data.free) data.free(&data);
  return bad;
}

int main(void) {
  int fails = 0;
  const char *tiny[] = {"model.seq_length=16", "train.micro_batch_size=1", "train.global_batch_size=1"};
  fails += run("models/tiny.lua", tiny, 3);
  const char *tiny_unfused[] = {"model.seq_length=16", "train.micro_batch_size=1", "model.attention_backend=unfused",
                                "model.num_layers=2"};
  fails += run("models/tiny.lua", tiny_unfused, 4);
  const char *tiny_mb[] = {"model.seq_length=8", "train.micro_batch_size=1", "train.global_batch_size=4", "model.num_layers=1"};
  fails += run("models/tiny.lua", tiny_mb, 4);
  fails += run("tests/recipes/gpt3_tiny.lua", NULL, 0);
  const char *gpt3_flash[] = {"model.attention_backend=flash", "model.share_embeddings_and_output_weights=false"};
  fails += run("tests/recipes/gpt3_tiny.lua", gpt3_flash, 2);
  /* the output layer and loss in chunks (ir/ops/linear_loss.c): untied, over micro-batches, tied */
  const char *tiny_chunks[] = {"model.seq_length=16", "train.micro_batch_size=1", "train.global_batch_size=1",
                               "model.output_layer_chunks=4"};
  fails += run("models/tiny.lua", tiny_chunks, 4);
  const char *tiny_mb_chunks[] = {"model.seq_length=8", "train.micro_batch_size=1", "train.global_batch_size=4",
                                  "model.num_layers=1", "model.output_layer_chunks=2"};
  fails += run("models/tiny.lua", tiny_mb_chunks, 5);
  const char *gpt3_chunks[] = {"model.output_layer_chunks=8"};
  fails += run("tests/recipes/gpt3_tiny.lua", gpt3_chunks, 1);
  if (fails) return 1;
  printf("test_model_grad: ok\n");
  return 0;
}
