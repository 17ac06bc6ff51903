/* fuse.c — the fusion pass (fuse.h). */
#include "passes/fuse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/launch.h"
#include "ops/ops.h"

/* The pass reads one per-kind fact from the op table (sink: which weight-gradient kernels may
 * accumulate into the fp32 main gradient, ir.h) and names kinds itself everywhere else: each
 * pattern below is one hand-written fused kernel's (linear_add, residual norms, rope_split_qkv,
 * the in-place loss, adamw_multi), a decision about that kernel's operands, not a fact of either
 * op alone. */
static int sinkable(OpKind k) { return op_info(k)->facts.sink == SINK_YES; }

static int same_shape(const Graph *g, int a, int b) {
  const Tensor *ta = &g->t[a], *tb = &g->t[b];
  return ta->dtype == tb->dtype && ta->ndim == tb->ndim && !memcmp(ta->shape, tb->shape, sizeof ta->shape);
}

/* Same phase, layer and graph scopes: in every graph mode both ops sit in one scope instance (or
 * both outside any). Recompute labels may differ (fc2 carries `mlp`, its residual add none): a
 * pair fuses in forward and in every replay of it or nowhere, and the decision reads only forward
 * readers, so it is the same whichever labels are recomputed. */
static int same_tags(const IrTags *a, const IrTags *b) {
  return a->phase == b->phase && a->layer == b->layer && a->scopes == b->scopes;
}

/* Whether op o (an ADD) and its predecessor o - 1 form a LINEAR/DROPOUT -> ADD pair:
 * FUSE_LINEAR_ADD, FUSE_DROPOUT_ADD or 0. The first two change the bits (the product or the
 * dropout output is added in fp32 before the one bf16 rounding), so they depend on the op
 * structure only and a forward pair fuses only together with every replay of it. */
static int producer_pair(const Graph *g, const Fusions *fz, const int *uses, int o) {
  const Op *add = &g->op[o];
  if (o < 1 || add->kind != OP_ADD || add->nin != 2 || add->nout != 1 || add->in[0] == add->in[1]) return 0;
  if (add->tags.phase != IR_PHASE_FORWARD && add->tags.phase != IR_PHASE_REPLAY) return 0;
  const Op *p = &g->op[o - 1];
  if ((p->kind != OP_LINEAR && p->kind != OP_DROPOUT) || !same_tags(&p->tags, &add->tags) || fz->skip[o] ||
      fz->skip[o - 1])
    return 0;
  int y = p->out[0], k = add->in[0] == y ? 0 : add->in[1] == y ? 1 : -1, out = add->out[0];
  if (k < 0 || uses[y] != 1 || y == g->loss || y == g->grad_norm || y == g->lr || g->t[y].role != ROLE_ACT)
    return 0;
  /* the dropout's mask output (out[1]) is neither written nor read on CUDA: DROPOUT_BWD
   * regenerates the mask from (seed, stream) */
  int r = add->in[1 - k];
  if (!same_shape(g, y, out) || !same_shape(g, r, out) || g->t[out].dtype != DT_BF16) return 0;
  if (fz->alias[y] != y || fz->alias[r] != r || fz->alias[out] != out) return 0;
  /* (a tensor-parallel slice's dropout, i[1], draws at the one-rank indices: its own launch) */
  if (p->kind == OP_DROPOUT)
    return p->nin == 1 && !p->a.i[1] && same_shape(g, p->in[0], y) ? FUSE_DROPOUT_ADD : 0;
  return p->nin >= 2 && g->t[p->in[0]].dtype == DT_BF16 ? FUSE_LINEAR_ADD : 0;
}

/* Whether op o (a backward ADD) sums the dx of the norm backward just before it, read by nothing
 * else, with another bf16 gradient of its shape, and the norm backward runs as the one-pass kernel
 * (kernels/launch.h stepc_norm_bwd_warps), which can add the other gradient as it stores dx. */
