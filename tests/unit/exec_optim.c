/* exec_optim.c — the optimizer's multi-tensor groups (compiler/passes/fuse.c's fuse_optimizer) and how
 * the CUDA executor runs them, on the recording device (no GPU):
 *   - the pass on a hand-built graph: which ops join a group (runs of GRAD_SUMSQ into one
 *     accumulator, runs of ADAMW of one setting, only ops the recipe allows), which run alone;
 *   - on whole recipes: one norm_squared_multi launch for every GRAD_SUMSQ, one adamw_multi for
 *     every ADAMW, each table in op order with its tensors' addresses, sizes, first chunks and
 *     weight decay; CLIP_COEF reduces exactly the group's partials; a second open writes the same
 *     table (relative to the arena); optimizer.multi_tensor=false runs one launch per tensor;
 *   - the cost model counts a group's work: the optimizer phase's predicted time and bytes are
 *     those of the per-tensor launches, less the gradients whose norm partials their grouped
 *     wgrad kernel writes (MoE, one data-parallel rank: fuse.c fuse_wgrad_norm), each launch
 *     writing them at its GRAD_SUMSQ's slice, one per block.
 *
 *   exec_optim   the checks below (exit 0 ok, 1 a failure) */
#include <math.h>
#include <stdlib.h>

#include "passes/fuse.h"
#include "kernels/launch.h"
#include "plan/plan.h"
#include "record_run.h"

/* ---- the pass on a hand-built graph ---- */

static int grad(Graph *g, const char *name, int64_t n) {
  int64_t shape[1] = {n};
  return graph_tensor(g, name, DT_F32, ROLE_GRAD, 1, shape);
}

static void check_pass(void) {
  Graph *g = graph_new();
  graph_set_phase(g, IR_PHASE_OPTIMIZER);
  graph_module(g, "optimizer");
  int64_t one = 1;
  int acc = graph_tensor(g, "acc", DT_F32, ROLE_OPTIM, 1, &one), acc2 = graph_tensor(g, "acc2", DT_F32, ROLE_OPTIM, 1, &one);
  int coef = graph_tensor(g, "coef", DT_F32, ROLE_OPTIM, 1, &one), lr = graph_tensor(g, "lr", DT_F32, ROLE_OPTIM, 1, &one);
  int step = graph_tensor(g, "step", DT_I32, ROLE_OPTIM, 1, &one);
  int gr[8];
  char name[32];
  for (int i = 0; i < 8; i++) snprintf(name, sizeof name, "g%d", i), gr[i] = grad(g, name, 100 + i);
  OpAttrs on = {.i = {1}}, off = {.i = {0}};
  /* ops 0-2 one accumulator (a group), 3 another (alone), 4-5 allowed, 6 not, 7 allowed (alone) */
  for (int i = 0; i < 3; i++) graph_op_into(g, OP_GRAD_SUMSQ, &gr[i], 1, &acc, 1, &on);
  graph_op_into(g, OP_GRAD_SUMSQ, &gr[3], 1, &acc2, 1, &on);
  graph_op_into(g, OP_GRAD_SUMSQ, &gr[4], 1, &acc2, 1, &on);
  graph_op_into(g, OP_GRAD_SUMSQ, &gr[5], 1, &acc2, 1, &on);
  graph_op_into(g, OP_GRAD_SUMSQ, &gr[6], 1, &acc2, 1, &off);
  graph_op_into(g, OP_GRAD_SUMSQ, &gr[7], 1, &acc2, 1, &on);
  /* AdamW: 8-9 setting A (a group; weight decay differs, a table column), 10 setting B (alone),
   * 11-12 A again (a second group: runs are consecutive ops) */
  int m[5], v[5], w[5], p[5];
  for (int i = 0; i < 5; i++) {
    int64_t n = 100 + i;
    snprintf(name, sizeof name, "p%d", i), p[i] = graph_tensor(g, name, DT_BF16, ROLE_PARAM, 1, &n);
    snprintf(name, sizeof name, "m%d", i), m[i] = graph_tensor(g, name, DT_F32, ROLE_OPTIM, 1, &n);
    snprintf(name, sizeof name, "v%d", i), v[i] = graph_tensor(g, name, DT_F32, ROLE_OPTIM, 1, &n);
    snprintf(name, sizeof name, "w%d", i), w[i] = graph_tensor(g, name, DT_F32, ROLE_MASTER, 1, &n);
  }
  for (int i = 0; i < 5; i++) {
    OpAttrs a = {.f = {i == 2 ? 0.8 : 0.9, 0.95, 1e-8, i == 1 ? 0.0 : 0.1}, .i = {1}};
    int in[4] = {gr[i], coef, lr, step}, out[4] = {p[i], m[i], v[i], w[i]};
    graph_op_into(g, OP_ADAMW, in, 4, out, 4, &a);
  }
  CHECK(g->nop == 13 && !g->err[0], "hand-built graph: %d ops (%s)", g->nop, g->err);
  Fusions *fz = fusions_new(g);
  CHECK(fz != NULL, "out of memory");
  if (!fz) {
    graph_free(g);
    return;
  }
  int groups = fuse_optimizer(g, fz);
  CHECK(groups == 4, "hand-built graph: %d groups, expected 4", groups);
  static const struct {
    int op, fuse, peer, skip;
  } want[] = {{0, 0, -1, 1}, {1, 0, -1, 1}, {2, FUSE_SUMSQ_MULTI, 0, 0}, {3, 0, -1, 1}, {4, 0, -1, 1},
              {5, FUSE_SUMSQ_MULTI, 3, 0}, {6, 0, -1, 0}, {7, 0, -1, 0}, {8, 0, -1, 1}, {9, FUSE_ADAMW_MULTI, 8, 0},
              {10, 0, -1, 0}, {11, 0, -1, 1}, {12, FUSE_ADAMW_MULTI, 11, 0}};
  for (size_t k = 0; k < sizeof want / sizeof *want && g->nop == 13; k++) {
    int o = want[k].op;
    CHECK(fz->fuse[o] == want[k].fuse && fz->peer[o] == want[k].peer && fz->skip[o] == want[k].skip,
          "hand-built graph op %d: fuse %d peer %d skip %d, expected %d %d %d", o, fz->fuse[o], fz->peer[o], fz->skip[o],
          want[k].fuse, want[k].peer, want[k].skip);
  }
  CHECK(fuse_optimizer(g, fz) == 0, "a second pass groups again");
  fusions_free(fz);
  graph_free(g);
}

