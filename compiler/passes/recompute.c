/* recompute.c — checkpoint regions, what they free, and the replays that rebuild it (plan.h).
 *
 * Regions follow Megatron's boundaries (docs/megatron-rules.md §3, §4): a selective
 * label's region is a maximal run of forward ops carrying the label in one layer (so the two
 * layernorms of a layer are two checkpoints, as in Megatron); full recompute groups the layers of
 * each pipeline stage / virtual chunk (uniform: groups of recompute_num_layers; block: the first
 * recompute_num_layers layers, one checkpoint each).
 *
 * What is freed is computed on the graph, never added up: a forward tensor t made inside region R
 * and read by backward ops is discarded when R is output-discard (moe_act, layernorm,
 * mla_up_proj, mlp_act), or when R is regular and every backward reader of t differentiates an op of R (a
 * reader outside R — "something downstream saves it" — keeps it alive). A discarded tensor
 * belongs to the replay unit of the outermost region containing its producer; the unit is
 * replayed once, right before the first backward op that reads any of its tensors, and replays
 * only the ops needed to rebuild them (plus what those need that is no longer alive — e.g. the
 * unsaved scores of unfused attention, or the output of another unit's replay, which is then
 * replayed first). Megatron's regular checkpoint reruns the whole wrapped function (fc2 in `mlp`,
 * say); stepc skips replay ops whose results nobody reads — docs/recompute.md lists the effect.
 *
 * Replays are clones of the forward ops (phase replay, tags.fwd = original, same attributes, so a
 * dropout replays the same RNG stream and mask) writing fresh "<name>.replay" tensors; backward
 * ops read the copies of discarded tensors, and the region's own backward ops read any copy the
 * replay made. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

static bool label_output_discard(int bit) {
  uint32_t m = 1u << bit;
  return m == IR_LABEL_MOE_ACT || m == IR_LABEL_LAYERNORM || m == IR_LABEL_MLA_UP_PROJ ||
         m == IR_LABEL_GDN_NORM_OUT || m == IR_LABEL_MLP_ACT;
}

void recompute_config_from_spec(const Spec *s, RecomputeConfig *c) {
  const SpecModel *m = &s->model;
  memset(c, 0, sizeof *c);
  pipe_split_from_spec(s, &c->split);
  if (!s->present[SPEC_F_model_recompute_granularity]) return;
  if (strcmp(m->recompute_granularity, "full") == 0) {
    c->full = true;
    c->block = strcmp(m->recompute_method, "block") == 0;
    c->num_layers = s->present[SPEC_F_model_recompute_num_layers] ? (int)m->recompute_num_layers : 1;
  } else if (strcmp(m->recompute_granularity, "selective") == 0) {
    for (int i = 0; i < m->recompute_modules.n; i++)
      c->labels |= ir_label_from_name(m->recompute_modules.items[i]);
  }
}

const char *recompute_region_name(const Region *r, char *buf, size_t n) {
  const char *lab = r->label < 0 ? "full" : ir_label_name(r->label);
  if (r->layer_last != r->layer)
    snprintf(buf, n, "%s@%d-%d", lab, r->layer, r->layer_last);
  else
    snprintf(buf, n, "%s@%d", lab, r->layer);
  return buf;
}

typedef struct {
  Graph *g;
  RecomputeResult *res;
  int nop0, nt0;
  int *unit;        /* per forward op: outermost region (-1: none) */
  uint8_t *disc;    /* per tensor: discarded */
  uint8_t *saved;   /* per tensor: read by some backward op */
  int *copy;        /* per tensor: replay copy, -1 */
  uint8_t *done;    /* per region: replayed */
  int *attach_head; /* per original op: first replay op (linked via attach_next) placed before it */
  int *attach_next, *attach_tail;
  int cap_attach;
  int cur_b; /* the backward op replays are being placed before */
  char *err;
  size_t nerr;
} Rc;

