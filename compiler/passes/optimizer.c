/* optimizer.c — the optimizer step appended to the graph as ops (see autodiff.h). Megatron's
 * choices: no weight decay on 1-D params (biases, norm weights); clip by the global L2 norm of the
 * main gradients with coefficient clip / (norm + 1e-6); Adam bias correction by the step count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/spec.h"
#include "passes/autodiff.h"
#include "plan/plan.h"

static int opt_tensor(Graph *g, const char *name, DType dt, int of, const Tensor *like) {
  int64_t one = 1;
  int id = like ? graph_tensor(g, name, dt, ROLE_OPTIM, like->ndim, like->shape)
                : graph_tensor(g, name, dt, ROLE_OPTIM, 1, &one);
  if (id >= 0) g->t[id].of = of;
  return id;
}

/* The TP_REP_PACK / _UNPACK attributes (ir/ops/tp.c) of a shard p with replicated segments
 * (Tensor.tp_rep: linear_qkv's K and V under fewer key/value groups than TP ranks): 1 and *a, 0
 * when p has none, -1 (g->err) for a layout those ops do not cover (not consecutive segments of one
 * size and replication along dim 0). */
static int rep_attrs(Graph *g, const Tensor *p, OpAttrs *a) {
  int first = -1, last = -1;
  int64_t row0 = 0; /* the shard's rows before the first replicated part */
  for (int k = 0; k < p->tp_nseg; k++)
    if (tensor_tp_rep(p, k) > 1)
      last = k, first = first < 0 ? k : first;
    else if (first < 0)
      row0 += tensor_tp_part(p, k);
  if (first < 0) return 0;
  bool alike = p->tp_dim == 0 && !p->tp_ep;
  for (int k = first; alike && k <= last; k++)
    alike = p->tp_seg[k] == p->tp_seg[first] && tensor_tp_rep(p, k) == tensor_tp_rep(p, first);
  if (!alike)
    return graph_fail(
        g, "%s: replicated tensor-parallel segments that are not consecutive, alike and along dim 0",
        p->name);
  *a = (OpAttrs){.i = {p->tp_size, tensor_tp_rep(p, first), row0, last - first + 1, p->tp_seg[first]}};
  return 1;
}

static bool micro_phase(Phase p) {
  return p == IR_PHASE_FORWARD || p == IR_PHASE_BACKWARD || p == IR_PHASE_REPLAY;
}

/* The op a ZERO of main gradient mg must come before so that it precedes every write of mg in the
 * micro program: the earliest op that writes it, where an ACCUM counts as its input's producer (the
 * fusion pass sinks an ACCUM into the kernel producing the weight gradient, fuse.c Fusions.sink, so
 * the first write happens at that launch); -1 when nothing in the micro program writes mg. */
static int first_write(const Graph *g, int mg) {
  int first = -1;
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    if (!micro_phase(op->tags.phase)) continue;
    for (int j = 0; j < op->nout; j++) {
      if (op->out[j] != mg) continue;
      int w = o;
      if (op->kind == OP_ACCUM && op->nin == 1 && g->t[op->in[0]].producer >= 0 &&
          g->t[op->in[0]].producer < o)
        w = g->t[op->in[0]].producer;
      if (first < 0 || w < first) first = w;
    }
  }
  return first;
}

/* The ZERO each main gradient accumulates from. With several micro-batches the micro program is
 * replayed with the same addresses and the gradients add up over the micro-batches, so they are
 * persistent (Megatron's main_grad buffers) and zeroed at the end of the tail, ready for the next
 * step. With one micro-batch a gradient need not exist before the backward first writes it
 * (PyTorch's zero_grad(set_to_none=True)): its ZERO is a backward op right before that write, with
 * that op's tags (same layer, module and scopes: a captured scope zeroes what it writes), and the
 * memory plan keeps it live from there to the optimizer only (memplan.c). A gradient whose first
 * write is not a backward op, or that nothing in the micro program writes, keeps the tail ZERO and
 * stays persistent. Gradients are tensors [0, nt). 0, or -1 with g->err. */
