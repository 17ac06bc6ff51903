/* test_eval.c [cpu|cuda] — stepc_eval (stepc.h) on one device: the loss equals the one the next
 * stepc_step reports on the same batch (its forward before the update: bitwise), an evaluation between
 * two steps changes nothing (the next step's loss and gradient norm, every parameter, master and Adam
 * moment and the step counter bitwise those of a run without it, a pending binding kept), the per-token
 * log-probabilities are 0 on ignored targets, unchanged elsewhere by masking other targets, and their
 * mean is minus the loss; dropout is off (two evaluations of a dropout recipe agree bitwise); bad
 * arguments are refused. Cases: tiny (logits, then CROSS_ENTROPY), tiny with output_layer_chunks=2
 * (LINEAR_CROSS_ENTROPY, on cuda its backward fused into the forward's launch), gpt3_tiny (dropout),
 * tiny in fp8 with delayed scaling, one micro-batch (its scaling state is optimizer state the
 * evaluation leaves alone), and on the CPU tiny_mla_moe so (its routed experts' grouped fp8 linears).
 * cuda runs bf16 recipes; exit 77 there without a GPU. Prints one line per check's numbers. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "open_recipe.h"
#include "runtime/image.h"

static stepc_device dev;
static int dev_cuda;

static unsigned vocab;

/* A batch drawn from k: tokens and targets in [0, vocab), every `mask`-th target -100 (0: none). */
static void batch(int32_t *tok, int32_t *tg, size_t n, unsigned k, size_t mask) {
  for (size_t i = 0; i < n; i++) {
    tok[i] = (int32_t)((i * 7919u + k * 104729u) % vocab);
    tg[i] = mask && i % mask == 3 ? -100 : (int32_t)((i * 31u + k * 17u + 5u) % vocab);
  }
}

static int same_file(const char *a, const char *b) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  int same = fa && fb, ca, cb;
  while (same && (ca = fgetc(fa)) == (cb = fgetc(fb)) && ca != EOF) {
  }
  if (same) same = feof(fa) && feof(fb);
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return same;
}

static void checkpoint_same(stepc_t *a, stepc_t *b, const char *tag, const char *when) {
  char da[300], db[300], fa[400], fb[400];
  snprintf(da, sizeof da, "%s/ck_%s_a", tmpdir, tag);
  snprintf(db, sizeof db, "%s/ck_%s_b", tmpdir, tag);
  CHECK(stepc_save_checkpoint(a, da) == STEPC_OK && stepc_save_checkpoint(b, db) == STEPC_OK);
  int ok = 1;
  for (int k = 0; k < 2; k++) {
    const char *f = k ? "optimizer.safetensors" : "model.safetensors";
    snprintf(fa, sizeof fa, "%s/%s", da, f);
    snprintf(fb, sizeof fb, "%s/%s", db, f);
    ok &= same_file(fa, fb);
  }
  printf("  %s: parameters, masters and optimizer state %s %s\n", tag, when,
         ok ? "bitwise those of the run without the evaluation" : "DIFFER");
  CHECK(ok);
}

/* The fused fp8 amaxes (compiler/passes/fuse.c fuse_amax) in one section of the program (the
 * training's points, or the evaluation's): a current-scaling cast (of bf16, or of an fp8 primary
 * weight's fp32 master) with no amax pass before it in its point reads one partial, the amax slot
 * that an earlier launch of the section (its producer: the master's AdamW for the latter) passes as
 * its last argument; such a master's cast point also has a solo range (runtime/program.h LpPoint.solo,
 * played after open, init and loads, with no AdamW before it): its amax pass, then the cast reading
 * that pass's partials. The casts that read a slot, and into *bad those with no producer or no
 * solo range where they need one. */