static int add_region(RecomputeResult *res, int label, int layer, int layer_last, int first, int last) {
  Region *nr = realloc(res->r, (size_t)(res->n + 1) * sizeof *nr);
  if (!nr) return -1;
  res->r = nr;
  nr[res->n] = (Region){.label = label,
                        .output_discard = label >= 0 && label_output_discard(label),
                        .layer = layer,
                        .layer_last = layer_last,
                        .first = first,
                        .last = last,
                        .outer = res->n,
                        .replay_first = -1,
                        .replay_last = -1,
                        .trigger = -1};
  res->n++;
  return 0;
}

static int find_regions(const Graph *g, const RecomputeConfig *c, RecomputeResult *res, int nfwd) {
  if (c->full) {
    /* Megatron checkpoints within each model chunk: every (stage, virtual chunk) pair's layers
     * (pipesplit.c), in layer order */
    const PipeSplit *ps = &c->split;
    int vpp = ps->pp > 1 ? ps->vpp : 1;
    /* block with a count below 1 checkpoints no layer, as Megatron (core/recompute.py) */
    int n = c->num_layers > 0 ? c->num_layers : c->block ? 0 : 1;
    for (int vc = 0; vc < vpp; vc++)
      for (int st = 0; st < ps->pp; st++) {
        int lo, cnt = pipe_chunk_layers(ps, st, vc, &lo), hi = lo + cnt - 1;
        for (int a = lo; a <= hi; a += c->block ? 1 : n) {
          if (c->block && a - lo >= n) break;
          int b = c->block ? a : (a + n - 1 < hi ? a + n - 1 : hi);
          int first = -1, last = -1;
          for (int o = 0; o < nfwd; o++)
            if (g->op[o].tags.layer >= a && g->op[o].tags.layer <= b) {
              if (first < 0) first = o;
              last = o;
            }
          if (first >= 0 && add_region(res, -1, a, b, first, last) < 0) return -1;
        }
      }
    return 0;
  }
  for (int bit = 0; bit < IR_NLABELS; bit++) {
    if (!(c->labels & (1u << bit))) continue;
    for (int o = 0; o < nfwd;) {
      const IrTags *t = &g->op[o].tags;
      if (!(t->labels & (1u << bit))) {
        o++;
        continue;
      }
      int e = o;
      while (e + 1 < nfwd && (g->op[e + 1].tags.labels & (1u << bit)) && g->op[e + 1].tags.layer == t->layer)
        e++;
      if (add_region(res, bit, t->layer, t->layer, o, e) < 0) return -1;
      o = e + 1;
    }
  }
  return 0;
}

static bool in_region(const Region *r, int op) { return op >= r->first && op <= r->last; }

static int unit_of_tensor(const Rc *rc, int t) {
  int p = rc->g->t[t].producer;
  return p >= 0 && p < rc->nop0 && rc->g->op[p].tags.phase == IR_PHASE_FORWARD ? rc->unit[p] : -1;
}

/* A forward tensor whose original is still there for a replay to read. */
static bool available(const Rc *rc, int t) {
  const Tensor *x = &rc->g->t[t];
  if (role_is_persistent(x->role) || x->role == ROLE_INPUT || x->producer < 0) return true;
  return rc->saved[t] && !rc->disc[t];
}

static int attach(Rc *rc, int op) {
  if (op >= rc->cap_attach) {
    int cap = rc->cap_attach * 2 > op + 1 ? rc->cap_attach * 2 : op + 1;
    int *nx = realloc(rc->attach_next, (size_t)cap * sizeof *nx);
    if (!nx) return -1;
    for (int i = rc->cap_attach; i < cap; i++)
      nx[i] = -1;
    rc->attach_next = nx;
    rc->cap_attach = cap;
  }
  int b = rc->cur_b;
  if (rc->attach_head[b] < 0)
    rc->attach_head[b] = op;
  else
    rc->attach_next[rc->attach_tail[b]] = op;
  rc->attach_tail[b] = op;
  return 0;
}