/* ---- whole recipes on the recording device ---- */

typedef RecordRun Run;

static int64_t nchunks(int64_t n, int64_t c) { return (n + c - 1) / c; }

/* The records op o makes when it runs. */
static int run_op(Run *r, int o) {
  r->rec.n = 0;
  r->rec.op = o;
  r->rec.on = 1;
  int rc = rt_exec_run_op(r->x, o);
  r->rec.on = 0;
  return rc;
}

/* The blocks of the launch op o records (its last record's grid). */
static int64_t launch_blocks(Run *r, int o) {
  if (run_op(r, o) || r->rec.n < 1) return -1;
  const RtRec *l = &r->rec.r[r->rec.n - 1];
  return (int64_t)l->grid[0] * l->grid[1] * l->grid[2];
}

/* The group's table against the graph: row k is op peer + k's tensors, in op order; a gradient whose
 * norm partials its grouped wgrad kernel writes (fusions.h norm_by) has a row marked done, with
 * that launch's blocks as its partial slots. */
static void check_table(Run *r, const char *name, int o, int64_t *chunks_out) {
  const Graph *g = r->p.g;
  const uint64_t *w;
  int rows, width, peer;
  int64_t chunks;
  int k = rt_exec_fusion(r->x, o, &peer);
  CHECK(rt_exec_multi_table(r->x, o, &w, &rows, &width, &chunks) == 0, "%s op %d: no table", name, o);
  if (rt_exec_multi_table(r->x, o, &w, &rows, &width, &chunks)) return;
  int sumsq = k == FUSE_SUMSQ_MULTI;
  int64_t chunk = sumsq ? STEPC_SUMSQ_CHUNK : STEPC_ADAMW_CHUNK, at = 0;
  CHECK(rows == o - peer + 1 && width == (sumsq ? STEPC_SUMSQ_ROW : STEPC_ADAMW_ROW), "%s op %d: %d rows of %d", name, o, rows,
        width);
  for (int i = 0; i < rows; i++) {
    const Op *op = &g->op[peer + i];
    const uint64_t *row = w + (int64_t)i * width;
    int64_t n = tensor_numel(&g->t[op->in[0]]);
    int by = sumsq ? r->p.fz->norm_by[op->in[0]] : -1;
    if (sumsq) {
      uint64_t kind = by >= 0 ? STEPC_MULTI_DONE : STEPC_MULTI_F32;
      CHECK(row[0] == rt_exec_ptr(r->x, op->in[0]) && row[1] == (uint64_t)n && row[2] == (uint64_t)at && row[3] == kind,
            "%s sumsq row %d (%s): {%llx, %llu, %llu, %llu}", name, i, g->t[op->in[0]].name, (unsigned long long)row[0],
            (unsigned long long)row[1], (unsigned long long)row[2], (unsigned long long)row[3]);
    } else {
      float wd = (float)op->a.f[3];
      uint32_t bits;
      memcpy(&bits, &wd, 4);
      const Tensor *param = &g->t[op->out[0]];
      CHECK(row[0] == rt_exec_ptr(r->x, op->out[3]) && row[1] == rt_exec_ptr(r->x, op->out[0]) &&
                row[2] == rt_exec_ptr(r->x, op->in[0]) && row[3] == rt_exec_ptr(r->x, op->out[1]) &&
                row[4] == rt_exec_ptr(r->x, op->out[2]) && row[5] == (uint64_t)n && row[6] == (uint64_t)at && row[7] == bits,
            "%s adamw row %d (%s): pointers, size, first chunk or weight decay", name, i, param->name);
      /* Megatron: no decay on 1-D params */
      CHECK((param->ndim >= 2) == (wd != 0.0f), "%s adamw row %d (%s, %d-D): weight decay %g", name, i, param->name, param->ndim,
            (double)wd);
    }
    at += by >= 0 ? launch_blocks(r, by) : nchunks(n, chunk);
  }
  CHECK(chunks == at, "%s op %d: %lld chunks, the rows say %lld", name, o, (long long)chunks, (long long)at);
  *chunks_out = chunks;
}

