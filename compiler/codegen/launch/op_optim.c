/* op_optim.c — dispatch of the optimizer ops (ir/ops/optim.c) and the tables of the compiler's
 * multi-tensor groups (compiler/passes/fuse.c's fuse_optimizer): one norm_squared_multi launch for a run
 * of GRAD_SUMSQ ops, one adamw_multi for a run of ADAMW ops. A group's table (kernels/launch.h)
 * lists its tensors in op order with the first chunk of each, so the kernels' partials and updates
 * do not depend on anything decided at run time; it is written once, when the executor opens, from
 * the memory plan's addresses, so a captured graph replays it as it stands. */
#include <string.h>

#include "codegen/launch/exec_internal.h"
#include "codegen/launch/launchers.h"
#include "kernels/launch.h"

static int64_t chunks_of(int64_t n, int64_t chunk) { return n > 0 ? (n + chunk - 1) / chunk : 0; }

/* The partial slots of GRAD_SUMSQ op's gradient in its group's slice: its producer's output tiles
 * when that kernel writes the partials (fusions.h norm_by), else its chunks. */
static int64_t sumsq_slots(const RtExec *x, const Op *op) {
  int by = x->fz->norm_by[op->in[0]];
  return by >= 0 ? rt_grouped_wgrad_tiles(x, &x->g->op[by])
                 : chunks_of(tensor_numel(&x->g->t[op->in[0]]), STEPC_SUMSQ_CHUNK);
}

int rt_multi_rows(const RtExec *x, int o, uint64_t *w, int64_t *chunks) {
  const Graph *g = x->g;
  const Op *run = &g->op[o];
  int sumsq = run->kind == OP_GRAD_SUMSQ, width = sumsq ? STEPC_SUMSQ_ROW : STEPC_ADAMW_ROW;
  int64_t chunk = sumsq ? STEPC_SUMSQ_CHUNK : STEPC_ADAMW_CHUNK, at = 0;
  for (int k = x->fz->peer[o]; k <= o; k++) {
    const Op *op = &g->op[k];
    const Tensor *gr = &g->t[op->in[0]];
    int64_t n = tensor_numel(gr);
    if (op->kind != run->kind || (k < o && !x->fz->skip[k]) || (!sumsq && op->nout != 4))
      return rt_fail(x->d,
                     "op %d (%s): the multi-tensor group of ops %d..%d mixes kinds or runs a member alone", k,
                     op->tags.module, x->fz->peer[o], o);
    if (gr->dtype != DT_F32 && (!sumsq || gr->dtype != DT_BF16))
      return rt_fail(x->d, "gradient %s is %s: the multi-tensor %s takes fp32%s gradients", gr->name,
                     dtype_name(gr->dtype), sumsq ? "norm" : "AdamW", sumsq ? " or bf16" : "");
    if (w) {
      uint64_t *r = w + (int64_t)(k - x->fz->peer[o]) * width;
      if (sumsq) {
        r[0] = rt_exec_ptr(x, op->in[0]), r[1] = (uint64_t)n, r[2] = (uint64_t)at;
        r[3] = x->fz->norm_by[op->in[0]] >= 0 ? STEPC_MULTI_DONE
               : gr->dtype == DT_BF16         ? STEPC_MULTI_BF16
                                              : STEPC_MULTI_F32;
      } else {
        float wd = (float)op->a.f[3]; /* as rt_op_adamw passes wd_mult */
        uint32_t bits;
        memcpy(&bits, &wd, 4);
        r[0] = rt_exec_ptr(x, op->out[3]), r[1] = rt_exec_ptr(x, op->out[0]),
        r[2] = rt_exec_ptr(x, op->in[0]);
        r[3] = rt_exec_ptr(x, op->out[1]), r[4] = rt_exec_ptr(x, op->out[2]), r[5] = (uint64_t)n,
        r[6] = (uint64_t)at;
        r[7] = bits;
      }
    }
    at += sumsq ? sumsq_slots(x, op) : chunks_of(n, chunk);
  }
  if (at < 1 || at > 0x7fffffff)
    return rt_fail(x->d, "op %d: a multi-tensor group of %lld chunks (1 to 2^31 - 1 fit a grid)", o,
                   (long long)at);
  *chunks = at;
  return RT_OK;
}

int rt_exec_multi_table(const RtExec *x, int op, const uint64_t **words, int *rows, int *width,
                        int64_t *chunks) {
  if (op < 0 || op >= x->g->nop || x->multi_at[op] < 0) return -1;
  *words = x->multi_host + x->multi_at[op];
  *rows = op - x->fz->peer[op] + 1;
  *width = x->g->op[op].kind == OP_GRAD_SUMSQ ? STEPC_SUMSQ_ROW : STEPC_ADAMW_ROW;
  *chunks = x->multi_chunks[op];
  return 0;
}

