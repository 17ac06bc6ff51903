/* image_check.c — every fact of a step image that the runtime uses as an index, a bound, a count, a
 * divisor or a size, checked once when the image is read (image.h). A payload that hashes right
 * may still have been written by something else than stepc build (or re-signed after an edit): the
 * executors trust what passes here, so what cannot be recomputed is at least bounded by what can
 * (an arena by the bytes of the tensors in it, a tensor's slot by its shape, an op's outputs by its
 * kind's shape rule). Each message names the field. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime/image.h"

/* Alignment slack per tensor that a plan may add between slots (compiler/plan/memplan.c aligns to 256). */
#define SLOT_SLACK 4096
#define MAX_MICROBATCHES (1 << 20)
#define MAX_TOKENS_PER_STEP ((int64_t)1 << 31)

typedef struct {
  char *why;
  size_t n;
} Why;

__attribute__((format(printf, 2, 3))) static int bad(Why *w, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->why, w->n, fmt, ap);
  va_end(ap);
  return -1;
}

static int in_range(int64_t v, int64_t n) { return v >= 0 && v < n; }
static int opt_index(int64_t v, int64_t n) { return v >= -1 && v < n; }

/* The bytes a tensor needs at an element size (its shape checked first). */
static int64_t need(const Tensor *t, int64_t esize) { return tensor_numel(t) * esize; }
static int64_t cpu_esize(const Tensor *t) {
  return dtype_is_float(t->dtype) ? 4 : (int64_t)dtype_size(t->dtype);
}

static int check_facts(const StepImage *im, Why *w) {
  const ImgFacts *f = &im->f;
  if (f->vocab_size < 1 || f->vocab_size > INT32_MAX)
    return bad(w, "facts.vocab_size %lld is outside [1, 2^31)", (long long)f->vocab_size);
  if (f->train_iters < 0 || f->train_iters > INT32_MAX)
    return bad(w, "facts.train_iters %lld is outside [0, 2^31)", (long long)f->train_iters);
  if (f->graph_mode < IMG_MODE_EAGER || f->graph_mode > IMG_MODE_SCOPED)
    return bad(w, "facts.graph_mode %d is not 0, 1 or 2", f->graph_mode);
  if (f->warmup_steps < 0 || f->warmup_steps > 1000000)
    return bad(w, "facts.warmup_steps %d is outside [0, 10^6]", f->warmup_steps);
  if (f->data_text != 0 && f->data_text != 1) return bad(w, "facts.data_text %d is not 0 or 1", f->data_text);
  if (f->nreplay < 0 || f->nreplay > im->g->nop)
    return bad(w, "facts.nreplay %d is outside [0, %d ops]", f->nreplay, im->g->nop);
  if (f->sm_count < 1 || f->sm_count > 65536)
    return bad(w, "facts.sm_count %d is outside [1, 65536]", f->sm_count);
  if (f->dp_size < 1 || f->dp_size > 65536)
    return bad(w, "facts.dp_size %d is outside [1, 65536]", f->dp_size);
  if (f->dist_opt != 0 && f->dist_opt != 1) return bad(w, "facts.dist_opt %d is not 0 or 1", f->dist_opt);
  if (f->tp_size < 0 || f->tp_size > 1024 || (int64_t)f->dp_size * (f->tp_size > 1 ? f->tp_size : 1) > 65536)
    return bad(w, "facts.tp_size %d is outside [0, 1024] or the job above 65536 ranks", f->tp_size);
  if (f->ep_size < 0 || f->ep_size > 1024 ||
      (f->ep_size > 1 && ((int64_t)f->dp_size * (f->tp_size > 1 ? f->tp_size : 1)) % f->ep_size))
    return bad(w, "facts.ep_size %d is outside [0, 1024] or does not divide the job's %d x %d ranks",
               f->ep_size, f->dp_size, f->tp_size > 1 ? f->tp_size : 1);
  if (f->cuda_peak < 0 || f->cpu_peak < 0) return bad(w, "facts.cuda_peak or facts.cpu_peak is negative");
  return 0;
}

/* The step's own tensors: tokens and targets (B, T) int32 with T the image's seq_length; the
 * scalars the trainer reads element 0 of. */
static int check_step_tensors(const StepImage *im, Why *w) {
  const Graph *g = im->g;
  int nt = g->nt;
  if (!in_range(g->tokens, nt) || !in_range(g->targets, nt) || !in_range(g->loss, nt) ||
      !in_range(g->grad_norm, nt) || !in_range(g->lr, nt))
    return bad(w, "counts.tokens/targets/loss/grad_norm/lr name a tensor outside [0, %d)", nt);
  const Tensor *tk = &g->t[g->tokens], *tg = &g->t[g->targets];
  if (tk->ndim != 2 || tk->dtype != DT_I32 || tg->ndim != 2 || tg->dtype != DT_I32 ||
      tg->shape[0] != tk->shape[0] || tg->shape[1] != tk->shape[1])
    return bad(w, "the tokens and targets tensors are not both (B, T) int32");
  if (im->f.seq_length != tk->shape[1])
    return bad(w, "facts.seq_length %lld is not the tokens tensor's T %lld", (long long)im->f.seq_length,
               (long long)tk->shape[1]);
  if (g->num_microbatches < 1 || g->num_microbatches > MAX_MICROBATCHES ||
      (int64_t)g->num_microbatches * tensor_numel(tk) > MAX_TOKENS_PER_STEP)
    return bad(w, "counts.num_microbatches %d is outside [1, 2^20] or gives over 2^31 tokens a step",
               g->num_microbatches);
  const int scal[3] = {g->loss, g->grad_norm, g->lr};
  for (int i = 0; i < 3; i++)
    if (g->t[scal[i]].dtype != DT_F32)
      return bad(w, "the %s tensor is not f32", i == 0 ? "loss" : i == 1 ? "grad_norm" : "lr");
  return 0;
}

