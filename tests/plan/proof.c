/* proof.c — recompute never changes the math: for every label alone, every pair of labels, full
 * uniform and block with 1..L layers, on each tiny architecture, two training steps on the
 * planned arena (freed bytes poisoned with NaN between last use and reuse) give the loss, every
 * main gradient, every updated parameter and every optimizer state bitwise equal to the no-recompute run on the trivial
 * plan (every tensor its own memory). An fp8 recipe runs its fp8 linears (a build's lowering):
 * under delayed scaling the replayed casts must reuse the forward's scales and record no other
 * amax, so that the states, and with them the second step, stay bitwise. Usage: proof RECIPE
 * [RECIPE ...] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "lower/lower.h"
#include "plan/plan.h"
#include "cli/cpu_train.h"
#include "runtime/cpu/program.h"
#include "validate/validate.h"

enum { STEPS = 2 };

typedef struct {
  double loss[STEPS][64];
  float **grads; /* per step: all main grads concatenated */
  float **params;
  float **optim; /* per step after the tail: moments, counters and fp8 delayed-scaling states */
  int64_t ngrad, nparam, noptim;
} Result;

static int collect(const Graph *g, CpuExec *e, int role, float **out, int64_t *n) {
  int64_t total = 0;
  for (int t = 0; t < g->nt; t++)
    if ((int)g->t[t].role == role) total += tensor_numel(&g->t[t]);
  *out = malloc((size_t)(total + 1) * sizeof **out);
  if (!*out) return -1;
  int64_t k = 0;
  for (int t = 0; t < g->nt; t++) /* tensors in graph order: the same order in both graphs */
    if ((int)g->t[t].role == role) {
      memcpy(*out + k, cpu_exec_ptr(e, t), (size_t)tensor_numel(&g->t[t]) * sizeof(float));
      k += tensor_numel(&g->t[t]);
    }
  *n = total;
  return 0;
}

/* Runs STEPS steps; rc_cfg NULL = the reference (no recompute, trivial plan, no poison). */
static int run(const Spec *s, const RecomputeConfig *cfg, Result *r, int64_t *peak, int64_t *poisoned, int *nreplay) {
  Graph *g;
  char err[512];
  if (lower_step(s, &g, err, sizeof err) != LOWER_OK) {
    fprintf(stderr, "lower: %s\n", err);
    return -1;
  }
  RecomputeResult rr = {0};
  Schedule sc;
  MemPlan mp = {0};
  if (cfg && recompute_apply(g, cfg, &rr, err, sizeof err) != 0) {
    fprintf(stderr, "recompute: %s\n", err);
    return -1;
  }
  *nreplay = rr.nreplay_total;
  if (schedule_build(g, s, &sc, err, sizeof err) != 0) {
    fprintf(stderr, "schedule: %s\n", err);
    return -1;
  }
  if (cfg) {
    Fusions *none = fusions_new(g); /* the CPU reference runs every op on its own */
    int mrc = !none || memplan_build(g, none, &sc, NULL, 4, &mp, err, sizeof err) != 0 ||
              memplan_verify(g, &mp, err, sizeof err) != 0;
    fusions_free(none);
    if (mrc) {
      fprintf(stderr, "memplan: %s\n", none ? err : "out of memory");
      return -1;
    }
    memplan_apply(g, &mp);
    *peak = mp.peak;
  } else {
    *peak = graph_plan_trivial(g, 4);
  }
  PlanProgram prog;
  if (plan_program_build(g, &sc, cfg ? &mp : NULL, &prog) != 0) return -1;
  PlanExec *x = plan_exec_new(g, &prog.p, 2, err, sizeof err);
  if (!x) {
    fprintf(stderr, "exec: %s\n", err);
    return -1;
  }
  CpuData d;
  if (cpu_data_open_spec(s, &d, err, sizeof err) != 0) return -1;
  cpu_exec_init_params(plan_exec_cpu(x), (uint64_t)s->train.seed);
  r->grads = calloc(STEPS, sizeof *r->grads);
  r->params = calloc(STEPS, sizeof *r->params);
  r->optim = calloc(STEPS, sizeof *r->optim);
  for (int st = 0; st < STEPS; st++) {
    for (int m = 0; m < sc.nmicro && m < 64; m++)
      if (plan_exec_micro(x, &d, (uint64_t)s->train.seed, st + 1, m, &r->loss[st][m], err, sizeof err) != 0) return -1;
    collect(g, plan_exec_cpu(x), ROLE_GRAD, &r->grads[st], &r->ngrad);
    plan_exec_tail(x);
    collect(g, plan_exec_cpu(x), ROLE_PARAM, &r->params[st], &r->nparam);
    collect(g, plan_exec_cpu(x), ROLE_OPTIM, &r->optim[st], &r->noptim);
  }
  *poisoned = plan_exec_poisoned(x);
  if (d.free) d.free(&d);
  plan_exec_free(x);
  plan_program_free(&prog);
  memplan_free(&mp);
  schedule_free(&sc);
  recompute_result_free(&rr);
  graph_free(g);
  return 0;
}

