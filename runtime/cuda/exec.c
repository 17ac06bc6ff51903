/* exec.c — the GPU graph executor (see exec.h): storage, the fusion analysis, the dispatch table
 * and the step's enqueue order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvrtc.h"
#include "runtime/cuda/exec_internal.h"
#include "runtime/cuda/launchers.h"

/* op kind -> launches; NULL = not run on CUDA yet (rt_exec_new reports it). */
static const RtOpFn DISPATCH[OP_COUNT] = {
    [OP_ADD] = rt_op_add,
    [OP_ACCUM] = rt_op_accum,
    [OP_ZERO] = rt_op_zero,
    [OP_FILL] = rt_op_fill,
    [OP_LINEAR] = rt_op_linear,
    [OP_LINEAR_DGRAD] = rt_op_linear_dgrad,
    [OP_LINEAR_WGRAD] = rt_op_linear_wgrad,
    [OP_LINEAR_BGRAD] = rt_op_linear_bgrad,
    [OP_EMBED] = rt_op_embed,
    [OP_EMBED_BWD] = rt_op_embed_bwd,
    [OP_POS_ADD] = rt_op_pos_add,
    [OP_POS_ADD_BWD] = rt_op_pos_add_bwd,
    [OP_RMSNORM] = rt_op_norm,
    [OP_RMSNORM_BWD] = rt_op_norm_bwd,
    [OP_LAYERNORM] = rt_op_norm,
    [OP_LAYERNORM_BWD] = rt_op_norm_bwd,
    [OP_ROPE] = rt_op_rope,
    [OP_DROPOUT] = rt_op_dropout,
    [OP_DROPOUT_BWD] = rt_op_dropout_bwd,
    [OP_SWIGLU] = rt_op_swiglu,
    [OP_SWIGLU_BWD] = rt_op_swiglu_bwd,
    [OP_GELU] = rt_op_gelu,
    [OP_GELU_BWD] = rt_op_gelu_bwd,
    [OP_SPLIT_QKV] = rt_op_split_qkv,
    [OP_CONCAT_QKV] = rt_op_concat_qkv,
    [OP_FLASH_ATTN] = rt_op_flash,
    [OP_FLASH_ATTN_BWD] = rt_op_flash_bwd,
    [OP_ATTN_SCORES] = rt_op_attn_scores,
    [OP_ATTN_SCORES_BWD] = rt_op_attn_scores_bwd,
    [OP_CAUSAL_MASK] = rt_op_causal_mask,
    [OP_SOFTMAX] = rt_op_softmax,
    [OP_SOFTMAX_BWD] = rt_op_softmax_bwd,
    [OP_ATTN_PV] = rt_op_attn_pv,
    [OP_ATTN_PV_BWD] = rt_op_attn_pv_bwd,
    [OP_CROSS_ENTROPY] = rt_op_cross_entropy,
    [OP_GRAD_SUMSQ] = rt_op_grad_sumsq,
    [OP_CLIP_COEF] = rt_op_clip_coef,
    [OP_LR_SCHED] = rt_op_lr_sched,
    [OP_ADAMW] = rt_op_adamw,
};

CUdeviceptr rt_exec_ptr(const RtExec *x, int tensor) {
  const Tensor *t = &x->g->t[x->alias[tensor]];
  return x->arena + (CUdeviceptr)(x->buf_base[t->buffer] + t->offset);
}

int64_t rt_exec_arena_bytes(const RtExec *x) { return x->arena_bytes; }
RtDevice *rt_exec_device(const RtExec *x) { return x->d; }
const EwKernels *rt_exec_gen_kernels(const RtExec *x) { return &x->ew; }
CUdeviceptr rt_exec_base(const RtExec *x, int which) { return which == 0 ? x->arena : which == 1 ? x->scratch : 0; }

uint64_t rt_exec_layout_hash(const RtExec *x) {
  const Graph *g = x->g;
  int64_t head[4] = {x->arena_bytes, x->scratch_bytes, g->nbuffers, g->nt};
  uint64_t h = cubin_fnv1a(CUBIN_FNV_OFFSET, head, sizeof head);
  h = cubin_fnv1a(h, x->buf_base, (size_t)g->nbuffers * sizeof x->buf_base[0]);
  for (int i = 0; i < g->nt; i++) {
    int64_t v[5] = {g->t[i].buffer, g->t[i].offset, g->t[i].bytes, x->alias[i], x->sink[i]};
    h = cubin_fnv1a(h, v, sizeof v);
  }
  h = cubin_fnv1a(h, x->skip, (size_t)g->nop);
  h = cubin_fnv1a(h, x->fuse, (size_t)g->nop);
  for (int c = 0; c < x->nchain; c++) h = cubin_fnv1a(h, &x->chain[c], sizeof x->chain[c]);
  for (int k = 0; k < x->ew.n; k++) h = cubin_fnv1a(h, x->ew.k[k].key, strlen(x->ew.k[k].key));
  return cubin_fnv1a(h, x->peer, (size_t)g->nop * sizeof x->peer[0]);
}
int64_t rt_exec_scratch_bytes(const RtExec *x) { return x->scratch_bytes; }

