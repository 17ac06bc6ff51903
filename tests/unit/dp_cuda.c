/* dp_cuda.c — data parallel on cuda, what can be checked without a GPU (the recording device):
 *
 *  - the buckets' fire points (compiler/passes/schedule.c, schedule_bucket_fire): for every main gradient
 *    of every recipe below, the op the compiler names as the launch that last writes it is the
 *    last op of the micro program whose recorded launches (kernel pointer arguments, GEMM and
 *    attention operands, memsets, copies) touch the gradient's bytes — an oracle independent of
 *    the fusion pass, read from what the launch program will launch;
 *  - ZeRO-1's lowering helpers (compiler/codegen/launch/op_optim.c): the GRAD_SUMSQ partial slices tile the
 *    partials buffer exactly; a masked multi-tensor table differs from the full one only by n = 0
 *    in the masked rows; the hyper-parameter launch kept for a skipped AdamW is the one the op
 *    itself makes first;
 *  - the distributed optimizer's region on a rank (compiler/plan/memplan.c, runtime/api_dp.c): with the
 *    other ranks' masters and moments at 0 bytes the launch lowering opens, its layout hash is the
 *    full graph's (the one the launch program is lowered from), and every AdamW launch of a tensor
 *    the rank owns — alone, and as a multi-tensor table row — points where the full graph's points
 *    (what the program holds), inside the rank's shard of the region.
 *
 *   dp_cuda     the checks (exit 0 ok, 1 a failure) */
#include <stdlib.h>

#include "kernels/launch.h"
#include "record_run.h"

static int touches(const RtRec *r, const RtDevice *d, CUdeviceptr lo, CUdeviceptr hi) {
  CUdeviceptr p[24];
  int n = 0;
  switch (r->kind) {
  case RT_REC_LAUNCH: {
    const char *sig = rt_ksig(d, r->k);
    for (int i = 0; i < r->nargs; i++)
      if (sig[i] == 'p') p[n++] = (CUdeviceptr)r->arg[i];
    break;
  }
  case RT_REC_GEMM: p[n++] = r->gemm.a, p[n++] = r->gemm.b, p[n++] = r->gemm.c, p[n++] = r->gemm.d; break;
  case RT_REC_SDPA:
    p[n++] = r->sdpa.dq, p[n++] = r->sdpa.dk, p[n++] = r->sdpa.dvv, p[n++] = r->sdpa.o, p[n++] = r->sdpa.lse;
    break;
  case RT_REC_MEMSET: p[n++] = r->dst; break;
  case RT_REC_COPY: p[n++] = r->dst; break;
  case RT_REC_COLL: p[n++] = r->coll.dst; break;
  case RT_REC_FORK:
  case RT_REC_JOIN: break;
  }
  for (int i = 0; i < n; i++)
    if (p[i] >= lo && p[i] < hi) return 1;
  return 0;
}

typedef struct {
  Plan p;
  RtDevice dev;
  RtRecorder rec;
  RtExec *x;
} Run;

static int load(Run *r, const char *title, const char *recipe, const char **kv, int nkv) {
  if (!record_run_open(recipe, kv, nkv, &r->p, &r->dev, &r->rec, &r->x)) return 0;
  CHECK(0, "%s: load", title);
  return -1;
}

static bool micro_phase(Phase p) {
  return p == IR_PHASE_FORWARD || p == IR_PHASE_BACKWARD || p == IR_PHASE_REPLAY;
}

/* Every main gradient as its own bucket: schedule_bucket_fire's answer per gradient against the
 * recorded launches. Returns how many gradients' last write moved off their ACCUM op. */