static void result_free(Result *r) {
  for (int i = 0; i < STEPS; i++)
    free(r->grads ? r->grads[i] : NULL), free(r->params ? r->params[i] : NULL), free(r->optim ? r->optim[i] : NULL);
  free(r->grads), free(r->params), free(r->optim);
}

static int same(const Result *a, const Result *b, int nmicro, char *why, size_t n) {
  if (a->ngrad != b->ngrad || a->nparam != b->nparam || a->noptim != b->noptim)
    return snprintf(why, n, "sizes differ"), 0;
  for (int st = 0; st < STEPS; st++) {
    for (int m = 0; m < nmicro; m++)
      if (memcmp(&a->loss[st][m], &b->loss[st][m], sizeof(double)))
        return snprintf(why, n, "loss step %d micro %d: %.9g vs %.9g", st, m, a->loss[st][m], b->loss[st][m]), 0;
    if (memcmp(a->grads[st], b->grads[st], (size_t)a->ngrad * sizeof(float)))
      return snprintf(why, n, "main gradients differ at step %d", st), 0;
    if (memcmp(a->params[st], b->params[st], (size_t)a->nparam * sizeof(float)))
      return snprintf(why, n, "parameters differ after step %d", st), 0;
    if (memcmp(a->optim[st], b->optim[st], (size_t)a->noptim * sizeof(float)))
      return snprintf(why, n, "optimizer state (or fp8 scaling state) differs after step %d", st), 0;
  }
  return 1;
}

static int check(const Spec *s, const char *name, const RecomputeConfig *cfg, const Result *ref, int64_t ref_peak, int *fails) {
  Result r = {0};
  int64_t peak = 0, poisoned = 0;
  int nrep = 0;
  char why[256] = "";
  int ok = run(s, cfg, &r, &peak, &poisoned, &nrep) == 0 && same(ref, &r, (int)spec_global_batch_size(s) / (int)s->train.micro_batch_size, why, sizeof why);
  printf("%-5s %-28s replay ops %3d  arena peak %8lld (trivial %8lld)  poisoned %lld B  %s\n", ok ? "ok" : "FAIL", name, nrep,
         (long long)peak, (long long)ref_peak, (long long)poisoned, why);
  result_free(&r);
  if (!ok) (*fails)++;
  return ok;
}

int main(int argc, char **argv) {
  int fails = 0;
  for (int a = 1; a < argc; a++) {
    Spec raw, s;
    DiagList d;
    diag_init(&d);
    if (frontend_load(argv[a], NULL, 0, NULL, &raw, &d) != 0 || validate_spec(&raw, &s, &d) != 0) {
      diag_print(&d, stderr);
      return 1;
    }
    diag_free(&d);
    /* an fp8 recipe lowers its fp8 linears only as a build runs it (lb_linear_op): their delayed
     * scaling's casts, recasts in the replays and state updates included */
    s.per_rank = s.present[SPEC_F_model_fp8];
    printf("== %s\n", argv[a]);
    Result ref = {0};
    int64_t ref_peak = 0, pz = 0;
    int nrep = 0;
    if (run(&s, NULL, &ref, &ref_peak, &pz, &nrep) != 0) return 1;
    RecomputeConfig base;
    recompute_config_from_spec(&s, &base);
    base.labels = 0, base.full = false;
    char name[96];
    check(&s, "[] (planned arena)", &base, &ref, ref_peak, &fails);
    for (int i = 0; i < IR_NLABELS; i++)
      for (int j = i; j < IR_NLABELS; j++) {
        RecomputeConfig c = base;
        c.labels = (1u << i) | (1u << j);
        if (i == j) snprintf(name, sizeof name, "%s", ir_label_name(i));
        else snprintf(name, sizeof name, "%s+%s", ir_label_name(i), ir_label_name(j));
        check(&s, name, &c, &ref, ref_peak, &fails);
      }
    for (int blk = 0; blk < 2; blk++)
      for (int n = 1; n <= s.model.num_layers; n++) {
        RecomputeConfig c = base;
        c.full = true, c.block = blk, c.num_layers = n;
        snprintf(name, sizeof name, "full %s %d", blk ? "block" : "uniform", n);
        check(&s, name, &c, &ref, ref_peak, &fails);
      }
    result_free(&ref);
  }
  printf("%d failure(s)\n", fails);
  return fails ? 1 : 0;
}