static int check_shape(const Tensor *t, int i, Why *w) {
  if (t->ndim < 0 || t->ndim > IR_MAX_DIMS)
    return bad(w, "tensor %d (%s): ndim %d is outside [0, %d]", i, t->name, t->ndim, IR_MAX_DIMS);
  int64_t n = 1;
  for (int d = 0; d < IR_MAX_DIMS; d++) {
    if (t->shape[d] < 1 || (d >= t->ndim && t->shape[d] != 1))
      return bad(w, "tensor %d (%s): shape[%d] is %lld", i, t->name, d, (long long)t->shape[d]);
    if (t->shape[d] > IR_MAX_NUMEL / n) return bad(w, "tensor %d (%s): over 2^40 elements", i, t->name);
    n *= t->shape[d];
  }
  return 0;
}

static int check_tensor(const StepImage *im, int i, Why *w) {
  const Graph *g = im->g;
  const Tensor *t = &g->t[i];
  int nt = g->nt;
  if ((unsigned)t->dtype >= DT_COUNT || (unsigned)t->role >= ROLE_COUNT ||
      (unsigned)t->init > IR_INIT_NORMAL || !isfinite(t->init_std))
    return bad(w, "tensor %d (%s): dtype, role or init is out of range", i, t->name);
  if (check_shape(t, i, w)) return -1;
  int home = im->storage[i];
  if (!in_range(home, nt) || !opt_index(t->of, nt) || !opt_index(t->producer, g->nop))
    return bad(w, "tensor %d (%s): storage, of or producer names nothing in the step", i, t->name);
  if (im->storage[home] != home)
    return bad(w, "tensor %d (%s): storage %d is on another tensor's storage itself", i, t->name, home);
  if (!in_range(t->buffer, g->nbuffers) || t->buffer > 1)
    return bad(w, "tensor %d (%s): buffer %d is not the arena or the region", i, t->name, t->buffer);
  int64_t cuda_need = need(t, (int64_t)dtype_size(t->dtype)), cpu_need = need(t, cpu_esize(t));
  /* first, so that the slot arithmetic below cannot overflow */
  if (t->bytes > cuda_need + SLOT_SLACK || im->cpu_bytes[i] > cpu_need + SLOT_SLACK)
    return bad(w, "tensor %d (%s): its slot is larger than its %lld elements", i, t->name,
               (long long)tensor_numel(t));
  /* CUDA: a weight gradient sunk into its main gradient, or a tensor on another's storage, has no slot */
  int borrowed = home != i;
  if (t->offset < 0 || t->bytes < 0 || (t->bytes < cuda_need && !(borrowed && t->bytes == 0)) ||
      t->offset > g->buffer_bytes[t->buffer] - t->bytes)
    return bad(w,
               "tensor %d (%s): CUDA slot (offset %lld, %lld bytes) does not hold its %lld bytes inside "
               "buffer %d's %lld",
               i, t->name, (long long)t->offset, (long long)t->bytes, (long long)cuda_need, t->buffer,
               (long long)g->buffer_bytes[t->buffer]);
  /* the storage a borrowing tensor uses on CUDA (the logits for the fused loss's dlogits, the main
   * gradient a weight gradient is summed into) holds it */
  if (borrowed && g->t[home].bytes < cuda_need)
    return bad(w, "tensor %d (%s): the tensor whose storage it uses (storage %d) is smaller than it", i,
               t->name, home);
  int64_t cap = t->buffer == 1 ? im->f.cpu_region : im->f.cpu_arena;
  if (im->cpu_offset[i] < 0 || im->cpu_bytes[i] < cpu_need || im->cpu_offset[i] > cap - im->cpu_bytes[i])
    return bad(w,
               "tensor %d (%s): CPU slot (offset %lld, %lld bytes) does not hold its %lld bytes inside %lld",
               i, t->name, (long long)im->cpu_offset[i], (long long)im->cpu_bytes[i], (long long)cpu_need,
               (long long)cap);
  if (t->tp_nseg != 0) { /* a tensor-parallel shard: its segments tile the one-rank dim (ir.h) */
    int64_t sum = 0;
    bool ok = t->tp_nseg > 0 && t->tp_nseg <= IR_TP_MAX_SEGS && t->tp_dim >= 0 && t->tp_dim < t->ndim &&
              t->tp_size > 1 && t->tp_size == (t->tp_ep ? im->f.ep_size : im->f.tp_size) &&
              (t->tp_ep == 0 || t->tp_ep == 1);
    for (int k = 0; ok && k < IR_TP_MAX_SEGS; k++) { /* a replicated segment: tp_rep ranks a part */
      int rep = t->tp_rep[k] > 1 ? t->tp_rep[k] : 1;
      ok = t->tp_rep[k] >= 0 && t->tp_size % rep == 0 && (k < t->tp_nseg || t->tp_rep[k] == 0) &&
           !(rep > 1 && t->tp_ep);
      if (!ok || k >= t->tp_nseg) continue;
      ok = t->tp_seg[k] > 0 && t->tp_seg[k] % (t->tp_size / rep) == 0 && t->tp_seg[k] <= IR_MAX_NUMEL,
      sum += ok ? tensor_tp_part(t, k) : 0;
    }
    if (!ok || sum != t->shape[t->tp_dim])
      return bad(w, "tensor %d (%s): its %s-parallel shard (dim %d, %d segments, %d ranks) does not tile it",
                 i, t->name, t->tp_ep ? "expert" : "tensor", t->tp_dim, t->tp_nseg, t->tp_size);
  }
  /* an owner is a data-parallel rank, an expert's state's an expert-data-parallel one (schedule.c) */
  int64_t tp = im->f.tp_size > 1 ? im->f.tp_size : 1, ep = im->f.ep_size > 1 ? im->f.ep_size : 1;
  int64_t edp = im->f.dp_size * tp / ep > 1 ? im->f.dp_size * tp / ep : 1;
  int64_t owners = graph_expert_state(g, i) ? edp : im->f.dp_size;
  if (!opt_index(im->owner[i], owners))
    return bad(w, "tensor %d (%s): owner %d is not a rank of %lld", i, t->name, im->owner[i],
               (long long)owners);
  /* the region (buffer 1) holds a distributed-optimizer step's masters (an fp8 primary weight's
   * fp32 param among them) and Adam moments only */
  if (t->buffer == 1 &&
      (!im->f.dist_opt || g->nbuffers != 2 ||
       !(t->role == ROLE_MASTER || graph_fp8_master(g, i) || (t->role == ROLE_OPTIM && t->of >= 0))))
    return bad(w,
               "tensor %d (%s): only a distributed optimizer's masters and moments lie in the "
               "optimizer-state region",
               i, t->name);
  return 0;
}