static int check_fire(const char *title, const char *recipe, const char **kv, int nkv) {
  static Run run;
  if (load(&run, title, recipe, kv, nkv)) return 0;
  RtDevice *dev = &run.dev;
  RtRecorder *rec = &run.rec;
  RtExec *x = run.x;
  const Graph *g = run.p.g;
  for (int o = 0; o < g->nop; o++) {
    if (!micro_phase(g->op[o].tags.phase)) continue;
    rec->on = 1, rec->op = o;
    CHECK(rt_exec_run_op(x, o) == RT_OK, "%s: recording op %d: %s", title, o, dev->err);
    rec->on = 0;
  }
  /* the real buckets: each fires at a micro op, at the last write of its gradients */
  const Schedule *sc = &run.p.sc;
  for (int k = 0; k < sc->nb; k++)
    CHECK(sc->b[k].fire_op >= 0 && micro_phase(g->op[sc->b[k].fire_op].tags.phase),
          "%s: bucket %d fires at op %d", title, k, sc->b[k].fire_op);
  Schedule one = *sc;
  one.b = calloc((size_t)sc->ngrad + 1, sizeof *one.b);
  one.nb = sc->ngrad;
  for (int i = 0; i < sc->ngrad; i++)
    one.b[i] = (Bucket){.first = i, .ngrads = 1, .after_op = -1, .fire_op = -1};
  char err[512] = "";
  CHECK(schedule_bucket_fire(g, run.p.fz, &one, err, sizeof err) == 0, "%s: %s", title, err);
  int moved = 0, earlier = 0, later = 0;
  for (int i = 0; i < sc->ngrad; i++) {
    int t = sc->grad[i], truth = -1, accum = -1;
    CUdeviceptr lo = rt_exec_ptr(x, t), hi = lo + (CUdeviceptr)g->t[t].bytes;
    for (int r = 0; r < rec->n; r++)
      if (touches(&rec->r[r], dev, lo, hi) && rec->r[r].op > truth) truth = rec->r[r].op;
    for (int o = 0; o < g->nop; o++)
      for (int j = 0; j < g->op[o].nout; j++)
        if (g->op[o].out[j] == t && micro_phase(g->op[o].tags.phase)) accum = o;
    CHECK(one.b[i].fire_op == truth,
          "%s: main gradient %s: the compiler fires after op %d, the recorded launches last write it "
          "at op %d",
          title, g->t[t].name, one.b[i].fire_op, truth);
    moved += one.b[i].fire_op != accum, earlier += one.b[i].fire_op<accum, later += one.b[i].fire_op> accum;
  }
  /* and the real buckets are the latest of their gradients' */
  for (int k = 0; k < sc->nb; k++) {
    int want = -1;
    for (int i = sc->b[k].first; i < sc->b[k].first + sc->b[k].ngrads; i++)
      want = one.b[i].fire_op > want ? one.b[i].fire_op : want;
    CHECK(sc->b[k].fire_op == want, "%s: bucket %d fires at op %d, its gradients' last write is op %d", title,
          k, sc->b[k].fire_op, want);
  }
  printf("%s: %d main gradients in %d bucket(s); the last write of %d is another launch than the op that "
         "names it "
         "(%d earlier: sunk into the producer; %d later: a fused group)\n",
         title, sc->ngrad, sc->nb, moved, earlier, later);
  free(one.b);
  record_run_close(&run.p, rec, x);
  return moved;
}

/* ZeRO-1's helpers on one recipe: every other gradient masked. */
static void check_zero(const char *title, const char *recipe, const char **kv, int nkv) {
  static Run run;
  if (load(&run, title, recipe, kv, nkv)) return;
  RtDevice *dev = &run.dev;
  RtRecorder *rec = &run.rec;
  RtExec *x = run.x;
  const Graph *g = run.p.g;
  int64_t total = 0, seen = 0;
  rt_exec_norm_buffer(x, &total);
  uint8_t *cover = calloc((size_t)total + 1, 1), *keep = calloc((size_t)g->nt + 1, 1);
  int ngrad = 0;
  for (int t = 0; t < g->nt; t++)
    if (g->t[t].role == ROLE_GRAD) keep[t] = ngrad++ % 2;
  for (int o = 0; o < g->nop; o++) {
    if (g->op[o].kind != OP_GRAD_SUMSQ) continue;
    int64_t first, count;
    CHECK(rt_exec_norm_partials(x, o, &first, &count) == RT_OK && first >= 0 && count > 0 &&
              first + count <= total,
          "%s: op %d's partial slice [%lld, +%lld) of %lld", title, o, (long long)first, (long long)count,
          (long long)total);
    for (int64_t i = first; i < first + count && i < total && i >= 0; i++)
      CHECK(!cover[i]++, "%s: partial %lld twice", title, (long long)i);
    seen += count;
  }
  CHECK(seen == total, "%s: the GRAD_SUMSQ slices cover %lld of %lld partials", title, (long long)seen,
        (long long)total);
  /* masked tables: n = 0 in exactly the masked rows */
  int groups = 0, masked = 0;
  for (int o = 0; o < g->nop; o++) {
    const uint64_t *w;
    int rows, width;
    int64_t chunks;
    if (rt_exec_multi_table(x, o, &w, &rows, &width, &chunks)) continue;
    uint64_t *full = malloc((size_t)(rows * width) * sizeof *full);
    memcpy(full, w, (size_t)(rows * width) * sizeof *full);
    CHECK(rt_exec_multi_keep(x, keep, keep) == RT_OK, "%s: masking: %s", title, dev->err);
    rt_exec_multi_table(x, o, &w, &rows, &width, &chunks);
    int nword = g->op[o].kind == OP_GRAD_SUMSQ ? 1 : 5;
    for (int r = 0; r < rows; r++) {
      int t = g->op[o - rows + 1 + r].in[0];
      for (int c = 0; c < width; c++)
        CHECK(w[r * width + c] == (c == nword && !keep[t] ? 0 : full[r * width + c]),
              "%s: op %d row %d word %d after masking", title, o, r, c);
      masked += !keep[t];
    }
    groups++;
    free(full);
  }
  /* the kept hyper-parameter launch: the ADAMW op's own first launch */
  int first_adam = -1;
  for (int o = 0; o < g->nop && first_adam < 0; o++)
    if (g->op[o].kind == OP_ADAMW && rt_exec_op_runs(x, o)) first_adam = o;
  if (first_adam >= 0) {
    rec->on = 1;
    int n0 = rec->n;
    rt_exec_run_op(x, first_adam);
    int n1 = rec->n;
    rt_exec_adamw_hparams(x, first_adam);
    rec->on = 0;
    CHECK(rec->n == n1 + 1 && n1 > n0 && rt_record_equal(&rec->r[n0], &rec->r[n1]) &&
              !strcmp(rt_kname(dev, rec->r[n1].k), "adamw_hparams"),
          "%s: the hyper-parameter launch of op %d alone is not the op's first launch", title, first_adam);
  }
  printf("%s: %lld norm partials tiled by the GRAD_SUMSQ slices; %d multi-tensor group(s), %d row(s) masked; "
         "the AdamW "
         "hyper-parameter launch kept alone\n",
         title, (long long)total, groups, masked);
  free(cover), free(keep);
  record_run_close(&run.p, rec, x);
}