static CUdeviceptr table_of(const RtExec *x, int o) {
  return x->multi_table + (CUdeviceptr)(x->multi_at[o] * 8);
}

/* in [g] out [acc]: this tensor's (or group's) slice of the global-norm partials; the sum is
 * CLIP_COEF's. */
static int rt_op_grad_sumsq(RtExec *x, const Op *op) {
  int o = rt_op_index(x, op);
  CUdeviceptr part = x->gn_partial + (CUdeviceptr)((int64_t)x->slot[o] * 4), g = rt_in(x, op, 0);
  if (x->fz->fuse[o] == RT_FUSE_SUMSQ_MULTI)
    return rt_launch_norm_squared_multi(x->d, rt_dim1((unsigned)x->multi_chunks[o]), STEPC_MULTI_THREADS, 0,
                                        part, table_of(x, o), o - x->fz->peer[o] + 1, STEPC_SUMSQ_CHUNK);
  return rt_launch_norm_squared_partial(x->d, rt_dim1((unsigned)x->gn_groups), 256, 0, part, g,
                                        (long)rt_numel(x, op->in[0]));
}

/* in [acc] out [norm, coef] */
static int rt_op_clip_coef(RtExec *x, const Op *op) {
  return rt_launch_global_norm_finalize(x->d, rt_dim1(1), 1024, 0, rt_out(x, op, 0), rt_out(x, op, 1),
                                        x->gn_partial, x->n_partial, (float)op->a.f[0]);
}

/* out [step, lr] */
static int rt_op_lr_sched(RtExec *x, const Op *op) {
  return rt_launch_lr_schedule(x->d, rt_dim1(1), 1, 0, rt_out(x, op, 0), rt_out(x, op, 1), op->a.f[0],
                               op->a.f[1], (long)op->a.i[0], (long)op->a.i[1], (int)op->a.i[2]);
}

/* in [grad, coef, lr, step] out [param, m, v, master]; a multi-tensor group reads the same
 * coef, lr and step for every member (fuse_optimizer groups only those). */
static int rt_op_adamw(RtExec *x, const Op *op) {
  /* an fp32 parameter (the MoE router's) has no master: it is updated in place, no bf16 copy */
  int f32 = op->nout == 3 && rt_t(x, op->out[0])->dtype == DT_F32;
  if (op->nout != 4 && !f32)
    return rt_fail(x->d, "AdamW of a %s parameter without an fp32 master",
                   dtype_name(rt_t(x, op->out[0])->dtype));
  int o = rt_op_index(x, op), s = x->slot[o];
  CUdeviceptr hp = x->hp + (CUdeviceptr)(32 * (s % RT_MAX_HP));
  if (rt_exec_adamw_hparams(x, o))
    return RT_ERROR; /* the first AdamW of its setting: this step's hyper-parameters */
  CUdeviceptr coef = rt_in(x, op, 1);
  if (x->fz->fuse[o] == RT_FUSE_ADAMW_MULTI)
    return rt_launch_adamw_multi(x->d, rt_dim1((unsigned)x->multi_chunks[o]), STEPC_MULTI_THREADS, 0,
                                 table_of(x, o), o - x->fz->peer[o] + 1, STEPC_ADAMW_CHUNK, hp, coef);
  CUdeviceptr master = rt_out(x, op, f32 ? 0 : 3), param = f32 ? 0 : rt_out(x, op, 0), grad = rt_in(x, op, 0),
              m = rt_out(x, op, 1), v = rt_out(x, op, 2);
  long n = (long)rt_numel(x, op->in[0]);
  /* model.fp8_param's master: its amax for the step's cast of it (the fused fp8 amax) */
  CUdeviceptr am = rt_amax_slot(x, op), ap = am ? x->amax_partial : 0;
  return rt_launch_adamw_update(x->d, rt_dim1(rt_adamw_blocks(x, op)), 256, 0, master, param, grad, m, v, n,
                                hp, coef, (float)op->a.f[3], ap, am);
}

/* adamw_update's grid: grid-stride over the tensor. */
unsigned rt_adamw_blocks(const RtExec *x, const Op *op) {
  return rt_grid1d(x->d, (int64_t)rt_numel(x, op->in[0]));
}

/* ---- ZeRO-1 (runtime/api_cuda_dp.c): the optimizer restricted to a rank's shard ---- */