/* Every arena size non-negative and at most 2^62 before any slot is checked against it. */
static int check_arena_signs(const StepImage *im, Why *w) {
  const int64_t max = (int64_t)1 << 62;
  for (int b = 0; b < IR_MAX_BUFFERS; b++)
    if (im->g->buffer_bytes[b] < 0 || im->g->buffer_bytes[b] > max)
      return bad(w, "counts.buffer_bytes[%d] %lld is outside [0, 2^62]", b,
                 (long long)im->g->buffer_bytes[b]);
  if (im->f.cpu_arena < 0 || im->f.cpu_arena > max || im->f.cpu_region < 0 || im->f.cpu_region > max)
    return bad(w, "facts.cpu_arena %lld or facts.cpu_region %lld is outside [0, 2^62]",
               (long long)im->f.cpu_arena, (long long)im->f.cpu_region);
  return 0;
}

/* The arenas: no larger than every slot side by side (what a plan needs at most), so that a
 * damaged size cannot make the runtime allocate what the step never uses. */
static int check_arenas(const StepImage *im, Why *w) {
  const Graph *g = im->g;
  if (g->nbuffers < 1 || g->nbuffers > 2) return bad(w, "counts.nbuffers %d is not 1 or 2", g->nbuffers);
  const int64_t max = (int64_t)1 << 62;
  int64_t za = im->f.zero_stage_at, zb = im->f.zero_stage_bytes;
  if (za < 0 || za > max || zb < 0 || zb > max || ((za || zb) && !im->f.dist_opt))
    return bad(w,
               "facts.zero_stage_at %lld or facts.zero_stage_bytes %lld is outside [0, 2^62] or set without "
               "a distributed optimizer",
               (long long)za, (long long)zb);
  /* the distributed optimizer's staging is an arena slot of no tensor's */
  int64_t cuda[2] = {zb ? zb + SLOT_SLACK : 0, 0}, cpu[2] = {0, 0};
  for (int i = 0; i < g->nt; i++) {
    int b = g->t[i].buffer == 1;
    cuda[b] += g->t[i].bytes + SLOT_SLACK;
    cpu[b] += im->cpu_bytes[i] + SLOT_SLACK;
  }
  for (int b = 0; b < IR_MAX_BUFFERS; b++)
    if (g->buffer_bytes[b] < 0 || g->buffer_bytes[b] > (b < 2 && b < g->nbuffers ? cuda[b] : 0))
      return bad(w, "counts.buffer_bytes[%d] %lld is outside [0, %lld] (the bytes of its tensors)", b,
                 (long long)g->buffer_bytes[b], (long long)(b < 2 && b < g->nbuffers ? cuda[b] : 0));
  if (za + zb > g->buffer_bytes[0])
    return bad(w,
               "facts.zero_stage_at %lld + facts.zero_stage_bytes %lld lies outside the arena (%lld bytes)",
               (long long)za, (long long)zb, (long long)g->buffer_bytes[0]);
  if (im->f.cpu_arena < 0 || im->f.cpu_arena > cpu[0])
    return bad(w, "facts.cpu_arena %lld is outside [0, %lld] (the bytes of its tensors)",
               (long long)im->f.cpu_arena, (long long)cpu[0]);
  if (im->f.cpu_region < 0 || im->f.cpu_region > cpu[1] || (im->f.cpu_region > 0) != (g->nbuffers == 2))
    return bad(w, "facts.cpu_region %lld is outside [0, %lld] or disagrees with counts.nbuffers %d",
               (long long)im->f.cpu_region, (long long)cpu[1], g->nbuffers);
  return 0;
}

/* The ops that write persistent tensors in place (built with graph_op_into, no shape rule): what
 * their CPU kernels index by (ir/ops/elementwise.c, ir/ops/optim.c). */