static int clone_op(Rc *rc, int o) {
  Graph *g = rc->g;
  Op src = g->op[o];
  int in[IR_MAX_IN];
  for (int i = 0; i < src.nin; i++)
    in[i] = rc->copy[src.in[i]] >= 0 ? rc->copy[src.in[i]] : src.in[i];
  char names[IR_MAX_OUT][IR_NAME_MAX];
  const char *np[IR_MAX_OUT];
  for (int i = 0; i < src.nout; i++) {
    snprintf(names[i], IR_NAME_MAX, "%.*s.replay", IR_NAME_MAX - 8, g->t[src.out[i]].name);
    np[i] = names[i];
  }
  IrTags saved = g->cur;
  g->cur = src.tags;
  g->cur.phase = IR_PHASE_REPLAY;
  g->cur.fwd = o;
  int out[IR_MAX_OUT];
  int id = graph_op(g, src.kind, in, src.nin, &src.a, out, np);
  g->cur = saved;
  if (id < 0) return -1;
  for (int i = 0; i < src.nout; i++) {
    g->t[out[i]].role = g->t[src.out[i]].role;
    rc->copy[src.out[i]] = out[i];
  }
  return attach(rc, id);
}

/* Replays unit u (and first any unit it depends on) before rc->cur_b. */
static int replay_unit(Rc *rc, int u, int depth) {
  Graph *g = rc->g;
  Region *R = &rc->res->r[u];
  if (rc->done[u]) return 0;
  if (depth > 64) {
    snprintf(rc->err, rc->nerr, "replay dependencies of %s do not terminate",
             R->label < 0 ? "full" : ir_label_name(R->label));
    return -1;
  }
  rc->done[u] = 1;
  /* closure over forward ops: rebuild the unit's discarded tensors and whatever they need */
  uint8_t *need = calloc((size_t)rc->nop0, 1);
  if (!need) return -1;
  int lo = rc->nop0, hi = -1;
  for (int o = R->first; o <= R->last; o++)
    for (int j = 0; j < g->op[o].nout; j++) {
      int t = g->op[o].out[j];
      if (rc->disc[t] && rc->copy[t] < 0 && unit_of_tensor(rc, t) == u) {
        need[o] = 1;
        lo = o < lo ? o : lo, hi = o > hi ? o : hi;
      }
    }
  if (hi < 0) {
    free(need);
    return 0;
  }
  /* walk backward so that adding a producer (always earlier) is seen in the same pass */
  for (int o = hi; o >= 0; o--) {
    if (!need[o]) continue;
    /* g->op[o] is read afresh each time: the nested replay below clones ops, and the op array
     * may move (a held pointer read freed memory under ASan) */
    for (int i = 0; i < g->op[o].nin; i++) {
      int t = g->op[o].in[i], p = g->t[t].producer;
      if (rc->copy[t] >= 0 || available(rc, t) || p < 0) continue;
      int pu = rc->unit[p];
      if (pu >= 0 && pu != u && rc->disc[t]) {
        if (replay_unit(rc, pu, depth + 1) < 0) {
          free(need);
          return -1;
        }
        if (rc->copy[t] >= 0) continue;
      }
      need[p] = 1; /* same unit, or not rebuilt by any unit: recompute it here */
      lo = p < lo ? p : lo;
    }
  }
  int n = 0;
  double fl = 0;
  bool rng = false;
  for (int o = lo; o <= hi; o++) {
    if (!need[o]) continue;
    if (clone_op(rc, o) < 0) {
      free(need);
      snprintf(rc->err, rc->nerr, "cloning %s for its replay failed: %s", g->op[o].tags.module, g->err);
      return -1;
    }
    int id = g->nop - 1;
    if (R->replay_first < 0) R->replay_first = id;
    R->replay_last = id;
    n++;
    fl += op_flops(g, &g->op[id]);
    rng |= plan_op_uses_rng(g, &g->op[id]);
  }
  free(need);
  R->nreplay += n;
  R->replay_flops += fl;
  R->rng |= rng;
  R->trigger = rc->cur_b;
  return 0;
}