/* The table words with pointers relative to the arena: what must not change between opens. */
static uint64_t *relative_table(Run *r, int o, int64_t *nw) {
  const uint64_t *w;
  int rows, width;
  int64_t chunks;
  if (rt_exec_multi_table(r->x, o, &w, &rows, &width, &chunks)) return NULL;
  *nw = (int64_t)rows * width;
  uint64_t *c = malloc((size_t)*nw * sizeof *c), base = rt_exec_base(r->x, 0);
  for (int64_t i = 0; c && i < *nw; i++) {
    int col = (int)(i % width), ptr = width == STEPC_SUMSQ_ROW ? col == 0 : col <= 4;
    c[i] = ptr ? w[i] - base : w[i];
  }
  return c;
}

/* The optimizer phase's modelled time and bytes (compiler/plan/cost.c) on the H200. */
static void optimizer_cost(const Graph *g, const Fusions *fz, double *time, double *bytes) {
  Device d;
  cost_device_h200(&d);
  *time = *bytes = 0;
  for (int o = 0; o < g->nop; o++) {
    double f, b;
    if (g->op[o].tags.phase != IR_PHASE_OPTIMIZER) continue;
    *time += cost_op_time(g, fz, o, &d, &f, &b);
    *bytes += b;
  }
}

/* The norm partials taken in the grouped wgrad kernels (fuse.c fuse_wgrad_norm): every gradient the
 * fusions mark is a GROUPED_LINEAR_WGRAD's main gradient, and that op's launch writes its partials
 * at the slice of the GRAD_SUMSQ that reads it, one per block. The count of such gradients; *bytes
 * their fp32 bytes (what the norm no longer reads). */
