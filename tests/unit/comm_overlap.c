/* comm_overlap.c — tensor parallelism's backward collectives on the communication stream
 * (compiler/passes/comm_overlap.c), checked on the plan and its launch program, no GPU:
 *
 *  - every column-parallel linear's input-gradient collective (a reduce-scatter under SP, else an
 *    all-reduce) comes right after its dgrad and runs beside the weight-gradient GEMM: a window
 *    that holds it, joined before anything reads the collective's output;
 *  - nothing the step's stream touches inside a window lies in the memory of the collective's input
 *    or output (the memory plan keeps them live to the join);
 *  - a window stays inside one CUDA-graph scope instance (or outside all), holds no other collective
 *    and no attention op;
 *  - the launch program holds one fork and one join per window, the collective's records between them
 *    and marked for the communication stream; with the forks, joins and marks taken out it is record
 *    for record the program lowered with no window (the same work in the serial order).
 *
 *   comm_overlap     the checks (exit 0 ok, 1 a failure) */
#include <stdlib.h>

#include "codegen/launch/program.h"
#include "passes/fuse.h"
#include "record_run.h"

static int plan_for(const char *recipe, const char **kv, int nkv, Plan *p) {
  memset(p, 0, sizeof *p);
  Spec spec;
  if (record_run_spec(recipe, kv, nkv, &spec)) return -1;
  spec.per_rank = true; /* what a build plans: the rank's own step */
  char err[512] = "";
  if (plan_build(&spec, 0, p, NULL, err, sizeof err) != 0) return fprintf(stderr, "%s: %s\n", recipe, err), -1;
  return 0;
}

static bool disjoint(const MemPlan *mp, int a, int b) {
  if (mp->size[a] == 0 || mp->size[b] == 0 || mp->buffer[a] || mp->buffer[b]) return true;
  return mp->offset[a] + mp->size[a] <= mp->offset[b] || mp->offset[b] + mp->size[b] <= mp->offset[a];
}

static int scope_of(const ScopeResult *sr, int i) {
  for (int k = 0; k < sr->n; k++)
    if (sr->s[k].first <= i && i <= sr->s[k].last) return k;
  return -1;
}

/* name: the case; min: windows at least; wgrad: every window holds a weight-gradient GEMM */
static void check(const char *name, const char *recipe, const char **kv, int nkv, int min, bool wgrad) {
  Plan p;
  if (plan_for(recipe, kv, nkv, &p)) {
    CHECK(0, "%s: planning failed", name);
    return;
  }
  const Graph *g = p.g;
  const Schedule *sc = &p.sc;
  CHECK(sc->comm_end && sc->ncomm >= min, "%s: %d windows, expected at least %d", name, sc->ncomm, min);
  int *pt = malloc(((size_t)sc->nops + 1) * sizeof *pt), *pos = malloc(((size_t)sc->nops + 1) * sizeof *pos);
  for (int i = 0, q = 0; i < sc->n; i++)
    if (sc->it[i].kind == SCHED_OP) pt[q] = sc->it[i].id, pos[q++] = i;
  int windows = 0;
  for (int q = 0; q < sc->nops; q++) {
    int s = pt[q], end = sc->comm_end ? sc->comm_end[s] : -1;
    if (end < 0) continue;
    windows++;
    const Op *c = &g->op[s];
    CHECK((c->kind == OP_TP_SCATTER || c->kind == OP_TP_ALLREDUCE) && c->tags.phase == IR_PHASE_BACKWARD,
          "%s: %s (point %d) on the communication stream", name, op_name(c->kind), q);
    CHECK(end > q && end < sc->nops, "%s: point %d's window ends at %d", name, q, end);
    int has_wgrad = 0;
    for (int r = q + 1; r <= end && r < sc->nops; r++) {
      int first, last;
      fuse_group(p.fz, pt[r], &first, &last);
      if (first > pt[r] || last < pt[r]) first = last = pt[r];
      CHECK(scope_of(&p.sr, pos[r]) == scope_of(&p.sr, pos[q]), "%s: the window of point %d leaves its scope at %d",
            name, q, r);
      for (int w = first; w <= last; w++) {
        const Op *op = &g->op[w];
        has_wgrad |= op->kind == OP_LINEAR_WGRAD;
        CHECK(op->kind != OP_TP_SCATTER && op->kind != OP_TP_GATHER && op->kind != OP_TP_ALLREDUCE &&
                  op->kind != OP_FLASH_ATTN_BWD,
              "%s: %s inside the window of point %d", name, op_name(op->kind), q);
        for (int j = 0; j < op->nin + op->nout; j++) {
          int t = j < op->nin ? op->in[j] : op->out[j - op->nin];
          CHECK(t != c->in[0] && t != c->out[0], "%s: point %d (%s) touches the collective's %s", name, r,
                op_name(op->kind), g->t[t].name);
          CHECK(disjoint(&p.mp, t, c->in[0]) && disjoint(&p.mp, t, c->out[0]),
                "%s: %s (point %d) lies in the memory of %s's operands", name, g->t[t].name, r, op_name(c->kind));
        }
      }
    }
    CHECK(!wgrad || has_wgrad, "%s: the window of point %d holds no weight gradient", name, q);
    /* the order: the collective right after the op producing its input */
    int prod = g->t[c->in[0]].producer;
    CHECK(q > 0 && pt[q - 1] == prod, "%s: point %d's collective is not right after its producer", name, q);
  }
  CHECK(windows == sc->ncomm, "%s: %d windows counted, ncomm %d", name, windows, sc->ncomm);
  printf("%s: %d windows\n", name, windows);
  /* the launch program */
  CHECK(p.lp_ok, "%s: no launch program", name);
  if (p.lp_ok) {
    const LaunchProgram *lp = &p.lp;
    int forks = 0, joins = 0, open = 0, side = 0;
    for (int i = 0; i < lp->f.nrec; i++) {
      const RtRec *r = &lp->rec[i];
      if (r->kind == RT_REC_FORK) {
        forks++;
        CHECK(!open, "%s: a fork inside a window", name);
        open = 1;
      }
      if (r->kind == RT_REC_JOIN) {
        joins++;
        CHECK(open, "%s: a join outside a window", name);
        open = 0;
      }
      if (r->kind == RT_REC_COLL && r->coll.side) {
        side++;
        CHECK(open && r->op >= 0 && sc->comm_end[r->op] >= 0, "%s: record %d on the communication stream", name,
              i);
      }
      if (r->kind == RT_REC_COLL && open && !r->coll.side)
        CHECK(0, "%s: record %d: a collective on the step's stream inside a window", name, i);
    }
    CHECK(forks == sc->ncomm && joins == sc->ncomm && !open, "%s: %d forks, %d joins for %d windows", name,
          forks, joins, sc->ncomm);
    CHECK(side >= sc->ncomm, "%s: %d collectives on the communication stream", name, side);
    /* the serial program: the same records without the windows */
    int *keep = sc->comm_end;
    ((Schedule *)sc)->comm_end = NULL;
    LaunchProgram serial;
    char why[256], err[256];
    int rc = launch_program_build(g, p.fz, sc, &p.ew, p.sm_count, &serial, why, sizeof why, err, sizeof err);
    ((Schedule *)sc)->comm_end = keep;
    CHECK(rc == 0, "%s: the serial program: %s", name, err);
    if (rc == 0) {
      int j = 0, same = 1;
      for (int i = 0; i < lp->f.nrec && same; i++) {
        RtRec r = lp->rec[i];
        if (r.kind == RT_REC_FORK || r.kind == RT_REC_JOIN) continue;
        if (r.kind == RT_REC_COLL) r.coll.side = 0;
        same = j < serial.f.nrec && rt_record_equal(&r, &serial.rec[j]) && r.op == serial.rec[j].op;
        j++;
      }
      CHECK(same && j == serial.f.nrec, "%s: the program without its forks and joins is not the serial one (%d of %d)",
            name, j, serial.f.nrec);
      lp_free(&serial);
    }
  }
  free(pt), free(pos);
  plan_free(&p);
}

