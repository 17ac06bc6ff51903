/* scope.c — CUDA-graph scopes on the schedule and the containment check (plan.h).
 *
 * Which ops a setting captures (docs/megatron-rules.md §2.1, §2.2): lowering tags
 * each op with the per-layer scopes that would capture it (IrTags.scopes); here the recipe picks
 * which of them are graphs:
 *   transformer_engine  cuda_graph_modules [] -> the whole layer; else each listed module.
 *   local               a layer with attention and a dense MLP is captured whole when the list is
 *                       [] or holds attn or mlp (Megatron's CudaGraphManager wraps the layer's
 *                       __call__); a MoE layer whole for [] or moe, its router/preprocess part
 *                       for moe_router / moe_preprocess.
 *   full_iteration      one graph over the whole step. stepc's holds forward, backward, gradient
 *                       reduction, clipping and the optimizer; Megatron's FullCudaGraphWrapper
 *                       wraps forward_backward_func and leaves the optimizer to separate graphs.
 *                       stepc can, because its optimizer is ops on planned addresses with the LR
 *                       and step counter in device memory (ROLE_OPTIM), nothing read on the host.
 * A per-layer scope is a maximal run of consecutive scheduled ops of one layer carrying the bit:
 * one forward graph, and one backward graph that also holds the replays placed inside it.
 *
 * The checks (rule ids in docs/rules.md, "Graph scopes and checkpoints"):
 *   STEPC-40  a checkpoint region crosses or covers a scope in forward (must be inside or apart);
 *   STEPC-41  the same for the region's replay against the backward scopes;
 *   STEPC-42  a region whose replay draws random numbers is replayed inside a captured graph;
 *   STEPC-43  (note) static graph outputs: tensors made inside a scope and read outside it stay
 *             allocated for the whole step in Megatron's job, as the static buffers of TE's graphed
 *             callables (the per-rank report pins them; stepc's own step does not need to). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

static ScopeImpl impl_of(const Spec *s) {
  const char *i = s->model.cuda_graph_impl;
  if (strcmp(i, "local") == 0) return SCOPE_LOCAL;
  if (strcmp(i, "transformer_engine") == 0) return SCOPE_TE;
  if (strcmp(i, "full_iteration") == 0) return SCOPE_FULL_ITERATION;
  return SCOPE_NONE;
}

/* The scope bits that become graphs in a layer whose ops carry `present` bits. */
static uint32_t graphed_bits_listed(ScopeImpl impl, uint32_t modules, uint32_t present) {
  bool moe_layer = present & (IR_SCOPE_MOE | IR_SCOPE_MOE_ROUTER);
  if (impl == SCOPE_TE) return modules ? (modules & present) : (present & IR_SCOPE_LAYER);
  if (impl != SCOPE_LOCAL) return 0;
  if (!modules) return present & IR_SCOPE_LAYER;
  if (present & IR_SCOPE_MAMBA) return modules & IR_SCOPE_MAMBA ? IR_SCOPE_MAMBA : 0;
  if (moe_layer) {
    if (modules & IR_SCOPE_MOE) return present & IR_SCOPE_LAYER;
    return modules & present & (IR_SCOPE_MOE_ROUTER | IR_SCOPE_MOE_PREPROCESS);
  }
  return modules & (IR_SCOPE_ATTN | IR_SCOPE_MLP) ? present & IR_SCOPE_LAYER : 0;
}

/* The router's ops carry both moe_router and moe_preprocess (lower_moe.c): Megatron's
 * moe_preprocess graph is the router plus the dispatch's preprocessing, so with both listed the
 * layer has that one graph, not a router graph inside it. */
static uint32_t graphed_bits(ScopeImpl impl, uint32_t modules, uint32_t present) {
  uint32_t b = graphed_bits_listed(impl, modules, present);
  return (b & IR_SCOPE_MOE_PREPROCESS) ? b & ~(uint32_t)IR_SCOPE_MOE_ROUTER : b;
}