static int check_wgrad_norm(Run *r, const char *name, double *bytes) {
  const Graph *g = r->p.g;
  const Fusions *fz = r->p.fz;
  int n = 0;
  int64_t total;
  CUdeviceptr base = rt_exec_norm_buffer(r->x, &total);
  *bytes = 0;
  for (int t = 0; t < g->nt; t++) {
    int w = fz->norm_by[t], s = -1;
    if (w < 0) continue;
    n++;
    *bytes += 4.0 * (double)tensor_numel(&g->t[t]);
    const Op *op = &g->op[w];
    CHECK(op->kind == OP_GROUPED_LINEAR_WGRAD && fz->sink[op->out[0]] == t, "%s: %s's norm partials are op %d's (%s)", name,
          g->t[t].name, w, op_name(op->kind));
    for (int o = 0; o < g->nop; o++)
      if (g->op[o].kind == OP_GRAD_SUMSQ && g->op[o].in[0] == t) s = o;
    int64_t first = -1, count = -1;
    CHECK(s >= 0 && rt_exec_norm_partials(r->x, s, &first, &count) == 0, "%s: %s has no norm slice", name, g->t[t].name);
    int64_t blocks = launch_blocks(r, w);
    const RtRec *l = &r->rec.r[r->rec.n - 1];
    /* one partial a block, or for the persistent TMA kernel one a tile (its argument 9, not 8) */
    int ws = l->kind == RT_REC_LAUNCH && l->k == RT_K_grouped_linear_wgrad_ws;
    const Tensor *dw = &g->t[op->out[0]];
    int64_t tiles = ws ? (dw->shape[2] + STEPC_MOE_TC_BN - 1) / STEPC_MOE_TC_BN *
                             ((dw->shape[1] + STEPC_MOE_TC_BM - 1) / STEPC_MOE_TC_BM) * dw->shape[0]
                       : blocks;
    CHECK(tiles == count && l->kind == RT_REC_LAUNCH &&
              (ws || l->k == RT_K_grouped_linear_wgrad_tc || l->k == RT_K_grouped_linear_wgrad) &&
              l->arg[1] == rt_exec_ptr(r->x, t) && l->arg[ws ? 9 : 8] == base + (CUdeviceptr)(4 * first) &&
              first + count <= total,
          "%s: op %d's launch (%lld tiles) does not write %s's %lld partials at %lld", name, w, (long long)tiles, g->t[t].name,
          (long long)count, (long long)first);
  }
  return n;
}

/* adam_launches: how many ADAMW launches the step makes (1: one group; an MoE router's fp32
 * parameters are updated in place, apart from the bf16 ones' groups, so their AdamW checks are
 * skipped — the norm's are the same). The count of norms taken in their wgrad, or -1. */
