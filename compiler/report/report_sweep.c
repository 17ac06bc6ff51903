/* report_sweep.c — the sweep table and its JSON (docs/plan-json.md). */
#include "report/report.h"

#define GB 1e9

void report_sweep_text(const char *recipe, const SweepRow *rows, int n, double budget, int cheapest,
                       FILE *f) {
  fprintf(f, "%s: recompute sweep against the [] control (predicted max allocated, worst rank)\n", recipe);
  double limit = budget > 0 ? budget : n > 0 ? rows[0].usable : 0;
  fprintf(f, "  %-24s %12s %10s %9s %13s %10s %6s %15s  %s\n", "candidate", "peak GB", "delta GB", "delta %",
          "replay TFLOP", "step ms", "time %", "device total GB", limit > 0 ? "fits" : "");
  for (int i = 0; i < n; i++) {
    const SweepRow *r = &rows[i];
    if (r->status != PLAN_OK) {
      fprintf(f, "  %-24s  (no plan: %s)\n", r->name, r->why);
      continue;
    }
    fprintf(f, "  %-24s %12.3f %+10.3f %+8.2f%% %13.3f %10.2f %+5.1f%% %15.3f  %s%s%s\n", r->name,
            r->peak / GB, r->delta / GB, r->delta_pct, r->replay_flops / 1e12, r->step_time * 1e3,
            r->time_delta_pct, r->device_total / GB, limit > 0 ? (r->fits ? "yes" : "no") : "",
            r->errors ? " (graph-scope violations)" : "",
            i == cheapest && limit > 0 ? "  <- cheapest that fits" : "");
  }
  if (limit > 0 && cheapest < 0) fprintf(f, "  nothing fits %.3f GB\n", limit / GB);
}

void report_sweep_json(const char *recipe, const SweepRow *rows, int n, double budget, int cheapest,
                       FILE *f) {
  fprintf(f, "{\"schema\": \"stepc.sweep/1\", \"recipe\": ");
  json_write_string(f, recipe);
  fprintf(f, ", \"budget_bytes\": %.17g, \"usable_device_memory_bytes\": %.17g, \"cheapest_fit\": ",
          budget > 0 ? budget : 0, n > 0 ? rows[0].usable : 0);
  if (cheapest >= 0)
    json_write_string(f, rows[cheapest].name);
  else
    fprintf(f, "null");
  fprintf(f, ", \"rows\": [");
  for (int i = 0; i < n; i++) {
    const SweepRow *r = &rows[i];
    fprintf(f, "%s\n  {\"candidate\": ", i ? "," : "");
    json_write_string(f, r->name);
    fprintf(f, ", \"ok\": %s, ", r->status == PLAN_OK ? "true" : "false");
    if (r->status != PLAN_OK) {
      fprintf(f, "\"why\": ");
      json_write_string(f, r->why);
      fprintf(f, "}");
      continue;
    }
    fprintf(f,
            "\"peak_bytes\": %.17g, \"delta_bytes\": %.17g, \"delta_pct\": %.6f, \"replay_flops\": %.17g, "
            "\"step_time_s\": %.9g, \"step_time_delta_pct\": %.6f, \"device_total_bytes\": %.17g, "
            "\"scope_errors\": %d, "
            "\"fits\": %s}",
            r->peak, r->delta, r->delta_pct, r->replay_flops, r->step_time, r->time_delta_pct,
            r->device_total, r->errors, r->fits ? "true" : "false");
  }
  fprintf(f, "]}\n");
}
