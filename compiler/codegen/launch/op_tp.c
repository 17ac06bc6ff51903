/* op_tp.c — tensor parallelism's ops on CUDA (ir/ops/tp.c): each collective a launch-program
 * collective record (rt.h RtColl, played through the job's communicator: NCCL, or host-staged when
 * ranks share a GPU: runtime/coll_host.h) over the rank's TP group, and BIAS_ADD.
 *
 *   TP_COPY       forward identity: a copy only where the memory plan gave the output its own slot
 *   TP_ALLREDUCE  all-reduce (sum) of a bf16 activation or an fp32 main gradient, in place or not;
 *                 on the global norm's TP accumulator (the sharded gradients' GRAD_SUMSQ ops' output)
 *                 the all-reduce of those ops' slices of the norm partials, which CLIP_COEF then sums
 *                 with the replicated gradients' (counted once: each rank holds the same)
 *   TP_GATHER     all-gather along the sequence: rank r's rows of every sequence, one all-gather a
 *                 sequence (its T rows are the members' blocks in member order), straight into the output
 *   TP_SCATTER    reduce-scatter along the sequence: the reverse, one a sequence
 *                 (both over the EP group with i[1] = 1: the allgather token dispatcher's)
 *   BIAS_ADD      out = x + b on every row (one kernel)
 *   TP_REP_PACK / TP_REP_UNPACK   the replicated shard rows' gradient into / out of the zero-padded
 *                 buffer the optimizer all-reduces between them (tp_rep_rows, one kernel each)
 *
 * and expert parallelism's exchange (ir/ops/ep.c), over the rank's EP group, in the CPU executor's
 * layout: EP_COUNTS all-gathers every rank's expert segments and derives this rank's receive
 * layout (kernels/ep.cuh); EP_DISPATCH / EP_COMBINE pack the rows for each peer into a block of the
 * static per-pair bound (R / EP rows), exchange the blocks by one all-to-all (Megatron's alltoall
 * dispatcher's collective, padded to the bound so that a dropless step is still one captured
 * graph) and place the received rows.
 *
 * The sums' order is the backend's: the host-staged one adds the members in group order, NCCL in its
 * own (docs/parallelism.md says what that means for bitwise comparisons). */
#include "codegen/launch/exec_internal.h"
#include "codegen/launch/launchers.h"

static int coll_dtype(RtExec *x, const Tensor *t, int64_t *dt) {
  if (t->dtype == DT_BF16) return *dt = RT_COLL_BF16, RT_OK;
  if (t->dtype == DT_F32) return *dt = RT_COLL_F32, RT_OK;
  return rt_fail(x->d, "a collective of %s (%s): only bf16 and fp32 tensors are exchanged", t->name,
                 dtype_name(t->dtype));
}

/* on the communication stream while the op is lowered for it (RtExec.comm_side:
 * compiler/passes/comm_overlap.c) */
static int coll_in(RtExec *x, int64_t group, RtCollOp kind, int64_t dt, int64_t count, CUdeviceptr src,
                   CUdeviceptr dst) {
  RtColl c = {
      .op = kind, .dtype = dt, .group = group, .count = count, .side = x->comm_side, .src = src, .dst = dst};
  return rt_coll(x->d, &c);
}

static int rt_op_tp_copy(RtExec *x, const Op *op) {
  CUdeviceptr in = rt_in(x, op, 0), out = rt_out(x, op, 0);
  return in == out ? RT_OK : rt_copy_d2d(x->d, out, in, (size_t)rt_t(x, op->in[0])->bytes);
}

/* The global norm's TP accumulator (the output of the sharded gradients' GRAD_SUMSQ ops): on CUDA
 * those ops write their slices of the norm partials, not the accumulator, so the partial slices are
 * what is summed over the group — contiguous slices merged, one all-reduce each. 0 when acc is not
 * such an accumulator (*found 0). */
/* The norm partials [lo, hi) summed over the group in place (nothing when empty). */
static int partials_allreduce(RtExec *x, int64_t group, int64_t lo, int64_t hi) {
  CUdeviceptr p = x->gn_partial + (CUdeviceptr)(lo * 4);
  return hi > lo ? coll_in(x, group, RT_COLL_ALLREDUCE_SUM, RT_COLL_F32, hi - lo, p, p) : RT_OK;
}

static int sumsq_allreduce(RtExec *x, int64_t group, int acc, int *found) {
  const Graph *g = x->g;
  int64_t lo = -1, hi = -1; /* the run of slices being merged */
  *found = 0;
  for (int k = 0; k < g->nop; k++) {
    if (g->op[k].kind != OP_GRAD_SUMSQ || g->op[k].out[0] != acc) continue;
    int64_t first, count;
    if (rt_exec_norm_partials(x, k, &first, &count)) return RT_ERROR;
    *found = 1;
    if (first == hi) {
      hi += count;
      continue;
    }
    if (partials_allreduce(x, group, lo, hi)) return RT_ERROR;
    lo = first, hi = first + count;
  }
  return partials_allreduce(x, group, lo, hi);
}