void rt_exec_free(RtExec *x) {
  if (!x) return;
  rt_free(x->d, x->arena, (size_t)x->arena_bytes);
  rt_free(x->d, x->scratch, (size_t)x->scratch_bytes);
  if (x->d && x->d->gen == &x->ew) x->d->gen = NULL;
  ew_kernels_free(&x->ew);
  free(x->chain);
  free(x->sink), free(x->alias), free(x->skip), free(x->slot), free(x->dloss), free(x->fuse), free(x->peer);
  free(x);
}

/* Producers whose fp32 weight-gradient kernels accumulate (so they need a main gradient to
 * accumulate into), and LINEAR_WGRAD, which may. */
static int sinkable(OpKind k) {
  return k == OP_LINEAR_WGRAD || k == OP_LINEAR_BGRAD || k == OP_EMBED_BWD || k == OP_POS_ADD_BWD ||
         k == OP_RMSNORM_BWD || k == OP_LAYERNORM_BWD;
}

/* ---- pair fusions (docs/gpu-runtime.md, "Fusions") ----
 *
 * Three producer/consumer pairs run as one launch: LINEAR -> ADD (one cuBLASLt call whose C is
 * the residual and whose D is the add's output), DROPOUT -> ADD (dropout_residual_forward) and
 * ADD -> RMSNORM/LAYERNORM (residual_*norm_forward). A pair is always two ops with consecutive
 * ids in one phase, so no launch runs between them in any mode (eager, full_iteration, scoped
 * runs of id ranges), the fused launch reads what the first op would have read and every reader
 * of what it writes comes after it.
 *
 * The first two change the bits (the product or the dropout output is added in fp32 before the
 * one bf16 rounding, instead of being rounded on its own first). So whether they fuse depends on
 * the op structure only — kinds, readers, shapes, the op tags — never on the memory plan, and a
 * forward pair fuses only together with every recompute replay of it: every recompute setting,
 * whose forward ops are the same, fuses the same forward pairs and replays them bit for bit. The
 * plan decides only *how* a fused pair writes: when the add's output overlaps an operand (the plan
 * may reuse the slot of an input that dies at the first op), the pair writes into the absorbed
 * op's own output (live across both ops, so disjoint from every operand) and one copy moves it.
 * ADD -> norm writes the bits the two kernels would write, so it may depend on the plan: it fuses
 * only where no output overlaps an input. */

static int overlap(const RtExec *x, int a, int b) {
  const Tensor *ta = rt_t(x, x->alias[a]), *tb = rt_t(x, x->alias[b]);
  if (ta->buffer != tb->buffer) return 0;
  return ta->offset < tb->offset + tb->bytes && tb->offset < ta->offset + ta->bytes;
}
static int same_slot(const RtExec *x, int a, int b) {
  const Tensor *ta = rt_t(x, x->alias[a]), *tb = rt_t(x, x->alias[b]);
  return ta->buffer == tb->buffer && ta->offset == tb->offset && ta->bytes == tb->bytes;
}
/* An elementwise kernel may write over an input exactly (each element read before it is
 * written, by the same thread), never partly. */
static int ew_ok(const RtExec *x, int out, int in) { return !overlap(x, out, in) || same_slot(x, out, in); }

static int same_shape(const Graph *g, int a, int b) {
  const Tensor *ta = &g->t[a], *tb = &g->t[b];
  return ta->dtype == tb->dtype && ta->ndim == tb->ndim && !memcmp(ta->shape, tb->shape, sizeof ta->shape);
}

/* Same phase, layer and graph scopes: in every graph mode both ops sit in one scope instance (or
 * both outside any). Recompute labels may differ (fc2 carries `mlp`, its residual add none): a
 * pair fuses in forward and in every replay of it or nowhere (fuse_pairs), and the decision reads
 * only forward readers, so it is the same whichever labels are recomputed. */
static int same_tags(const IrTags *a, const IrTags *b) {
  return a->phase == b->phase && a->layer == b->layer && a->scopes == b->scopes;
}

/* Whether op o (an ADD) and its predecessor o - 1 form a LINEAR/DROPOUT -> ADD pair, from the
 * structure alone: RT_FUSE_LINEAR_ADD, RT_FUSE_DROPOUT_ADD or 0. */
static int producer_pair(const RtExec *x, const int *uses, int o) {
  const Graph *g = x->g;
  const Op *add = &g->op[o];
  if (o < 1 || add->kind != OP_ADD || add->nin != 2 || add->nout != 1 || add->in[0] == add->in[1]) return 0;
  if (add->tags.phase != IR_PHASE_FORWARD && add->tags.phase != IR_PHASE_REPLAY) return 0;
  const Op *p = &g->op[o - 1];
  if ((p->kind != OP_LINEAR && p->kind != OP_DROPOUT) || !same_tags(&p->tags, &add->tags) || x->skip[o] || x->skip[o - 1])
    return 0;
  int y = p->out[0], k = add->in[0] == y ? 0 : add->in[1] == y ? 1 : -1, out = add->out[0];
  if (k < 0 || uses[y] != 1 || y == g->loss || y == g->grad_norm || y == g->lr || g->t[y].role != ROLE_ACT) return 0;
  /* the dropout's mask output (out[1]) is neither written nor read on CUDA: DROPOUT_BWD
   * regenerates the mask from (seed, stream) */
  int r = add->in[1 - k];
  if (!same_shape(g, y, out) || !same_shape(g, r, out) || g->t[out].dtype != DT_BF16) return 0;
  if (x->alias[y] != y || x->alias[r] != r || x->alias[out] != out) return 0;
  if (p->kind == OP_DROPOUT) return p->nin == 1 && same_shape(g, p->in[0], y) ? RT_FUSE_DROPOUT_ADD : 0;
  return p->nin >= 2 && g->t[p->in[0]].dtype == DT_BF16 ? RT_FUSE_LINEAR_ADD : 0;
}