/* The multi-tensor group op k belongs to: the op that runs it, or -1 (k runs alone). */
static int group_of(const RtExec *x, int k) {
  for (int r = k; r < x->g->nop; r++)
    if (x->multi_at[r] >= 0 && x->fz->peer[r] <= k)
      return r;
    else if (!x->fz->skip[r] && r > k)
      break;
  return -1;
}

int rt_exec_norm_partials(const RtExec *x, int op, int64_t *first, int64_t *count) {
  const Graph *g = x->g;
  if (op < 0 || op >= g->nop || g->op[op].kind != OP_GRAD_SUMSQ)
    return rt_fail(x->d, "op %d is not a GRAD_SUMSQ", op);
  int r = group_of(x, op);
  if (r < 0) {
    if (x->fz->skip[op])
      return rt_fail(x->d, "GRAD_SUMSQ op %d launches nothing and belongs to no multi-tensor group", op);
    *first = x->slot[op], *count = x->gn_groups;
    return RT_OK;
  }
  int64_t at = 0;
  for (int k = x->fz->peer[r]; k < op; k++)
    at += sumsq_slots(x, &g->op[k]);
  *first = x->slot[r] + at, *count = sumsq_slots(x, &g->op[op]);
  return RT_OK;
}

CUdeviceptr rt_exec_norm_slice(const RtExec *x, int grad) {
  for (int o = 0; o < x->g->nop; o++) {
    int64_t first, count;
    if (x->g->op[o].kind == OP_GRAD_SUMSQ && x->g->op[o].in[0] == grad)
      return rt_exec_norm_partials(x, o, &first, &count) ? 0 : x->gn_partial + (CUdeviceptr)(first * 4);
  }
  rt_fail(x->d, "no GRAD_SUMSQ reads %s", x->g->t[grad].name);
  return 0;
}

CUdeviceptr rt_exec_norm_buffer(const RtExec *x, int64_t *count) {
  *count = x->n_partial;
  return x->gn_partial;
}

int rt_exec_multi_keep(RtExec *x, const uint8_t *keep_sumsq, const uint8_t *keep_adamw) {
  const Graph *g = x->g;
  if (!x->multi_words) return RT_OK;
  if (rt_sync(x->d)) return RT_ERROR; /* the table's first copy has left the host buffer */
  int64_t chunks;
  for (int o = 0; o < g->nop; o++) {
    if (x->multi_at[o] < 0) continue;
    uint64_t *w = x->multi_host + x->multi_at[o];
    if (rt_multi_rows(x, o, w, &chunks)) return RT_ERROR; /* the rows as at open, then the shard's */
    int sumsq = g->op[o].kind == OP_GRAD_SUMSQ, width = sumsq ? STEPC_SUMSQ_ROW : STEPC_ADAMW_ROW;
    const uint8_t *keep = sumsq ? keep_sumsq : keep_adamw;
    for (int k = x->fz->peer[o]; k <= o; k++)
      if (!keep[g->op[k].in[0]]) {
        uint64_t *r = w + (int64_t)(k - x->fz->peer[o]) * width;
        r[sumsq ? 1 : 5] = 0; /* n = 0: its chunks do nothing (a norm row's write 0) */
        if (sumsq) r[3] = STEPC_MULTI_F32;
      }
  }
  if (x->d->rec) return RT_OK;
  return rt_copy_h2d(x->d, x->multi_table, x->multi_host, (size_t)x->multi_words * 8) || rt_sync(x->d)
             ? RT_ERROR
             : RT_OK;
}

int rt_exec_adamw_hparams(RtExec *x, int o) {
  const Op *op = &x->g->op[o];
  int s = x->slot[o];
  if (op->kind != OP_ADAMW || s < RT_MAX_HP) return RT_OK;
  return rt_launch_adamw_hparams(x->d, rt_dim1(1), 1, 0, x->hp + (CUdeviceptr)(32 * (s % RT_MAX_HP)),
                                 rt_in(x, op, 3), rt_in(x, op, 2), (float)op->a.f[0], (float)op->a.f[1],
                                 (float)op->a.f[2]);
}

/* This family's rows of the per-kind launch table (exec.c gathers every family's). */
const RtOpRow RT_OPS_OPTIM[] = {
    {OP_GRAD_SUMSQ, rt_op_grad_sumsq},
    {OP_CLIP_COEF, rt_op_clip_coef},
    {OP_LR_SCHED, rt_op_lr_sched},
    {OP_ADAMW, rt_op_adamw},
    {OP_COUNT, NULL},
};