static int check_inplace(const Graph *g, int o, Why *w) {
  const Op *op = &g->op[o];
  int64_t n0 = op->nin > 0 ? tensor_numel(&g->t[op->in[0]]) : 0;
  int same = 1, want = op->kind == OP_ADAMW ? 3 : op->kind == OP_CLIP_COEF || op->kind == OP_LR_SCHED ? 2 : 1;
  if (op->kind == OP_ACCUM || op->kind == OP_ADAMW)
    for (int k = 0; k < op->nout; k++)
      same &= tensor_numel(&g->t[op->out[k]]) == n0;
  if (op->nout < want || (op->kind != OP_ADAMW && op->nout > want) || !same)
    return bad(w, "op %d (%s): its in-place outputs are not the number or size its kind writes", o,
               op_name(op->kind));
  const Tensor *st = &g->t[op->out[0]]; /* a delayed-scaling state: fp32 (1 + history, n), ir/ops/fp8.h */
  if (op->kind == OP_FP8_SCALE_UPDATE && (st->dtype != DT_F32 || st->ndim != 2 || st->shape[0] < 2))
    return bad(w, "op %d (%s): %s is not an fp32 (1 + history, n) scaling state", o, op_name(op->kind),
               st->name);
  return 0;
}

/* An op against its kind's row: arity, and the outputs it creates shaped as the kind's infer says. */
static int check_op_shapes(const Graph *g, int o, Why *w) {
  const Op *op = &g->op[o];
  const OpInfo *info = op_info(op->kind);
  if (op->nin < info->nin_min || op->nin > info->nin_max)
    return bad(w, "op %d (%s): %d inputs, its kind takes %d..%d", o, info->name, op->nin, info->nin_min,
               info->nin_max);
  if (info->nout == 0) return check_inplace(g, o, w);
  if (op->nout != info->nout)
    return bad(w, "op %d (%s): %d outputs, its kind writes %d", o, info->name, op->nout, info->nout);
  if (!info->infer) return 0;
  OpOut out[IR_MAX_OUT] = {0};
  char err[200] = "";
  if (info->infer(g, op, out, err, sizeof err) != 0) return bad(w, "op %d (%s): %s", o, info->name, err);
  for (int k = 0; k < op->nout && k < info->nout; k++) {
    const Tensor *t = &g->t[op->out[k]];
    /* a float output may be kept at another float precision (an fp32 router weight's gradient) */
    int same = dtype_is_float(t->dtype) == dtype_is_float(out[k].dtype) && t->ndim == out[k].ndim;
    if (!dtype_is_float(t->dtype)) same &= t->dtype == out[k].dtype;
    for (int d = 0; same && d < t->ndim; d++)
      same = t->shape[d] == out[k].shape[d];
    if (!same)
      return bad(w, "op %d (%s): output %d (%s) is not the shape or dtype its inputs give", o, info->name, k,
                 t->name);
  }
  return 0;
}

static int check_op(const Graph *g, int o, Why *w) {
  Op *op = &g->op[o];
  op->tags.module[IR_MODULE_MAX - 1] = 0;
  if ((unsigned)op->kind >= OP_COUNT || op->nin < 0 || op->nin > IR_MAX_IN || op->nout < 1 ||
      op->nout > IR_MAX_OUT || (unsigned)op->tags.phase >= IR_PHASE_COUNT ||
      !opt_index(op->tags.fwd, g->nop) || op->tags.layer < -1 || op->tags.labels >= (1u << IR_NLABELS) ||
      op->tags.scopes >= (1u << IR_NSCOPES))
    return bad(w, "op %d: kind, arity, phase or tags is out of range", o);
  for (int i = 0; i < op->nin; i++)
    if (!in_range(op->in[i], g->nt))
      return bad(w, "op %d (%s): input %d is tensor %d, not in the step", o, op_name(op->kind), i, op->in[i]);
  for (int i = 0; i < op->nout; i++)
    if (!in_range(op->out[i], g->nt))
      return bad(w, "op %d (%s): output %d is tensor %d, not in the step", o, op_name(op->kind), i,
                 op->out[i]);
  return check_op_shapes(g, o, w);
}

static int check_program(const StepImage *im, Why *w) {
  const Graph *g = im->g;
  if (im->micro_points < 0 || im->micro_points > im->npoints)
    return bad(w, "counts.micro_points %d is outside [0, %d]", im->micro_points, im->npoints);
  if (im->poison_start[0] != 0 || im->poison_start[im->npoints] != im->npoison)
    return bad(w, "poison_start does not run from 0 to counts.npoison %d", im->npoison);
  for (int q = 0; q < im->npoints; q++) {
    if (!in_range(im->point_op[q], g->nop))
      return bad(w, "point_op[%d] is %d, not an op of the step", q, im->point_op[q]);
    if (im->poison_start[q + 1] < im->poison_start[q]) return bad(w, "poison_start[%d] decreases", q + 1);
  }
  for (int k = 0; k < im->npoison; k++)
    if (!in_range(im->poison[k], g->nt))
      return bad(w, "poison[%d] is %d, not a tensor of the step", k, im->poison[k]);
  for (int s = 0; s < im->nscope; s++) {
    const ImgScope *sc = &im->scope[s];
    if (!in_range(sc->first, g->nop) || !in_range(sc->last, g->nop) || sc->last < sc->first ||
        !opt_index(sc->scope, IR_NSCOPES) ||
        (sc->phase != IR_PHASE_FORWARD && sc->phase != IR_PHASE_BACKWARD) || sc->layer < -1)
      return bad(w, "scope %d: first, last, scope, layer or phase is out of range", s);
  }
  return 0;
}

