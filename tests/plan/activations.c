/* activations.c — what the planner says about activations, against the literature and the
 * recompute guide:
 *   gpt3_paper: saved activations per layer vs Korthikanti et al.'s sbh(34 + 5as/h), and 34 sbh
 *     with core_attn (docs/megatron-rules.md §5), tensor by tensor;
 *   bench_m flash: core_attn frees under 1% of activation memory; unfused: it frees the s^2
 *     tensors;
 *   every lowerable shipped recipe under several settings: plan invariants (no two live buffers
 *   overlap, peak = max live sum) and determinism;
 *   deterministic_mode under `auto`: the backward on stepc's kernels at head dim 64, cuDNN's at 128;
 *   the Mamba ops' workspaces (tiny_hybrid, and Nemotron-9's shape): each op's last output, fp32,
 *   the floats kernels/launch.h lays out for its shapes, live at that op alone; the launch
 *   scratch's op workspace holds the flash backward's row sums only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/launch/exec.h"
#include "frontend/frontend.h"
#include "kernels/launch.h"
#include "ops/ops.h"
#include "plan/plan.h"
#include "validate/validate.h"

static int fails;
#define CHECK(c, ...)                  \
  do {                                 \
    if (!(c)) {                        \
      printf("FAIL: " __VA_ARGS__);    \
      printf("\n");                    \
      fails++;                         \
    }                                  \
  } while (0)

static int load(const char *path, const char **ov, int n, Spec *s) {
  Spec raw;
  DiagList d;
  diag_init(&d);
  int rc = frontend_load(path, ov, n, NULL, &raw, &d) || validate_spec(&raw, s, &d);
  if (rc) diag_print(&d, stdout);
  diag_free(&d);
  return rc;
}

static int plan(const char *path, const char **ov, int n, Plan *p) {
  static Spec s;
  if (load(path, ov, n, &s)) return -1;
  char err[512] = "";
  int rc = plan_build(&s, 0, p, NULL, err, sizeof err);
  if (rc != PLAN_OK) printf("plan %s: %s\n", path, err);
  return rc;
}

static int last_forward_point(const Plan *p) {
  int q = 0, last = 0;
  for (int i = 0; i < p->sc.n; i++)
    if (p->sc.it[i].kind == SCHED_OP) {
      if (p->g->op[p->sc.it[i].id].tags.phase == IR_PHASE_FORWARD) last = q;
      q++;
    }
  return last;
}

/* Bytes of layer `l`'s forward tensors alive across the forward/backward boundary. */
static double saved_layer(const Plan *p, int l, bool print) {
  int lf = last_forward_point(p);
  double sum = 0;
  for (int t = 0; t < p->g->nt; t++) {
    const Tensor *x = &p->g->t[t];
    if (x->producer < 0 || p->g->op[x->producer].tags.layer != l || role_is_persistent(x->role)) continue;
    if (p->mp.start[t] <= lf && p->mp.end[t] > lf) {
      double b = (double)tensor_numel(x) * (double)dtype_size(x->dtype);
      sum += b;
      if (print) printf("    %-52s %-5s %10.1f MB\n", x->name, dtype_name(x->dtype), b / 1e6);
    }
  }
  return sum;
}

static double saved_total(const Plan *p) {
  double s = 0;
  for (int l = -1; l < (int)p->spec.model.num_layers; l++) s += saved_layer(p, l, false);
  return s;
}

static void gpt3(void) {
  static Plan p;
  const char *ov_none[] = {"train.global_batch_size=1"};
  const char *ov_ca[] = {"train.global_batch_size=1", "model.recompute_granularity=selective", "model.recompute_modules=[core_attn]"};
  double s = 2048, b = 1, h = 12288, a = 96, sbh = s * b * h;
  double paper = sbh * (34 + 5 * a * s / h), paper_ca = 34 * sbh;
  if (plan("models/gpt3_paper.lua", ov_none, 1, &p) != PLAN_OK) {
    fails++;
    return;
  }
  printf("gpt3_paper layer 1, no recompute (single-rank graph = the paper's no-parallelism row):\n");
  double got = saved_layer(&p, 1, true);
  printf("  planned %.1f MB, paper sbh(34 + 5as/h) = %.1f MB (%+.3f%%)\n", got / 1e6, paper / 1e6, 100 * (got - paper) / paper);
  CHECK(fabs(got - paper) / paper < 0.005, "gpt3 no recompute: %.0f vs %.0f", got, paper);
  plan_free(&p);
  if (plan("models/gpt3_paper.lua", ov_ca, 3, &p) != PLAN_OK) {
    fails++;
    return;
  }
  printf("gpt3_paper layer 1, core_attn:\n");
  got = saved_layer(&p, 1, true);
  printf("  planned %.1f MB, paper 34 sbh = %.1f MB (%+.3f%%)\n", got / 1e6, paper_ca / 1e6, 100 * (got - paper_ca) / paper_ca);
  CHECK(fabs(got - paper_ca) / paper_ca < 0.01, "gpt3 core_attn: %.0f vs %.0f", got, paper_ca);
  plan_free(&p);
}