static int rt_op_tp_allreduce(RtExec *x, const Op *op) {
  int64_t group = op->a.i[1] ? RT_COLL_GROUP_EP : RT_COLL_GROUP_TP; /* i[1]: the expert-parallel group */
  int found = 0;
  if (op->in[0] == op->out[0] && sumsq_allreduce(x, group, op->in[0], &found)) return RT_ERROR;
  if (found) return RT_OK;
  int64_t dt = 0;
  if (coll_dtype(x, rt_t(x, op->in[0]), &dt)) return RT_ERROR;
  return coll_in(x, group, RT_COLL_ALLREDUCE_SUM, dt, rt_numel(x, op->in[0]), rt_in(x, op, 0),
                 rt_out(x, op, 0));
}

/* The sequence shards (ir/ops/tp.c tp_shards): rank r's block of sequence b is rows [r tl, (r + 1) tl)
 * of it, so a sequence's T rows are the members' blocks in member order and each sequence is one
 * collective between them and the rank's tl rows — no staging, no copies. i[1] = 1: over the EP
 * group (the allgather token dispatcher); an int32 tensor (its expert indices) is gathered as an
 * fp32 collective of the same bits (an all-gather copies, it never adds). */
static int per_sequence(RtExec *x, const Op *op, RtCollOp kind, const Tensor *shard) {
  int64_t dt = 0, b = shard->shape[0], n = tensor_numel(shard) / b, tp = op->a.i[0];
  int64_t group = op->a.i[1] ? RT_COLL_GROUP_EP : RT_COLL_GROUP_TP;
  if (kind == RT_COLL_ALL_GATHER && shard->dtype == DT_I32)
    dt = RT_COLL_F32;
  else if (coll_dtype(x, shard, &dt))
    return RT_ERROR;
  int64_t es = dt == RT_COLL_BF16 ? 2 : 4, full = n * tp * es, part = n * es;
  int gather = kind == RT_COLL_ALL_GATHER;
  for (int64_t i = 0; i < b; i++) {
    CUdeviceptr in = rt_in(x, op, 0) + (CUdeviceptr)(i * (gather ? part : full)),
                out = rt_out(x, op, 0) + (CUdeviceptr)(i * (gather ? full : part));
    if (coll_in(x, group, kind, dt, n, in, out)) return RT_ERROR;
  }
  return RT_OK;
}

static int rt_op_tp_gather(RtExec *x, const Op *op) {
  return per_sequence(x, op, RT_COLL_ALL_GATHER, rt_t(x, op->in[0]));
}

static int rt_op_tp_scatter(RtExec *x, const Op *op) {
  return per_sequence(x, op, RT_COLL_REDUCE_SCATTER, rt_t(x, op->out[0]));
}

int64_t rt_tp_workspace(const Graph *g, const Op *op) {
  if ((op->kind == OP_EMBED && op->a.i[0]) || (op->kind == OP_EMBED_BWD && op->a.i[1]))
    return 4 * tensor_numel(&g->t[op->in[op->kind == OP_EMBED ? 0 : 1]]);
  if (op->kind == OP_CROSS_ENTROPY && op->a.i[0]) return 12 * ops_rows(&g->t[op->in[0]]);
  if (op->kind == OP_EP_DISPATCH || op->kind == OP_EP_COMBINE) /* the send and receive blocks: 2 R rows */
    return 2 * g->t[op->kind == OP_EP_DISPATCH ? op->out[0] : op->in[0]].bytes;
  if (op->kind == OP_MOE_AUX_LOSS && op->a.i[2] > 1) return 4 * ops_last(&g->t[op->in[0]]);
  if (op->kind == OP_MOE_AUX_LOSS_BWD && op->a.i[2] > 1) return 4 * op->a.i[1];
  return 0;
}

static int rt_op_bias_add(RtExec *x, const Op *op) {
  const Tensor *t = rt_t(x, op->in[0]);
  if (t->dtype != DT_BF16 || rt_t(x, op->in[1])->dtype != DT_BF16)
    return rt_fail(x->d, "bias_add of %s: bf16 activations and bias only", t->name);
  long n = (long)ops_rows(t);
  int c = (int)ops_last(t);
  return rt_launch_bias_add_rows(x->d, rt_grid_stride(x->d, (int64_t)n * c), 256, 0, rt_out(x, op, 0),
                                 rt_in(x, op, 0), rt_in(x, op, 1), n, c);
}