static int push_inst(ScopeResult *sr, ScopeInst si) {
  ScopeInst *n = realloc(sr->s, (size_t)(sr->n + 1) * sizeof *n);
  if (!n) return -1;
  sr->s = n;
  sr->s[sr->n++] = si;
  return 0;
}

static bool bwd_phase(Phase p) { return p == IR_PHASE_BACKWARD || p == IR_PHASE_REPLAY; }

int scope_build(const Graph *g, const Spec *s, const Schedule *sc, ScopeResult *sr, char *err, size_t nerr) {
  memset(sr, 0, sizeof *sr);
  sr->impl = impl_of(s);
  for (int i = 0; i < s->model.cuda_graph_modules.n; i++)
    sr->modules |= ir_scope_from_name(s->model.cuda_graph_modules.items[i]);
  sr->is_static = calloc((size_t)g->nt + 1, 1);
  if (!sr->is_static) goto oom;
  if (sr->impl == SCOPE_NONE) return 0;
  if (sr->impl == SCOPE_FULL_ITERATION) {
    if (push_inst(
            sr, (ScopeInst){
                    .scope = -1, .layer = -1, .phase = IR_PHASE_FORWARD, .first = 0, .last = sc->n - 1}) < 0)
      goto oom;
    return 0;
  }
  /* scope bits present per layer */
  int nl = (int)s->model.num_layers;
  uint32_t *present = calloc((size_t)nl + 1, sizeof *present);
  if (!present) goto oom;
  for (int o = 0; o < g->nop; o++)
    if (g->op[o].tags.layer >= 0 && g->op[o].tags.layer < nl)
      present[g->op[o].tags.layer] |= g->op[o].tags.scopes;
  for (int bit = 0; bit < IR_NSCOPES; bit++) {
    ScopeInst cur = {.first = -1};
    for (int i = 0; i <= sc->micro_end; i++) {
      bool match = false;
      const Op *op = NULL;
      if (i < sc->micro_end) {
        if (sc->it[i].kind == SCHED_BUCKET) continue; /* a marker neither opens nor closes a graph */
        op = &g->op[sc->it[i].id];
        int l = op->tags.layer;
        match = l >= 0 && l < nl && (op->tags.scopes & (1u << bit)) &&
                (graphed_bits(sr->impl, sr->modules, present[l]) & (1u << bit));
      }
      Phase ph = op && bwd_phase(op->tags.phase) ? IR_PHASE_BACKWARD : IR_PHASE_FORWARD;
      if (cur.first >= 0 && (!match || op->tags.layer != cur.layer || ph != cur.phase)) {
        if (push_inst(sr, cur) < 0) {
          free(present);
          goto oom;
        }
        cur.first = -1;
      }
      if (match && cur.first < 0)
        cur = (ScopeInst){.scope = bit, .layer = op->tags.layer, .phase = ph, .first = i};
      if (match) cur.last = i;
    }
  }
  free(present);
  /* static graph outputs: produced inside an instance, read at a position outside it */
  int *inst_at = malloc((size_t)(sc->n + 1) * sizeof *inst_at);
  if (!inst_at) goto oom;
  for (int i = 0; i < sc->n; i++)
    inst_at[i] = -1;
  for (int k = 0; k < sr->n; k++)
    for (int i = sr->s[k].first; i <= sr->s[k].last; i++)
      inst_at[i] = k;
  for (int i = 0; i < sc->n; i++) {
    if (sc->it[i].kind != SCHED_OP) continue;
    const Op *op = &g->op[sc->it[i].id];
    for (int j = 0; j < op->nin; j++) {
      int t = op->in[j], p = g->t[t].producer;
      if (p < 0 || role_is_persistent(g->t[t].role) || sc->pos[p] < 0) continue;
      int k = inst_at[sc->pos[p]];
      if (k >= 0 && inst_at[i] != k && !sr->is_static[t]) {
        sr->is_static[t] = 1;
        int64_t b = tensor_numel(&g->t[t]) * (int64_t)dtype_size(g->t[t].dtype);
        sr->s[k].nstatic++, sr->s[k].static_bytes += b;
        sr->static_bytes += b;
      }
    }
  }
  free(inst_at);
  return 0;
oom:
  snprintf(err, nerr, "out of memory");
  scope_free(sr);
  return -1;
}