static void llama_core_attn(const char *backend, bool flash) {
  static Plan p0, p1;
  char be[64];
  snprintf(be, sizeof be, "model.attention_backend=%s", backend);
  const char *ov0[] = {be, "model.recompute_granularity=selective", "model.recompute_modules=[]"};
  const char *ov1[] = {be, "model.recompute_granularity=selective", "model.recompute_modules=[core_attn]"};
  if (plan("models/bench_m.lua", ov0, 3, &p0) != PLAN_OK || plan("models/bench_m.lua", ov1, 3, &p1) != PLAN_OK) {
    fails++;
    return;
  }
  double a0 = saved_total(&p0), a1 = saved_total(&p1);
  double peak0 = p0.rank.r[0].activations, peak1 = p1.rank.r[0].activations;
  printf("bench_m %s: saved activations %.3f -> %.3f GB with core_attn (%.3f%%); activation peak %.3f -> %.3f GB; "
         "max allocated %.3f -> %.3f GB\n",
         backend, a0 / 1e9, a1 / 1e9, 100 * (a0 - a1) / a0, peak0 / 1e9, peak1 / 1e9, p0.rank.r[0].max_allocated / 1e9,
         p1.rank.r[0].max_allocated / 1e9);
  if (flash) {
    CHECK((a0 - a1) / a0 < 0.01 && a1 <= a0, "flash: core_attn frees %.3f%%", 100 * (a0 - a1) / a0);
  } else {
    /* the freed tensors are the (B, H, T, T) ones */
    int64_t T = p1.spec.model.seq_length, s2 = 0, other = 0;
    for (int i = 0; i < p1.rr.n; i++) (void)i;
    for (int t = 0; t < p1.g->nt; t++) {
      const Tensor *x = &p1.g->t[t];
      if (!strstr(x->name, ".replay")) continue;
      bool sq = x->ndim == 4 && x->shape[2] == T && x->shape[3] == T;
      if (sq) s2++;
      else other++;
    }
    printf("  unfused core_attn replays %lld s^2 tensors (and %lld others)\n", (long long)s2, (long long)other);
    CHECK(s2 > 0 && a0 - a1 > 0.3 * a0, "unfused: core_attn frees %.1f%% (s^2 replays %lld)", 100 * (a0 - a1) / a0, (long long)s2);
  }
  plan_free(&p0), plan_free(&p1);
}

/* deterministic_mode under attention_backend=auto: the backward runs on stepc's own kernels at head
 * dim 64 (bench_m), so the plan holds no cuDNN attention workspace; at head dim 128 (llama3_8b) it
 * stays cuDNN's, with the deterministic (B,H,T,T) bf16 buffer; without deterministic_mode both are
 * cuDNN's. The forward stays `auto` everywhere. */
static void det_backward(const char *path, const char *layers, bool det, bool want_flash) {
  static Plan p;
  const char *ov[] = {det ? "model.deterministic_mode=true" : "model.deterministic_mode=false", layers};
  if (plan(path, ov, layers ? 2 : 1, &p) != PLAN_OK) {
    fails++;
    return;
  }
  int nf = 0, nb = 0, bflash = 0;
  for (int o = 0; o < p.g->nop; o++) {
    const Op *op = &p.g->op[o];
    if (op->kind == OP_FLASH_ATTN) {
      nf++;
      CHECK(op->a.i[2] == ATTN_IMPL_AUTO, "%s: forward op %d not auto", path, o);
    }
    if (op->kind == OP_FLASH_ATTN_BWD) nb++, bflash += op->a.i[2] == ATTN_IMPL_FLASH;
  }
  int64_t ws = attn_cudnn_workspace_max(p.g, NULL);
  printf("%s deterministic=%d: %d forward, %d backward attention ops, %d backward on stepc's kernels, cuDNN workspace %.3f GB\n",
         path, det, nf, nb, bflash, (double)ws / 1e9);
  CHECK(nb > 0 && bflash == (want_flash ? nb : 0), "%s deterministic=%d: %d of %d backward ops on stepc's kernels", path, det,
        bflash, nb);
  CHECK(want_flash ? ws == 0 : ws > 0, "%s deterministic=%d: cuDNN workspace %lld B", path, det, (long long)ws);
  plan_free(&p);
}