/* ---- the launch program (program.h): every range inside the records, every address inside the
 * allocation, every kernel one of the cubin's with its argument count; what a kernel then reads
 * at those addresses is bounded only by the compiler that wrote it. */

static int lp_ptr_ok(uint64_t v, int64_t alloc) {
  return v == 0 || ((v & LP_PTR) && (int64_t)(v & ~LP_PTR) <= alloc);
}
static int lp_range_ok(LpRange r, int nrec) {
  return r.first >= 0 && r.count >= 0 && r.first <= nrec - r.count;
}
static int lp_span_ok(int64_t at, int64_t bytes, int64_t alloc) {
  return at >= 0 && bytes >= 0 && at <= alloc - bytes;
}

static int check_record(StepImage *im, int i, Why *w) {
  RtRec *r = &im->lp.rec[i];
  int64_t alloc = im->lp.f.alloc_bytes;
  const char *sig = NULL;
  switch (r->kind) {
  case RT_REC_LAUNCH:
    if (!in_range((int64_t)r->k, (int64_t)RT_K_COUNT + im->gen.n))
      return bad(w, "program record %d: kernel %d is not in the cubin", i, (int)r->k);
    sig = (int)r->k < RT_K_COUNT ? rt_kernel_sig[r->k] : im->gen.k[(int)r->k - RT_K_COUNT].sig;
    if (r->nargs != (int)strlen(sig) || r->nargs > LP_MAX_ARGS)
      return bad(w, "program record %d: %d arguments, kernel %d takes %zu", i, r->nargs, (int)r->k,
                 strlen(sig));
    if (r->block < 1 || r->block > 1024 || !r->grid[0] || !r->grid[1] || !r->grid[2])
      return bad(w, "program record %d: an empty grid or a block of %u threads", i, r->block);
    break;
  case RT_REC_GEMM:
  case RT_REC_SDPA: break;
  case RT_REC_COLL: {
    const RtColl *c = &r->coll;
    /* a group of one where the program was lowered with train.force_parallel_lowering at size 1 */
    int tp = im->f.tp_size > 1 ? im->f.tp_size : 1, dp = im->f.dp_size > 1 ? im->f.dp_size : 1;
    int size = c->group == RT_COLL_GROUP_EP     ? (im->f.ep_size > 1 ? im->f.ep_size : 1)
               : c->group == RT_COLL_GROUP_TP   ? tp
               : c->group == RT_COLL_GROUP_AMAX ? tp * dp /* every rank */
                                                : 0;
    int64_t sb = 0, db = 0;
    if (!in_range(c->op, RT_COLL_OPS) || !in_range(c->dtype, RT_COLL_TYPES) ||
        !in_range(c->group, RT_COLL_GROUPS) || c->count < 1 || c->count > IR_MAX_NUMEL || size < 1)
      return bad(w,
                 "program record %d: a collective (op %lld, type %lld, group %lld, %lld elements) of a step "
                 "planned for %d such ranks",
                 i, (long long)c->op, (long long)c->dtype, (long long)c->group, (long long)c->count, size);
    rt_coll_bytes(c, size, &sb, &db);
    if (!(c->src & LP_PTR) || !(c->dst & LP_PTR) || !lp_span_ok((int64_t)(c->src & ~LP_PTR), sb, alloc) ||
        !lp_span_ok((int64_t)(c->dst & ~LP_PTR), db, alloc))
      return bad(w, "program record %d: a collective's buffers outside the step's allocation", i);
    break;
  }
  case RT_REC_FORK:
  case RT_REC_JOIN: break; /* where they may stand: check_comm_stream */
  case RT_REC_MEMSET:
  case RT_REC_COPY:
    if (!(r->dst & LP_PTR) || !lp_span_ok((int64_t)(r->dst & ~LP_PTR), (int64_t)r->bytes, alloc) ||
        (r->kind == RT_REC_COPY &&
         (!(r->src & LP_PTR) || !lp_span_ok((int64_t)(r->src & ~LP_PTR), (int64_t)r->bytes, alloc))))
      return bad(w, "program record %d: a memset or copy outside the step's allocation", i);
    break;
  default: return bad(w, "program record %d: kind %d", i, (int)r->kind);
  }
  uint64_t *slot[LP_MAX_ARGS];
  int n = lp_rec_addrs(r, sig, slot);
  for (int k = 0; k < n; k++)
    if (!lp_ptr_ok(*slot[k], alloc))
      return bad(w, "program record %d: an address outside the step's allocation", i);
  return 0;
}

