/* cpu_run.c — `stepc run SPEC --gradcheck` (cpu_run.h): the in-process fp64 oracle. Training runs
 * through an artifact (compiler/cli/run_artifact.c). */
#include "cli/cpu_run.h"

#include <stdlib.h>

#include "cli/cpu_train.h"
#include "lower/lower.h"
#include "validate/diag.h"

static CpuRunStatus from_lower(int rc) {
  return rc == LOWER_UNSUPPORTED ? CPU_RUN_UNSUPPORTED : CPU_RUN_ERROR;
}

static CpuRunStatus run_gradcheck(const Spec *s, const CpuRunOptions *o, CpuData *d, FILE *out, char *err,
                                  size_t nerr) {
  GradcheckOptions go = {.elements = 2, .h = 1e-5};
  GradcheckRow *rows = NULL;
  int n = 0, lrc = LOWER_OK;
  double worst = cpu_gradcheck_spec(s, d, &go, o->threads, &rows, &n, &lrc, err, nerr);
  if (worst < 0) return lrc != LOWER_OK ? from_lower(lrc) : CPU_RUN_ERROR;
  bool ok = worst <= GRADCHECK_TOL;
  if (o->json) {
    fprintf(out,
            "{\"schema\": \"stepc.gradcheck/1\", \"tolerance\": %g, \"worst_rel_error\": %.3e, \"ok\": %s, "
            "\"params\": [",
            GRADCHECK_TOL, worst, ok ? "true" : "false");
    for (int i = 0; i < n; i++) {
      fprintf(out, "%s{\"name\": ", i ? ", " : "");
      json_write_string(out, rows[i].name);
      fprintf(out, ", \"numel\": %lld, \"worst_rel_error\": %.3e}", (long long)rows[i].numel,
              rows[i].worst_rel);
    }
    fprintf(out, "]}\n");
  } else {
    fprintf(out, "%-56s %10s %12s %14s %14s\n", "parameter", "numel", "worst rel", "finite diff", "analytic");
    for (int i = 0; i < n; i++)
      fprintf(out, "%-56s %10lld %12.3e %14.6e %14.6e\n", rows[i].name, (long long)rows[i].numel,
              rows[i].worst_rel, rows[i].fd, rows[i].an);
    fprintf(out, "worst relative error %.3e, tolerance %g: %s\n", worst, GRADCHECK_TOL, ok ? "ok" : "FAILED");
  }
  free(rows);
  return ok ? CPU_RUN_OK : CPU_RUN_CHECK_FAILED;
}

CpuRunStatus cpu_run(const Spec *s, const CpuRunOptions *o, FILE *out, FILE *progress, char *err,
                     size_t nerr) {
  (void)progress;
  CpuData d;
  if (cpu_data_open_spec(s, &d, err, nerr) != 0) return CPU_RUN_ERROR;
  CpuRunStatus st = run_gradcheck(s, o, &d, out, err, nerr);
  if (d.free) d.free(&d);
  return st;
}