static int norm_bwd_add(const Graph *g, const Fusions *fz, const int *uses, int o) {
  const Op *add = &g->op[o], *n = &g->op[o - 1];
  if (add->kind != OP_ADD || add->nin != 2 || add->nout != 1 || add->in[0] == add->in[1] || fz->skip[o] ||
      fz->fuse[o])
    return 0;
  if ((n->kind != OP_RMSNORM_BWD && n->kind != OP_LAYERNORM_BWD) || fz->skip[o - 1] || fz->fuse[o - 1] ||
      add->tags.phase != IR_PHASE_BACKWARD || !same_tags(&n->tags, &add->tags))
    return 0;
  int dx = n->out[0], k = add->in[0] == dx ? 0 : add->in[1] == dx ? 1 : -1, out = add->out[0];
  if (k < 0 || uses[dx] != 1 || g->t[dx].role != ROLE_ACT_GRAD || fz->sink[dx] >= 0) return 0;
  int r = add->in[1 - k], C = (int)ops_last(&g->t[dx]);
  if (!same_shape(g, dx, out) || !same_shape(g, r, out) || g->t[out].dtype != DT_BF16 || C % 8) return 0;
  if (fz->alias[dx] != dx || fz->alias[r] != r || fz->alias[out] != out || fz->sink[r] >= 0 ||
      fz->sink[out] >= 0)
    return 0;
  return stepc_norm_bwd_warps(C, n->kind == OP_LAYERNORM_BWD ? 2 : 1) > 0;
}

static void fuse_pair(Fusions *fz, int run, int absorbed, int kind) {
  fz->fuse[run] = (uint8_t)kind;
  fz->peer[run] = absorbed;
  fz->skip[absorbed] = 1;
}

static int fuse_pairs(const Graph *g, Fusions *fz, const int *uses, char *err, size_t nerr) {
  int *cand = calloc((size_t)g->nop + 1, sizeof *cand);
  if (!cand) return snprintf(err, nerr, "out of memory"), -1;
  for (int o = 0; o < g->nop; o++)
    cand[o] = producer_pair(g, fz, uses, o);
  /* a forward pair and its replays fuse together or not at all */
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    if (op->kind != OP_ADD || op->tags.phase != IR_PHASE_REPLAY) continue;
    int f = op->tags.fwd;
    if (f < 0 || f >= g->nop || cand[o] != cand[f] || (cand[o] && g->op[o - 1].tags.fwd != f - 1))
      cand[f] = -1;
  }
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    int f = op->tags.phase == IR_PHASE_REPLAY ? op->tags.fwd : o;
    if (cand[o] <= 0 || f < 0 || f >= g->nop || cand[f] != cand[o]) continue;
    fuse_pair(fz, o, o - 1, cand[o]);
  }
  free(cand);
  /* ADD -> norm writes the bits the two kernels write */
  for (int o = 0; o + 1 < g->nop; o++) {
    const Op *add = &g->op[o], *n = &g->op[o + 1];
    if (add->kind != OP_ADD || add->nin != 2 || add->nout != 1 || fz->skip[o] || fz->fuse[o] ||
        fz->skip[o + 1])
      continue;
    if ((n->kind != OP_RMSNORM && n->kind != OP_LAYERNORM) || n->in[0] != add->out[0] ||
        n->tags.phase != add->tags.phase ||
        (add->tags.phase != IR_PHASE_FORWARD && add->tags.phase != IR_PHASE_REPLAY))
      continue;
    int out = add->out[0], a = add->in[0], b = add->in[1];
    if (!same_shape(g, a, out) || !same_shape(g, b, out) || g->t[out].dtype != DT_BF16 ||
        ops_last(&g->t[out]) % 8)
      continue;
    if (fz->alias[a] != a || fz->alias[b] != b || fz->alias[out] != out) continue;
    fuse_pair(fz, o + 1, o, FUSE_ADD_NORM);
  }
  return 0;
}

/* The RoPE of ops a and b (consecutive, either order) applied to tensors x and y (x to one, y to
 * the other), both in direction dir, with one base and scaling, each output its own storage: 1 and, in *ra /
 * *rb, which op rotates x / y. */