/* Pointer arguments of the launches op o makes, relative to the executor's arena (-1 outside). */
static int adam_ptrs(Run *run, RtExec *x, int o, int64_t *out, int cap) {
  RtRecorder *rec = &run->rec;
  CUdeviceptr base = rt_exec_base(x, 0);
  int64_t size = rt_exec_arena_bytes(x);
  rec->on = 1;
  int n0 = rec->n, n = 0;
  rt_exec_run_op(x, o);
  rec->on = 0;
  for (int i = n0; i < rec->n; i++) {
    const RtRec *r = &rec->r[i];
    if (r->kind != RT_REC_LAUNCH) continue;
    const char *sig = rt_ksig(&run->dev, r->k);
    for (int a = 0; a < r->nargs && n < cap; a++)
      if (sig[a] == 'p') {
        CUdeviceptr p = (CUdeviceptr)r->arg[a];
        out[n++] = p >= base && p < base + (CUdeviceptr)size ? (int64_t)(p - base) : -1;
      }
  }
  return n;
}

/* A distributed-optimizer step of `dp` ranks: each rank's view against the full graph's. */
static void check_region(const char *title, const char *recipe, const char **kv, int nkv, int dp) {
  static Run run;
  if (load(&run, title, recipe, kv, nkv)) return;
  const Graph *g = run.p.g;
  const MemPlan *mp = &run.p.mp;
  RtExec *full = run.x;
  CHECK(mp->region > 0 && mp->nshard == dp && g->nbuffers == 2, "%s: no optimizer-state region of %d ranks", title, dp);
  uint64_t want = rt_exec_layout_hash(full);
  int64_t region_at = rt_exec_arena_bytes(full) - g->buffer_bytes[1]; /* the region: the last buffer, 256-aligned */
  int checked = 0, rows = 0;
  for (int r = 0; r < dp && mp->region; r++) {
    Graph view = *g;
    view.t = malloc((size_t)g->nt * sizeof *view.t);
    memcpy(view.t, g->t, (size_t)g->nt * sizeof *view.t);
    for (int t = 0; t < g->nt; t++)
      if (view.t[t].buffer == 1 && mp->owner[t] >= 0 && mp->owner[t] != r) view.t[t].bytes = 0;
    int unsupported = 0;
    RtExec *x = rt_exec_new(&run.dev, &view, run.p.fz, &unsupported);
    CHECK(x != NULL, "%s rank %d: the executor refuses the rank's view: %s", title, r, run.dev.err);
    if (!x) {
      free(view.t);
      continue;
    }
    CHECK(rt_exec_layout_hash(x) == want, "%s rank %d: another layout hash than the full graph's (step.c's)", title, r);
    for (int o = 0; o < g->nop; o++) {
      const Op *op = &g->op[o];
      if (op->kind != OP_ADAMW || (mp->owner[op->in[0]] >= 0 && mp->owner[op->in[0]] != r)) continue;
      if (rt_exec_op_runs(x, o)) { /* alone: its launches' pointers, the rank's against the full graph's */
        int64_t a[64], b[64];
        int na = adam_ptrs(&run, x, o, a, 64), nb = adam_ptrs(&run, full, o, b, 64);
        CHECK(na == nb && na > 0 && !memcmp(a, b, (size_t)na * sizeof *a), "%s rank %d: AdamW op %d points elsewhere", title, r, o);
        checked++;
      }
      for (int j = 1; j < op->nout; j++) { /* its state inside the rank's shard */
        int64_t off = rt_exec_ptr(x, op->out[j]) - rt_exec_base(x, 0) - region_at;
        CHECK(g->t[op->out[j]].buffer == 1 && off >= 0 && off + g->t[op->out[j]].bytes <= mp->shard[r],
              "%s rank %d: %s outside its shard", title, r, g->t[op->out[j]].name);
      }
    }
    for (int o = 0; o < g->nop; o++) { /* multi-tensor rows: the same words */
      const uint64_t *w, *wf;
      int n, nf, width;
      int64_t chunks;
      if (rt_exec_multi_table(x, o, &w, &n, &width, &chunks) || g->op[o].kind != OP_ADAMW) continue;
      rt_exec_multi_table(full, o, &wf, &nf, &width, &chunks);
      for (int k = 0; k < n; k++) {
        int t = g->op[o - n + 1 + k].in[0];
        if (mp->owner[t] >= 0 && mp->owner[t] != r) continue;
        for (int c = 0; c < 5; c++) /* master, param, grad, m, v: relative to each executor's arena */
          CHECK(w[k * width + c] - rt_exec_base(x, 0) == wf[k * width + c] - rt_exec_base(full, 0),
                "%s rank %d: op %d row %d word %d differs from the full graph's", title, r, o, k, c);
        rows++;
      }
    }
    rt_exec_free(x);
    free(view.t);
  }
  printf("%s: %d ranks' views of the optimizer-state region (%lld B, shards", title, dp, (long long)mp->region);
  for (int r = 0; r < mp->nshard; r++) printf(" %lld", (long long)mp->shard[r]);
  printf(") open with step.c's layout hash; %d AdamW launches alone and %d multi-tensor rows as the full graph's\n", checked, rows);
  record_run_close(&run.p, &run.rec, full);
}

