/* fusions_again.c — the compiler's fusions (compiler/passes/fusions.h) decided again from a planned
 * graph are the plan's own, byte for byte: fuse_build reads the op structure alone, never the memory
 * plan. `stepc run --profile` relies on it: the step image carries no fusions, so the profile
 * (compiler/cli/run_artifact.c) decides them again from the image's graph, which is the planned
 * graph as image_write stores it, to price the fused groups the build lowered. Recipes cover every
 * kind: pairs, chains (gpt3_tiny), stored weight gradients (one micro-batch), the chunked loss and
 * the QKV RoPE groups (llama3_2_1b), MoE (moonlight_mla_7l) and Mamba (nemotron3_nano). */
#include <stdlib.h>

#include "passes/fuse.h"
#include "record_run.h"

static int same_fusions(const Fusions *a, const Fusions *b) {
  if (a->nop != b->nop || a->nt != b->nt || a->nchain != b->nchain) return 0;
  return !memcmp(a->fuse, b->fuse, (size_t)a->nop) && !memcmp(a->skip, b->skip, (size_t)a->nop) &&
         !memcmp(a->peer, b->peer, (size_t)a->nop * sizeof *a->peer) &&
         !memcmp(a->alias, b->alias, (size_t)a->nt * sizeof *a->alias) &&
         !memcmp(a->sink, b->sink, (size_t)a->nt * sizeof *a->sink) &&
         !memcmp(a->norm_by, b->norm_by, (size_t)a->nt * sizeof *a->norm_by) &&
         (a->nchain == 0 || !memcmp(a->chain, b->chain, (size_t)a->nchain * sizeof *a->chain));
}

static void check(const char *title, const char *recipe, const char **kv, int nkv) {
  RecordRun r;
  if (record_run_open(recipe, kv, nkv, &r.p, &r.dev, &r.rec, &r.x) != 0) {
    CHECK(0, "%s: load", title);
    return;
  }
  const Fusions *plan = r.p.fz;
  int fused = 0;
  for (int o = 0; o < plan->nop; o++)
    fused += plan->fuse[o] != FUSE_NONE || plan->skip[o];
  Fusions *again = fusions_new(r.p.g);
  if (again) again->dp = plan->dp;
  EwKernels ks = {0};
  char err[512] = "";
  CHECK(again && fuse_build(r.p.g, again, &ks, err, sizeof err) == 0, "%s: fuse_build again: %s", title, err);
  CHECK(fused > 0, "%s: the plan fuses nothing", title);
  CHECK(again && same_fusions(plan, again), "%s: the fusions decided again differ from the plan's", title);
  CHECK(ks.n == r.p.ew.n, "%s: %d generated kernels again, the plan has %d", title, ks.n, r.p.ew.n);
  printf("%-32s %5d ops fused or skipped, %3d chains in %d kernels: the same again\n", title, fused,
         plan->nchain, ks.n);
  ew_kernels_free(&ks);
  fusions_free(again);
  record_run_close(&r.p, &r.rec, r.x);
}

int main(void) {
  const char *bf16[] = {"model.bf16=true", "model.output_layer_chunks=2"};
  const char *one_micro[] = {"train.global_batch_size=4"};
  const char *nemotron[] = {"model.hybrid_override_pattern=MEMEM*EME", "model.num_layers=9",
                            "model.expert_model_parallel_size=1", "train.world_size=1",
                            "train.global_batch_size=1"};
  check("gpt3_tiny bf16", "tests/recipes/gpt3_tiny.lua", bf16, 2);
  check("tiny, one micro-batch", "models/tiny.lua", one_micro, 1);
  check("llama3_2_1b", "models/llama3_2_1b.lua", NULL, 0);
  check("moonlight_mla_7l", "models/moonlight_mla_7l.lua", NULL, 0);
  check("nemotron3_nano, 9 layers", "models/nemotron3_nano.lua", nemotron, 5);
  return failures ? 1 : 0;
}