static int rope_pair(const Graph *g, const Fusions *fz, int a, int b, int x, int y, int dir, int *ra,
                     int *rb) {
  const Op *p = &g->op[a], *q = &g->op[b];
  if (p->kind != OP_ROPE || q->kind != OP_ROPE || fz->skip[a] || fz->skip[b] || fz->fuse[a] || fz->fuse[b] ||
      p->a.i[0] != dir || q->a.i[0] != dir || p->a.f[0] != q->a.f[0] || p->a.f[1] != q->a.f[1])
    return 0;
  if (p->in[0] == x && q->in[0] == y)
    *ra = a, *rb = b;
  else if (p->in[0] == y && q->in[0] == x)
    *ra = b, *rb = a;
  else
    return 0;
  return fz->alias[p->out[0]] == p->out[0] && fz->alias[q->out[0]] == q->out[0];
}

/* SPLIT_QKV with RoPE on q and k (forward or a replay), and the gradient's two inverse RoPEs with
 * CONCAT_QKV, each as three consecutive ops of one phase, layer and scope set: one launch at the
 * third (rope_split_qkv / rope_concat_qkv). Both kernels write the bits of the three ops (rope.cuh),
 * so a group need not fuse together with its replays. The split's q and k, and the inverse RoPEs'
 * outputs, are read by the group alone: nothing writes them on the GPU. */
static void fuse_rope_qkv(const Graph *g, Fusions *fz, const int *uses) {
  for (int o = 0; o + 2 < g->nop; o++) {
    const Op *a = &g->op[o], *c = &g->op[o + 2];
    if (!same_tags(&a->tags, &g->op[o + 1].tags) || !same_tags(&a->tags, &c->tags)) continue;
    int ra, rb, D;
    if (a->kind == OP_SPLIT_QKV && !fz->skip[o] && !fz->fuse[o] && a->nout == 3 &&
        (a->tags.phase == IR_PHASE_FORWARD || a->tags.phase == IR_PHASE_REPLAY)) {
      int q = a->out[0], k = a->out[1];
      if (!rope_pair(g, fz, o + 1, o + 2, q, k, 1, &ra, &rb) || uses[q] != 1 || uses[k] != 1) continue;
      if (fz->alias[a->in[0]] != a->in[0] || fz->alias[a->out[2]] != a->out[2]) continue;
      D = (int)a->a.i[2];
    } else if (c->kind == OP_CONCAT_QKV && !fz->skip[o + 2] && !fz->fuse[o + 2] && c->nin == 3 &&
               a->tags.phase == IR_PHASE_BACKWARD) {
      int dq = c->in[0], dk = c->in[1];
      if (g->t[dq].producer < o || g->t[dk].producer < o) continue;
      if (!rope_pair(g, fz, o, o + 1, g->op[g->t[dq].producer].in[0], g->op[g->t[dk].producer].in[0], -1, &ra,
                     &rb) ||
          g->op[ra].out[0] != dq || g->op[rb].out[0] != dk || uses[dq] != 1 || uses[dk] != 1 ||
          fz->alias[c->out[0]] != c->out[0])
        continue;
      D = (int)c->a.i[2];
    } else
      continue;
    if (D % 16 || D / 2 > STEPC_ROPE_MAX_HALF || g->t[g->op[ra].out[0]].dtype != DT_BF16) continue;
    fz->skip[o] = fz->skip[o + 1] = 1;
    fz->fuse[o + 2] = FUSE_ROPE_QKV;
    fz->peer[o + 2] = o;
    o += 2;
  }
}

/* A run of consecutive pointwise ops no pair took (ew_fuse.h): every tensor its own storage, no
 * weight gradient sunk into another's kernel. */
static int chain_ok(const Graph *g, const Fusions *fz, const EwChain *c) {
  for (int j = 0; j < c->nops; j++) {
    const Op *op = &g->op[c->op[j]];
    for (int i = 0; i < op->nin; i++)
      if (fz->alias[op->in[i]] != op->in[i] || fz->sink[op->in[i]] >= 0) return 0;
    int y = op->out[0];
    if (fz->alias[y] != y || fz->sink[y] >= 0) return 0;
  }
  return 1;
}