int main(void) {
  const char *sp[] = {"model.tensor_model_parallel_size=2", "model.sequence_parallel=true", "train.world_size=2"};
  const char *nosp[] = {"model.tensor_model_parallel_size=2", "model.sequence_parallel=false", "train.world_size=2"};
  const char *te[] = {"model.tensor_model_parallel_size=2", "model.sequence_parallel=true", "train.world_size=2",
                      "model.cuda_graph_impl=transformer_engine", "model.cuda_graph_modules=[attn,mlp]"};
  const char *forced[] = {"train.force_parallel_lowering=true", "model.sequence_parallel=true"};
  const char *moe[] = {"model.bf16=true",
                       "model.tensor_model_parallel_size=2",
                       "model.sequence_parallel=true",
                       "model.expert_model_parallel_size=2",
                       "model.expert_tensor_parallel_size=1",
                       "train.world_size=2"};
  /* models/tiny.lua: 4 layers, each with two column-parallel inputs (QKV, FC1), + the output layer's */
  check("tiny TP 2 + SP", "models/tiny.lua", sp, 3, 8, true);
  check("tiny TP 2", "models/tiny.lua", nosp, 3, 8, true);
  check("tiny TP 2 + SP, TE graphs of attn and mlp", "models/tiny.lua", te, 5, 1, false);
  check("tiny forced TP 1 + SP", "models/tiny.lua", forced, 2, 8, true);
  check("tiny_mla_moe TP 2 + SP x EP 2", "tests/recipes/tiny_mla_moe.lua", moe, 6, 4, false);
  /* the allgather token dispatcher's EP-group reduce-scatters stay on the step's stream (only TP-group
   * collectives move): at EP 2 without TP nothing runs on the communication stream */
  const char *ag[] = {"model.bf16=true", "model.moe_token_dispatcher_type=allgather",
                      "model.expert_model_parallel_size=2", "train.world_size=2"};
  Plan q;
  if (plan_for("tests/recipes/tiny_mla_moe.lua", ag, 4, &q) == 0) {
    int ep_coll = 0;
    for (int o = 0; o < q.g->nop; o++)
      ep_coll += (q.g->op[o].kind == OP_TP_SCATTER || q.g->op[o].kind == OP_TP_GATHER) && q.g->op[o].a.i[1] == 1;
    CHECK(ep_coll > 0, "allgather EP 2: no EP-group gather or scatter in the graph");
    CHECK(q.sc.ncomm == 0, "allgather EP 2: %d windows (EP-group collectives must stay on the step's stream)",
          q.sc.ncomm);
    plan_free(&q);
  }
  /* one rank, no TP: nothing moves to the communication stream */
  Plan p;
  if (plan_for("models/tiny.lua", NULL, 0, &p) == 0) {
    CHECK(p.sc.ncomm == 0, "tiny: %d windows without tensor parallelism", p.sc.ncomm);
    plan_free(&p);
  }
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