void scope_free(ScopeResult *sr) {
  free(sr->s), free(sr->is_static);
  memset(sr, 0, sizeof *sr);
}

static const char *scope_label(const ScopeInst *si) {
  return si->scope < 0 ? "full_iteration" : ir_scope_name(si->scope);
}

/* A violation per (rule, label, scope), the first layer in full and a count of the others. */
typedef struct {
  char rule[12];
  int label;
  int scope;
  int count;
  Diag *d;
} Seen;

static const char *field_where(const Spec *s, int id) {
  return s->where[id][0] ? s->where[id] : s->recipe_path;
}

static void report(DiagList *d, Seen *seen, int *nseen, const char *rule, const Region *r,
                   const ScopeInst *si, const char *msg, const char *hint, const Spec *s) {
  for (int i = 0; i < *nseen; i++)
    if (strcmp(seen[i].rule, rule) == 0 && seen[i].label == r->label && seen[i].scope == si->scope) {
      seen[i].count++;
      return;
    }
  if (*nseen >= 64) return;
  Diag *g = diag_add(d, DIAG_ERROR, rule, "model.cuda_graph_modules",
                     field_where(s, SPEC_F_model_recompute_granularity), "%s", msg);
  if (g) diag_hint(g, "%s", hint);
  Seen *n = &seen[(*nseen)++];
  snprintf(n->rule, sizeof n->rule, "%s", rule);
  n->label = r->label, n->scope = si->scope, n->count = 1, n->d = g;
}

static const char *fix_for(const Region *r) {
  if (r->label < 0)
    return "full recompute needs cuda_graph_impl=full_iteration (or a recompute group that a per-layer graph "
           "wholly "
           "contains); or use selective labels inside the captured module";
  return "drop the label from model.recompute_modules, or choose model.cuda_graph_modules so the captured "
         "module "
         "contains the whole region or none of it";
}

/* The first op of [a0, a1] outside [b0, b1] (schedule positions). */
static int first_outside(const Schedule *sc, int a0, int a1, int b0, int b1) {
  for (int i = a0; i <= a1; i++)
    if ((i < b0 || i > b1) && sc->it[i].kind == SCHED_OP) return sc->it[i].id;
  return -1;
}

static void check_span(const Graph *g, const Spec *s, const Schedule *sc, const Region *r,
                       const ScopeInst *si, int a0, int a1, bool replay, DiagList *d, Seen *seen,
                       int *nseen) {
  if (a1 < si->first || a0 > si->last) return;   /* disjoint */
  if (a0 >= si->first && a1 <= si->last) return; /* nested */
  int op = first_outside(sc, a0, a1, si->first, si->last);
  char rn[64], msg[640], hint[320];
  recompute_region_name(r, rn, sizeof rn);
  bool covers = a0 <= si->first && a1 >= si->last;
  snprintf(msg, sizeof msg,
           "layer %d: the %s of checkpoint region %s (label %s) %s the %s CUDA-graph scope '%s' of layer %d: "
           "op %s "
           "(%s) is in the region but outside the graph, which starts at %s",
           r->layer, replay ? "replay" : "forward", rn,
           r->label < 0 ? "full recompute" : ir_label_name(r->label), covers ? "covers" : "crosses",
           replay ? "backward" : "forward", scope_label(si), si->layer, op >= 0 ? g->op[op].tags.module : "?",
           op >= 0 ? op_name(g->op[op].kind) : "?",
           g->op[sc->it[si->first].kind == SCHED_OP ? sc->it[si->first].id : 0].tags.module);
  snprintf(hint, sizeof hint, "%s", fix_for(r));
  report(d, seen, nseen, replay ? "STEPC-41" : "STEPC-40", r, si, msg, hint, s);
}