static int check_launch_facts(const StepImage *im, Why *w) {
  const Graph *g = im->g;
  const LpFacts *f = &im->lp.f;
  int64_t bufs = 0;
  for (int b = 0; b < g->nbuffers; b++)
    bufs += (g->buffer_bytes[b] + 255) / 256 * 256;
  if (f->buffers_bytes != bufs || f->scratch_bytes < 0 ||
      f->alloc_bytes != f->buffers_bytes + f->scratch_bytes || f->alloc_bytes > ((int64_t)1 << 47))
    return bad(w, "program: allocation %lld bytes is not the plan's buffers (%lld) and the scratch (%lld)",
               (long long)f->alloc_bytes, (long long)bufs, (long long)f->scratch_bytes);
  int nmb = g->num_microbatches > 0 ? g->num_microbatches : 1;
  if (f->nmb != nmb || f->ntok != tensor_numel(&g->t[g->tokens]))
    return bad(w, "program: %d micro-batches of %lld tokens, the step has %d of %lld", f->nmb,
               (long long)f->ntok, nmb, (long long)tensor_numel(&g->t[g->tokens]));
  for (int k = 0; k < LP_SCRATCH_PARTS; k++)
    if (f->part_at[k] < f->buffers_bytes || !lp_span_ok(f->part_at[k], f->part_bytes[k], f->alloc_bytes))
      return bad(w, "program: scratch part %d lies outside the scratch", k);
  int64_t a = f->alloc_bytes;
  if (!lp_span_ok(f->inputs_at, (int64_t)nmb * 2 * f->ntok * 4, a) ||
      !lp_span_ok(f->seeds_at, 8 * (int64_t)nmb, a) || !lp_span_ok(f->losses_at, 4 * (int64_t)nmb, a) ||
      !lp_span_ok(f->init_seed_at, 8, a) || !lp_span_ok(f->loss_den_at, 4, a) || f->norm_count < 0 ||
      f->norm_count > a / 4 || !lp_span_ok(f->norm_at, 4 * f->norm_count, a) || f->ntable > a / 8 ||
      !lp_span_ok(f->tables_at, 8 * f->ntable, a) || f->ntmap > a / RT_TMAP_BYTES ||
      !lp_span_ok(f->tmaps_at, RT_TMAP_BYTES * f->ntmap, a) || f->tmaps_at % 64)
    return bad(
        w, "program: inputs, seeds, losses, the loss denominator, norm partials, tables or tensor maps lie "
           "outside the step's allocation");
  return 0;
}

/* The evaluation section: with has_eval, eval ranges inside the records on the micro program's forward
 * points only, no refusal, and the per-token losses (ntok fp32) inside the plan's buffers; without,
 * no eval range and the reason, a terminated string. */
static int check_eval(StepImage *im, Why *w) {
  const Graph *g = im->g;
  LpFacts *f = &im->lp.f;
  size_t nr = strnlen(f->eval_refusal, sizeof f->eval_refusal);
  if (nr == sizeof f->eval_refusal) return bad(w, "program: eval_refusal is not a terminated string");
  if (f->has_eval != 0 && f->has_eval != 1) return bad(w, "program: has_eval is %d", f->has_eval);
  if (f->eval_alt_ok != 0 && f->eval_alt_ok != 1) return bad(w, "program: eval_alt_ok is %d", f->eval_alt_ok);
  if (f->has_eval ? nr != 0 || !lp_span_ok(f->eval_token_at, 4 * f->ntok, f->buffers_bytes)
                  : nr == 0 || f->eval_token_at != -1)
    return bad(
        w, "program: the evaluation's facts disagree (has_eval %d, per-token losses at %lld, refusal \"%s\")",
        f->has_eval, (long long)f->eval_token_at, f->eval_refusal);
  int lo = graph_lm_loss_op(g);
  if (f->has_eval && (lo < 0 || f->eval_token_at != im->lp.tensor_at[g->op[lo].out[1]] ||
                      tensor_numel(&g->t[g->op[lo].out[1]]) != f->ntok))
    return bad(w, "program: the evaluation's per-token losses are not the loss op's");
  for (int q = 0; q < im->npoints; q++) {
    LpRange r = im->lp.point[q].eval;
    int fwd = f->has_eval && q < im->micro_points && g->op[im->point_op[q]].tags.phase == IR_PHASE_FORWARD;
    if (!lp_range_ok(r, f->nrec) || (!fwd && (r.first != 0 || r.count != 0)))
      return bad(w,
                 "program point %d: its evaluation records are out of range, or it is no forward point of an "
                 "evaluation",
                 q);
  }
  return 0;
}

static int sdpa_calls(const LaunchProgram *lp, LpRange r) {
  int k = 0;
  for (int i = r.first; i < r.first + r.count; i++)
    k += lp->rec[i].kind == RT_REC_SDPA;
  return k;
}

/* The attention lowerings (program.h LP_ATTN_*): cuDNN calls exactly where the facts say so, and
 * with auto a flash alternative at every point that makes one, of that point's op, with no cuDNN
 * call in it; no alternative anywhere else. (Its records are checked with all the others.) */
static int check_attention(const StepImage *im, Why *w) {
  const LaunchProgram *lp = &im->lp;
  int attn = lp->f.attn, auto_ = attn == LP_ATTN_AUTO;
  if (attn < LP_ATTN_NONE || attn > LP_ATTN_AUTO || lp->f.attn_pad)
    return bad(w, "program: attention lowering %d is not one of none, flash, cuDNN, auto", attn);
  int all = sdpa_calls(lp, (LpRange){0, lp->f.nrec});
  if ((all > 0) != (attn == LP_ATTN_CUDNN || auto_))
    return bad(w, "program: %d cuDNN attention calls in a program whose attention lowering is %d", all, attn);
  for (int q = 0; q < im->npoints; q++) {
    const LpPoint *p = &lp->point[q];
    int has = sdpa_calls(lp, p->rec) > 0;
    if (!p->alt.count) {
      if (p->alt.first || (auto_ && has))
        return bad(w, "program point %d: %s", q,
                   p->alt.first
                       ? "an empty alternative that starts at a record"
                       : "a cuDNN attention call without its flash alternative (attention_backend=auto)");
      continue;
    }
    if (!auto_ || !has || sdpa_calls(lp, p->alt))
      return bad(w, "program point %d: a flash alternative %s", q,
                 !auto_ ? "in a program that is not attention_backend=auto"
                 : !has ? "for launches that hold no cuDNN attention call"
                        : "that holds a cuDNN call");
    for (int i = p->alt.first; i < p->alt.first + p->alt.count; i++)
      if (lp->rec[i].op != im->point_op[q])
        return bad(w, "program point %d: its flash alternative's record %d is op %d's, not op %d's", q, i,
                   lp->rec[i].op, im->point_op[q]);
  }
  return 0;
}