static int zero_main_grads(Graph *g, int nt) {
  IrTags saved = g->cur;
  int n0 = g->nop, nz = 0, moved = 0, rc = 0;
  int *before = malloc(((size_t)nt + 1) * sizeof *before); /* per ZERO added (ids n0..): the op it precedes */
  if (!before) return graph_fail(g, "out of memory");
  for (int i = 0; i < nt && rc == 0; i++) {
    if (g->t[i].role != ROLE_GRAD) continue;
    int w = g->num_microbatches == 1 ? first_write(g, i) : -1;
    if (w >= 0 && g->op[w].tags.phase != IR_PHASE_BACKWARD) w = -1;
    g->cur = w >= 0 ? g->op[w].tags : saved;
    if (graph_op_into(g, OP_ZERO, NULL, 0, &i, 1, NULL) < 0) rc = -1;
    before[nz++] = w, moved += w >= 0;
  }
  g->cur = saved;
  if (rc < 0 || moved == 0) return free(before), rc;
  int n = g->nop, k = 0;
  int *order = malloc(((size_t)n + 1) * sizeof *order);
  if (!order) return free(before), graph_fail(g, "out of memory");
  for (int o = 0; o < n; o++) {
    if (o >= n0 && before[o - n0] >= 0) continue; /* placed before its first write below */
    for (int z = 0; o < n0 && z < nz; z++)
      if (before[z] == o) order[k++] = n0 + z;
    order[k++] = o;
  }
  rc = k == n ? graph_reorder(g, order) : graph_fail(g, "main-gradient zeros: %d of %d ops placed", k, n);
  free(order), free(before);
  return rc;
}