int scope_check(const Graph *g, const Spec *s, const Schedule *sc, const RecomputeResult *rr,
                const ScopeResult *sr, DiagList *d) {
  Seen seen[64];
  int nseen = 0, before = diag_count(d, DIAG_ERROR);
  for (int k = 0; k < rr->n; k++) {
    const Region *r = &rr->r[k];
    int f0 = sc->pos[r->first], f1 = sc->pos[r->last];
    bool has_replay = r->replay_first >= 0 && r->outer == k;
    int r0 = has_replay ? sc->pos[r->replay_first] : -1, r1 = has_replay ? sc->pos[r->replay_last] : -1;
    for (int i = 0; i < sr->n; i++) {
      const ScopeInst *si = &sr->s[i];
      if (si->scope >= 0 && si->phase == IR_PHASE_FORWARD)
        check_span(g, s, sc, r, si, f0, f1, false, d, seen, &nseen);
      if (!has_replay) continue;
      if (si->scope >= 0 && si->phase == IR_PHASE_BACKWARD)
        check_span(g, s, sc, r, si, r0, r1, true, d, seen, &nseen);
      if (r->rng && r1 >= si->first && r0 <= si->last) {
        int rop = -1;
        for (int o = r->replay_first; o <= r->replay_last && rop < 0; o++)
          if (g->op[o].tags.phase == IR_PHASE_REPLAY && plan_op_uses_rng(g, &g->op[o])) rop = o;
        char rn[64], msg[640];
        recompute_region_name(r, rn, sizeof rn);
        snprintf(msg, sizeof msg,
                 "layer %d: checkpoint region %s (label %s) replays %s (%s), which draws random numbers, "
                 "inside the "
                 "captured CUDA graph '%s'%s",
                 r->layer, rn, r->label < 0 ? "full recompute" : ir_label_name(r->label),
                 rop >= 0 ? g->op[rop].tags.module : "?", rop >= 0 ? op_name(g->op[rop].kind) : "?",
                 scope_label(si), si->scope >= 0 ? "" : " (the whole step)");
        report(d, seen, &nseen, "STEPC-42", r, si, msg,
               "set the dropout that the region replays to 0 (model.attention_dropout / "
               "model.hidden_dropout), or keep "
               "the region's replay out of graphs (another label, or cuda_graph_modules without this module)",
               s);
      }
    }
  }
  for (int i = 0; i < nseen; i++)
    if (seen[i].count > 1 && seen[i].d) {
      size_t n = strlen(seen[i].d->message);
      snprintf(seen[i].d->message + n, sizeof seen[i].d->message - n,
               " (and %d more like it in other layers)", seen[i].count - 1);
    }
  if (sr->static_bytes > 0) {
    int ns = 0;
    for (int i = 0; i < sr->n; i++)
      ns += sr->s[i].nstatic;
    Diag *n = diag_add(
        d, DIAG_NOTE, "STEPC-43", "model.cuda_graph_impl", field_where(s, SPEC_F_model_cuda_graph_impl),
        "%d tensors leave their CUDA-graph scope (%d scope instances); in Megatron's job, as the "
        "static outputs of TE's graphs, they stay allocated for the whole step: %.3f GB on one "
        "rank before sharding (the per-rank report's graph_buffers; stepc's own step frees them "
        "after their last reader)",
        ns, sr->n, (double)sr->static_bytes / 1e9);
    if (n)
      diag_hint(n, "`stepc plan` shows them per rank; fewer, larger scopes (or full_iteration) hold fewer "
                   "static outputs");
  }
  return diag_count(d, DIAG_ERROR) - before;
}
