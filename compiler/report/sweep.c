/* sweep.c — the recompute guide's matched-control method (`stepc sweep`): the [] control first,
 * then one candidate at a time, each planned from the same recipe and overrides, so that every
 * difference is the candidate's. Candidates are "[]", a comma list of labels, or "full" /
 * "full:uniform:N" / "full:block:N". The default set is the control, each label the lowered
 * architecture carries, then full uniform 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/layout.h"
#include "frontend/frontend.h"
#include "lower/lower.h"
#include "report/report.h"
#include "report/sweep.h"
#include "validate/validate.h"

static double worst_rank(const Plan *p, bool device_total) {
  double w = 0;
  for (int i = 0; i < p->rank.n; i++) {
    double b = device_total ? p->rank.r[i].device_total : p->rank.r[i].max_allocated;
    if (b > w) w = b;
  }
  return w;
}

/* Candidate -> its two or three overrides. */
static int candidate_overrides(const char *c, char ov[3][200]) {
  if (strncmp(c, "full", 4) == 0) {
    char method[16] = "uniform";
    int n = 1;
    if (c[4] == ':' && sscanf(c + 5, "%15[a-z]:%d", method, &n) < 1) return -1;
    if (strcmp(method, "uniform") && strcmp(method, "block")) return -1;
    snprintf(ov[0], 200, "model.recompute_granularity=full");
    snprintf(ov[1], 200, "model.recompute_method=%s", method);
    snprintf(ov[2], 200, "model.recompute_num_layers=%d", n);
    return 3;
  }
  snprintf(ov[0], 200, "model.recompute_granularity=selective");
  if (strcmp(c, "[]") == 0 || !c[0])
    snprintf(ov[1], 200, "model.recompute_modules=[]");
  else
    snprintf(ov[1], 200, "model.recompute_modules=[%s]", c);
  return 2;
}

/* The default candidates: labels whose tag appears on a forward op of the lowered graph. */
static int default_candidates(const Spec *s, char out[][128], int max) {
  char err[256];
  int n = 0;
  snprintf(out[n++], 128, "[]");
  Graph *g;
  if (lower_step(s, &g, err, sizeof err) != 0) return n;
  uint32_t seen = 0;
  for (int o = 0; o < g->nop; o++)
    if (g->op[o].tags.phase == IR_PHASE_FORWARD) seen |= g->op[o].tags.labels;
  graph_free(g);
  for (int i = 0; i < IR_NLABELS && n < max - 1; i++)
    if (seen & (1u << i)) snprintf(out[n++], 128, "%s", ir_label_name(i));
  snprintf(out[n++], 128, "full:uniform:1");
  return n;
}

int sweep_run(const char *recipe, const char *const *overrides, int noverrides, const char *candidates,
              double budget, SweepRow **rows_out, int *nrows, int *cheapest, DiagList *d) {
  *rows_out = NULL, *nrows = 0, *cheapest = -1;
  Spec raw, base;
  FrontendOptions fo = {.models_dir = stepc_models_dir()}; /* the shipped recipes beside this stepc */
  if (frontend_load(recipe, overrides, noverrides, &fo, &raw, d) != 0) return SWEEP_LOAD;
  if (validate_spec(&raw, &base, d) != 0) return SWEEP_INVALID;
  char cand[32][128];
  int nc = 0;
  if (candidates && candidates[0]) {
    const char *p = candidates;
    while (*p && nc < 32) {
      const char *e = strchr(p, ';');
      size_t len = e ? (size_t)(e - p) : strlen(p);
      snprintf(cand[nc++], 128, "%.*s", (int)len, p);
      p = e ? e + 1 : p + len;
    }
    if (nc == 0 || strcmp(cand[0], "[]") != 0) { /* the matched control always comes first */
      memmove(cand[1], cand[0], sizeof(cand[0]) * (size_t)(nc < 31 ? nc : 31));
      snprintf(cand[0], 128, "[]");
      nc = nc < 31 ? nc + 1 : 32;
    }
  } else {
    nc = default_candidates(&base, cand, 32);
  }
  SweepRow *rows = calloc((size_t)nc, sizeof *rows);
  const char **ov = malloc((size_t)(noverrides + 3) * sizeof *ov);
  Plan *p = malloc(sizeof *p);
  if (!rows || !ov || !p) {
    free(rows), free(ov), free(p);
    return SWEEP_ERROR;
  }
  for (int i = 0; i < nc; i++) {
    SweepRow *r = &rows[i];
    snprintf(r->name, sizeof r->name, "%s", cand[i]);
    char extra[3][200];
    int ne = candidate_overrides(cand[i], extra);
    if (ne < 0) {
      r->status = PLAN_ERROR;
      snprintf(r->why, sizeof r->why,
               "not a candidate: use [], labels joined by commas, or full[:uniform|block:N]");
      continue;
    }
    for (int k = 0; k < noverrides; k++)
      ov[k] = overrides[k];
    for (int k = 0; k < ne; k++)
      ov[noverrides + k] = extra[k];
    DiagList cd;
    diag_init(&cd);
    Spec s;
    if (frontend_load(recipe, ov, noverrides + ne, &fo, &raw, &cd) != 0 ||
        validate_spec(&raw, &s, &cd) != 0) {
      r->status = PLAN_ERROR;
      for (int k = 0; k < cd.n; k++)
        if (cd.items[k].severity == DIAG_ERROR) {
          snprintf(r->why, sizeof r->why, "[%s] %s", cd.items[k].rule, cd.items[k].message);
          break;
        }
      diag_free(&cd);
      continue;
    }
    char err[512] = "";
    r->status = plan_build(&s, 0, p, &cd, err, sizeof err);
    if (r->status != PLAN_OK) {
      snprintf(r->why, sizeof r->why, "%s", err);
      diag_free(&cd);
      continue;
    }
    r->errors = diag_count(&cd, DIAG_ERROR);
    r->peak = worst_rank(p, false);
    r->device_total = worst_rank(p, true);
    r->usable = p->rank.usable;
    for (int k = 0; k < p->rank.n; k++)
      for (int j = 0; j < 2; j++)
        if (p->rank.r[k].after_iteration[j] > r->logged[j]) r->logged[j] = p->rank.r[k].after_iteration[j];
    r->replay_flops = p->cost.replay_flops;
    r->step_time = p->cost.step_time;
    plan_free(p);
    diag_free(&cd);
  }
  for (int i = 0; i < nc; i++) {
    SweepRow *r = &rows[i];
    if (r->status != PLAN_OK) continue;
    if (rows[0].status == PLAN_OK && rows[0].peak > 0) {
      r->delta = r->peak - rows[0].peak;
      r->delta_pct = 100.0 * r->delta / rows[0].peak;
      r->time_delta_pct =
          rows[0].step_time > 0 ? 100.0 * (r->step_time - rows[0].step_time) / rows[0].step_time : 0;
    }
    /* the verdict compares the device total (max allocated plus the memory outside PyTorch's
     * allocator) with --budget, or without one with the recipe's usable device memory */
    double limit = budget > 0 ? budget : r->usable;
    r->fits = r->errors == 0 && (limit <= 0 || r->device_total <= limit);
    if (r->fits && (*cheapest < 0 || r->step_time < rows[*cheapest].step_time)) *cheapest = i;
  }
  free(ov), free(p);
  *rows_out = rows, *nrows = nc;
  return SWEEP_OK;
}