/* How a LINEAR/DROPOUT -> ADD pair at (o - 1, o) writes: 0 straight into the add's output,
 * RT_FUSE_STAGED through the producer's output, -1 neither is safe (cannot happen in a plan from
 * memplan.c: the producer's output is live across both ops). */
static int pair_write(const RtExec *x, int o, int kind) {
  const Graph *g = x->g;
  const Op *p = &g->op[o - 1], *add = &g->op[o];
  int y = p->out[0], out = add->out[0], r = add->in[0] == y ? add->in[1] : add->in[0];
  if (kind == RT_FUSE_LINEAR_ADD) {
    /* cuBLASLt: D apart from C (in place, D = C, split-K algorithms may read C after writing D:
     * on the H200 the in-place product differed from the out-of-place one), and from A, W, bias */
    int ok = !overlap(x, out, r);
    for (int i = 0; i < p->nin; i++) ok = ok && !overlap(x, out, p->in[i]);
    if (ok) return 0;
    ok = !overlap(x, y, r);
    for (int i = 0; i < p->nin; i++) ok = ok && !overlap(x, y, p->in[i]);
    return ok && ew_ok(x, out, y) ? RT_FUSE_STAGED : -1;
  }
  int in = p->in[0];
  if (ew_ok(x, out, in) && ew_ok(x, out, r)) return 0;
  return ew_ok(x, y, in) && !overlap(x, y, r) && ew_ok(x, out, y) ? RT_FUSE_STAGED : -1;
}

static void fuse_pair(RtExec *x, int run, int absorbed, int kind, int staged) {
  x->fuse[run] = (uint8_t)(kind | staged);
  x->peer[run] = absorbed;
  x->skip[absorbed] = 1;
  x->nfused[kind]++;
}

static int fuse_pairs(RtExec *x, const int *uses) {
  const Graph *g = x->g;
  int *cand = calloc((size_t)g->nop + 1, sizeof *cand);
  if (!cand) return rt_fail(x->d, "out of memory");
  for (int o = 0; o < g->nop; o++) {
    cand[o] = producer_pair(x, uses, o);
    if (!(x->fuse_on >> cand[o] & 1)) cand[o] = 0;
  }
  /* a forward pair and its replays fuse together or not at all: a replay that cannot fuse
   * (or a forward op that cannot while its replay could) clears the forward op's group */
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    if (op->kind != OP_ADD || op->tags.phase != IR_PHASE_REPLAY) continue;
    int f = op->tags.fwd;
    if (f < 0 || f >= g->nop || cand[o] != cand[f] || (cand[o] && g->op[o - 1].tags.fwd != f - 1)) cand[f] = -1;
  }
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    int f = op->tags.phase == IR_PHASE_REPLAY ? op->tags.fwd : o;
    if (cand[o] <= 0 || f < 0 || f >= g->nop || cand[f] != cand[o]) continue;
    int w = pair_write(x, o, cand[o]);
    if (w < 0) {
      free(cand);
      return rt_fail(x->d, "op %d %s in %s: its fused pair has no safe output slot", o, op_name(op->kind), op->tags.module);
    }
    fuse_pair(x, o, o - 1, cand[o], w);
  }
  free(cand);
  /* ADD -> norm: bit-identical to the two kernels, so only the plan's overlaps can stop it */
  for (int o = 0; o + 1 < g->nop && x->fuse_on >> RT_FUSE_ADD_NORM & 1; o++) {
    const Op *add = &g->op[o], *n = &g->op[o + 1];
    if (add->kind != OP_ADD || add->nin != 2 || add->nout != 1 || x->skip[o] || x->fuse[o] || x->skip[o + 1]) continue;
    if ((n->kind != OP_RMSNORM && n->kind != OP_LAYERNORM) || n->in[0] != add->out[0] || n->tags.phase != add->tags.phase ||
        (add->tags.phase != IR_PHASE_FORWARD && add->tags.phase != IR_PHASE_REPLAY))
      continue;
    int out = add->out[0], a = add->in[0], b = add->in[1];
    if (!same_shape(g, a, out) || !same_shape(g, b, out) || g->t[out].dtype != DT_BF16 || ops_last(&g->t[out]) % 8) continue;
    int ok = ew_ok(x, out, a) && ew_ok(x, out, b);
    for (int i = 0; i < n->nout; i++) /* the norm's y, rstd (and mean): rows written after reads */
      ok = ok && !overlap(x, n->out[i], a) && !overlap(x, n->out[i], b) && !overlap(x, n->out[i], out);
    if (ok) fuse_pair(x, o + 1, o, RT_FUSE_ADD_NORM, 0);
  }
  return RT_OK;
}