static int fuse_chains(const Graph *g, Fusions *fz, const int *uses, EwKernels *ks, char *err, size_t nerr) {
  uint8_t *blocked = calloc((size_t)g->nop + 1, 1), *pass = calloc((size_t)g->nop + 1, 1);
  if (!blocked || !pass) {
    free(blocked), free(pass);
    return snprintf(err, nerr, "out of memory"), -1;
  }
  /* passable: a weight-gradient ACCUM sunk into its producer's kernel (an earlier op) launches
   * nothing where it stands */
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    blocked[o] = fz->skip[o] || fz->fuse[o];
    pass[o] = op->kind == OP_ACCUM && fz->skip[o] && !fz->fuse[o] && fz->sink[op->in[0]] >= 0 &&
              g->t[op->in[0]].producer < o;
  }
  int rc = 0;
  for (int o = 0; o < g->nop && rc == 0;) {
    EwChain c;
    if (!ew_chain_at(g, o, uses, blocked, pass, &c) || !chain_ok(g, fz, &c)) {
      o++;
      continue;
    }
    EwChain *n = realloc(fz->chain, (size_t)(fz->nchain + 1) * sizeof *n);
    if (!n || ew_kernel_add(ks, g, &c) < 0) {
      if (n) fz->chain = n;
      rc = -1;
      snprintf(err, nerr,
               "op %d: generating the elementwise kernel of its chain failed (more than %d kernels, or out "
               "of memory)",
               o, EW_MAX_KERNELS);
      break;
    }
    fz->chain = n;
    fz->chain[fz->nchain++] = c;
    int last = c.op[c.nops - 1];
    for (int j = 0; j + 1 < c.nops; j++)
      fz->skip[c.op[j]] = 1;
    fz->fuse[last] = FUSE_EW;
    fz->peer[last] = c.first;
    o = last + 1;
  }
  free(blocked), free(pass);
  return rc;
}

/* Whether tensor t is written by a FILL: the constant loss gradient. */
static int constant_fill(const Graph *g, int t) {
  for (int f = 0; f < g->nop; f++)
    if (g->op[f].kind == OP_FILL && g->op[f].nout == 1 && g->op[f].out[0] == t) return 1;
  return 0;
}

/* The chunked output layer's backward into its forward's launch (FUSE_LOSS_BWD): under a constant
 * loss gradient the forward takes each chunk's gradient right after its loss, in place over the
 * chunk's logits, so the chunk is multiplied once; the ops between (the loss's sum with the MoE
 * aux loss, the FILL) write scalars. Its weight gradient must be sunk into the main gradient (a
 * chunk's product adds into it); otherwise nothing fuses and the CUDA executor refuses the op. */
static void fuse_loss_bwd(const Graph *g, Fusions *fz) {
  for (int b = 0; b < g->nop; b++) {
    const Op *bw = &g->op[b];
    int f = bw->tags.fwd;
    if (bw->kind != OP_LINEAR_CROSS_ENTROPY_BWD || bw->tags.phase != IR_PHASE_BACKWARD || f < 0 || f >= b)
      continue;
    const Op *fw = &g->op[f];
    if (fw->kind != OP_LINEAR_CROSS_ENTROPY || fw->tags.phase != IR_PHASE_FORWARD || bw->in[1] != fw->in[0] ||
        bw->in[2] != fw->in[1] || bw->in[3] != fw->in[2] || bw->a.i[0] != fw->a.i[0] ||
        !constant_fill(g, bw->in[0]) || fz->sink[bw->out[1]] < 0)
      continue;
    int early = 0; /* something between reads what the launch writes early */
    for (int o = f + 1; o < b; o++)
      for (int i = 0; i < g->op[o].nin; i++)
        early |= g->op[o].in[i] == bw->out[0] || g->op[o].in[i] == bw->out[1];
    if (early) continue;
    fz->skip[b] = 1;
    fz->fuse[b] = FUSE_LOSS_BWD;
    fz->peer[b] = f;
    /* one micro-batch: the main gradient's ZERO sits right before the backward (optimizer.c), after
     * the forward whose launch adds into the gradient; the launch zeroes it first instead */
    for (int z = f + 1; z < b; z++)
      if (g->op[z].kind == OP_ZERO && g->op[z].nout == 1 && g->op[z].out[0] == fz->sink[bw->out[1]])
        fz->skip[z] = 1;
  }
}