/* The communication stream (program.h RT_REC_FORK / RT_REC_JOIN): forks and joins alternate along the
 * micro program's points, a fork first; a collective on that stream (RtColl.side) stands only between
 * them; every fork is joined before the micro program ends and within the scope it began in (a capture
 * must join what it forked); no other section holds any of them. */
static int comm_walk(const LaunchProgram *lp, LpRange r, int *open, int q, Why *w) {
  for (int i = r.first; i < r.first + r.count; i++) {
    const RtRec *e = &lp->rec[i];
    int fork = e->kind == RT_REC_FORK, join = e->kind == RT_REC_JOIN,
        side = e->kind == RT_REC_COLL && e->coll.side;
    if (!fork && !join && !side) continue;
    if (!open || (fork && *open) || (join && !*open) || (side && (!*open || e->coll.side != 1)))
      return bad(w, "program record %d (point %d): a communication-stream %s out of place", i, q,
                 fork   ? "fork"
                 : join ? "join"
                        : "collective");
    if (!side) *open = fork;
  }
  return 0;
}

static int check_comm_stream(const StepImage *im, Why *w) {
  const LaunchProgram *lp = &im->lp;
  int open = 0;
  for (int q = 0; q < im->npoints; q++) {
    int edge = 0;
    for (int k = 0; k < im->nscope; k++)
      edge |= im->scope[k].first == q;
    if (open && (edge || q == im->micro_points))
      return bad(w, "program point %d: the communication stream forked before it is not joined", q);
    if (comm_walk(lp, lp->point[q].rec, q < im->micro_points ? &open : NULL, q, w)) return -1;
    for (int k = 0; k < im->nscope && open; k++)
      if (im->scope[k].last == q) return bad(w, "program point %d: a scope ends with its fork not joined", q);
    const LpRange other[4] = {lp->point[q].hparams, lp->point[q].eval, lp->point[q].alt, lp->point[q].solo};
    for (int j = 0; j < 4; j++)
      if (comm_walk(lp, other[j], NULL, q, w)) return -1;
  }
  if (open) return bad(w, "program: the communication stream is not joined at the micro program's end");
  if (comm_walk(lp, lp->f.init, NULL, -1, w)) return -1;
  for (int k = 0; k < 2 * lp->f.nmb; k++)
    if (comm_walk(lp, lp->micro[k], NULL, -1, w)) return -1;
  return 0;
}