static int fused_casts(const LaunchProgram *lp, int npoints, int eval, int *bad) {
  int fused = 0;
  for (int q = 0; q < npoints; q++) {
    LpRange r = eval ? lp->point[q].eval : lp->point[q].rec;
    int pass = 0;
    for (int i = r.first; i < r.first + r.count; i++) {
      const RtRec *c = &lp->rec[i];
      if (c->kind != RT_REC_LAUNCH) continue;
      pass |= c->k == RT_K_fp8_amax_partial || c->k == RT_K_fp8_amax_partial_f32;
      int f32 = c->k == RT_K_fp8_cast_transpose_f32;
      if ((c->k != RT_K_fp8_cast_transpose && !f32) || c->arg[9] != 0 || pass) continue;
      LpRange so = lp->point[q].solo;
      if (f32 && !eval &&
          !(so.count == 2 && lp->rec[so.first].k == RT_K_fp8_amax_partial_f32 &&
            lp->rec[so.first + 1].k == RT_K_fp8_cast_transpose_f32 &&
            lp->rec[so.first + 1].arg[4] == lp->rec[so.first].arg[0] && lp->rec[so.first + 1].arg[5] > 1))
        ++*bad, fprintf(stderr, "  point %d: a master's fused cast has no solo range with its amax pass\n", q);
      int found = 0;
      fused++;
      for (int p = 0; p <= q && !found; p++) {
        LpRange pr = eval ? lp->point[p].eval : lp->point[p].rec;
        for (int j = pr.first; j < pr.first + pr.count && j < i && !found; j++)
          found = lp->rec[j].kind == RT_REC_LAUNCH && lp->rec[j].k != RT_K_fp8_cast_transpose &&
                  lp->rec[j].nargs > 0 && lp->rec[j].arg[lp->rec[j].nargs - 1] == c->arg[4];
      }
      if (!found || (uint32_t)c->arg[5] != 1)
        ++*bad, fprintf(stderr, "  %spoint %d: an fp8 cast without its amax pass has no producer\n",
                        eval ? "eval " : "", q);
    }
  }
  return fused;
}

/* The artifact's evaluation section (step.img): present, and no GEMM, memset or copy of it writes a
 * parameter, master, main gradient or optimizer state (what the training's fused output-layer loss
 * does: its weight gradient GEMM adds into the main gradient); its GEMM count. */
static void eval_section(const char *dir) {
  char path[400], err[600];
  snprintf(path, sizeof path, "%s/%s", dir, STEPC_IMAGE_FILE);
  StepImage im;
  CHECK(image_read(path, &im, err, sizeof err) == 0);
  if (!im.has_program) {
    printf("  (no launch program: %s)\n", im.f.cuda_refusal);
    image_free(&im);
    return;
  }
  const LaunchProgram *lp = &im.lp;
  CHECK(lp->f.has_eval == 1);
  int gemms = 0, bad = 0, train_gemms = 0;
  for (int q = 0; q < im.npoints; q++) {
    LpRange r = lp->point[q].eval;
    for (int i = r.first; i < r.first + r.count; i++) {
      const RtRec *c = &lp->rec[i];
      uint64_t w = c->kind == RT_REC_GEMM     ? (c->gemm.d ? c->gemm.d : c->gemm.c)
                   : c->kind != RT_REC_LAUNCH ? c->dst
                                              : 0;
      gemms += c->kind == RT_REC_GEMM;
      /* a delayed-scaling cast records no amax: its last argument, the state's amax entry, is null */
      if (c->kind == RT_REC_LAUNCH && c->k == RT_K_fp8_cast_transpose && c->arg[c->nargs - 1] != 0)
        bad++, fprintf(stderr, "  eval point %d: an fp8 cast records its amax\n", q);
      if (!(w & LP_PTR)) continue;
      int64_t at = (int64_t)(w & ~LP_PTR);
      for (int t = 0; t < im.g->nt; t++) {
        TensorRole ro = im.g->t[t].role;
        /* main gradients are state only with several micro-batches: with one they are transient
         * (zeroed in the backward, dead after the optimizer: optimizer.c) and an evaluation may
         * land on their bytes */
        if ((ro == ROLE_PARAM || ro == ROLE_MASTER || (ro == ROLE_GRAD && im.g->num_microbatches > 1) ||
             ro == ROLE_OPTIM) &&
            im.g->t[t].bytes > 0 && at >= lp->tensor_at[t] && at < lp->tensor_at[t] + im.g->t[t].bytes)
          bad++, fprintf(stderr, "  eval point %d writes %s\n", q, im.g->t[t].name);
      }
    }
    if (r.count)
      for (int i = lp->point[q].rec.first; i < lp->point[q].rec.first + lp->point[q].rec.count; i++)
        train_gemms += lp->rec[i].kind == RT_REC_GEMM;
  }
  int fused = fused_casts(lp, im.npoints, 0, &bad), eval_fused = fused_casts(lp, im.npoints, 1, &bad);
  printf("  evaluation section: %d GEMMs (the same points train with %d), %d writes of persistent state; "
         "fp8 casts with their amax from the producer: %d training, %d evaluation\n",
         gemms, train_gemms, bad, fused, eval_fused);
  CHECK(bad == 0 && gemms > 0);
  image_free(&im);
}