/* ---- generated elementwise chains (compiler/ew_fuse.h; docs/gpu-runtime.md, "Fusions") ----
 *
 * After the pairs: a run of consecutive pointwise ops no pair took. The chain's kernel computes
 * each op's value in fp32 and rounds it to bf16 exactly where the op alone stores it, so it writes
 * the bits the ops write one by one and its decision may read the plan: it fuses only where every
 * tensor is its own storage, no output overlaps another, and each written output meets each input
 * either not at all or (for an input no later op of the chain reads) exactly, as one thread reads
 * an element before writing it. */
static int chain_plan_ok(const RtExec *x, const EwChain *c) {
  const Graph *g = x->g;
  for (int j = 0; j < c->nops; j++) {
    const Op *op = &g->op[c->op[j]];
    for (int i = 0; i < op->nin; i++)
      if (x->alias[op->in[i]] != op->in[i] || x->sink[op->in[i]] >= 0) return 0;
    int y = op->out[0];
    if (x->alias[y] != y || x->sink[y] >= 0) return 0;
  }
  for (int j = 0; j < c->nops; j++) {
    if (!c->store[j]) continue;
    int y = g->op[c->op[j]].out[0];
    for (int k = j + 1; k < c->nops; k++)
      if (c->store[k] && overlap(x, y, g->op[c->op[k]].out[0])) return 0;
    for (int m = 0; m < c->nin; m++) {
      int last = -1;
      for (int k = 0; k < c->nops; k++) {
        const Op *op = &g->op[c->op[k]];
        for (int i = 0; i < op->nin; i++)
          if (op->in[i] == c->in[m]) last = k;
      }
      if (last > j ? overlap(x, y, c->in[m]) : !ew_ok(x, y, c->in[m])) return 0;
    }
  }
  return 1;
}

static int fuse_chains(RtExec *x, const int *uses) {
  const Graph *g = x->g;
  uint8_t *blocked = calloc((size_t)g->nop + 1, 1);
  if (!blocked) return rt_fail(x->d, "out of memory");
  /* passable: a weight-gradient ACCUM sunk into its producer's kernel (an earlier op) launches
   * nothing where it stands */
  uint8_t *pass = calloc((size_t)g->nop + 1, 1);
  if (!pass) {
    free(blocked);
    return rt_fail(x->d, "out of memory");
  }
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    blocked[o] = x->skip[o] || x->fuse[o];
    pass[o] = op->kind == OP_ACCUM && x->skip[o] && !x->fuse[o] && x->sink[op->in[0]] >= 0 && g->t[op->in[0]].producer < o;
  }
  int rc = RT_OK;
  for (int o = 0; o < g->nop && rc == RT_OK;) {
    EwChain c;
    if (!ew_chain_at(g, o, uses, blocked, pass, &c) || !chain_plan_ok(x, &c)) {
      o++;
      continue;
    }
    if (ew_kernel_add(&x->ew, g, &c) < 0) {
      rc = rt_fail(x->d, "op %d: generating the elementwise kernel of its chain failed (more than %d kernels, or out of memory)", o,
                   RT_GEN_MAX);
      break;
    }
    EwChain *n = realloc(x->chain, (size_t)(x->nchain + 1) * sizeof *n);
    if (!n) {
      rc = rt_fail(x->d, "out of memory");
      break;
    }
    x->chain = n;
    x->chain[x->nchain++] = c;
    int last = c.op[c.nops - 1];
    for (int j = 0; j + 1 < c.nops; j++) x->skip[c.op[j]] = 1;
    x->fuse[last] = RT_FUSE_EW;
    x->peer[last] = c.first;
    x->nfused[RT_FUSE_EW]++;
    o = last + 1;
  }
  free(blocked), free(pass);
  return rc;
}

/* The chain ending at op o: one launch of its generated kernel, the arguments in ew_fuse.h's order.
 * Built by hand, unlike the static kernels' (launchers.h): a chain kernel's parameters are made per
 * step, so there is no table row to generate a launcher from. */
static int run_chain(RtExec *x, int o) {
  const Graph *g = x->g;
  const EwChain *c = NULL;
  for (int i = 0; i < x->nchain && !c; i++)
    if (x->chain[i].first == x->peer[o]) c = &x->chain[i];
  if (!c) return rt_fail(x->d, "op %d: no elementwise chain ends here", o);
  CUdeviceptr ptr[EW_MAX_CHAIN + EW_MAX_IO + EW_MAX_CHAIN];
  float fv[EW_MAX_CHAIN];
  unsigned uv[EW_MAX_CHAIN];
  void *args[2 * EW_MAX_CHAIN + EW_MAX_IO + 1 + 3 * EW_MAX_CHAIN];
  int na = 0, np = 0;
  for (int j = 0; j < c->nops; j++)
    if (c->store[j]) ptr[np] = rt_exec_ptr(x, g->op[c->op[j]].out[0]), args[na++] = &ptr[np++];
  for (int m = 0; m < c->nin; m++) ptr[np] = rt_exec_ptr(x, c->in[m]), args[na++] = &ptr[np++];
  long n = (long)tensor_numel(&g->t[g->op[c->first].out[0]]);
  args[na++] = &n;
  for (int j = 0; j < c->nops; j++) {
    const Op *op = &g->op[c->op[j]];
    for (const char *s = ew_scalars(op->kind); *s; s++) {
      if (*s == 'f') fv[j] = (float)op->a.f[0], args[na++] = &fv[j];
      else if (*s == 'S') ptr[np] = x->seed_cur, args[na++] = &ptr[np++];
      else uv[j] = (unsigned)op->a.i[0], args[na++] = &uv[j];
    }
  }
  return rt_launch(x->d, (RtKernel)(RT_K_COUNT + c->kernel), rt_grid1d(x->d, (n + 3) / 4), 1, 1, 256, 0, args);
}

