/* report_plan.c — `stepc plan`: the per-rank memory table, the cost, and per label what it frees
 * and replays; as text and as JSON (docs/plan-json.md). */
#include <string.h>

#include "plan/fingerprint.h"
#include "report/report.h"

#define GB 1e9

void report_recompute_str(const Spec *s, char *buf, size_t n) {
  const SpecModel *m = &s->model;
  if (!s->present[SPEC_F_model_recompute_granularity]) {
    snprintf(buf, n, "none");
  } else if (strcmp(m->recompute_granularity, "full") == 0) {
    snprintf(buf, n, "full %s %lld", m->recompute_method[0] ? m->recompute_method : "uniform",
             (long long)(s->present[SPEC_F_model_recompute_num_layers] ? m->recompute_num_layers : 1));
  } else {
    size_t k = (size_t)snprintf(buf, n, "selective [");
    for (int i = 0; i < m->recompute_modules.n && k < n; i++)
      k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? "," : "", m->recompute_modules.items[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
  }
}

void report_label_summary(const Plan *p, LabelSummary *out) {
  memset(out, 0, sizeof(LabelSummary) * (IR_NLABELS + 1));
  double nmicro = p->sc.nmicro;
  for (int i = 0; i < p->rr.n; i++) {
    const Region *r = &p->rr.r[i];
    LabelSummary *l = &out[r->label < 0 ? IR_NLABELS : r->label];
    l->regions++;
    if (r->outer != i) continue;
    l->freed_tensors += r->nfreed;
    l->freed_bytes += (double)r->freed_bytes;
    l->replay_ops += r->nreplay;
    l->replay_flops += r->replay_flops * nmicro;
    for (int o = r->replay_first; o >= 0 && o <= r->replay_last; o++)
      if (p->g->op[o].tags.phase == IR_PHASE_REPLAY) l->replay_time_s += p->cost.op_time[o] * nmicro;
  }
}

static int peak_op(const Plan *p) {
  int q = 0;
  for (int i = 0; i < p->sc.n; i++)
    if (p->sc.it[i].kind == SCHED_OP && q++ == p->mp.peak_pos) return p->sc.it[i].id;
  return -1;
}

static int count_phase(const Graph *g, Phase ph) {
  int n = 0;
  for (int o = 0; o < g->nop; o++)
    n += g->op[o].tags.phase == ph;
  return n;
}

static const char *impl_name(ScopeImpl i) {
  return i == SCOPE_LOCAL            ? "local"
         : i == SCOPE_TE             ? "transformer_engine"
         : i == SCOPE_FULL_ITERATION ? "full_iteration"
                                     : "none";
}

/* The masters and moments of the whole step (every rank's), unpadded. */
static int64_t region_state_bytes(const Plan *p) {
  int64_t b = 0;
  for (int t = 0; p->mp.region && t < p->g->nt; t++)
    if (p->mp.buffer[t]) b += p->mp.size[t];
  return b;
}

/* Beside max allocated, what each rank holds outside PyTorch's allocator and the verdict against the
 * recipe's usable device memory (memrank.c, "outside"). */
static void outside_allocator_text(const RankReport *rr, FILE *f) {
  fprintf(f, "  outside PyTorch's allocator (not in max allocated), GB:\n");
  for (int i = 0; i < rr->n; i++) {
    const RankMem *r = &rr->r[i];
    fprintf(f, "  %-18s HybridEP buffers %.3f + NCCL ring buffers %.3f -> device total %.3f", r->name,
            r->hybridep_buffers / GB, r->nccl_buffers / GB, r->device_total / GB);
    if (rr->usable > 0)
      fprintf(f, " %s %.3f usable (%.2f GiB): %s", r->device_total <= rr->usable ? "<=" : ">",
              rr->usable / GB, rr->usable / 1073741824.0,
              r->device_total <= rr->usable ? "fits" : "out of memory");
    fprintf(f, "\n");
  }
}

/* What the distributed optimizer's staging (MemPlan.zstage_*) adds to the peak: the peak less the
 * largest live sum without it (a peak is a sum over the points' live slots, whatever their offsets). */
static int64_t zero_staging_cost(const MemPlan *mp) {
  int64_t without = 0;
  for (int q = 0; q < mp->npos; q++) {
    int64_t v = mp->live[q] - (q >= mp->zstage_start ? mp->zstage_bytes : 0);
    if (v > without) without = v;
  }
  return mp->zstage_bytes ? mp->peak - without : 0;
}

void report_plan_region(const Plan *p, FILE *f) {
  const MemPlan *mp = &p->mp;
  if (!mp->region) return;
  int64_t all = region_state_bytes(p);
  int dp = mp->nshard / (mp->tp > 0 ? mp->tp : 1); /* the shards are per job rank, each a TP rank's */
  double ideal = (double)all / dp;
  fprintf(f,
          "optimizer-state region (distributed optimizer; stepc's own step, as allocated on every rank): "
          "%lld B = the "
          "largest shard (rank %d), %+.1f%% over an even 1/%d of the %lld B of masters and moments (whole "
          "tensors per "
          "rank); arena %lld B + region = %lld B per rank\n  shards (B):",
          (long long)mp->region, mp->region_rank,
          ideal > 0 ? 100.0 * ((double)mp->region - ideal) / ideal : 0.0, dp, (long long)all,
          (long long)mp->arena, (long long)(mp->arena + mp->region));
  for (int r = 0; r < mp->nshard && r < 16; r++)
    fprintf(f, " rank%d %lld", r, (long long)mp->shard[r]);
  fprintf(f, "%s\n", mp->nshard > 16 ? " ..." : "");
  if (mp->zstage_bytes)
    fprintf(f,
            "  staging (cuda: buckets reduce-scattered, params all-gathered through it): %lld B in the arena "
            "at %lld, live from point %d (after the first bucket's fire) to the end; it adds %lld B to the "
            "peak\n",
            (long long)mp->zstage_bytes, (long long)mp->zstage_offset, mp->zstage_start,
            (long long)zero_staging_cost(mp));
}

static const char *const ATTN_NAME[] = {"none", "flash", "cudnn", "auto"};

/* The attention points with a flash alternative (attention_backend=auto: runtime/program.h). */
static int flash_alternatives(const Plan *p) {
  int n = 0;
  for (int q = 0; q < p->sc.nops; q++)
    n += p->lp.point[q].alt.count > 0;
  return n;
}

/* The launch scratch (compiler/codegen/launch/exec.h): allocated with the plan's buffers for the
 * whole step, so the device peak is the arena (and the optimizer-state region) plus it. */
static void launch_scratch_text(const Plan *p, FILE *f) {
  if (!p->lp_ok) {
    if (p->lp_why[0]) fprintf(f, "  launch program: none (%s)\n", p->lp_why);
    return;
  }
  const LpFacts *lf = &p->lp.f;
  fprintf(f,
          "  device peak %.3f GB = the arena + launch scratch %.6f GB (lowered for %d SMs) + cuBLASLt "
          "workspace %.6f GB + "
          "cuDNN attention workspace %.6f GB; the scratch:",
          (double)plan_device_peak(p) / GB, (double)lf->scratch_bytes / GB, lf->sm_count,
          (double)RT_BLAS_WORKSPACE_BYTES / GB, (double)lf->attn_workspace / GB);
  for (int k = 0; k < LP_SCRATCH_PARTS; k++)
    if (lf->part_bytes[k])
      fprintf(f, "%s %s %lld B", k ? ";" : "", lp_scratch_part_name[k], (long long)lf->part_bytes[k]);
  fprintf(f, "\n");
  if (lf->attn == LP_ATTN_AUTO)
    fprintf(
        f,
        "  attention: cuDNN, with stepc's flash kernels at %d points if cuDNN has no engine at open (they "
        "need no cuDNN workspace: their row sums are the scratch's op workspace, counted above)\n",
        flash_alternatives(p));
  char libs[768];
  lp_runtime_libs(&p->lp, p->sc.dp, libs, sizeof libs);
  fprintf(f, "  run-time libraries (cuda): %s\n", libs);
}

/* The launch scratch in plan --json. */
static void launch_scratch_json(const Plan *p, FILE *f) {
  if (!p->lp_ok) return;
  const LpFacts *lf = &p->lp.f;
  fprintf(f,
          ", \"launch_scratch\": {\"bytes\": %lld, \"sm_count\": %d, \"cublas_workspace_bytes\": %lld, "
          "\"cudnn_workspace_bytes\": %lld, \"device_peak_bytes\": %lld, \"parts\": {",
          (long long)lf->scratch_bytes, lf->sm_count, (long long)RT_BLAS_WORKSPACE_BYTES,
          (long long)lf->attn_workspace, (long long)plan_device_peak(p));
  for (int k = 0; k < LP_SCRATCH_PARTS; k++) {
    fprintf(f, "%s", k ? ", " : "");
    json_write_string(f, lp_scratch_part_name[k]);
    fprintf(f, ": %lld", (long long)lf->part_bytes[k]);
  }
  char hex[17];
  char libs[768];
  lp_runtime_libs(&p->lp, p->sc.dp, libs, sizeof libs);
  fprintf(f,
          "}}, \"launch_program\": {\"records\": %d, \"digest\": \"%s\", \"attention\": \"%s\", "
          "\"flash_alternatives\": %d, \"runtime_libraries\": ",
          lf->nrec, program_digest_hex(&p->lp, hex), ATTN_NAME[lf->attn], flash_alternatives(p));
  json_write_string(f, libs);
  fprintf(f, "}");
}

void report_plan_text(const Plan *p, const DiagList *d, FILE *f) {
  const Graph *g = p->g;
  const MemPlan *mp = &p->mp;
  char rec[256];
  report_recompute_str(&p->spec, rec, sizeof rec);
  fprintf(f, "%s: planned in %.2f s\n", p->spec.recipe_path, p->build_s);
  fprintf(f,
          "graph: %d ops (%d forward, %d backward, %d replay, %d optimizer), %d tensors; %d micro-batch%s "
          "per step\n",
          g->nop, count_phase(g, IR_PHASE_FORWARD), count_phase(g, IR_PHASE_BACKWARD),
          count_phase(g, IR_PHASE_REPLAY), count_phase(g, IR_PHASE_OPTIMIZER), g->nt, p->sc.nmicro,
          p->sc.nmicro == 1 ? "" : "es");
  fprintf(f, "recompute: %s; CUDA graphs: %s (%d scope instances)\n\n", rec, impl_name(p->sr.impl), p->sr.n);
  int po = peak_op(p);
  fprintf(f, "single-rank plan (exact offsets, nominal dtypes):\n");
  int64_t held = mp->arena + mp->region; /* the region counts in the peak whole */
  char region[64] = "";
  if (mp->region)
    snprintf(region, sizeof region, " + optimizer-state region %.3f GB", (double)mp->region / GB);
  fprintf(f,
          "  peak %.3f GB at op %d (%s %s, %s); arena %.3f GB%s (fragmentation %.2f%%); %d in-place reuses\n",
          (double)mp->peak / GB, po, po >= 0 ? g->op[po].tags.module : "?",
          po >= 0 ? op_name(g->op[po].kind) : "", po >= 0 ? phase_name(g->op[po].tags.phase) : "",
          (double)mp->arena / GB, region, held ? 100.0 * (double)(held - mp->peak) / (double)held : 0.0,
          mp->ninplace);
  launch_scratch_text(p, f);
  fprintf(f, "  live at the peak:");
  for (int r = 0; r < MEM_NROLES; r++) {
    int64_t b = mp->live_role[(size_t)mp->peak_pos * MEM_NROLES + r];
    if (b) fprintf(f, " %s %.3f GB;", memplan_role_name(r), (double)b / GB);
  }
  const RankReport *rr = &p->rank;
  fprintf(f,
          "\n\nper rank (TP%d PP%d VPP%d CP%d EP%d ETP%d DP%d, sequence parallel %s, distributed optimizer "
          "%s), GB:\n",
          rr->tp, rr->pp, rr->vpp, rr->cp, rr->ep, rr->etp, rr->dp, rr->sp ? "on" : "off",
          rr->dist_opt ? "on" : "off");
  fprintf(f, "  %-18s %-8s %8s %8s %9s %11s %9s %8s %9s %8s %10s %13s %15s\n", "rank", "layers", "weights",
          "grads", "optimizer", "activations", "in flight", "graph", "workspace", "opt step", "iteration 1",
          "max allocated", "logged 1 / 2");
  for (int i = 0; i < rr->n; i++) {
    const RankMem *r = &rr->r[i];
    char lay[24];
    snprintf(lay, sizeof lay, "%d-%d", r->layer_first, r->layer_last);
    fprintf(f, "  %-18s %-8s %8.3f %8.3f %9.3f %11.3f %9.2f %8.3f %9.3f %8.3f %11.3f %13.3f %7.3f/%7.3f\n",
            r->name, lay, r->weights / GB, r->grads / GB, r->optimizer / GB, r->activations / GB, r->inflight,
            r->graph_buffers / GB, r->workspace / GB, r->optimizer_step / GB, r->first_iteration / GB,
            r->max_allocated / GB, r->after_iteration[0] / GB, r->after_iteration[1] / GB);
  }
  outside_allocator_text(rr, f);
  if (p->mp.region) fprintf(f, "\n"), report_plan_region(p, f);
  const Cost *c = &p->cost;
  double nm = p->sc.nmicro;
  fprintf(f,
          "\ncost (roofline GEMM %.0f TFLOP/s, attention %.0f TFLOP/s, DRAM %.2f TB/s, scaled per op class: "
          "%s), one rank's graph:\n",
          p->dev.gemm_flops_per_s / 1e12, p->dev.attn_flops_per_s / 1e12, p->dev.bytes_per_s / 1e12,
          p->dev.calibration);
  fprintf(
      f, "  step %.2f ms: forward %.2f, backward %.2f, replay %.2f, optimizer %.2f ms; %.1f TFLOP executed\n",
      c->step_time * 1e3, c->time[IR_PHASE_FORWARD] * nm * 1e3, c->time[IR_PHASE_BACKWARD] * nm * 1e3,
      c->time[IR_PHASE_REPLAY] * nm * 1e3, c->time[IR_PHASE_OPTIMIZER] * 1e3, c->step_flops / 1e12);
  fprintf(f, "  model FLOPs (bench convention) %.1f TFLOP: %.0f TFLOP/s at the predicted time\n",
          c->model_flops / 1e12, c->step_time > 0 ? c->model_flops / c->step_time / 1e12 : 0.0);
  LabelSummary ls[IR_NLABELS + 1];
  report_label_summary(p, ls);
  if (p->rr.n) {
    fprintf(f, "\nrecompute regions (freed = discarded by the region's replay unit, one micro-batch, before "
               "sharding):\n");
    fprintf(f, "  %-16s %7s %13s %12s %10s %12s %12s\n", "label", "regions", "freed tensors", "freed GB",
            "replay ops", "replay TFLOP", "replay ms");
    for (int i = 0; i <= IR_NLABELS; i++) {
      if (!ls[i].regions) continue;
      fprintf(f, "  %-16s %7d %13d %12.4f %10d %12.3f %12.3f\n", i == IR_NLABELS ? "full" : ir_label_name(i),
              ls[i].regions, ls[i].freed_tensors, ls[i].freed_bytes / GB, ls[i].replay_ops,
              ls[i].replay_flops / 1e12, ls[i].replay_time_s * 1e3);
    }
  }
  if (p->sr.static_bytes)
    fprintf(f, "\nstatic graph outputs: %.3f GB single-rank, pinned for the step (graph_buffers)\n",
            (double)p->sr.static_bytes / GB);
  if (d && d->n) {
    fprintf(f, "\n");
    diag_print(d, f);
  }
}

static void jnum(FILE *f, const char *k, double v, bool comma) {
  fprintf(f, "\"%s\": %.17g%s", k, v, comma ? ", " : "");
}

void report_plan_json(const Plan *p, const DiagList *d, FILE *f) {
  const Graph *g = p->g;
  const MemPlan *mp = &p->mp;
  const SpecModel *m = &p->spec.model;
  fprintf(f, "{\"schema\": \"stepc.plan/1\", \"recipe\": ");
  json_write_string(f, p->spec.recipe_path);
  fprintf(f, ", \"plan_seconds\": %.6f,\n", p->build_s);
  fprintf(f,
          " \"graph\": {\"ops\": %d, \"tensors\": %d, \"forward_ops\": %d, \"backward_ops\": %d, "
          "\"replay_ops\": %d, "
          "\"optimizer_ops\": %d, \"microbatches\": %d},\n",
          g->nop, g->nt, count_phase(g, IR_PHASE_FORWARD), count_phase(g, IR_PHASE_BACKWARD),
          count_phase(g, IR_PHASE_REPLAY), count_phase(g, IR_PHASE_OPTIMIZER), p->sc.nmicro);
  fprintf(f, " \"recompute\": {\"granularity\": ");
  json_write_string(f,
                    p->spec.present[SPEC_F_model_recompute_granularity] ? m->recompute_granularity : "none");
  fprintf(f, ", \"labels\": [");
  for (int i = 0; i < IR_NLABELS; i++)
    if (p->rc.labels & (1u << i))
      fprintf(f, "%s\"%s\"", (p->rc.labels & ((1u << i) - 1)) ? ", " : "", ir_label_name(i));
  fprintf(f, "], \"method\": ");
  json_write_string(f, p->rc.full ? (p->rc.block ? "block" : "uniform") : "");
  fprintf(
      f,
      ", \"num_layers\": %d, \"regions\": %d, \"freed_tensors\": %d, \"freed_bytes\": %lld, \"per_label\": [",
      p->rc.num_layers, p->rr.n, p->rr.nfreed_total, (long long)p->rr.freed_bytes_total);
  LabelSummary ls[IR_NLABELS + 1];
  report_label_summary(p, ls);
  bool first = true;
  for (int i = 0; i <= IR_NLABELS; i++) {
    if (!ls[i].regions) continue;
    fprintf(f, "%s\n   {\"label\": \"%s\", ", first ? "" : ",", i == IR_NLABELS ? "full" : ir_label_name(i));
    first = false;
    jnum(f, "regions", ls[i].regions, true), jnum(f, "freed_tensors", ls[i].freed_tensors, true);
    jnum(f, "freed_bytes", ls[i].freed_bytes, true), jnum(f, "replay_ops", ls[i].replay_ops, true);
    jnum(f, "replay_flops", ls[i].replay_flops, true), jnum(f, "replay_time_s", ls[i].replay_time_s, false);
    fprintf(f, "}");
  }
  fprintf(f, "]},\n \"arena\": {");
  int po = peak_op(p);
  jnum(f, "peak_bytes", (double)mp->peak, true), jnum(f, "arena_bytes", (double)mp->arena, true);
  int64_t held = mp->arena + mp->region; /* the region counts in the peak whole */
  jnum(f, "fragmentation", held ? (double)(held - mp->peak) / (double)held : 0, true);
  jnum(f, "persistent_bytes", (double)mp->persistent, true), jnum(f, "inplace_reuses", mp->ninplace, true);
  jnum(f, "peak_op", po, true);
  fprintf(f, "\"layout_digest\": \"%016llx\", \"peak_module\": ", (unsigned long long)plan_layout_digest(g));
  json_write_string(f, po >= 0 ? g->op[po].tags.module : "");
  fprintf(f, ", \"peak_phase\": \"%s\", \"at_peak\": {", po >= 0 ? phase_name(g->op[po].tags.phase) : "");
  for (int r = 0; r < MEM_NROLES; r++)
    fprintf(f, "%s\"%s\": %lld", r ? ", " : "", memplan_role_name(r),
            (long long)mp->live_role[(size_t)mp->peak_pos * MEM_NROLES + r]);
  fprintf(f, "}");
  launch_scratch_json(p, f);
  if (mp->region) {
    fprintf(f, ", \"optimizer_region\": {");
    jnum(f, "bytes", (double)mp->region, true), jnum(f, "common_bytes", (double)mp->region_common, true);
    jnum(f, "state_bytes", (double)region_state_bytes(p), true),
        jnum(f, "largest_rank", mp->region_rank, true);
    fprintf(f, "\"shard_bytes\": [");
    for (int r = 0; r < mp->nshard; r++)
      fprintf(f, "%s%lld", r ? ", " : "", (long long)mp->shard[r]);
    fprintf(f, "]}");
  }
  if (mp->zstage_bytes) {
    fprintf(f, ", \"zero_staging\": {");
    jnum(f, "bytes", (double)mp->zstage_bytes, true), jnum(f, "offset", (double)mp->zstage_offset, true);
    jnum(f, "live_from_point", mp->zstage_start, true);
    jnum(f, "peak_cost_bytes", (double)zero_staging_cost(mp), false);
    fprintf(f, "}");
  }
  fprintf(f, "},\n");
  const RankReport *rr = &p->rank;
  fprintf(
      f,
      " \"layout\": {\"tp\": %d, \"pp\": %d, \"vpp\": %d, \"cp\": %d, \"ep\": %d, \"etp\": %d, \"dp\": %d, "
      "\"sequence_parallel\": %s, \"distributed_optimizer\": %s},\n \"ranks\": [",
      rr->tp, rr->pp, rr->vpp, rr->cp, rr->ep, rr->etp, rr->dp, rr->sp ? "true" : "false",
      rr->dist_opt ? "true" : "false");
  for (int i = 0; i < rr->n; i++) {
    const RankMem *r = &rr->r[i];
    fprintf(f, "%s\n   {\"name\": \"%s\", \"stage\": %d, \"layers\": [%d, %d], ", i ? "," : "", r->name,
            r->stage, r->layer_first, r->layer_last);
    jnum(f, "params", (double)r->params, true), jnum(f, "weights_bytes", r->weights, true);
    jnum(f, "grads_bytes", r->grads, true), jnum(f, "optimizer_bytes", r->optimizer, true);
    jnum(f, "activations_bytes", r->activations, true),
        jnum(f, "saved_activations_per_microbatch_bytes", r->saved_per_micro, true);
    jnum(f, "microbatches_in_flight", r->inflight, true),
        jnum(f, "graph_buffers_bytes", r->graph_buffers, true);
    jnum(f, "workspace_bytes", r->workspace, true), jnum(f, "optimizer_step_bytes", r->optimizer_step, true);
    jnum(f, "first_iteration_max_allocated_bytes", r->first_iteration, true);
    jnum(f, "logged_after_iteration_1_bytes", r->after_iteration[0], true);
    jnum(f, "logged_after_iteration_2_bytes", r->after_iteration[1], true);
    jnum(f, "max_allocated_bytes", r->max_allocated, true);
    fprintf(f, "\"outside_allocator\": {");
    jnum(f, "hybridep_buffers_bytes", r->hybridep_buffers, true),
        jnum(f, "nccl_buffers_bytes", r->nccl_buffers, false);
    fprintf(f, "}, ");
    jnum(f, "device_total_bytes", r->device_total, true);
    fprintf(f, "\"fits\": %s}", rr->usable > 0 ? (r->device_total <= rr->usable ? "true" : "false") : "null");
  }
  const Cost *c = &p->cost;
  double nm = p->sc.nmicro;
  fprintf(f, "],\n \"cost\": {");
  jnum(f, "step_time_s", c->step_time, true), jnum(f, "forward_time_s", c->time[IR_PHASE_FORWARD] * nm, true);
  jnum(f, "backward_time_s", c->time[IR_PHASE_BACKWARD] * nm, true),
      jnum(f, "replay_time_s", c->replay_time, true);
  jnum(f, "optimizer_time_s", c->time[IR_PHASE_OPTIMIZER], true), jnum(f, "step_flops", c->step_flops, true);
  jnum(f, "step_bytes", c->step_bytes, true), jnum(f, "replay_flops", c->replay_flops, true);
  jnum(f, "model_flops", c->model_flops, true);
  jnum(f, "model_tflops_per_s", c->step_time > 0 ? c->model_flops / c->step_time / 1e12 : 0, false);
  fprintf(f,
          "},\n \"scopes\": {\"impl\": \"%s\", \"instances\": %d, \"static_bytes\": %lld, "
          "\"gradient_buckets\": %d},\n",
          impl_name(p->sr.impl), p->sr.n, (long long)p->sr.static_bytes, p->sc.nb);
  fprintf(f, " \"diagnostics\": ");
  if (d)
    diag_print_json(d, f);
  else
    fprintf(f, "[]");
  fprintf(f, "}\n");
}