/* Whether op o reads or writes tensor t, itself or through a weight gradient sunk into t. */
static int touches(const Fusions *fz, const Op *op, int t) {
  for (int i = 0; i < op->nin; i++)
    if (op->in[i] == t) return 1;
  for (int i = 0; i < op->nout; i++)
    if (op->out[i] == t || fz->sink[op->out[i]] == t) return 1;
  return 0;
}

static int micro_phase(Phase p) {
  return p == IR_PHASE_FORWARD || p == IR_PHASE_BACKWARD || p == IR_PHASE_REPLAY;
}

/* One micro-batch a step: a main gradient's ZERO is a backward op before its first write
 * (optimizer.c). When the next op of the step (the micro-batch's ops in id order, then the tail's)
 * that touches the gradient is a LINEAR_WGRAD, GROUPED_LINEAR_WGRAD (every expert's tile is written,
 * an expert without rows as 0) or FP8_GEMM sunk into it over the whole tensor, the GEMM stores its
 * product (beta = 0, the bits of 0 + product) and the ZERO is skipped. With more micro-batches the
 * gradients are zeroed in the tail and accumulate over the micro-batches: nothing changes there. */
static void fuse_wgrad_store(const Graph *g, Fusions *fz) {
  if (g->num_microbatches != 1) return;
  for (int z = 0; z < g->nop; z++) {
    const Op *zo = &g->op[z];
    if (zo->kind != OP_ZERO || fz->skip[z] || zo->nout != 1 || zo->tags.phase != IR_PHASE_BACKWARD) continue;
    int mg = zo->out[0], first = -1, next = -1;
    if (g->t[mg].role != ROLE_GRAD || g->t[mg].dtype != DT_F32) continue;
    for (int pass = 0; pass < 2 && next < 0; pass++) /* execution order: the micro-batch, then the tail */
      for (int o = 0; o < g->nop && next < 0; o++)
        if (micro_phase(g->op[o].tags.phase) == !pass && touches(fz, &g->op[o], mg)) {
          if (first < 0)
            first = o;
          else
            next = o;
        }
    if (first != z || next < 0) continue;
    const Op *w = &g->op[next];
    if ((w->kind != OP_LINEAR_WGRAD && w->kind != OP_GROUPED_LINEAR_WGRAD && w->kind != OP_FP8_GEMM &&
         w->kind != OP_GROUPED_FP8_WGRAD) ||
        fz->skip[next] || fz->fuse[next] || w->nout != 1 || fz->sink[w->out[0]] != mg ||
        tensor_numel(&g->t[w->out[0]]) != tensor_numel(&g->t[mg]))
      continue;
    fz->fuse[next] = FUSE_WGRAD_STORE;
    fz->peer[next] = -1;
    fz->skip[z] = 1;
  }
}

/* A main gradient's global-norm partials taken in its producer: at one data-parallel rank (nothing
 * reduces the gradient after the backward), a GRAD_SUMSQ inside a multi-tensor group whose gradient
 * is last written, in the micro-batch, by a GROUPED_LINEAR_WGRAD sunk into it, and touched by no
 * op of the tail before the GRAD_SUMSQ: the wgrad kernel writes the sum of squares of each output
 * tile as it leaves (the gradient's final values: with more micro-batches the last one's launch
 * overwrites the earlier ones' partials), and the group's launch reads nothing of that gradient.
 * Each tile's sum is reduced in a fixed order, so replays give the same bits. */