static int check_recipe(const char *title, const char *path, const char **kv, int nkv, int adam_launches) {
  Run r, r2;
  if (record_run_open(path, kv, nkv, &r.p, &r.dev, &r.rec, &r.x)) {
    CHECK(0, "%s: load", title);
    return -1;
  }
  const Graph *g = r.p.g;
  int ngrad = 0, nsumsq = 0, nadam = 0, runs_sumsq = 0, runs_adam = 0, gsum = -1, gadam = -1, clip = -1;
  for (int t = 0; t < g->nt; t++) ngrad += g->t[t].role == ROLE_GRAD;
  for (int o = 0; o < g->nop; o++) {
    int peer, k = rt_exec_fusion(r.x, o, &peer);
    OpKind kind = g->op[o].kind;
    nsumsq += kind == OP_GRAD_SUMSQ, nadam += kind == OP_ADAMW;
    runs_sumsq += kind == OP_GRAD_SUMSQ && rt_exec_op_runs(r.x, o);
    runs_adam += kind == OP_ADAMW && rt_exec_op_runs(r.x, o);
    if (k == FUSE_SUMSQ_MULTI) gsum = o;
    if (k == FUSE_ADAMW_MULTI) gadam = o;
    if (kind == OP_CLIP_COEF) clip = o;
  }
  CHECK(nsumsq == ngrad && nadam == ngrad, "%s: %d gradients, %d GRAD_SUMSQ, %d ADAMW", title, ngrad, nsumsq, nadam);
  CHECK(runs_sumsq == 1 && runs_adam == adam_launches, "%s: %d GRAD_SUMSQ and %d ADAMW ops launch (1 and %d expected)", title,
        runs_sumsq, runs_adam, adam_launches);
  CHECK(gsum >= 0 && gadam >= 0 && clip >= 0, "%s: no sumsq group, AdamW group or CLIP_COEF", title);
  if (gsum < 0 || gadam < 0 || clip < 0) {
    record_run_close(&r.p, &r.rec, r.x);
    return -1;
  }
  int peer;
  rt_exec_fusion(r.x, gsum, &peer);
  CHECK(gsum - peer + 1 == nsumsq, "%s: the sumsq group holds %d of %d ops", title, gsum - peer + 1, nsumsq);
  rt_exec_fusion(r.x, gadam, &peer);
  CHECK(adam_launches > 1 || gadam - peer + 1 == nadam, "%s: the AdamW group holds %d of %d ops", title, gadam - peer + 1, nadam);
  int64_t cs = 0, ca = 0;
  check_table(&r, title, gsum, &cs);
  check_table(&r, title, gadam, &ca);
  /* the launches: one kernel for the norm, the hyper-parameters + one kernel for AdamW, and the
   * finalize over exactly the group's partials */
  CHECK(run_op(&r, gsum) == 0 && r.rec.n == 1 && r.rec.r[0].kind == RT_REC_LAUNCH && r.rec.r[0].k == RT_K_norm_squared_multi &&
            r.rec.r[0].grid[0] == (unsigned)cs && r.rec.r[0].block == STEPC_MULTI_THREADS && (int)r.rec.r[0].arg[2] == nsumsq &&
            (int64_t)r.rec.r[0].arg[3] == STEPC_SUMSQ_CHUNK,
        "%s: the sumsq group is not one norm_squared_multi launch over %lld chunks", title, (long long)cs);
  CUdeviceptr partial = r.rec.n == 1 ? (CUdeviceptr)r.rec.r[0].arg[0] : 0;
  CHECK(adam_launches > 1 || (run_op(&r, gadam) == 0 && r.rec.n == 2 && r.rec.r[0].k == RT_K_adamw_hparams && r.rec.r[1].k == RT_K_adamw_multi &&
            r.rec.r[1].grid[0] == (unsigned)ca && (int)r.rec.r[1].arg[1] == nadam && (int64_t)r.rec.r[1].arg[2] == STEPC_ADAMW_CHUNK &&
            r.rec.r[1].arg[3] == r.rec.r[0].arg[0] && r.rec.r[1].arg[4] == rt_exec_ptr(r.x, g->op[gadam].in[1])),
        "%s: the AdamW group is not adamw_hparams + one adamw_multi over %lld chunks reading its hp and clip factor", title,
        (long long)ca);
  CHECK(run_op(&r, clip) == 0 && r.rec.n == 1 && r.rec.r[0].k == RT_K_global_norm_finalize && r.rec.r[0].arg[2] == partial &&
            (int64_t)(int32_t)r.rec.r[0].arg[3] == cs,
        "%s: CLIP_COEF does not reduce the group's %lld partials", title, (long long)cs);
  /* a second open: the same tables, relative to its arena (the fixed order) */
  if (record_run_open(path, kv, nkv, &r2.p, &r2.dev, &r2.rec, &r2.x) == 0) {
    for (int q = 0; q < 2; q++) {
      int o = q ? gadam : gsum;
      int64_t n1 = 0, n2 = 0;
      uint64_t *a = relative_table(&r, o, &n1), *b = relative_table(&r2, o, &n2);
      CHECK(a && b && n1 == n2 && !memcmp(a, b, (size_t)n1 * 8), "%s: op %d's table differs between two opens", title, o);
      free(a), free(b);
    }
    record_run_close(&r2.p, &r2.rec, r2.x);
  } else
    CHECK(0, "%s: second load", title);
  double t_multi, b_multi, t_single, b_single, b_fused;
  int nfused = check_wgrad_norm(&r, title, &b_fused);
  CHECK(nfused == 0 || r.p.sc.dp == 1, "%s: %d norms in their producers at %d data-parallel ranks", title, nfused, r.p.sc.dp);
  optimizer_cost(g, r.p.fz, &t_multi, &b_multi);
  printf("%-28s %d gradients: 1 norm launch (%lld chunks), 1 AdamW launch (%lld chunks), %d norms in their wgrad\n", title, ngrad,
         (long long)cs, (long long)ca, nfused);
  record_run_close(&r.p, &r.rec, r.x);

  /* the per-tensor reference: the recipe says so, no op groups, one launch per tensor */
  const char *kv2[16];
  int n2 = 0;
  for (int i = 0; i < nkv && n2 < 15; i++) kv2[n2++] = kv[i];
  kv2[n2++] = "optimizer.multi_tensor=false";
  if (record_run_open(path, kv2, n2, &r.p, &r.dev, &r.rec, &r.x)) {
    CHECK(0, "%s: load per-tensor", title);
    return -1;
  }
  g = r.p.g;
  int launches = 0;
  for (int o = 0; o < g->nop; o++) {
    int k = rt_exec_fusion(r.x, o, &peer);
    CHECK(k != FUSE_SUMSQ_MULTI && k != FUSE_ADAMW_MULTI, "%s per-tensor: op %d is grouped", title, o);
    if (g->op[o].kind == OP_GRAD_SUMSQ) {
      CHECK(run_op(&r, o) == 0 && r.rec.n == 1 && r.rec.r[0].k == RT_K_norm_squared_partial, "%s per-tensor: op %d", title, o);
      launches++;
    }
    if (g->op[o].kind == OP_CLIP_COEF)
      CHECK(run_op(&r, o) == 0 && r.rec.n == 1 && (int)r.rec.r[0].arg[3] == ngrad * 264,
            "%s per-tensor: CLIP_COEF reduces %d partials, not %d x 264", title, (int)r.rec.r[0].arg[3], ngrad);
  }
  CHECK(launches == ngrad, "%s per-tensor: %d norm launches for %d gradients", title, launches, ngrad);
  optimizer_cost(g, r.p.fz, &t_single, &b_single);
  /* per tensor, every norm reads its gradient (a norm in its producer needs the group's slice) */
  for (int t = 0; t < g->nt; t++) CHECK(r.p.fz->norm_by[t] < 0, "%s per-tensor: %s's norm in its producer", title, g->t[t].name);
  CHECK(fabs(b_multi + b_fused - b_single) <= 1e-12 * b_single + 8.0 * nfused &&
            (nfused > 0 || fabs(t_multi - t_single) <= 1e-9 * t_single) && t_multi > 0,
        "%s: the optimizer's cost with groups %.6g s, %.6g bytes (+%.6g read by the wgrad kernels); per tensor %.6g s, %.6g bytes",
        title, t_multi, b_multi, b_fused, t_single, b_single);
  record_run_close(&r.p, &r.rec, r.x);
  return nfused;
}

int main(void) {
  check_pass();
  check_recipe("tiny", "models/tiny.lua", NULL, 0, 1);
  const char *bf16[] = {"model.bf16=true"};
  check_recipe("gpt3_tiny bf16", "tests/recipes/gpt3_tiny.lua", bf16, 1, 1);
  check_recipe("bench_m", "models/bench_m.lua", NULL, 0, 1);
  /* MoE: the grouped wgrads write their gradients' norm partials at one data-parallel rank (with
   * two micro-batches too: the last one's launch leaves them), not at two */
  int n1 = check_recipe("tiny_mla_moe bf16", "tests/recipes/tiny_mla_moe.lua", bf16, 1, 5);
  const char *dp2[] = {"model.bf16=true", "train.world_size=2"};
  int n2 = check_recipe("tiny_mla_moe bf16 dp 2", "tests/recipes/tiny_mla_moe.lua", dp2, 2, 5);
  CHECK(n1 == 4 && n2 == 0, "tiny_mla_moe: %d and %d (dp 2) norms in their wgrad, expected 4 (fc1, fc2 of 2 MoE layers) and 0", n1,
        n2);
  if (failures) fprintf(stderr, "%d failures\n", failures);
  return failures ? 1 : 0;
}
