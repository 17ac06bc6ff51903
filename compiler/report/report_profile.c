/* report_profile.c — `stepc run --profile`: one step's measured time per program point, summed
 * by op class, beside the cost model's roofline and its calibrated prediction (report.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report.h"

typedef struct {
  int ops;
  double ms, roof_ms, cal_ms, flops, bytes;
} ClassRow;

typedef struct {
  int point;
  double ms, roof_ms, cal_ms, flops;
} Top;

static int cmp_top(const void *a, const void *b) {
  double x = ((const Top *)a)->ms, y = ((const Top *)b)->ms;
  return x < y ? 1 : x > y ? -1 : 0;
}

int report_profile(const StepImage *im, const Fusions *fz, const double *ms, double step_ms, bool json,
                   FILE *out) {
  const Graph *g = im->g;
  Device roof, cal;
  cost_device_h200_roofline(&roof);
  cost_device_h200(&cal);
  ClassRow row[COST_NCLASS];
  memset(row, 0, sizeof row);
  Top *top = malloc((size_t)im->npoints * sizeof *top);
  if (!top) return -1;
  double nmb = g->num_microbatches, total = 0, total_roof = 0, total_cal = 0;
  for (int q = 0; q < im->npoints; q++) {
    int o = im->point_op[q];
    double rep = q < im->micro_points ? nmb : 1, f, b, fc, bc;
    double tr = cost_op_time(g, fz, o, &roof, &f, &b) * 1e3 * rep,
           tc = cost_op_time(g, fz, o, &cal, &fc, &bc) * 1e3 * rep;
    ClassRow *r = &row[cost_op_class(g, fz, o)];
    r->ops += !fz->skip[o];
    r->ms += ms[q], r->roof_ms += tr, r->cal_ms += tc, r->flops += f * rep, r->bytes += b * rep;
    total += ms[q], total_roof += tr, total_cal += tc;
    top[q] = (Top){q, ms[q], tr, tc, f * rep};
  }
  if (json) { /* every point in program order, then the slowest */
    fprintf(out, "{\"schema\": \"stepc.profile/2\", \"points\": [");
    for (int q = 0; q < im->npoints; q++) {
      const Op *op = &g->op[im->point_op[q]];
      fprintf(out, "%s{\"point\": %d, \"op\": \"%s\", \"class\": \"%s\", \"module\": ", q ? ", " : "", q,
              op_name(op->kind), cost_class_name(cost_op_class(g, fz, im->point_op[q])));
      json_write_string(out, op->tags.module);
      fprintf(out, ", \"ms\": %.4f, \"roofline_ms\": %.4f, \"predicted_ms\": %.4f, \"flops\": %.6g}",
              top[q].ms, top[q].roof_ms, top[q].cal_ms, top[q].flops);
    }
    fprintf(out, "], ");
  }
  qsort(top, (size_t)im->npoints, sizeof *top, cmp_top);
  int ntop = im->npoints < 12 ? im->npoints : 12;
  if (json) {
    fprintf(out, "\"device_model\": ");
    json_write_string(out, cal.calibration);
    fprintf(out,
            ", \"step_ms\": %.4f, \"points_ms\": %.4f, \"roofline_ms\": %.4f, \"predicted_ms\": %.4f, "
            "\"classes\": [",
            step_ms, total, total_roof, total_cal);
    for (int c = 0, k = 0; c < COST_NCLASS; c++) {
      const ClassRow *r = &row[c];
      if (!r->ops && r->ms == 0) continue;
      fprintf(out,
              "%s{\"class\": \"%s\", \"ops\": %d, \"ms\": %.4f, \"roofline_ms\": %.4f, \"predicted_ms\": "
              "%.4f, \"flops\": %.6g, "
              "\"bytes\": %.6g}",
              k++ ? ", " : "", cost_class_name((CostClass)c), r->ops, r->ms, r->roof_ms, r->cal_ms, r->flops,
              r->bytes);
    }
    fprintf(out, "], \"top\": [");
    for (int i = 0; i < ntop; i++) {
      const Op *op = &g->op[im->point_op[top[i].point]];
      fprintf(out, "%s{\"point\": %d, \"op\": \"%s\", \"module\": ", i ? ", " : "", top[i].point,
              op_name(op->kind));
      json_write_string(out, op->tags.module);
      fprintf(out, ", \"ms\": %.4f}", top[i].ms);
    }
    fprintf(out, "]}\n");
  } else {
    fprintf(out,
            "\nprofile: one eager step, %d points (%d per micro-batch x %d micro-batches + %d in the tail), "
            "CUDA events "
            "around each; cost model: %s\n",
            im->npoints, im->micro_points, g->num_microbatches, im->npoints - im->micro_points,
            cal.calibration);
    fprintf(out, "%-14s %5s %10s %6s %11s %11s %9s %9s %9s\n", "class", "ops", "ms", "share", "roofline",
            "predicted", "meas/roof", "TFLOP/s", "GB/s");
    for (int c = 0; c < COST_NCLASS; c++) {
      const ClassRow *r = &row[c];
      if (!r->ops && r->ms == 0) continue;
      fprintf(out, "%-14s %5d %10.3f %5.1f%% %11.3f %11.3f %9.2f %9.1f %9.0f\n",
              cost_class_name((CostClass)c), r->ops, r->ms, total > 0 ? 100 * r->ms / total : 0, r->roof_ms,
              r->cal_ms, r->roof_ms > 0 ? r->ms / r->roof_ms : 0, r->ms > 0 ? r->flops / r->ms / 1e9 : 0,
              r->ms > 0 ? r->bytes / r->ms / 1e6 : 0);
    }
    fprintf(out, "%-14s %5s %10.3f %6s %11.3f %11.3f %9.2f   (the step itself, events around it: %.3f ms)\n",
            "total", "", total, "", total_roof, total_cal, total_roof > 0 ? total / total_roof : 0, step_ms);
    fprintf(out, "slowest points:\n");
    for (int i = 0; i < ntop; i++) {
      const Op *op = &g->op[im->point_op[top[i].point]];
      fprintf(out, "  %5d %-18s %-48s %9.3f ms\n", top[i].point, op_name(op->kind), op->tags.module,
              top[i].ms);
    }
  }
  free(top);
  return ferror(out) ? -1 : 0;
}