static int rc_run(Rc *rc, const RecomputeConfig *c) {
  Graph *g = rc->g;
  RecomputeResult *res = rc->res;
  int nfwd = 0;
  while (nfwd < rc->nop0 && g->op[nfwd].tags.phase == IR_PHASE_FORWARD)
    nfwd++;
  if (find_regions(g, c, res, nfwd) < 0) return -1;
  if (res->n == 0) return 0;
  /* outermost region of each forward op: the largest containing one */
  for (int o = 0; o < rc->nop0; o++)
    rc->unit[o] = -1;
  for (int i = 0; i < res->n; i++) {
    Region *r = &res->r[i];
    for (int o = r->first; o <= r->last; o++) {
      int cur = rc->unit[o];
      if (cur < 0 || (res->r[cur].last - res->r[cur].first) < (r->last - r->first)) rc->unit[o] = i;
    }
  }
  for (int i = 0; i < res->n; i++)
    res->r[i].outer = rc->unit[res->r[i].first];
  /* which forward tensors backward reads */
  for (int o = 0; o < rc->nop0; o++) {
    const Op *op = &g->op[o];
    if (op->tags.phase != IR_PHASE_BACKWARD) continue;
    for (int i = 0; i < op->nin; i++)
      rc->saved[op->in[i]] = 1;
  }
  /* discarded tensors; rd_*: per tensor, the forward ops whose backward reads it (CSR) */
  int *rd_start = calloc((size_t)rc->nt0 + 1, sizeof *rd_start), nrd = 0;
  if (!rd_start) return -1;
  for (int b = nfwd; b < rc->nop0; b++)
    if (g->op[b].tags.phase == IR_PHASE_BACKWARD)
      for (int k = 0; k < g->op[b].nin; k++)
        rd_start[g->op[b].in[k] + 1]++, nrd++;
  for (int t = 0; t < rc->nt0; t++)
    rd_start[t + 1] += rd_start[t];
  int *rd_fwd = malloc((size_t)(nrd + 1) * sizeof *rd_fwd),
      *fill = malloc((size_t)(rc->nt0 + 1) * sizeof *fill);
  if (!rd_fwd || !fill) {
    free(rd_start), free(rd_fwd), free(fill);
    return -1;
  }
  memcpy(fill, rd_start, (size_t)rc->nt0 * sizeof *fill);
  for (int b = nfwd; b < rc->nop0; b++)
    if (g->op[b].tags.phase == IR_PHASE_BACKWARD)
      for (int k = 0; k < g->op[b].nin; k++)
        rd_fwd[fill[g->op[b].in[k]]++] = g->op[b].tags.fwd;
  for (int i = 0; i < res->n; i++) {
    Region *r = &res->r[i];
    for (int o = r->first; o <= r->last; o++) {
      const Op *op = &g->op[o];
      for (int j = 0; j < op->nout; j++) {
        int t = op->out[j];
        if (!rc->saved[t] || role_is_persistent(g->t[t].role) || rc->disc[t]) continue;
        bool discard = true; /* output-discard; regular: unless a reader outside the region saves it */
        for (int k = rd_start[t]; k < rd_start[t + 1] && !r->output_discard; k++)
          if (!(rd_fwd[k] >= 0 && in_region(r, rd_fwd[k]))) discard = false;
        rc->disc[t] = discard;
      }
    }
  }
  free(rd_start), free(rd_fwd), free(fill);
  rc->done = calloc((size_t)res->n, 1);
  if (!rc->done) return -1;
  /* replays, in backward order */
  for (int b = nfwd; b < rc->nop0; b++) {
    Op *bo = &g->op[b];
    if (bo->tags.phase != IR_PHASE_BACKWARD) continue;
    rc->cur_b = b;
    for (int i = 0; i < bo->nin; i++) {
      int t = bo->in[i];
      if (t < rc->nt0 && rc->disc[t] && rc->copy[t] < 0) {
        int u = unit_of_tensor(rc, t);
        if (u < 0 || replay_unit(rc, u, 0) < 0) return -1;
        bo = &g->op[b]; /* graph_op may have moved the op array */
      }
    }
    for (int i = 0; i < bo->nin; i++) {
      int t = bo->in[i];
      if (t >= rc->nt0 || rc->copy[t] < 0) continue;
      int u = unit_of_tensor(rc, t);
      if (rc->disc[t] || (u >= 0 && bo->tags.fwd >= 0 && in_region(&res->r[u], bo->tags.fwd)))
        bo->in[i] = rc->copy[t];
    }
  }
  /* stats per unit */
  for (int t = 0; t < rc->nt0; t++) {
    if (!rc->disc[t]) continue;
    int u = unit_of_tensor(rc, t);
    Region *r = &res->r[u];
    int64_t bytes = tensor_numel(&g->t[t]) * (int64_t)dtype_size(g->t[t].dtype);
    r->nfreed++, r->freed_bytes += bytes;
    res->nfreed_total++, res->freed_bytes_total += bytes;
  }
  for (int i = 0; i < res->n; i++)
    res->nreplay_total += res->r[i].nreplay, res->replay_flops_total += res->r[i].replay_flops;
  return 0;
}