static int run_op(RtExec *x, const Op *op) {
  int o = rt_op_index(x, op);
  return x->fuse[o] == RT_FUSE_EW ? run_chain(x, o) : DISPATCH[op->kind](x, op);
}

int rt_exec_fusion(const RtExec *x, int op, int *peer, int *staged) {
  *peer = x->peer[op];
  *staged = (x->fuse[op] & RT_FUSE_STAGED) != 0;
  return x->fuse[op] & ~RT_FUSE_STAGED;
}

static int analyse(RtExec *x, int *unsupported) {
  const Graph *g = x->g;
  RtDevice *d = x->d;
  int *uses = calloc((size_t)g->nt, sizeof *uses);
  if (!uses) return rt_fail(d, "out of memory");
  for (int o = 0; o < g->nop; o++)
    for (int i = 0; i < g->op[o].nin; i++) uses[g->op[o].in[i]]++;
  /* weight gradients straight into their main gradients */
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    if (op->kind != OP_ACCUM) continue;
    int gt = op->in[0], mg = op->out[0], p = g->t[gt].producer;
    if (uses[gt] == 1 && p >= 0 && sinkable(g->op[p].kind) && g->t[mg].dtype == DT_F32 &&
        tensor_numel(&g->t[gt]) == tensor_numel(&g->t[mg])) {
      x->sink[gt] = mg;
      x->skip[o] = 1;
    }
  }
  int rc = RT_OK;
  for (int o = 0; o < g->nop && rc == RT_OK; o++) {
    const Op *op = &g->op[o];
    /* kernels that only accumulate: every weight-gradient output needs its main gradient */
    if (sinkable(op->kind) && op->kind != OP_LINEAR_WGRAD)
      for (int i = op->kind == OP_RMSNORM_BWD || op->kind == OP_LAYERNORM_BWD ? 1 : 0; i < op->nout && rc == RT_OK; i++)
        if (x->sink[op->out[i]] < 0)
          rc = rt_fail(d, "%s in %s: its weight gradient %s is not accumulated into an fp32 main gradient", op_name(op->kind),
                       op->tags.module, g->t[op->out[i]].name);
  }
  /* cross-entropy forward + backward fused in place over the logits */
  for (int o = 0; o < g->nop && rc == RT_OK; o++) {
    const Op *op = &g->op[o];
    if (op->kind != OP_CROSS_ENTROPY) continue;
    for (int b = o + 1; b < g->nop; b++) {
      const Op *bw = &g->op[b];
      if (bw->kind != OP_CROSS_ENTROPY_BWD || bw->in[1] != op->in[0]) continue;
      double seed = 0;
      int found = 0;
      for (int f = 0; f < g->nop; f++)
        if (g->op[f].kind == OP_FILL && g->op[f].nout == 1 && g->op[f].out[0] == bw->in[0]) seed = g->op[f].a.f[0], found = 1;
      if (!found) {
        rc = rt_fail(d, "cross_entropy_bwd in %s: its loss gradient is not a constant FILL", bw->tags.module);
        break;
      }
      if (uses[op->in[0]] != 2) {
        rc = rt_fail(d, "the logits of %s have readers besides the loss: the fused in-place loss cannot run", op->tags.module);
        break;
      }
      x->dloss[o] = (float)(seed / (double)ops_rows(&g->t[op->in[0]]));
      x->alias[bw->out[0]] = op->in[0];
      x->skip[b] = 1;
    }
  }
  if (rc == RT_OK && x->fuse_on) rc = fuse_pairs(x, uses);
  if (rc == RT_OK && x->fuse_on >> RT_FUSE_EW & 1) rc = fuse_chains(x, uses);
  for (int o = 0; o < g->nop && rc == RT_OK; o++) { /* after the fusions: what is left must have a row */
    const Op *op = &g->op[o];
    char why[256];
    if (!x->skip[o] && !DISPATCH[op->kind]) {
      *unsupported = 1;
      rc = rt_fail(d, "op %s (%s) does not run on CUDA yet", op_name(op->kind), op->tags.module);
    } else if (!x->skip[o] && rt_unfused_check(g, op, why, sizeof why)) {
      *unsupported = 1;
      rc = rt_fail(d, "op %s (%s): %s", op_name(op->kind), op->tags.module, why);
    } else if ((op->kind == OP_FLASH_ATTN || op->kind == OP_FLASH_ATTN_BWD) && op->a.f[1] > 0) {
      /* the flash kernels draw no dropout mask yet; the unfused backend runs attention dropout as
       * a DROPOUT op on the probabilities */
      *unsupported = 1;
      rc = rt_fail(d, "op %s (%s): attention dropout inside flash attention (p = %g) is not built on CUDA yet: use "
                      "model.attention_backend=unfused or model.attention_dropout=0",
                   op_name(op->kind), op->tags.module, op->a.f[1]);
    }
  }
  /* global-norm slices and AdamW hyper-parameter slots */
  float hpk[RT_MAX_HP][3];
  int nhp = 0;
  for (int o = 0; o < g->nop && rc == RT_OK; o++) {
    const Op *op = &g->op[o];
    if (op->kind == OP_GRAD_SUMSQ) x->slot[o] = x->n_sumsq++;
    if (op->kind != OP_ADAMW) continue;
    float k[3] = {(float)op->a.f[0], (float)op->a.f[1], (float)op->a.f[2]};
    int s = 0;
    while (s < nhp && memcmp(hpk[s], k, sizeof k) != 0) s++;
    if (s == nhp) {
      if (nhp == RT_MAX_HP) {
        rc = rt_fail(d, "more than %d AdamW settings", RT_MAX_HP);
        break;
      }
      memcpy(hpk[nhp++], k, sizeof k);
      x->slot[o] = s + RT_MAX_HP; /* first of its slot: computes the values each step */
    } else x->slot[o] = s;
  }
  free(uses);
  return rc;
}