static void invariants(void) {
  const char *recipes[] = {"models/tiny.lua", "models/gpt2_small_llama.lua", "models/bench_m.lua", "models/llama3_8b.lua",
                           "models/gpt3_paper.lua", "models/moonlight_16b.lua", "models/llama3_70b_fp8.lua", "tests/recipes/gpt3_tiny.lua",
                           "tests/recipes/tiny_mla_moe.lua", "tests/recipes/tiny_hybrid.lua"};
  /* full recompute turns per-layer graphs off (MCORE-54: Megatron allows it only with full_iteration
   * graphs); llama3_70b_fp8 carries TE graphs of the MLP */
  const char *settings[][4] = {{"model.recompute_granularity=selective", "model.recompute_modules=[]", NULL, NULL},
                               {"model.recompute_granularity=selective", "model.recompute_modules=[core_attn]", NULL, NULL},
                               {"model.recompute_granularity=selective", "model.recompute_modules=[layernorm,mlp]", NULL, NULL},
                               {"model.recompute_granularity=full", "model.recompute_method=uniform", "model.recompute_num_layers=1",
                                "model.cuda_graph_impl=none"},
                               {"model.recompute_granularity=full", "model.recompute_method=block", "model.recompute_num_layers=2",
                                "model.cuda_graph_impl=none"}};
  for (size_t r = 0; r < sizeof recipes / sizeof *recipes; r++)
    for (size_t k = 0; k < sizeof settings / sizeof *settings; k++) {
      static Plan a, b;
      const char *ov[5];
      int n = 0;
      for (int j = 0; j < 4 && settings[k][j]; j++) ov[n++] = settings[k][j];
      bool big = strstr(recipes[r], "gpt3_paper") != NULL;
      if (big) ov[n++] = "train.global_batch_size=1";
      if (plan(recipes[r], ov, n, &a) != PLAN_OK || plan(recipes[r], ov, n, &b) != PLAN_OK) {
        fails++;
        continue;
      }
      char err[512] = "ok";
      int v = memplan_verify(a.g, &a.mp, err, sizeof err);
      bool det = a.mp.arena == b.mp.arena && a.mp.peak == b.mp.peak && a.g->nt == b.g->nt &&
                 memcmp(a.mp.offset, b.mp.offset, (size_t)a.g->nt * sizeof *a.mp.offset) == 0;
      printf("%-30s %-45s peak %9.3f GB arena %9.3f GB frag %.2f%% %s%s\n", recipes[r], settings[k][1], (double)a.mp.peak / 1e9,
             (double)a.mp.arena / 1e9, 100.0 * (double)(a.mp.arena - a.mp.peak) / (double)a.mp.arena, err, det ? "" : " NONDETERMINISTIC");
      CHECK(v == 0 && det, "%s %s: %s", recipes[r], settings[k][1], err);
      /* one rank, nothing sharded: the per-rank figure is the exact plan's peak + the GEMM workspace
       * + the widest cuDNN attention backward's workspace */
      const SpecModel *m = &a.spec.model;
      if (m->tensor_model_parallel_size == 1 && m->pipeline_model_parallel_size == 1 && m->context_parallel_size == 1 &&
          m->expert_model_parallel_size == 1 && a.spec.train.world_size == 1) {
        double attn = (double)attn_cudnn_workspace_max(a.g, NULL);
        double want = (double)a.mp.peak + 32.0 * 1024 * 1024 + attn, got = a.rank.r[0].max_allocated;
        CHECK(got > want * (1 - 1e-9) && got < want * (1 + 1e-9), "%s %s: per-rank %.0f B, plan peak + workspace %.0f B",
              recipes[r], settings[k][1], got, want);
      }
      plan_free(&a), plan_free(&b);
    }
}