/* Puts each replay op right before the backward op it was placed for. */
static int place_replays(Rc *rc) {
  Graph *g = rc->g;
  int n = g->nop, k = 0;
  int *order = malloc((size_t)n * sizeof *order), *newid = malloc((size_t)n * sizeof *newid);
  if (!order || !newid) {
    free(order), free(newid);
    return -1;
  }
  for (int o = 0; o < rc->nop0; o++) {
    for (int r = rc->attach_head[o]; r >= 0; r = rc->attach_next[r])
      order[k++] = r;
    order[k++] = o;
  }
  if (k != n) {
    free(order), free(newid);
    snprintf(rc->err, rc->nerr, "internal: %d of %d ops placed", k, n);
    return -1;
  }
  for (int i = 0; i < n; i++)
    newid[order[i]] = i;
  int rcode = graph_reorder(g, order);
  for (int i = 0; i < rc->res->n && rcode == 0; i++) {
    Region *r = &rc->res->r[i];
    if (r->trigger >= 0) r->trigger = newid[r->trigger];
    if (r->replay_first >= 0)
      r->replay_first = newid[r->replay_first], r->replay_last = newid[r->replay_last];
  }
  free(order), free(newid);
  if (rcode != 0) snprintf(rc->err, rc->nerr, "%s", g->err);
  return rcode;
}

int recompute_apply(Graph *g, const RecomputeConfig *c, RecomputeResult *res, char *err, size_t nerr) {
  memset(res, 0, sizeof *res);
  Rc rc = {.g = g, .res = res, .nop0 = g->nop, .nt0 = g->nt, .err = err, .nerr = nerr};
  rc.unit = malloc((size_t)(g->nop + 1) * sizeof *rc.unit);
  rc.disc = calloc((size_t)g->nt + 1, 1);
  rc.saved = calloc((size_t)g->nt + 1, 1);
  rc.copy = malloc((size_t)(g->nt + 1) * sizeof *rc.copy);
  rc.attach_head = malloc((size_t)(g->nop + 1) * sizeof *rc.attach_head);
  rc.attach_tail = malloc((size_t)(g->nop + 1) * sizeof *rc.attach_tail);
  int rcode = -1;
  if (rc.unit && rc.disc && rc.saved && rc.copy && rc.attach_head && rc.attach_tail) {
    for (int i = 0; i < g->nt; i++)
      rc.copy[i] = -1;
    for (int i = 0; i < g->nop; i++)
      rc.attach_head[i] = rc.attach_tail[i] = -1;
    err[0] = 0;
    rcode = rc_run(&rc, c);
    if (rcode == 0 && res->n > 0) rcode = place_replays(&rc);
    if (rcode != 0 && !err[0]) snprintf(err, nerr, "recompute: %s", g->err[0] ? g->err : "out of memory");
  } else {
    snprintf(err, nerr, "out of memory");
  }
  free(rc.unit), free(rc.disc), free(rc.saved), free(rc.copy), free(rc.attach_head), free(rc.attach_tail);
  free(rc.attach_next), free(rc.done);
  if (rcode != 0) recompute_result_free(res);
  return rcode;
}

void recompute_result_free(RecomputeResult *res) {
  free(res->r);
  memset(res, 0, sizeof *res);
}
