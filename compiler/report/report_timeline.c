/* report_timeline.c — the measured timeline of `stepc run --profile` (stepc_profile_timeline):
 * the communication stream's collectives beside the step's points, as a one-line summary and as a
 * Chrome / Perfetto trace with a track per stream (report.h). */
#include <stdlib.h>
#include <string.h>

#include "report/report.h"

static double overlap(double a0, double a1, double b0, double b1) {
  double lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
  return hi > lo ? hi - lo : 0;
}

void timeline_summary(const stepc_span *sp, int64_t n, TimelineSummary *t) {
  memset(t, 0, sizeof *t);
  for (int64_t i = 0; i < n; i++) {
    if (sp[i].end_ms > t->step_ms) t->step_ms = sp[i].end_ms;
    if (sp[i].kind == STEPC_SPAN_NORM || sp[i].kind == STEPC_SPAN_PARAMS)
      t->other_ms += sp[i].end_ms - sp[i].start_ms;
    if (sp[i].kind == STEPC_SPAN_TP_COLL) {
      t->tp++;
      t->tp_ms += sp[i].end_ms - sp[i].start_ms;
      for (int64_t j = 0; j < n; j++)
        if (sp[j].kind == STEPC_SPAN_POINT && sp[j].micro == sp[i].micro && sp[j].id > sp[i].id)
          t->tp_beside_ms += overlap(sp[i].start_ms, sp[i].end_ms, sp[j].start_ms, sp[j].end_ms);
    }
    if (sp[i].kind != STEPC_SPAN_BUCKET) continue;
    t->buckets++;
    t->bucket_ms += sp[i].end_ms - sp[i].start_ms;
    /* the step's stream runs one point at a time: its micro-program spans do not overlap each other */
    for (int64_t j = 0; j < n; j++)
      if (sp[j].kind == STEPC_SPAN_POINT && sp[j].micro >= 0)
        t->overlap_ms += overlap(sp[i].start_ms, sp[i].end_ms, sp[j].start_ms, sp[j].end_ms);
  }
}

void timeline_summary_line(const TimelineSummary *t, FILE *out) {
  if (t->tp)
    fprintf(
        out,
        "tp comm stream: %d backward collective%s %.3f ms, at most %.3f ms of it beside the step's stream's "
        "later points (the weight-gradient GEMMs)\n",
        t->tp, t->tp == 1 ? "" : "s", t->tp_ms, t->tp_beside_ms);
  if (!t->buckets && t->other_ms == 0) {
    if (!t->tp) fprintf(out, "comm stream: no collectives (one rank without a communicator)\n");
    return;
  }
  fprintf(out,
          "comm stream: %d bucket collective%s %.3f ms, %.3f ms (%.0f %%) of it beside forward/backward "
          "compute on the "
          "step's stream",
          t->buckets, t->buckets == 1 ? "" : "s", t->bucket_ms, t->overlap_ms,
          t->bucket_ms > 0 ? 100 * t->overlap_ms / t->bucket_ms : 0.0);
  if (t->other_ms > 0) fprintf(out, "; ZeRO-1 norm exchange and parameter broadcast %.3f ms", t->other_ms);
  fprintf(out, "; step %.3f ms\n", t->step_ms);
}

static const char *KIND[] = {"point", "gradient bucket", "ZeRO-1 norm exchange", "ZeRO-1 parameter broadcast",
                             "tensor-parallel collective"};

int report_timeline_trace(const StepImage *im, const stepc_span *sp, int64_t n, const char *title, FILE *f) {
  const Graph *g = im->g;
  fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n{\"name\": \"process_name\", \"ph\": \"M\", "
             "\"pid\": 0, \"args\": "
             "{\"name\": ");
  json_write_string(f, title);
  fprintf(
      f,
      "}},\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": 1, \"args\": {\"name\": "
      "\"step stream\"}},\n"
      "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": 2, \"args\": {\"name\": \"comm "
      "stream\"}},\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": 3, \"args\": {\"name\": "
      "\"tp comm stream\"}}");
  for (int64_t i = 0; i < n; i++) {
    const stepc_span *s = &sp[i];
    char name[IR_NAME_MAX + 96];
    const Op *op = NULL;
    if ((s->kind == STEPC_SPAN_POINT || s->kind == STEPC_SPAN_TP_COLL) && s->id >= 0 && s->id < im->npoints) {
      op = &g->op[im->point_op[s->id]];
      snprintf(name, sizeof name, "%s %s", op_name(op->kind), op->tags.module);
    } else if (s->kind == STEPC_SPAN_BUCKET)
      snprintf(name, sizeof name, "bucket %d", s->id);
    else
      snprintf(name, sizeof name, "%s", s->kind >= 0 && s->kind <= STEPC_SPAN_TP_COLL ? KIND[s->kind] : "?");
    fprintf(f, ",\n{\"name\": ");
    json_write_string(f, name);
    double dur = s->end_ms - s->start_ms;
    fprintf(f,
            ", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, "
            "\"args\": {\"point\": %d, "
            "\"micro_batch\": %d",
            s->kind == STEPC_SPAN_POINT ? (op ? phase_name(op->tags.phase) : "point") : "collective",
            s->stream + 1, s->start_ms * 1e3, (dur > 0 ? dur : 0) * 1e3,
            s->kind == STEPC_SPAN_POINT ? s->id : -1, s->micro);
    if (s->kind == STEPC_SPAN_BUCKET && s->id >= 0 && s->id < im->nbucket)
      fprintf(f, ", \"gradients\": %d, \"elements\": %lld", im->bucket[s->id].ngrads,
              (long long)im->bucket[s->id].params);
    fprintf(f, "}}");
  }
  fprintf(f, "\n]}\n");
  return ferror(f) ? -1 : 0;
}