/* TP_REP_PACK in [g] out [buf, g] / TP_REP_UNPACK in [buf, g] out [g] (fp32 main gradients, g in place) */
static int rt_op_tp_rep_rows(RtExec *x, const Op *op) {
  int pack = op->kind == OP_TP_REP_PACK;
  const Tensor *g = rt_t(x, op->in[pack ? 0 : 1]);
  CUdeviceptr gp = rt_in(x, op, pack ? 0 : 1), buf = pack ? rt_out(x, op, 0) : rt_in(x, op, 0);
  if (g->dtype != DT_F32 || gp != rt_out(x, op, pack ? 1 : 0))
    return rt_fail(x->d, "%s of %s: an fp32 main gradient, in place", op_name(op->kind), g->name);
  int64_t tp = op->a.i[0], rep = op->a.i[1], nrep = op->a.i[3], S = op->a.i[4], part = S * rep / tp,
          inner = tensor_numel(g) / g->shape[0];
  return rt_launch_tp_rep_rows(x->d, rt_grid_stride(x->d, nrep * (pack ? S : part) * inner), 256, 0, gp, buf,
                               (long)part, (long)inner, (long)op->a.i[2], (int)nrep, (long)S, (int)rep, pack,
                               x->rank);
}

/* in [seg (E, 2)] out [all_seg (EP, E, 2), lseg (El, 2)] */
static int rt_op_ep_counts(RtExec *x, const Op *op) {
  int ep = (int)op->a.i[0], E = (int)rt_t(x, op->in[0])->shape[0];
  return coll_in(x, RT_COLL_GROUP_EP, RT_COLL_ALL_GATHER, RT_COLL_F32, 2 * (int64_t)E, rt_in(x, op, 0),
                 rt_out(x, op, 0)) ||
                 rt_launch_ep_local_segments(x->d, rt_dim1(1), 1, 0, rt_out(x, op, 1), rt_out(x, op, 0), ep,
                                             E, x->rank + 4)
             ? RT_ERROR
             : RT_OK;
}

/* in [x (N, ...), all_seg] out [xr (R, ...)] / in [y (R, ...), all_seg] out [yp (N, ...)]: the rows
 * packed into EP blocks of P = R / EP rows (the static bound on what one source sends one owner),
 * exchanged by one all-to-all over the EP group, placed (kernels/ep.cuh ep_a2a_rows); the op
 * workspace holds the send blocks, then the received ones. */
static int ep_move(RtExec *x, const Op *op) {
  const Tensor *t = rt_t(x, op->in[0]), *as = rt_t(x, op->in[1]);
  int ep = (int)op->a.i[0], E = (int)as->shape[1], dispatch = op->kind == OP_EP_DISPATCH;
  int64_t rows = t->shape[0], out_rows = op->a.i[1], rb = t->bytes / (rows > 0 ? rows : 1);
  int64_t R = dispatch ? out_rows : rows, P = R / (ep > 0 ? ep : 1);
  if (rb % 2)
    return rt_fail(x->d, "%s: rows of %lld bytes (an even number moves)", op_name(op->kind), (long long)rb);
  if (ep < 1 || R % ep)
    return rt_fail(x->d, "%s: %lld received rows do not split into %d equal blocks", op_name(op->kind),
                   (long long)R, ep);
  int w = (int)(rb / 2);
  unsigned block = w >= 256 ? 256 : 64;
  CUdeviceptr out = rt_out(x, op, 0), seg = rt_in(x, op, 1), in = rt_in(x, op, 0), send = x->work,
              recv = x->work + (CUdeviceptr)(R * rb);
  int64_t unit = rb % 4 == 0 ? RT_COLL_F32 : RT_COLL_BF16, count = P * rb / (unit == RT_COLL_F32 ? 4 : 2);
  return rt_launch_ep_a2a_rows(x->d, rt_dim1((unsigned)R), block, 0, send, in, seg, (long)R, (long)rows,
                               (long)P, w, ep, E, dispatch ? 0 : 2, x->rank + 4) ||
                 coll_in(x, RT_COLL_GROUP_EP, RT_COLL_ALL_TO_ALL, unit, count, send, recv) ||
                 rt_launch_ep_a2a_rows(x->d, rt_dim1((unsigned)out_rows), block, 0, out, recv, seg,
                                       (long)out_rows, (long)R, (long)P, w, ep, E, dispatch ? 1 : 3,
                                       x->rank + 4)
             ? RT_ERROR
             : RT_OK;
}

/* This family's rows of the per-kind launch table (exec.c gathers every family's). */
const RtOpRow RT_OPS_TP[] = {
    {OP_TP_COPY, rt_op_tp_copy},
    {OP_TP_ALLREDUCE, rt_op_tp_allreduce},
    {OP_TP_GATHER, rt_op_tp_gather},
    {OP_TP_SCATTER, rt_op_tp_scatter},
    {OP_BIAS_ADD, rt_op_bias_add},
    {OP_TP_REP_PACK, rt_op_tp_rep_rows},
    {OP_TP_REP_UNPACK, rt_op_tp_rep_rows},
    {OP_EP_COUNTS, rt_op_ep_counts},
    {OP_EP_DISPATCH, ep_move},
    {OP_EP_COMBINE, ep_move},
    {OP_COUNT, NULL},
};