static void run_case(const char *recipe, const char *const *ov, int nov, int dropout) {
  stepc_options o = stepc_options_default();
  o.device = dev;
  stepc_t *a = NULL, *b = NULL;
  stepc_status st = open_recipe(recipe, ov, nov, &o, &a);
  CHECK(st == STEPC_OK && open_recipe(recipe, ov, nov, &o, &b) == STEPC_OK);
  if (st != STEPC_OK || !b) {
    fprintf(stderr, "%s: %s\n", recipe, a ? stepc_last_error(a) : "");
    stepc_close(a), stepc_close(b);
    return;
  }
  stepc_info in;
  CHECK(stepc_get_info(a, &in) == STEPC_OK);
  printf("%s%s%s (%s):\n", recipe, nov ? " " : "", nov ? ov[nov - 1] : "", in.device);
  eval_section(built_dir);
  size_t ntok = (size_t)(in.micro_batch_size * in.seq_length), n = (size_t)in.num_microbatches * ntok;
  int32_t *x1 = malloc(n * 4), *t1 = malloc(n * 4), *x2 = malloc(n * 4), *t2 = malloc(n * 4),
          *xe = malloc(n * 4), *te = malloc(n * 4), *tu = malloc(n * 4);
  vocab = (unsigned)in.vocab_size;
  float *lp = malloc(n * 4), *lpu = malloc(n * 4), *lp2 = malloc(n * 4);
  batch(x1, t1, n, 1, 7), batch(x2, t2, n, 2, 0), batch(xe, te, n, 3, 5), batch(xe, tu, n, 3, 0);
  CHECK(stepc_init_params(a, 7) == STEPC_OK && stepc_init_params(b, 7) == STEPC_OK);

  /* 1. the loss of the next step's forward */
  double le = 0, le2 = 0;
  stepc_step_stats sa, sb;
  st = stepc_eval(a, x1, t1, n, &le, lp);
  CHECK(st == STEPC_OK);
  if (st != STEPC_OK) fprintf(stderr, "  stepc_eval: %s\n", stepc_last_error(a));
  CHECK(stepc_bind_batch(a, x1, t1, n) == STEPC_OK && stepc_step(a, &sa) == STEPC_OK);
  CHECK(stepc_bind_batch(b, x1, t1, n) == STEPC_OK && stepc_step(b, &sb) == STEPC_OK);
  CHECK(sa.loss == sb.loss && sa.grad_norm == sb.grad_norm);
  printf("  eval loss %.9g, the next step's %.9g (%s)\n", le, sa.loss,
         le == sa.loss ? "bitwise"
         : dropout     ? "differ: the step drops out"
                       : "DIFFER");
  if (!dropout) CHECK(le == sa.loss);
  if (dropout) { /* dropout off: the loss of the recipe without dropout, on the same parameters */
    const char *nodrop[] = {"model.bf16=true", "model.hidden_dropout=0", "model.attention_dropout=0"};
    stepc_t *c = NULL;
    stepc_step_stats sc;
    CHECK(open_recipe(recipe, nodrop + !dev_cuda, 2 + dev_cuda, &o, &c) == STEPC_OK &&
          stepc_init_params(c, 7) == STEPC_OK);
    CHECK(stepc_bind_batch(c, x1, t1, n) == STEPC_OK && stepc_step(c, &sc) == STEPC_OK);
    double d = fabs(sc.loss - le);
    printf("  the recipe without dropout: step loss %.9g, |difference| %.2e\n", sc.loss, d);
    CHECK(dev_cuda ? d < 1e-6 * le : d == 0);
    stepc_close(c);
  }

  /* 2. the per-token log-probabilities: 0 where ignored, <= 0 elsewhere, mean -loss */
  int zero_ok = 1;
  double mean = 0, mean_kept = 0, all = 0;
  size_t kept_all = 0;
  for (int64_t mb = 0; mb < in.num_microbatches; mb++) {
    double s = 0;
    for (size_t i = mb * ntok; i < (mb + 1) * ntok; i++) {
      if (t1[i] < 0)
        zero_ok &= lp[i] == 0;
      else
        zero_ok &= lp[i] <= 0 && isfinite(lp[i]), kept_all++;
      s += lp[i];
    }
    mean += -s / (double)ntok / (double)in.num_microbatches;
    all += s;
  }
  /* Megatron's normalisation: the kept tokens of the whole batch, every micro-batch together */
  mean_kept = kept_all ? -all / (double)kept_all : 0;
  /* the step's normaliser: the kept tokens of the batch (every token without masks) */
  double rel = fabs(mean - le) / le, rel_kept = fabs(mean_kept - le) / le;
  printf("  -mean log-prob %.9g over every token, %.9g over the kept ones; loss %.9g (relative %.1e, %.1e); "
         "ignored targets 0: %s\n",
         mean, mean_kept, le, rel, rel_kept, zero_ok ? "yes" : "NO");
  CHECK(zero_ok && rel_kept < 2e-6);

  /* 3. an evaluation between steps, with a binding pending, changes nothing */
  CHECK(stepc_bind_batch(a, x2, t2, n) == STEPC_OK && stepc_eval(a, xe, te, n, &le, NULL) == STEPC_OK);
  CHECK(stepc_step(a, &sa) == STEPC_OK);
  CHECK(stepc_bind_batch(b, x2, t2, n) == STEPC_OK && stepc_step(b, &sb) == STEPC_OK);
  stepc_info ia, ib;
  CHECK(stepc_get_info(a, &ia) == STEPC_OK && stepc_get_info(b, &ib) == STEPC_OK && ia.step == ib.step &&
        ia.step == 2);
  printf("  step 2 after an evaluation: loss %.9g grad norm %.9g; without: %.9g %.9g (%s)\n", sa.loss,
         sa.grad_norm, sb.loss, sb.grad_norm,
         sa.loss == sb.loss && sa.grad_norm == sb.grad_norm ? "bitwise" : "DIFFER");
  CHECK(sa.loss == sb.loss && sa.grad_norm == sb.grad_norm);
  /* and an unbound step after an evaluation draws the recipe's batch as the other run does */
  CHECK(stepc_eval(a, xe, te, n, NULL, NULL) == STEPC_OK && stepc_step(a, &sa) == STEPC_OK &&
        stepc_step(b, &sb) == STEPC_OK);
  CHECK(sa.loss == sb.loss && sa.grad_norm == sb.grad_norm);
  static int ncase;
  char tag[16];
  snprintf(tag, sizeof tag, "case%d", ncase++);
  checkpoint_same(a, b, tag, "after the next step");
  /* and right after one: nothing of the state moved (fp8 delayed scaling: no amax recorded) */
  CHECK(stepc_eval(a, xe, te, n, NULL, NULL) == STEPC_OK);
  snprintf(tag, sizeof tag, "case%d", ncase++);
  checkpoint_same(a, b, tag, "right after an evaluation");

  /* 4. masking targets changes only their log-probabilities; an evaluation is deterministic */
  CHECK(stepc_eval(a, xe, te, n, &le, lp) == STEPC_OK && stepc_eval(a, xe, tu, n, &le2, lpu) == STEPC_OK);
  double le3 = 0;
  CHECK(stepc_eval(a, xe, te, n, &le3, lp2) == STEPC_OK && le3 == le && !memcmp(lp, lp2, n * 4));
  int kept_same = 1;
  for (size_t i = 0; i < n; i++)
    kept_same &= te[i] < 0 ? lp[i] == 0 : lp[i] == lpu[i];
  printf("  masked batch: kept tokens' log-probs bitwise the unmasked batch's: %s; twice the same: %s (loss "
         "%.9g, "
         "unmasked %.9g)\n",
         kept_same ? "yes" : "NO", le3 == le ? "yes" : "NO", le, le2);
  CHECK(kept_same);

  /* 5. bad arguments */
  CHECK(stepc_eval(a, xe, te, n - 1, &le, NULL) == STEPC_ERR_ARGUMENT);
  CHECK(stepc_eval(a, xe, NULL, n, &le, NULL) == STEPC_ERR_ARGUMENT);
  xe[5] = (int32_t)vocab;
  CHECK(stepc_eval(a, xe, te, n, &le, NULL) == STEPC_ERR_ARGUMENT && strstr(stepc_last_error(a), "token 5"));
  free(x1), free(t1), free(x2), free(t2), free(xe), free(te), free(tu), free(lp), free(lpu), free(lp2);
  stepc_close(a), stepc_close(b);
}