/* Scratch sizes from the graph's shapes. */
static int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }

static int carve_scratch(RtExec *x) {
  const Graph *g = x->g;
  int64_t maxc = 8, maxrows = 1, maxdsum = 1;
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    const Tensor *a = &g->t[op->in[0]];
    if (op->kind == OP_RMSNORM_BWD || op->kind == OP_LAYERNORM_BWD || op->kind == OP_LINEAR_BGRAD) {
      if (ops_last(a) > maxc) maxc = ops_last(a);
      if (ops_rows(a) > maxrows) maxrows = ops_rows(a);
    }
    if (op->kind == OP_FLASH_ATTN_BWD) {
      const Tensor *q = &g->t[op->in[1]];
      int64_t n = q->shape[0] * q->shape[1] * q->shape[2];
      if (n > maxdsum) maxdsum = n;
    }
  }
  x->norm_groups = (int)(maxrows / 32 < 1 ? 1 : maxrows / 32 > 256 ? 256 : maxrows / 32);
  /* a fixed count (2 per SM of an H100/H200), not the device's: the scratch layout, and so a
   * recorded step.c, must not depend on the GPU it runs on */
  x->gn_groups = 264;
  x->nmb = g->num_microbatches > 0 ? g->num_microbatches : 1;
  x->ntok = tensor_numel(&g->t[g->tokens]);
  int64_t sizes[8] = {(int64_t)x->norm_groups * 2 * maxc * 4, (int64_t)(x->n_sumsq > 0 ? x->n_sumsq : 1) * x->gn_groups * 4,
                      maxdsum * 4, RT_MAX_HP * 8 * 4, (int64_t)x->nmb * 8, (int64_t)x->nmb * 4, (int64_t)x->nmb * 2 * x->ntok * 4, 8};
  int64_t off[8], total = 0;
  for (int i = 0; i < 8; i++) off[i] = total, total += align256(sizes[i]);
  x->scratch_bytes = total;
  if (rt_alloc(x->d, &x->scratch, (size_t)total, "the executor's scratch")) return RT_ERROR;
  CUdeviceptr s = x->scratch;
  x->norm_partial = s + (CUdeviceptr)off[0];
  x->gn_partial = s + (CUdeviceptr)off[1];
  x->dsum = s + (CUdeviceptr)off[2];
  x->hp = s + (CUdeviceptr)off[3];
  x->seeds = s + (CUdeviceptr)off[4];
  x->losses = s + (CUdeviceptr)off[5];
  x->inputs = s + (CUdeviceptr)off[6];
  x->seed_cur = s + (CUdeviceptr)off[7];
  return rt_memset0(x->d, x->scratch, (size_t)total);
}

