/* run.c — `stepc run SPEC --device cpu [--steps N] [--json] [--gradcheck]` (see run.h). */
#include "cpu_run.h"

#include <stdlib.h>
#include <time.h>

#include "diag.h"
#include "lower.h"
#include "cpu_train.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static CpuRunStatus from_lower(int rc) { return rc == LOWER_UNSUPPORTED ? CPU_RUN_UNSUPPORTED : CPU_RUN_ERROR; }

static CpuRunStatus run_gradcheck(const Spec *s, const CpuRunOptions *o, CpuData *d, FILE *out, char *err, size_t nerr) {
  GradcheckOptions go = {.elements = 2, .h = 1e-5};
  GradcheckRow *rows = NULL;
  int n = 0, lrc = LOWER_OK;
  double worst = cpu_gradcheck_spec(s, d, &go, o->threads, &rows, &n, &lrc, err, nerr);
  if (worst < 0) return lrc != LOWER_OK ? from_lower(lrc) : CPU_RUN_ERROR;
  bool ok = worst <= GRADCHECK_TOL;
  if (o->json) {
    fprintf(out, "{\"tolerance\": %g, \"worst_rel_error\": %.3e, \"ok\": %s, \"params\": [", GRADCHECK_TOL, worst,
            ok ? "true" : "false");
    for (int i = 0; i < n; i++) {
      fprintf(out, "%s{\"name\": ", i ? ", " : "");
      json_write_string(out, rows[i].name);
      fprintf(out, ", \"numel\": %lld, \"worst_rel_error\": %.3e}", (long long)rows[i].numel, rows[i].worst_rel);
    }
    fprintf(out, "]}\n");
  } else {
    fprintf(out, "%-56s %10s %12s %14s %14s\n", "parameter", "numel", "worst rel", "finite diff", "analytic");
    for (int i = 0; i < n; i++)
      fprintf(out, "%-56s %10lld %12.3e %14.6e %14.6e\n", rows[i].name, (long long)rows[i].numel, rows[i].worst_rel,
              rows[i].fd, rows[i].an);
    fprintf(out, "worst relative error %.3e, tolerance %g: %s\n", worst, GRADCHECK_TOL, ok ? "ok" : "FAILED");
  }
  free(rows);
  return ok ? CPU_RUN_OK : CPU_RUN_CHECK_FAILED;
}

CpuRunStatus cpu_run(const Spec *s, const CpuRunOptions *o, FILE *out, FILE *progress, char *err, size_t nerr) {
  CpuData d;
  if (cpu_data_open_spec(s, &d, err, nerr) != 0) return CPU_RUN_ERROR;
  CpuRunStatus st;
  if (o->gradcheck) {
    st = run_gradcheck(s, o, &d, out, err, nerr);
  } else {
    int lrc = LOWER_OK;
    double t0 = now_s();
    CpuTrainer *tr = cpu_trainer_new(s, &d, o->threads, &lrc, err, nerr);
    if (!tr) {
      st = lrc != LOWER_OK ? from_lower(lrc) : CPU_RUN_ERROR;
    } else {
      int steps = o->steps > 0 ? o->steps : (int)s->train.train_iters;
      st = CPU_RUN_OK;
      int64_t arena, peak;
      int nreplay;
      cpu_trainer_plan(tr, &arena, &peak, &nreplay);
      if (o->json)
        fprintf(out, "{\"device\": \"cpu\", \"arena_bytes\": %lld, \"peak_bytes\": %lld, \"replay_ops\": %d, \"steps\": [",
                (long long)arena, (long long)peak, nreplay);
      else
        fprintf(out, "planned arena %.3f MB (fp32 on the CPU), peak live %.3f MB, %d replay ops per micro-batch\n",
                (double)arena / 1e6, (double)peak / 1e6, nreplay);
      double t1 = now_s();
      for (int i = 0; i < steps; i++) {
        CpuStepStats ss;
        if (cpu_trainer_step(tr, &ss, err, nerr) != 0) {
          st = CPU_RUN_ERROR;
          break;
        }
        if (o->json)
          fprintf(out, "%s{\"step\": %lld, \"loss\": %.6f, \"lr\": %.6e, \"grad_norm\": %.6f}", i ? ", " : "",
                  (long long)ss.step, ss.loss, ss.lr, ss.grad_norm);
        else
          fprintf(out, "step %5lld  loss %.4f  lr %.3e  grad_norm %.4f\n", (long long)ss.step, ss.loss, ss.lr, ss.grad_norm);
        if (progress) fprintf(progress, "\rstep %d/%d (%.1f s)", i + 1, steps, now_s() - t1);
        fflush(out);
      }
      double t2 = now_s();
      if (progress) fprintf(progress, "\n");
      if (o->json && st == CPU_RUN_OK)
        fprintf(out, "], \"setup_s\": %.3f, \"train_s\": %.3f, \"s_per_step\": %.4f}\n", t1 - t0, t2 - t1,
                (t2 - t1) / (steps > 0 ? steps : 1));
      else if (st == CPU_RUN_OK)
        fprintf(out, "%d steps in %.2f s (%.3f s/step)\n", steps, t2 - t1, (t2 - t1) / (steps > 0 ? steps : 1));
      cpu_trainer_free(tr);
    }
  }
  if (d.free) d.free(&d);
  return st;
}