int main(void) {
  const char *bf16[] = {"model.bf16=true"};
  const char *bf16_single[] = {"model.bf16=true", "optimizer.multi_tensor=false"};
  const char *tiny_sel[] = {"model.recompute_granularity=selective",
                            "model.recompute_modules=[core_attn,mlp,layernorm]"};
  const char *tiny_tied[] = {"model.share_embeddings_and_output_weights=true"};
  int moved = 0;
  moved += check_fire("tiny", "models/tiny.lua", NULL, 0);
  moved += check_fire("tiny, selective recompute", "models/tiny.lua", tiny_sel, 2);
  moved += check_fire("tiny, tied embeddings", "models/tiny.lua", tiny_tied, 1);
  moved += check_fire("gpt3_tiny bf16", "tests/recipes/gpt3_tiny.lua", bf16, 1);
  moved += check_fire("tiny_mla_moe bf16", "tests/recipes/tiny_mla_moe.lua", bf16, 1);
  CHECK(moved > 0, "no recipe moves a gradient's last write off its op: the check proves nothing");
  check_zero("tiny", "models/tiny.lua", NULL, 0);
  check_zero("gpt3_tiny bf16", "tests/recipes/gpt3_tiny.lua", bf16, 1);
  check_zero("gpt3_tiny bf16, optimizer ops alone", "tests/recipes/gpt3_tiny.lua", bf16_single, 2);
  const char *zero4[] = {"model.bf16=true", "train.world_size=4", "train.global_batch_size=16",
                         "optimizer.use_distributed_optimizer=true", "optimizer.multi_tensor=false"};
  check_region("gpt3_tiny bf16 ZeRO-1 DP 4, optimizer ops alone", "tests/recipes/gpt3_tiny.lua", zero4, 5, 4);
  check_region("gpt3_tiny bf16 ZeRO-1 DP 4, multi-tensor", "tests/recipes/gpt3_tiny.lua", zero4, 4, 4);
  const char *tiny_zero2[] = {"train.world_size=2", "train.global_batch_size=8", "optimizer.use_distributed_optimizer=true"};
  check_region("tiny ZeRO-1 DP 2", "models/tiny.lua", tiny_zero2, 3, 2);
  if (failures) fprintf(stderr, "%d failures\n", failures);
  return failures ? 1 : 0;
}