static void fuse_wgrad_norm(const Graph *g, Fusions *fz) {
  if (fz->dp != 1) return;
  for (int s = 0; s < g->nop; s++) {
    const Op *so = &g->op[s];
    if (so->kind != OP_GRAD_SUMSQ || so->nin != 1 || so->tags.phase != IR_PHASE_OPTIMIZER ||
        !(fz->skip[s] || fz->fuse[s] == FUSE_SUMSQ_MULTI))
      continue;
    int mg = so->in[0], last = -1, tail = 0;
    if (g->t[mg].role != ROLE_GRAD || g->t[mg].dtype != DT_F32) continue;
    for (int o = 0; o < g->nop; o++) {
      const Op *op = &g->op[o];
      if (fz->skip[o] && op->kind == OP_ACCUM && fz->sink[op->in[0]] == mg) continue; /* in its producer */
      if (touches(fz, op, mg)) {
        if (micro_phase(op->tags.phase))
          last = o;
        else if (o < s)
          tail = 1;
      }
    }
    if (last < 0 || tail) continue;
    const Op *w = &g->op[last];
    if ((w->kind != OP_GROUPED_LINEAR_WGRAD && w->kind != OP_GROUPED_FP8_WGRAD) || fz->skip[last] ||
        (fz->fuse[last] != FUSE_NONE && fz->fuse[last] != FUSE_WGRAD_STORE) || w->nout != 1 ||
        fz->sink[w->out[0]] != mg || tensor_numel(&g->t[w->out[0]]) != tensor_numel(&g->t[mg]))
      continue;
    fz->norm_by[mg] = last;
  }
}

/* Whether optimizer op b may join the multi-tensor run that op a is in: the same kind, both
 * allowed by the recipe (i[0], optimizer.multi_tensor), and what the launch shares: the
 * accumulator for GRAD_SUMSQ; the fp32 master, the (beta1, beta2, eps) setting and the clip,
 * lr and step inputs for ADAMW (weight decay is per tensor: a table column). */
static int multi_peer(const Graph *g, const Fusions *fz, int ia, int ib) {
  const Op *a = &g->op[ia], *b = &g->op[ib];
  if (a->kind != b->kind || !a->a.i[0] || !b->a.i[0] || fz->skip[ia] || fz->skip[ib] || fz->fuse[ia] ||
      fz->fuse[ib] || a->tags.phase != IR_PHASE_OPTIMIZER || !same_tags(&a->tags, &b->tags))
    return 0;
  if (a->kind == OP_GRAD_SUMSQ) return a->nin == 1 && b->nin == 1 && a->out[0] == b->out[0];
  if (a->kind != OP_ADAMW || a->nout != 4 || b->nout != 4 || a->nin != 4 || b->nin != 4) return 0;
  for (int i = 1; i < 4; i++)
    if (a->in[i] != b->in[i]) return 0;
  return a->a.f[0] == b->a.f[0] && a->a.f[1] == b->a.f[1] && a->a.f[2] == b->a.f[2];
}

int fuse_optimizer(const Graph *g, Fusions *fz) {
  int groups = 0;
  for (int o = 0; o < g->nop;) {
    const Op *first = &g->op[o];
    int last = o;
    if (first->kind == OP_GRAD_SUMSQ || first->kind == OP_ADAMW)
      while (last + 1 < g->nop && multi_peer(g, fz, o, last + 1))
        last++;
    if (last > o) {
      for (int k = o; k < last; k++)
        fz->skip[k] = 1;
      fz->fuse[last] = (uint8_t)(first->kind == OP_GRAD_SUMSQ ? FUSE_SUMSQ_MULTI : FUSE_ADAMW_MULTI);
      fz->peer[last] = o;
      groups++;
    }
    o = last + 1;
  }
  return groups;
}

/* The tensor whose fp8 amax op o's launch can fold as it stores it (kernels/common.cuh amax_fold):
 * a norm's output (alone or behind the residual add it runs), a gated activation's output or input
 * gradient, a one-pass norm backward's dx (alone, or with the residual add it runs at the ADD), the
 * fused RoPE backward's concatenated dqkv (rope_concat_qkv: linear_qkv's output gradient), the fp32
 * master AdamW updates alone (adamw_update: model.fp8_param's primary weight); else -1. */
