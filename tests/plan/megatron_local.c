/* Megatron-Core's local layer spec on one H200 (issue 28): stepc's per-rank "logged 1 / 2"
 * (compiler/plan/memrank.c, local_attention_add and global_buffer_bytes; torch_adamw's first optimizer
 * step, which sets the MoE row's iteration 1; memrank_readings) against
 * max_memory_allocated() that Megatron-Core itself printed after iterations 1 and 2, stored with its
 * commit and command in tests/plan/data/megatron_local_h200.txt. Each reading within 2%, and each
 * configuration, which ran, predicted to fit the H200 (139 GiB as PyTorch reports it, rounded down).
 * Also: the same job at world size 1 with train.megatron_job = true predicts the same peaks (the
 * data-parallel size changes nothing without the distributed optimizer), and stepc's own step at
 * world size 1 keeps its plan (no Megatron allocation added). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "plan/plan.h"
#include "validate/validate.h"

static int fails;

static int plan(const char **ov, int n, Plan *p) {
  static Spec raw, s;
  DiagList d;
  diag_init(&d);
  int rc = frontend_load("models/bench_m.lua", ov, n, NULL, &raw, &d) || validate_spec(&raw, &s, &d);
  if (rc) diag_print(&d, stdout);
  diag_free(&d);
  if (rc) return -1;
  char err[512] = "";
  rc = plan_build(&s, 0, p, NULL, err, sizeof err);
  if (rc != PLAN_OK) printf("plan: %s\n", err);
  return rc;
}

static char *trim(char *x) {
  while (*x == ' ') x++;
  size_t n = strlen(x);
  while (n && (x[n - 1] == ' ' || x[n - 1] == '\n')) x[--n] = 0;
  return x;
}

/* the base overrides of the command, then the row's, then extra */
static int row_plan(char *row_ov, const char *extra1, const char *extra2, Plan *p) {
  const char *ov[32] = {"model.transformer_impl=local", "model.attention_backend=unfused", "model.cross_entropy_loss_fusion=false",
                        "model.num_layers=4", "train.micro_batch_size=2", "train.world_size=2", "train.global_batch_size=4",
                        "train.usable_device_memory_gib=139"};
  int n = 8;
  char buf[512];
  snprintf(buf, sizeof buf, "%s", row_ov);
  if (strcmp(trim(buf), "-") != 0)
    for (char *t = strtok(buf, " "); t && n < 28; t = strtok(NULL, " ")) ov[n++] = t;
  if (extra1) ov[n++] = extra1;
  if (extra2) ov[n++] = extra2;
  return plan(ov, n, p);
}

int main(void) {
  FILE *f = fopen("tests/plan/data/megatron_local_h200.txt", "r");
  if (!f) {
    printf("FAIL: tests/plan/data/megatron_local_h200.txt not found\n");
    return 1;
  }
  char line[1024];
  int rows = 0;
  printf("%-24s %17s %17s %16s %s\n", "config", "megatron 1 / 2", "stepc 1 / 2", "error 1 / 2", "fits");
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#' || line[0] == '\n') continue;
    char *col[5];
    int nc = 0;
    for (char *t = strtok(line, "|"); t && nc < 5; t = strtok(NULL, "|")) col[nc++] = t;
    if (nc != 5) {
      printf("FAIL: bad row\n");
      fails++;
      continue;
    }
    char name[64], ovs[512];
    snprintf(name, sizeof name, "%s", trim(col[0]));
    snprintf(ovs, sizeof ovs, "%s", trim(col[2]));
    double m1 = atof(col[3]), m2 = atof(col[4]);
    Plan p;
    memset(&p, 0, sizeof p);
    if (row_plan(ovs, NULL, NULL, &p) != PLAN_OK) {
      printf("FAIL: %s does not plan\n", name);
      fails++;
      plan_free(&p);
      continue;
    }
    const RankMem *r = &p.rank.r[0];
    double s1 = r->after_iteration[0] / 1e9, s2 = r->after_iteration[1] / 1e9;
    double e1 = (s1 - m1) / m1, e2 = (s2 - m2) / m2;
    bool fits = r->device_total <= p.rank.usable;
    printf("%-24s %8.3f /%7.3f %8.3f /%7.3f %+7.2f%% /%+6.2f%% %s\n", name, m1, m2, s1, s2, 100 * e1, 100 * e2,
           fits ? "fits (ran)" : "OUT OF MEMORY (it ran)");
    if (fabs(e1) > 0.02 || fabs(e2) > 0.02) printf("FAIL: %s beyond 2%%\n", name), fails++;
    if (!fits) printf("FAIL: %s predicted out of memory\n", name), fails++;
    /* the same job described at world size 1 */
    Plan q;
    memset(&q, 0, sizeof q);
    if (row_plan(ovs, "train.world_size=1", "train.megatron_job=true", &q) == PLAN_OK) {
      double d = fabs(q.rank.r[0].after_iteration[1] - r->after_iteration[1]);
      if (d > 1e6) printf("FAIL: %s at world size 1 as a Megatron job differs by %.0f bytes\n", name, d), fails++;
    } else {
      printf("FAIL: %s at world size 1 does not plan\n", name), fails++;
    }
    plan_free(&q);
    plan_free(&p);
    rows++;
  }
  fclose(f);
  if (rows < 7) printf("FAIL: %d rows read\n", rows), fails++;
  /* stepc's own step (world size 1, no megatron_job) reports its own plan: max allocated is the
   * single-rank arena's peak, with none of Megatron's allocations */
  {
    const char *ov[] = {"model.transformer_impl=local", "model.attention_backend=unfused", "model.num_layers=4", "train.micro_batch_size=2"};
    Plan p;
    memset(&p, 0, sizeof p);
    if (plan(ov, 4, &p) == PLAN_OK) {
      double own = p.rank.r[0].max_allocated, arena = (double)p.mp.peak;
      if (fabs(own - arena - p.rank.r[0].workspace) > 1e6)
        printf("FAIL: stepc's own step reports %.3f GB, its plan %.3f GB\n", own / 1e9, arena / 1e9), fails++;
    } else {
      printf("FAIL: stepc's own step does not plan\n"), fails++;
    }
    plan_free(&p);
  }
  printf(fails ? "%d failures\n" : "ok\n", fails);
  return fails != 0;
}