int optimizer_build(Graph *g, const Spec *s) {
  const SpecOptimizer *o = &s->optimizer;
  IrTags saved = g->cur;
  g->cur = (IrTags){.phase = IR_PHASE_OPTIMIZER, .layer = -1, .fwd = -1};
  snprintf(g->cur.module, sizeof g->cur.module, "optimizer");
  int step = opt_tensor(g, "optimizer.step", DT_I32, -1, NULL);
  int lr = opt_tensor(g, "optimizer.lr", DT_F32, -1, NULL);
  int sumsq = opt_tensor(g, "optimizer.grad_sumsq", DT_F32, -1, NULL);
  int norm = opt_tensor(g, "optimizer.grad_norm", DT_F32, -1, NULL);
  int coef = opt_tensor(g, "optimizer.clip_coef", DT_F32, -1, NULL);
  if (step < 0 || lr < 0 || sumsq < 0 || norm < 0 || coef < 0) return -1;

  int style = strcmp(o->lr_decay_style, "constant") == 0 ? 0
              : strcmp(o->lr_decay_style, "linear") == 0 ? 1
                                                         : 2;
  int64_t decay = s->present[SPEC_F_optimizer_lr_decay_iters] ? o->lr_decay_iters : s->train.train_iters;
  OpAttrs la = {.f = {o->lr, o->min_lr}, .i = {o->lr_warmup_iters, decay, style}};
  int lr_out[2] = {step, lr};
  if (graph_op_into(g, OP_LR_SCHED, NULL, 0, lr_out, 2, &la) < 0) return -1;
  if (graph_op_into(g, OP_ZERO, NULL, 0, &sumsq, 1, NULL) < 0) return -1;
  int nt = g->nt;
  /* Tensor parallelism (a per-rank step, ir.h Tensor.tp_*): under sequence parallelism the
   * replicated params (the norms) saw only this rank's rows, so their main gradients are summed
   * over the TP group first (Megatron's allreduce of sequence-parallel grads); the global norm
   * adds the sharded gradients' sums of squares over the group, the replicated ones' once. */
  int64_t tp = s->per_rank ? s->model.tensor_model_parallel_size : 1;
  bool tp_on = spec_lowers_tp(s); /* also at TP 1 under train.force_parallel_lowering */
  OpAttrs ta = {.i = {tp}};
  int sumsq_tp = tp_on ? opt_tensor(g, "optimizer.grad_sumsq_tp", DT_F32, -1, NULL) : -1;
  if (tp_on && (sumsq_tp < 0 || graph_op_into(g, OP_ZERO, NULL, 0, &sumsq_tp, 1, NULL) < 0)) return -1;
  for (int i = 0; i < nt && tp_on && s->model.sequence_parallel; i++)
    if (g->t[i].role == ROLE_GRAD && g->t[g->t[i].of].tp_nseg == 0 &&
        graph_op_into(g, OP_TP_ALLREDUCE, &i, 1, &i, 1, &ta) < 0)
      return -1;
  /* Replicated shard rows (fewer key/value groups than TP ranks: linear_qkv's K and V rows on the
   * TP/G ranks sharing a group): each such rank's gradient of them is its own query heads' part. They
   * are moved into a zero-padded buffer of every group's rows (TP_REP_PACK), which one all-reduce over
   * the TP group sums — each group's rows over the ranks holding it — and moved back after the norm
   * (TP_REP_UNPACK); the buffer, alike on every rank, is counted once in the norm, the shard's other
   * rows with the sharded gradients'. */
  int *rep_buf = tp > 1 ? malloc((size_t)nt * sizeof *rep_buf) : NULL;
  OpAttrs *rep_a = tp > 1 ? malloc((size_t)nt * sizeof *rep_a) : NULL;
  if (tp > 1 && (!rep_buf || !rep_a)) {
    free(rep_buf), free(rep_a);
    return graph_fail(g, "out of memory");
  }
  int rc = 0;
  for (int i = 0; i < nt && tp > 1 && rc == 0; i++) {
    rep_buf[i] = -1;
    if (g->t[i].role != ROLE_GRAD) continue;
    const Tensor *p = &g->t[g->t[i].of];
    int r = rep_attrs(g, p, &rep_a[i]);
    if (r <= 0) {
      rc = r;
      continue;
    }
    char name[IR_NAME_MAX];
    snprintf(name, sizeof name, "%s.grad_rep_rows", p->name);
    int64_t sh[IR_MAX_DIMS];
    memcpy(sh, g->t[i].shape, sizeof sh);
    sh[0] = rep_a[i].i[3] * rep_a[i].i[4];
    int buf = graph_tensor(g, name, DT_F32, ROLE_ACT_GRAD, g->t[i].ndim, sh), pack_out[2] = {buf, i};
    if (buf < 0 || graph_op_into(g, OP_TP_REP_PACK, &i, 1, pack_out, 2, &rep_a[i]) < 0 ||
        graph_op_into(g, OP_TP_ALLREDUCE, &buf, 1, &buf, 1, &ta) < 0)
      rc = -1;
    rep_buf[i] = buf;
  }
  if (rc < 0) {
    free(rep_buf), free(rep_a);
    return -1;
  }
  /* i[0]: the fusion pass may run the op in one multi-tensor launch with its neighbours (fuse.c) */
  OpAttrs sa = {.i = {o->multi_tensor}};
  /* Expert parallelism: each rank holds E/EP experts (Tensor.tp_ep); their gradients' squares are
   * summed over the EP group, so the norm counts every expert once (TP_ALLREDUCE i[1] = 1: the EP
   * group). The expert-data-parallel copies of an expert are equal after the buckets' reduce. */
  int64_t ep = s->per_rank ? s->model.expert_model_parallel_size : 1;
  bool ep_on = spec_lowers_ep(s);
  OpAttrs ea = {.i = {ep, 1}};
  int sumsq_ep = ep_on ? opt_tensor(g, "optimizer.grad_sumsq_ep", DT_F32, -1, NULL) : -1;
  if (ep_on && (sumsq_ep < 0 || graph_op_into(g, OP_ZERO, NULL, 0, &sumsq_ep, 1, NULL) < 0)) return -1;
  /* one accumulator after another (the replicated gradients', the TP shards', the EP shards'), so that
   * each accumulator's GRAD_SUMSQ ops are adjacent: the CUDA lowering runs them as one multi-tensor
   * group whose slice of the norm partials one collective sums over the group (op_tp.c) */
  for (int pass = 0; pass < 3 && rc == 0; pass++) {
    for (int i = 0; i < nt && rc == 0; i++) {
      if (g->t[i].role != ROLE_GRAD) continue;
      const Tensor *p = &g->t[g->t[i].of];
      int cls = p->tp_nseg > 0 ? (p->tp_ep ? 2 : 1) : 0;
      int *acc = cls == 2 ? &sumsq_ep : cls == 1 ? &sumsq_tp : &sumsq;
      if (cls == pass && graph_op_into(g, OP_GRAD_SUMSQ, &i, 1, acc, 1, &sa) < 0) rc = -1;
    }
    for (int i = 0; i < nt && pass == 0 && rep_buf && rc == 0; i++) /* the replicated rows, once */
      if (rep_buf[i] >= 0 && graph_op_into(g, OP_GRAD_SUMSQ, &rep_buf[i], 1, &sumsq, 1, &sa) < 0) rc = -1;
  }
  for (int i = 0; i < nt && rep_buf && rc == 0; i++) {
    int in[2] = {rep_buf[i], i};
    if (rep_buf[i] >= 0 && graph_op_into(g, OP_TP_REP_UNPACK, in, 2, &i, 1, &rep_a[i]) < 0) rc = -1;
  }
  free(rep_buf), free(rep_a);
  if (rc < 0) return -1;
  if (tp_on && (graph_op_into(g, OP_TP_ALLREDUCE, &sumsq_tp, 1, &sumsq_tp, 1, &ta) < 0 ||
                graph_op_into(g, OP_ACCUM, &sumsq_tp, 1, &sumsq, 1, NULL) < 0))
    return -1;
  if (ep_on && (graph_op_into(g, OP_TP_ALLREDUCE, &sumsq_ep, 1, &sumsq_ep, 1, &ea) < 0 ||
                graph_op_into(g, OP_ACCUM, &sumsq_ep, 1, &sumsq, 1, NULL) < 0))
    return -1;
  OpAttrs ca = {.f = {o->clip_grad}};
  int clip_out[2] = {norm, coef};
  if (graph_op_into(g, OP_CLIP_COEF, &sumsq, 1, clip_out, 2, &ca) < 0) return -1;

  for (int i = 0; i < nt; i++) {
    if (g->t[i].role != ROLE_GRAD) continue;
    int param = g->t[i].of;
    Tensor p = g->t[param];
    char name[IR_NAME_MAX];
    snprintf(name, sizeof name, "%s.exp_avg", p.name);
    int m = opt_tensor(g, name, DT_F32, param, &p);
    snprintf(name, sizeof name, "%s.exp_avg_sq", p.name);
    int v = opt_tensor(g, name, DT_F32, param, &p);
    int master = -1;
    if (p.dtype != DT_F32) { /* bf16 compute weights: the update runs on an fp32 master copy */
      snprintf(name, sizeof name, "%s.master", p.name);
      master = graph_tensor(g, name, DT_F32, ROLE_MASTER, p.ndim, p.shape);
      if (master >= 0) g->t[master].of = param;
    }
    if (m < 0 || v < 0 || (p.dtype != DT_F32 && master < 0)) return -1;
    OpAttrs aa = {.f = {o->adam_beta1, o->adam_beta2, o->adam_eps, p.ndim >= 2 ? o->weight_decay : 0.0},
                  .i = {o->multi_tensor}};
    int in[4] = {i, coef, lr, step}, out[4] = {param, m, v, master};
    if (graph_op_into(g, OP_ADAMW, in, 4, out, master >= 0 ? 4 : 3, &aa) < 0) return -1;
  }
  if (zero_main_grads(g, nt) < 0) return -1;
  g->lr = lr;
  g->grad_norm = norm;
  g->cur = saved;
  return 0;
}