int main(int argc, char **argv) {
  int cuda = argc > 1 && !strcmp(argv[1], "cuda");
  dev = cuda ? STEPC_DEVICE_CUDA : STEPC_DEVICE_CPU;
  dev_cuda = cuda;
  char dir[] = "/tmp/stepc_test_eval_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  snprintf(tmpdir, sizeof tmpdir, "%s", dir);
  if (cuda) {
    stepc_options o = stepc_options_default();
    o.device = STEPC_DEVICE_CUDA;
    stepc_t *s = NULL;
    const char *bf[] = {"model.bf16=true"};
    stepc_status st = open_recipe("models/tiny.lua", bf, 1, &o, &s);
    stepc_close(s);
    if (st == STEPC_ERR_NO_DEVICE) {
      printf("SKIP: no GPU here\n");
      return 77;
    }
  }
  const char *plain[] = {"model.bf16=true"}, *chunks[] = {"model.bf16=true", "model.output_layer_chunks=2"};
  run_case("models/tiny.lua", plain + !cuda, cuda, 0);
  run_case("models/tiny.lua", chunks + !cuda, 1 + cuda, 0);
  run_case("tests/recipes/gpt3_tiny.lua", plain + !cuda, cuda, 1);
  /* fp8 delayed scaling: an evaluation's casts use the current scales and record no amax; one micro-batch
   * a step, since a step rescales its inputs' casts between micro-batches and an evaluation does not */
  const char *f8[] = {"model.bf16=true", "train.global_batch_size=4"};
  run_case("tests/recipes/tiny_fp8_delayed.lua", f8 + !cuda, 1 + cuda, 0);
  /* fp8 current scaling: the casts of the norms' and the MLP activation's outputs read the amax their
   * producers folded (eval_section checks each has one) */
  run_case("tests/recipes/tiny_fp8.lua", f8 + !cuda, 1 + cuda, 0);
  /* with fp8 primary weights: the casts of the masters after the optimizer read the amax each
   * master's AdamW folded, and run alone (after open, init, a load) with their own amax pass */
  const char *f8p[] = {"model.bf16=true", "train.global_batch_size=4", "model.fp8_param=true"};
  run_case("tests/recipes/tiny_fp8.lua", f8p + !cuda, 2 + cuda, 0);
  /* the routed experts' grouped fp8 linears (delayed: a state column an expert; no CUDA kernels, so the
   * CPU device only): the evaluation records no expert's amax either */
  const char *moe[] = {"model.fp8=hybrid", "model.fp8_recipe=delayed", "train.global_batch_size=2",
                       "model.moe_aux_loss_coeff=0"}; /* the loss = the mean of the log-probabilities */
  if (!cuda) run_case("tests/recipes/tiny_mla_moe.lua", moe, 4, 0);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  if (failures)
    fprintf(stderr, "%d check(s) failed\n", failures);
  else
    printf("ok\n");
  return failures ? 1 : 0;
}