RtExec *rt_exec_new(RtDevice *d, const Graph *g, int *unsupported) {
  *unsupported = 0;
  if (g->nbuffers <= 0) {
    rt_fail(d, "the graph has no memory plan");
    return NULL;
  }
  for (int i = 0; i < g->nt; i++) {
    const Tensor *t = &g->t[i];
    if (t->buffer < 0 || t->buffer >= g->nbuffers || t->bytes != tensor_numel(t) * (int64_t)dtype_size(t->dtype) ||
        t->offset < 0 || t->offset % 16 || t->offset + t->bytes > g->buffer_bytes[t->buffer]) {
      rt_fail(d, "tensor %s: the plan's (buffer %d, offset %lld, %lld bytes) is not a 16-byte-aligned slot at its nominal "
                 "dtype size", t->name, t->buffer, (long long)t->offset, (long long)t->bytes);
      return NULL;
    }
    if (dtype_is_float(t->dtype) && t->dtype != DT_F32 && t->dtype != DT_BF16) {
      *unsupported = 1;
      rt_fail(d, "tensor %s is %s: the CUDA backend runs bf16 and fp32 tensors", t->name, dtype_name(t->dtype));
      return NULL;
    }
    if (t->role == ROLE_PARAM && t->dtype != DT_BF16) {
      *unsupported = 1;
      rt_fail(d, "parameter %s is %s: the CUDA backend runs bf16 recipes (model.bf16=true)", t->name, dtype_name(t->dtype));
      return NULL;
    }
  }
  RtExec *x = calloc(1, sizeof *x);
  if (!x) {
    rt_fail(d, "out of memory");
    return NULL;
  }
  x->d = d;
  x->g = g;
  x->sink = malloc((size_t)g->nt * sizeof *x->sink);
  x->alias = malloc((size_t)g->nt * sizeof *x->alias);
  x->skip = calloc((size_t)g->nop + 1, 1);
  x->slot = calloc((size_t)g->nop + 1, sizeof *x->slot);
  x->dloss = calloc((size_t)g->nop + 1, sizeof *x->dloss);
  x->fuse = calloc((size_t)g->nop + 1, 1);
  x->peer = malloc(((size_t)g->nop + 1) * sizeof *x->peer);
  if (!x->sink || !x->alias || !x->skip || !x->slot || !x->dloss || !x->fuse || !x->peer) {
    rt_fail(d, "out of memory");
    rt_exec_free(x);
    return NULL;
  }
  for (int i = 0; i < g->nt; i++) x->sink[i] = -1, x->alias[i] = i;
  for (int o = 0; o <= g->nop; o++) x->peer[o] = -1;
  /* a measurement / debugging switch (docs/gpu-runtime.md): STEPC_FUSE=0 runs every pair as two
   * launches; the layout hash includes the fusions, so a step.c recorded the other way is refused */
  const char *fz = getenv("STEPC_FUSE");
  x->fuse_on = 1 << RT_FUSE_LINEAR_ADD | 1 << RT_FUSE_DROPOUT_ADD | 1 << RT_FUSE_ADD_NORM | 1 << RT_FUSE_EW;
  if (fz && strcmp(fz, "0") == 0) x->fuse_on = 0;
  else if (fz && *fz && strcmp(fz, "1") != 0) /* a list: linear_add,dropout_add,add_norm,ew */
    x->fuse_on = (strstr(fz, "linear_add") ? 1 << RT_FUSE_LINEAR_ADD : 0) | (strstr(fz, "dropout_add") ? 1 << RT_FUSE_DROPOUT_ADD : 0) |
                 (strstr(fz, "add_norm") ? 1 << RT_FUSE_ADD_NORM : 0) | (strstr(fz, "ew") ? 1 << RT_FUSE_EW : 0);
  int64_t total = 0;
  for (int b = 0; b < g->nbuffers; b++) x->buf_base[b] = total, total += align256(g->buffer_bytes[b]);
  x->arena_bytes = total;
  if (analyse(x, unsupported)) {
    rt_exec_free(x);
    return NULL;
  }
  d->gen = &x->ew; /* the generated kernels' handles follow the static ones (rt.h) */
  if (rt_alloc(d, &x->arena, (size_t)total, "the plan's arena") || carve_scratch(x)) {
    rt_exec_free(x);
    return NULL;
  }
  return x;
}

/* ---- running ---- */

static const uint32_t MICRO_PHASES =
    IR_PHASE_BIT(IR_PHASE_FORWARD) | IR_PHASE_BIT(IR_PHASE_BACKWARD) | IR_PHASE_BIT(IR_PHASE_REPLAY);

int rt_exec_op_runs(const RtExec *x, int op) { return !x->skip[op] && DISPATCH[x->g->op[op].kind] != NULL; }

int rt_exec_enqueue_ops(RtExec *x, int first, int last, uint32_t phases) {
  const Graph *g = x->g;
  for (int o = first < 0 ? 0 : first; o <= last && o < g->nop; o++)
    if ((phases & IR_PHASE_BIT(g->op[o].tags.phase)) && rt_exec_run_op(x, o) != RT_OK) return RT_ERROR;
  return RT_OK;
}

/* Micro-batch mb's staged tokens (B*T int32), its targets right after. */
static CUdeviceptr inputs_of(const RtExec *x, int mb) { return x->inputs + (CUdeviceptr)((int64_t)mb * 2 * x->ntok * 4); }

int rt_exec_micro_begin(RtExec *x, int micro) {
  const Graph *g = x->g;
  RtDevice *d = x->d;
  CUdeviceptr in = inputs_of(x, micro);
  return rt_copy_d2d(d, rt_exec_ptr(x, g->tokens), in, (size_t)x->ntok * 4) ||
                 rt_copy_d2d(d, rt_exec_ptr(x, g->targets), in + (CUdeviceptr)(x->ntok * 4), (size_t)x->ntok * 4) ||
                 rt_copy_d2d(d, x->seed_cur, x->seeds + (CUdeviceptr)(8 * micro), 8)
             ? RT_ERROR
             : RT_OK;
}

int rt_exec_micro_end(RtExec *x, int micro) {
  return rt_copy_d2d(x->d, x->losses + (CUdeviceptr)(micro * 4), rt_exec_ptr(x, x->g->loss), 4);
}

int rt_exec_enqueue_micro(RtExec *x, int micro) {
  if (rt_exec_micro_begin(x, micro) || rt_exec_enqueue_ops(x, 0, x->g->nop - 1, MICRO_PHASES)) return RT_ERROR;
  return rt_exec_micro_end(x, micro);
}

int rt_exec_enqueue_optimizer(RtExec *x) {
  return rt_exec_enqueue_ops(x, 0, x->g->nop - 1, IR_PHASE_BIT(IR_PHASE_REDUCE) | IR_PHASE_BIT(IR_PHASE_OPTIMIZER));
}