static int amax_producer(const Graph *g, const Fusions *fz, int o) {
  const Op *op = &g->op[o];
  int f = fz->fuse[o];
  if (fz->skip[o] || op->nout < 1) return -1;
  switch (op->kind) {
  case OP_RMSNORM:
  case OP_LAYERNORM: return f == FUSE_NONE || f == FUSE_ADD_NORM ? op->out[0] : -1;
  case OP_SWIGLU:
  case OP_GEGLU:
  case OP_SWIGLU_BWD:
  case OP_GEGLU_BWD: return f == FUSE_NONE ? op->out[0] : -1;
  case OP_RMSNORM_BWD:
  case OP_LAYERNORM_BWD:
    return f == FUSE_NONE && stepc_norm_bwd_warps((int)ops_last(&g->t[op->in[1]]),
                                                  op->kind == OP_LAYERNORM_BWD ? 2 : 1) > 0
               ? op->out[0]
               : -1;
  case OP_ADD: return f == FUSE_NORM_BWD_ADD ? op->out[0] : -1;
  case OP_CONCAT_QKV: return f == FUSE_ROPE_QKV ? op->out[0] : -1;
  case OP_ADAMW: /* alone, on an fp32 parameter: model.fp8_param's master */
    return f == FUSE_NONE && op->nout == 3 && g->t[op->out[0]].dtype == DT_F32 ? op->out[0] : -1;
  default: return -1;
  }
}

/* The tensor a current-scaling fp8 cast at op o reads (bf16: an activation's FP8_QUANT or a
 * LINEAR_FP8's input; fp32: the FP8_QUANT of an fp8 primary weight's master), else -1: delayed casts
 * know their scale and run one pass anyway. */
static int amax_cast(const Graph *g, const Fusions *fz, int o) {
  const Op *op = &g->op[o];
  if (fz->skip[o] || op->nin < 1) return -1;
  DType in = g->t[op->in[0]].dtype;
  bool master = in == DT_F32 && op->kind == OP_FP8_QUANT && g->t[op->out[0]].role == ROLE_PARAM_FP8;
  if (in != DT_BF16 && !master) return -1;
  if (op->kind == OP_FP8_QUANT) return op->a.i[1] == 1 ? -1 : op->in[0];
  if (op->kind == OP_LINEAR_FP8) return op->a.i[2] == 1 ? -1 : op->in[0];
  return -1;
}

/* The fused fp8 amax: a current-scaling cast of a tensor that one of our kernels produces (or, for
 * an fp8 primary weight's master, the AdamW that updates it in place), in the same phase, reads the
 * amax that kernel folded into a slot of its own (fusions.h amax) and skips its amax pass. Each producer
 * serves one cast, the first that reads its output (another runs both passes); nothing between them writes
 * the tensor's storage. The producer writes the slot on every run and the cast only reads it, so every graph
 * mode, the evaluation's forward and every replay (a replayed producer is another op, with its own slot) see
 * the amax of the bytes they cast. */
static void fuse_amax(const Graph *g, Fusions *fz) {
  for (int c = 0; c < g->nop; c++) {
    int x = amax_cast(g, fz, c), p = x >= 0 ? g->t[x].producer : -1;
    if (x >= 0 && g->t[x].dtype == DT_F32) /* a master: its AdamW updates it in place */
      for (p = c - 1; p >= 0 && !(g->op[p].kind == OP_ADAMW && g->op[p].out[0] == x); p--)
        ;
    if (p < 0 || p >= c || fz->amax[p] >= 0 || amax_producer(g, fz, p) != x ||
        g->op[p].tags.phase != g->op[c].tags.phase || fz->alias[x] != x || fz->sink[x] >= 0)
      continue;
    int written = 0;
    for (int q = p + 1; q < c && !written; q++)
      for (int i = 0; i < g->op[q].nout; i++)
        written |= fusions_storage(fz, g->op[q].out[i]) == x;
    if (written) continue;
    fz->amax[p] = fz->amax[c] = fz->namax++;
  }
}