/* The floats the CUDA kernels of Mamba op `op` take (kernels/launch.h), from its tensors' shapes. */
static long mamba_ws_floats(const Graph *g, const Op *op) {
  if (op->kind == OP_MAMBA_GROUP_NORM_BWD) {
    const Tensor *x = &g->t[op->in[1]];
    long c = (long)x->shape[x->ndim - 1];
    return stepc_mamba_gnorm_ws((long)tensor_numel(x) / c, (int)c, (int)op->a.i[0]);
  }
  int bwd = op->kind == OP_MAMBA_MIXER_BWD;
  const Tensor *x = &g->t[op->in[bwd]], *cw = &g->t[op->in[bwd + 1]];
  return stepc_mamba_ws(x->shape[0], x->shape[1], op->a.i[0], op->a.i[1], op->a.i[3], op->a.i[2], x->shape[2],
                        cw->shape[1] - 1, bwd)
      .floats;
}

static void mamba_workspace(const char *path, const char **ov, int n) {
  static Plan p;
  if (plan(path, ov, n, &p) != PLAN_OK) {
    fails++;
    return;
  }
  const Graph *g = p.g;
  int nops = 0, q = 0, *point = malloc((size_t)g->nop * sizeof *point);
  for (int o = 0; o < g->nop; o++) point[o] = -1;
  for (int i = 0; i < p.sc.n; i++)
    if (p.sc.it[i].kind == SCHED_OP) point[p.sc.it[i].id] = q++;
  int64_t rowsums = 4, largest = 0;
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    if (op->kind == OP_FLASH_ATTN_BWD) {
      const Tensor *qt = &g->t[op->in[1]];
      int64_t b = 4 * qt->shape[0] * qt->shape[1] * qt->shape[2];
      rowsums = b > rowsums ? b : rowsums;
    }
    if (op->kind != OP_MAMBA_MIXER && op->kind != OP_MAMBA_MIXER_BWD && op->kind != OP_MAMBA_GROUP_NORM_BWD) continue;
    nops++;
    int t = op->out[op->nout - 1];
    const Tensor *w = &g->t[t];
    long want = mamba_ws_floats(g, op);
    largest = 4 * want > largest ? 4 * want : largest;
    CHECK(w->role == ROLE_WORKSPACE && w->dtype == DT_F32 && tensor_numel(w) == want,
          "%s %s: workspace %s is %s, %lld floats; the kernels take %ld", path, op_name(op->kind), w->name,
          dtype_name(w->dtype), (long long)tensor_numel(w), want);
    CHECK(point[o] >= 0 && p.mp.start[t] == point[o] && p.mp.end[t] == point[o],
          "%s %s: workspace %s live over points [%d, %d], its op at %d", path, op_name(op->kind), w->name,
          p.mp.start[t], p.mp.end[t], point[o]);
  }
  int64_t part = p.lp_ok ? p.lp.f.part_bytes[RT_SCRATCH_WORK] : -1;
  printf("%s: %d Mamba ops, the largest workspace %.3f GB (planned); the scratch's op workspace %lld B\n", path,
         nops, (double)largest / 1e9, (long long)part);
  CHECK(nops > 0 && part == rowsums, "%s: the scratch's op workspace %lld B, the flash row sums %lld B", path,
        (long long)part, (long long)rowsums);
  free(point);
  plan_free(&p);
}

int main(void) {
  mamba_workspace("tests/recipes/tiny_hybrid.lua", NULL, 0);
  const char *nem[] = {"model.hybrid_override_pattern=MEMEM*EME", "model.num_layers=9",
                       "model.expert_model_parallel_size=1", "train.world_size=1", "train.global_batch_size=1"};
  mamba_workspace("models/nemotron3_nano.lua", nem, 5);
  gpt3();
  llama_core_attn("flash", true);
  llama_core_attn("unfused", false);
  det_backward("models/bench_m.lua", NULL, true, true);
  det_backward("models/bench_m.lua", NULL, false, false);
  det_backward("models/llama3_8b.lua", "model.num_layers=2", true, false);
  invariants();
  printf("%d failure(s)\n", fails);
  return fails ? 1 : 0;
}