int rt_exec_enqueue_step(RtExec *x) {
  for (int mb = 0; mb < x->nmb; mb++)
    if (rt_exec_enqueue_micro(x, mb)) return RT_ERROR;
  return rt_exec_enqueue_optimizer(x);
}

int rt_exec_stage(RtExec *x, const int32_t *tokens, const int32_t *targets, const uint64_t *seeds) {
  RtDevice *d = x->d;
  size_t nb = (size_t)x->ntok * 4;
  for (int mb = 0; mb < x->nmb; mb++) {
    CUdeviceptr in = inputs_of(x, mb);
    if (rt_copy_h2d(d, in, tokens + (int64_t)mb * x->ntok, nb) || rt_copy_h2d(d, in + nb, targets + (int64_t)mb * x->ntok, nb))
      return RT_ERROR;
  }
  return rt_copy_h2d(d, x->seeds, seeds, (size_t)x->nmb * 8);
}

int rt_exec_stage_device(RtExec *x, CUdeviceptr tokens, CUdeviceptr targets) {
  size_t nb = (size_t)x->ntok * 4;
  for (int mb = 0; mb < x->nmb; mb++) {
    CUdeviceptr in = inputs_of(x, mb), off = (CUdeviceptr)((int64_t)mb * x->ntok * 4);
    if (rt_copy_d2d(x->d, in, tokens + off, nb) || rt_copy_d2d(x->d, in + nb, targets + off, nb)) return RT_ERROR;
  }
  return RT_OK;
}

int rt_exec_read_losses(RtExec *x, float *losses) { return rt_copy_d2h(x->d, losses, x->losses, (size_t)x->nmb * 4); }

int rt_exec_read(RtExec *x, int tensor, double *out) {
  const Tensor *t = rt_t(x, tensor);
  int64_t n = tensor_numel(t);
  void *h = malloc((size_t)t->bytes ? (size_t)t->bytes : 1);
  if (!h) return rt_fail(x->d, "out of memory");
  if (rt_copy_d2h(x->d, h, rt_exec_ptr(x, tensor), (size_t)t->bytes)) {
    free(h);
    return RT_ERROR;
  }
  for (int64_t i = 0; i < n; i++) {
    switch (t->dtype) {
    case DT_F32: out[i] = ((float *)h)[i]; break;
    case DT_BF16: {
      uint32_t u = (uint32_t)((uint16_t *)h)[i] << 16;
      float f;
      memcpy(&f, &u, 4);
      out[i] = f;
      break;
    }
    case DT_I32: out[i] = ((int32_t *)h)[i]; break;
    default: out[i] = ((uint8_t *)h)[i]; break;
    }
  }
  free(h);
  return RT_OK;
}

/* ---- initialisation, as cpu_exec_init_params ---- */

int rt_exec_init_params(RtExec *x, uint64_t seed) {
  const Graph *g = x->g;
  RtDevice *d = x->d;
  if (rt_memset0(d, x->arena, (size_t)x->arena_bytes)) return RT_ERROR;
  for (int i = 0; i < g->nt; i++) {
    const Tensor *t = &g->t[i];
    if (t->role != ROLE_PARAM || t->init == IR_INIT_NONE || t->init == IR_INIT_ZEROS) continue;
    int master = -1;
    for (int j = 0; j < g->nt; j++)
      if (g->t[j].role == ROLE_MASTER && g->t[j].of == i) master = j;
    CUdeviceptr f32 = master >= 0 ? rt_exec_ptr(x, master) : 0, b16 = rt_exec_ptr(x, i);
    long n = (long)tensor_numel(t);
    if (t->init == IR_INIT_ONES) {
      /* the kernel with std 0 would give zeros: ones are written from the host */
      size_t bytes = (size_t)n * 4;
      float *ones = malloc(bytes);
      uint16_t *ob = malloc((size_t)n * 2);
      if (!ones || !ob) {
        free(ones), free(ob);
        return rt_fail(d, "out of memory");
      }
      for (long j = 0; j < n; j++) ones[j] = 1.0f, ob[j] = 0x3f80;
      int rc = rt_copy_h2d(d, b16, ob, (size_t)n * 2) || (f32 && rt_copy_h2d(d, f32, ones, bytes)) || rt_sync(d);
      free(ones), free(ob);
      if (rc) return RT_ERROR;
      continue;
    }
    unsigned long long key = ops_init_key(seed, t->name); /* as the CPU executor's */
    if (rt_launch_init_normal(d, rt_grid_stride(d, n), 256, 0, f32, b16, n, key, t->init_std)) return RT_ERROR;
  }
  return rt_sync(d);
}

/* ---- one op at a time (the generated step.c drives the order through runtime/api_cuda.c) ---- */

int rt_exec_run_op(RtExec *x, int o) {
  if (o < 0 || o >= x->g->nop) return rt_fail(x->d, "op %d is not in the step", o);
  const Op *op = &x->g->op[o];
  if (x->skip[o]) return RT_OK; /* fused into a neighbour (see analyse) */
  if (run_op(x, op) != RT_OK) {
    char msg[sizeof x->d->err];
    snprintf(msg, sizeof msg, "%s", x->d->err);
    rt_clear_error(x->d);
    return rt_fail(x->d, "op %d %s in %s: %s", o, op_name(op->kind), op->tags.module, msg);
  }
  return RT_OK;
}