int fuse_build(const Graph *g, Fusions *fz, EwKernels *ks, char *err, size_t nerr) {
  if (fz->nop != g->nop || fz->nt != g->nt)
    return snprintf(err, nerr, "the fusions are sized for another graph (%d ops, %d tensors; it has %d, %d)",
                    fz->nop, fz->nt, g->nop, g->nt),
           -1;
  int *uses = calloc((size_t)g->nt + 1, sizeof *uses);
  if (!uses) return snprintf(err, nerr, "out of memory"), -1;
  for (int o = 0; o < g->nop; o++)
    for (int i = 0; i < g->op[o].nin; i++)
      uses[g->op[o].in[i]]++;
  /* weight gradients straight into their main gradients */
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    if (op->kind != OP_ACCUM) continue;
    int gt = op->in[0], mg = op->out[0], p = g->t[gt].producer;
    if (uses[gt] == 1 && p >= 0 && sinkable(g->op[p].kind) && g->t[mg].dtype == DT_F32 &&
        tensor_numel(&g->t[gt]) == tensor_numel(&g->t[mg])) {
      fz->sink[gt] = mg;
      fz->skip[o] = 1;
    }
  }
  /* cross-entropy forward + backward in place over the logits: the backward's loss gradient must
   * be a constant FILL and the logits read by nothing else */
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    if (op->kind != OP_CROSS_ENTROPY) continue;
    for (int b = o + 1; b < g->nop; b++) {
      const Op *bw = &g->op[b];
      if (bw->kind != OP_CROSS_ENTROPY_BWD || bw->in[1] != op->in[0]) continue;
      if (!constant_fill(g, bw->in[0]) || uses[op->in[0]] != 2)
        continue; /* then the CUDA executor refuses the unfused backward */
      fz->alias[bw->out[0]] = op->in[0];
      fz->skip[b] = 1;
    }
  }
  fuse_loss_bwd(g, fz);
  int rc = fuse_pairs(g, fz, uses, err, nerr);
  if (rc == 0) fuse_rope_qkv(g, fz, uses);
  if (rc == 0) rc = fuse_chains(g, fz, uses, ks, err, nerr);
  /* after the chains: an ADD a generated chain took (with a dropout's backward, say) stays there */
  for (int o = 1; o < g->nop && rc == 0; o++)
    if (norm_bwd_add(g, fz, uses, o)) fuse_pair(fz, o, o - 1, FUSE_NORM_BWD_ADD);
  if (rc == 0) fuse_optimizer(g, fz);
  if (rc == 0) fuse_wgrad_store(g, fz);
  if (rc == 0) fuse_wgrad_norm(g, fz);
  if (rc == 0) fuse_amax(g, fz);
  free(uses);
  return rc;
}

void fuse_group(const Fusions *fz, int o, int *first, int *last) {
  *first = *last = o;
  if (fz->fuse[o] != FUSE_NONE && fz->peer[o] >= 0 && fz->peer[o] < o) *first = fz->peer[o];
}

static int overlap(const Graph *g, const Fusions *fz, int a, int b) {
  const Tensor *ta = &g->t[fz->alias[a]], *tb = &g->t[fz->alias[b]];
  if (ta->buffer != tb->buffer || ta->bytes == 0 || tb->bytes == 0) return 0;
  return ta->offset < tb->offset + tb->bytes && tb->offset < ta->offset + ta->bytes;
}

int fuse_verify(const Graph *g, const Fusions *fz, char *err, size_t nerr) {
  for (int o = 0; o < g->nop; o++) {
    int first, last;
    fuse_group(fz, o, &first, &last);
    if (first == last) continue;
    for (int w = first; w <= last; w++)
      for (int j = 0; j < g->op[w].nout; j++)
        for (int r = first; r <= last; r++)
          for (int i = 0; i < g->op[r].nin; i++) {
            int out = g->op[w].out[j], in = g->op[r].in[i];
            if (out != in && overlap(g, fz, out, in)) {
              snprintf(err, nerr, "the fused group of ops %d..%d (%s): %s is planned over %s", first, last,
                       g->op[o].tags.module, g->t[out].name, g->t[in].name);
              return -1;
            }
          }
  }
  return 0;
}