static int check_launch_program(StepImage *im, Why *w) {
  const Graph *g = im->g;
  const LaunchProgram *lp = &im->lp;
  const LpFacts *f = &lp->f;
  if (!im->has_program)
    return im->f.cuda_refusal[0] ? 0 : bad(w, "no launch program, and no reason the CUDA backend refused");
  if (im->f.kernel_list != rt_kernel_list_hash(&im->gen))
    return bad(
        w,
        "the launch program was built against another kernel list or GEMM call than this runtime's (it names "
        "kernels by their place in the list)");
  if (check_launch_facts(im, w)) return -1;
  int n = f->nrec;
  if (!lp_range_ok(f->init, n)) return bad(w, "program: the initialisation's records are out of range");
  if (check_eval(im, w)) return -1;
  for (int q = 0; q < im->npoints; q++) {
    const LpPoint *p = &lp->point[q];
    if (!lp_range_ok(p->rec, n) || !lp_range_ok(p->hparams, n) || !lp_range_ok(p->alt, n) ||
        !lp_range_ok(p->solo, n) || (p->alone != 0 && p->alone != 1))
      return bad(w, "program point %d: its records are out of range", q);
    if (p->norm_count >= 0 && (p->norm_first < 0 || p->norm_first > f->norm_count - p->norm_count))
      return bad(w, "program point %d: its norm partials lie outside the partials", q);
  }
  for (int k = 0; k < 2 * f->nmb; k++)
    if (!lp_range_ok(lp->micro[k], n))
      return bad(w, "program: micro-batch %d's records are out of range", k / 2);
  for (int t = 0; t < g->nt; t++)
    if (!lp_span_ok(lp->tensor_at[t], g->t[t].bytes, f->buffers_bytes))
      return bad(w, "program: tensor %s lies outside the plan's buffers", g->t[t].name);
  for (int k = 0; k < f->nrow; k++) {
    const LpRow *r = &lp->row[k];
    /* a row's addresses come first: one for a norm row, five for an AdamW row (kernels/launch.h) */
    int naddr = r->adamw ? 5 : 1;
    if (!in_range(r->word, f->ntable) || r->word < naddr || !in_range(r->tensor, g->nt) || (r->adamw & ~1))
      return bad(w, "program: multi-tensor row %d is out of range", k);
    for (int a = r->word - naddr; a < r->word; a++)
      if (!(lp->table[a] & LP_PTR) || !lp_ptr_ok(lp->table[a], f->alloc_bytes))
        return bad(w, "program: multi-tensor row %d holds an address outside the step's allocation", k);
  }
  for (int k = 0; k < f->ntmap; k++) { /* a tensor map: encodable, over bytes inside the allocation */
    RtTmap t = lp->tmap[k];
    char why[128];
    int64_t bytes = t.elem == 1 ? 1 : 2;
    for (int i = 0; i < t.rank && i < 3; i++) {
      if (t.dim[i] == 0 || t.dim[i] > (uint64_t)f->alloc_bytes ||
          bytes > f->alloc_bytes / (int64_t)t.dim[i]) {
        bytes = f->alloc_bytes + 1;
        break;
      }
      bytes *= (int64_t)t.dim[i];
    }
    if (!(t.ptr & LP_PTR) || !lp_ptr_ok(t.ptr, f->alloc_bytes))
      return bad(w, "program: tensor map %d's address is outside the step's allocation", k);
    t.ptr &= ~LP_PTR;
    if (rt_tmap_invalid(&t, why, sizeof why)) return bad(w, "program: tensor map %d: %s", k, why);
    if (t.pad) return bad(w, "program: tensor map %d's padding is not 0", k);
    if (!lp_span_ok((int64_t)t.ptr, bytes, f->alloc_bytes))
      return bad(w, "program: tensor map %d's tensor lies outside the step's allocation", k);
  }
  for (int i = 0; i < n; i++)
    if (check_record(im, i, w)) return -1;
  /* the initialisation's master rows (LpInitMaster): in record order, each an initialisation launch
   * whose named argument is a pointer holding its master's address (what a rank nulls there) */
  for (int k = 0; k < f->ninit_master; k++) {
    const LpInitMaster *m = &lp->init_master[k];
    const RtRec *r = in_range(m->rec, n) ? &lp->rec[m->rec] : NULL;
    const char *sig =
        r && r->kind == RT_REC_LAUNCH
            ? ((int)r->k < RT_K_COUNT ? rt_kernel_sig[r->k] : im->gen.k[(int)r->k - RT_K_COUNT].sig)
            : NULL;
    if (!sig || m->rec < f->init.first || m->rec >= f->init.first + f->init.count ||
        (k > 0 && m->rec <= lp->init_master[k - 1].rec) || !in_range(m->arg, r->nargs) ||
        sig[m->arg] != 'p' || !in_range(m->tensor, g->nt) ||
        !(g->t[m->tensor].role == ROLE_MASTER ||
          (g->t[m->tensor].role == ROLE_PARAM && g->t[m->tensor].dtype == DT_F32)) ||
        m->pad != 0 || r->arg[m->arg] != (LP_PTR | (uint64_t)lp->tensor_at[m->tensor]))
      return bad(w,
                 "program: initialisation master row %d (record %d, argument %d, tensor %d) is out of range",
                 k, m->rec, m->arg, m->tensor);
  }
  if (f->init_master_pad != 0) return bad(w, "program: a nonzero pad");
  return check_attention(im, w) || check_comm_stream(im, w) ? -1 : 0;
}

static int check_buckets(const StepImage *im, Why *w) {
  const Graph *g = im->g;
  for (int k = 0; k < im->nbucket; k++) {
    const ImgBucket *b = &im->bucket[k];
    if (!in_range(b->after_op, g->nop) || !in_range(b->fire_op, g->nop) || b->first < 0 || b->ngrads < 1 ||
        b->first > im->nbucket_grad - b->ngrads || b->params < 0)
      return bad(w, "bucket %d: after_op, fire_op, first, ngrads or params is out of range", k);
  }
  for (int k = 0; k < im->nbucket_grad; k++)
    if (!in_range(im->bucket_grad[k], g->nt) || g->t[im->bucket_grad[k]].role != ROLE_GRAD)
      return bad(w, "bucket_grad[%d] is %d, not a main gradient", k, im->bucket_grad[k]);
  return 0;
}

int image_check(StepImage *im, char *why, size_t nwhy) {
  Why w = {why, nwhy};
  Graph *g = im->g;
  for (int i = 0; i < g->nt; i++)
    g->t[i].name[IR_NAME_MAX - 1] = 0;
  for (int k = 0; k < im->gen.n; k++)
    im->gen.k[k].name[sizeof im->gen.k[k].name - 1] = im->gen.k[k].sig[sizeof im->gen.k[k].sig - 1] = 0;
  if (g->nt > IR_MAX_TENSORS) return bad(&w, "counts.nt %d is over %d", g->nt, IR_MAX_TENSORS);
  if (check_facts(im, &w) || check_arena_signs(im, &w)) return -1;
  for (int i = 0; i < g->nt; i++)
    if (check_tensor(im, i, &w)) return -1;
  if (check_arenas(im, &w)) return -1;
  if (check_step_tensors(im, &w)) return -1;
  for (int o = 0; o < g->nop; o++) {
    if (check_op(g, o, &w)) return -1;
    const Op *op = &g->op[o]; /* the replicated rows' ops index by the rank: over the job's TP group */
    if ((op->kind == OP_TP_REP_PACK || op->kind == OP_TP_REP_UNPACK) && op->a.i[0] != im->f.tp_size)
      return bad(&w, "op %d (%s): i[0] %lld is not facts.tp_size %d", o, op_name(op->kind),
                 (long long)op->a.i[0], im->f.tp_size);
  }
  return check_program(im, &w) || check_buckets(im, &w) || check_launch_program(im, &w) ? -1 : 0;
}
