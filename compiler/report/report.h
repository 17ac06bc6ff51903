/* report.h — what `stepc plan`, `sweep` and `trace` print: tables, JSON (fields documented in
 * docs/plan-json.md and kept stable), an SVG of live memory, a Chrome/Perfetto trace. Writers
 * take the stream; they never decide exit codes. */
#ifndef STEPC_REPORT_H
#define STEPC_REPORT_H

#include <stdio.h>

#include "plan/plan.h"
#include "runtime/stepc.h"

/* Per label: the regions, what their replay units free and what they replay (summed over the
 * outermost regions of that label; a label nested in another's region shows 0). */
typedef struct {
  int regions, freed_tensors, replay_ops;
  double freed_bytes, replay_flops, replay_time_s;
} LabelSummary;
/* index 0..IR_NLABELS-1 by label bit, IR_NLABELS = full recompute */
void report_label_summary(const Plan *p, LabelSummary *out);
/* "selective [core_attn,mlp]", "full uniform 1", "none" */
void report_recompute_str(const Spec *s, char *buf, size_t n);

void report_plan_text(const Plan *p, const DiagList *d, FILE *f);
void report_plan_json(const Plan *p, const DiagList *d, FILE *f);
/* The distributed optimizer's region as p's step allocates it on every rank (memplan.c: exact),
 * each job rank's shard on a second line; nothing without a region. */
void report_plan_region(const Plan *p, FILE *f);
/* Live memory over the schedule, stacked, the peak marked, scopes and replays shaded, phases and
 * layers marked (report_svg.c). rank: an index into p->rank.r (that rank's memory by memrank.c's
 * rules), or REPORT_SVG_SINGLE (the single-rank plan by role). 0, or -1 with err. */
enum { REPORT_SVG_SINGLE = -1 };
int report_plan_svg(const Plan *p, int rank, FILE *f, char *err, size_t nerr);
/* `--svg-rank WHICH` (NULL: worst) as report_plan_svg's rank: "worst" the rank of p->rank with the
 * largest max allocated (a one-GPU layout: the single-rank plan), "single", or a pipeline stage
 * that p->rank holds. 0, or -1 with err. */
int report_svg_rank(const Plan *p, const char *which, int *rank, char *err, size_t nerr);
/* Chrome trace events: ops per phase on a cost-model timeline, scopes and checkpoint regions as
 * slices, a memory counter track. */
int report_trace(const Plan *p, FILE *f);
/* `stepc run --profile`: ms[point] of one eager step of the artifact whose image is im (step_ms:
 * the step's own time), by op class beside the roofline and the calibrated cost model (which
 * prices the fused groups of fz, the compiler's fusions of im->g), and the slowest points; text,
 * or JSON (schema stepc.profile/1). */
int report_profile(const StepImage *im, const Fusions *fz, const double *ms, double step_ms, bool json,
                   FILE *out);

/* The measured timeline of a profiled step (stepc_profile_timeline, report_timeline.c). */
typedef struct {
  int buckets;         /* gradient-bucket collectives */
  double bucket_ms;    /* their time on the communication stream */
  double overlap_ms;   /* of it, the time the step's stream was running micro-program points
                          (forward, backward, replays) beside it */
  double other_ms;     /* ZeRO-1's norm exchange and parameter broadcast */
  int tp;              /* tensor-parallel collectives on the launch program's communication stream */
  double tp_ms;        /* their time there */
  double tp_beside_ms; /* of it, beside the spans of later points of its micro-batch on the step's stream
                          (at most: the point that joins it includes any wait for it) */
  double step_ms;      /* the last span's end */
} TimelineSummary;
void timeline_summary(const stepc_span *sp, int64_t n, TimelineSummary *out);
/* One line: "comm stream: 1 bucket collective 0.412 ms, 0.301 ms (73 %) beside backward compute". */
void timeline_summary_line(const TimelineSummary *t, FILE *out);
/* A Chrome / Perfetto trace of the measured step: the step's stream (each point, named by its op
 * and module, micro-batch in its args) and the communication stream as two tracks. */
int report_timeline_trace(const StepImage *im, const stepc_span *sp, int64_t n, const char *title, FILE *f);

/* One sweep row: a candidate recompute setting against the control. */
typedef struct {
  char name[128];
  int status; /* PLAN_OK, or why it has no numbers */
  char why[200];
  double peak;         /* predicted max allocated on the worst rank, bytes */
  double logged[2];    /* worst rank's max allocated as Megatron logs it after iterations 1 and 2 */
  double device_total; /* worst rank's max allocated plus what it holds outside PyTorch's allocator */
  double usable;       /* the recipe's usable device memory (bytes, 0: none) */
  double delta, delta_pct;
  double replay_flops, step_time, time_delta_pct;
  int errors; /* scope violations */
  bool fits;
} SweepRow;

void report_sweep_text(const char *recipe, const SweepRow *rows, int n, double budget, int cheapest, FILE *f);
void report_sweep_json(const char *recipe, const SweepRow *rows, int n, double budget, int cheapest, FILE *f);

#endif
