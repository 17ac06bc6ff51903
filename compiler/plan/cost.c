/* cost.c — FLOPs, bytes and a roofline time per op on the H200 (plan.h).
 *
 * Ceilings from docs/benchmarks.md, measured on the H200 on 2026-11-29: bf16 GEMM 773 TFLOP/s
 * at 8192^3 and 670-773 at layer shapes (stepc takes 700); cuDNN fused attention 480-600 TFLOP/s
 * at L8 shapes forward and forward+backward, 335-375 at the M shape (stepc takes 450, the
 * attention kernels being stepc's own); device-to-device copy 4.16 TB/s; fp8 GEMMs twice the bf16
 * rate (torch._scaled_mm 1409.5 TFLOP/s at 8192^3 beside bf16's 769.4, 2026-12-02). An op takes the larger
 * of its compute time and its memory time (op_bytes at nominal dtypes): GEMMs and attention
 * against their ceilings, everything else against DRAM. No launch overhead is added: the step is
 * meant to run as CUDA graphs. Micro-program ops run once per micro-batch, the tail once.
 *
 * model_flops is the bench's convention, so that TFLOP/s compare with PyTorch's: 6 x (params
 * without embeddings, with the output layer) x tokens + causal attention 6 x mbs x L x s^2 x
 * (heads x head dim) per micro-batch. Routed experts count at top-k / experts (the parameters a
 * token meets); MLA's head dim is the mean of its q/k and v head dims. A hybrid counts attention in
 * its attention layers only and adds the Mamba mixers in their recurrent form (see below). */
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

void cost_device_h200_roofline(Device *d) {
  memset(d, 0, sizeof *d);
  d->gemm_flops_per_s = 700e12;
  d->gemm_fp8_flops_per_s = 1400e12;
  d->attn_flops_per_s = 450e12;
  d->bytes_per_s = 4.16e12;
  d->launch_s = 0;
  for (int c = 0; c < COST_NCLASS; c++)
    d->class_scale[c] = 1;
  d->calibration = "roofline";
}

void cost_device_h200(Device *d) {
  cost_device_h200_roofline(d);
#include "plan/cost_h200.h"
}

static const char *const CLASS_NAMES[COST_NCLASS] = {"unset",
                                                     "gemm",
                                                     "attention_fwd",
                                                     "attention_bwd",
                                                     "attention_fwd_cudnn",
                                                     "attention_bwd_cudnn",
                                                     "grouped_gemm",
                                                     "moe_routing",
                                                     "norm",
                                                     "activation",
                                                     "rope_qkv",
                                                     "embedding",
                                                     "loss",
                                                     "elementwise",
                                                     "grad_norm",
                                                     "optimizer",
                                                     "mamba_mixer_fwd",
                                                     "mamba_mixer_bwd",
                                                     "mamba_gate_norm",
                                                     "gemm_fp8",
                                                     "fp8_cast",
                                                     "other"};
const char *cost_class_name(CostClass c) { return c >= 0 && c < COST_NCLASS ? CLASS_NAMES[c] : "?"; }

CostClass cost_op_class(const Graph *g, const Fusions *fz, int op) {
  const Op *o = &g->op[op];
  if (fz->fuse[op] == FUSE_LINEAR_ADD) return COST_GEMM;
  if (fz->fuse[op] == FUSE_ADD_NORM || fz->fuse[op] == FUSE_NORM_BWD_ADD) return COST_NORM;
  CostClass c = op_info(o->kind)->facts.cost;
  if ((c == COST_ATTN_FWD || c == COST_ATTN_BWD) &&
      o->a.i[2] != ATTN_IMPL_FLASH) /* auto: cuDNN where the machine has it */
    return c == COST_ATTN_FWD ? COST_ATTN_FWD_CUDNN : COST_ATTN_BWD_CUDNN;
  return c;
}

/* The bytes op o does not move because of a fusion its own op_bytes cannot see: a current-scaling
 * fp8 cast whose input's producer folded the amax (fusions.h amax; the cast reads the slot, not its
 * input, for the amax) skips one read of its input. */
static double fused_saving(const Graph *g, const Fusions *fz, int o) {
  const Op *op = &g->op[o];
  if (fz->amax[o] < 0 || (op->kind != OP_FP8_QUANT && op->kind != OP_LINEAR_FP8)) return 0;
  const Tensor *x = &g->t[op->in[0]];
  return (double)tensor_numel(x) * (double)dtype_size(x->dtype);
}

/* The roofline time of op o alone: the larger of its compute and memory times. */
static double roofline(const Graph *g, const Fusions *fz, int o, const Device *d, double *f, double *b) {
  const Op *op = &g->op[o];
  *f = op_flops(g, op), *b = op_bytes(g, op) - fused_saving(g, fz, o);
  OpCeiling c = op_info(op->kind)->facts.ceiling;
  double rate = c == CEIL_ATTN       ? d->attn_flops_per_s
                : c == CEIL_GEMM     ? d->gemm_flops_per_s
                : c == CEIL_GEMM_FP8 ? d->gemm_fp8_flops_per_s
                                     : 0;
  double tc = rate > 0 ? *f / rate : 0, tm = *b / d->bytes_per_s;
  return tc > tm ? tc : tm;
}

/* The chunked output layer's launch (ir/ops/linear_loss.c): its products at the GEMM ceiling,
 * scaled as GEMMs, and its cross entropy's in-place pass over the logits (a read and a write of
 * every logit) at DRAM speed, scaled as the loss; with its backward in the launch (FUSE_LOSS_BWD)
 * the backward's products too. */
static double linear_loss_time(const Graph *g, const Fusions *fz, int op, const Device *d, double *flops,
                               double *bytes) {
  const Op *o = &g->op[op];
  const Tensor *x = &g->t[o->in[0]], *w = &g->t[o->in[1]];
  double logits = (double)tensor_numel(x) / (double)x->shape[x->ndim - 1] * (double)w->shape[0];
  double ce_bytes = 2 * logits * (double)dtype_size(x->dtype), ce_flops = 3 * logits;
  *flops = op_flops(g, o), *bytes = op_bytes(g, o) + ce_bytes;
  int passes = 1; /* the cross entropy's: its forward, and its gradient with a fused backward */
  for (int b = op + 1; b < g->nop; b++)
    if (fz->fuse[b] == FUSE_LOSS_BWD && fz->peer[b] == op)
      *flops += op_flops(g, &g->op[b]), *bytes += op_bytes(g, &g->op[b]), passes = 2;
  double gemm = *flops - passes * ce_flops;
  return gemm / d->gemm_flops_per_s * d->class_scale[COST_GEMM] +
         ce_bytes / d->bytes_per_s * d->class_scale[COST_LOSS] + d->launch_s;
}

/* A GRAD_SUMSQ whose gradient's partials its producer writes (fusions.h norm_by): its row of the
 * group's launch reads nothing. */
static int norm_in_producer(const Graph *g, const Fusions *fz, int op) {
  return g->op[op].kind == OP_GRAD_SUMSQ && fz->norm_by[g->op[op].in[0]] >= 0;
}

double cost_op_time(const Graph *g, const Fusions *fz, int op, const Device *d, double *flops,
                    double *bytes) {
  const Op *o = &g->op[op];
  int fuse = fz->fuse[op], peer = fz->peer[op];
  *flops = *bytes = 0;
  if (fz->skip[op]) return 0; /* absorbed, or launching nothing: its work counts where its group runs */
  /* by kind on purpose: one op's own time model (its launch mixes GEMM and DRAM work), not a fact
   * other passes read */
  if (o->kind == OP_LINEAR_CROSS_ENTROPY) return linear_loss_time(g, fz, op, d, flops, bytes);
  int members[EW_MAX_CHAIN + 1], n = 0;
  double t = 0, f, b;
  if (fuse == FUSE_SUMSQ_MULTI || fuse == FUSE_ADAMW_MULTI) {
    /* one multi-tensor launch: the sum of its members' rooflines (cost_h200.h's optimizer and
     * grad_norm scales were calibrated on per-tensor launches) */
    for (int k = peer >= 0 ? peer : op; k < op; k++)
      if (!norm_in_producer(g, fz, k)) t += roofline(g, fz, k, d, &f, &b), *flops += f, *bytes += b;
  } else if (fuse == FUSE_EW) {
    for (int c = 0; c < fz->nchain && !n; c++)
      if (fz->chain[c].op[fz->chain[c].nops - 1] == op)
        for (int j = 0; j < fz->chain[c].nops; j++)
          members[n++] = fz->chain[c].op[j];
  } else if (fuse == FUSE_NORM_BWD_ADD) {
    /* the norm backward's pass, reading the addend too (dx is never written apart) */
    t = roofline(g, fz, peer, d, flops, bytes);
    const Tensor *addend = &g->t[o->out[0]]; /* nominal bytes: the cost never reads the memory plan */
    double addend_bytes = (double)tensor_numel(addend) * (double)dtype_size(addend->dtype);
    double extra = addend_bytes / d->bytes_per_s;
    *bytes += addend_bytes;
    return (t + extra) * d->class_scale[COST_NORM] + d->launch_s;
  } else if (fuse == FUSE_ROPE_QKV) {
    /* one pass over the QKV projection and q, k, v: the bytes of the split (or concat) alone (by
     * kind: which member of fuse.c's group that is) */
    members[n++] = g->op[op].kind == OP_CONCAT_QKV ? op : peer;
  } else if (fuse != FUSE_NONE && peer >= 0)
    members[n++] = peer;
  if (!n || (members[n - 1] != op && fuse != FUSE_ROPE_QKV)) members[n++] = op;
  for (int k = 0; k < n; k++) {
    if (norm_in_producer(g, fz, members[k])) continue;
    t += roofline(g, fz, members[k], d, &f, &b);
    *flops += f, *bytes += b;
  }
  return t * d->class_scale[cost_op_class(g, fz, op)] + d->launch_s;
}

int cost_build(const Graph *g, const Fusions *fz, const Spec *s, const Device *d, Cost *c) {
  memset(c, 0, sizeof *c);
  c->op_time = calloc((size_t)g->nop + 1, sizeof *c->op_time);
  if (!c->op_time) return -1;
  double nmicro = g->num_microbatches > 0 ? g->num_microbatches : 1;
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    double f, b, t = cost_op_time(g, fz, o, d, &f, &b);
    c->op_time[o] = t;
    Phase ph = op->tags.phase;
    c->flops[ph] += f, c->bytes[ph] += b, c->time[ph] += t;
    double rep = ph == IR_PHASE_FORWARD || ph == IR_PHASE_BACKWARD || ph == IR_PHASE_REPLAY ? nmicro : 1;
    c->step_flops += f * rep, c->step_bytes += b * rep, c->step_time += t * rep;
    if (ph == IR_PHASE_REPLAY) c->replay_flops += f * rep, c->replay_time += t * rep;
  }
  /* the bench's model FLOPs */
  const SpecModel *m = &s->model;
  double params = 0;
  for (int t = 0; t < g->nt; t++) {
    const Tensor *x = &g->t[t];
    if (x->role != ROLE_PARAM) continue;
    if (strstr(x->name, "embedding") && !m->share_embeddings_and_output_weights) continue;
    if (strstr(x->name, "position_embeddings")) continue;
    double n = (double)tensor_numel(x);
    /* a token passes through top-k of the routed experts, not all of them */
    if (strstr(x->name, ".experts.") && spec_is_moe(s))
      n *= (double)m->moe_router_topk / (double)m->num_moe_experts;
    params += n;
  }
  double tokens = (double)s->train.micro_batch_size * (double)m->seq_length * nmicro;
  /* QK^T runs at the q/k head dim and PV at the v head dim; they differ under MLA */
  double head_dim = m->multi_latent_attention
                        ? ((double)(m->qk_head_dim + m->qk_pos_emb_head_dim) + (double)m->v_head_dim) / 2
                        : (double)spec_kv_channels(s);
  double hd = (double)m->num_attention_heads * head_dim;
  /* attention in the attention layers only: a hybrid's '*' layers */
  double attn_layers = (double)m->num_layers;
  if (s->present[SPEC_F_model_hybrid_override_pattern]) {
    attn_layers = 0;
    for (const char *p = m->hybrid_override_pattern; *p && p - m->hybrid_override_pattern < m->num_layers;
         p++)
      attn_layers += *p == '*';
  }
  /* the Mamba mixer in its recurrent form, per token and head 5 P N (3 P N for the state update, 2 P N
   * for the output) and 2 K per conv tap and channel, x3 for forward and backward (torch_hybrid.py's
   * convention); its in/out projections are parameters above */
  double mamba = 0;
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    if (op->kind != OP_MAMBA_MIXER || op->tags.phase != IR_PHASE_FORWARD) continue;
    const Tensor *xbc = &g->t[op->in[0]], *cw = &g->t[op->in[1]];
    double tok = (double)(xbc->shape[0] * xbc->shape[1]), hp = (double)(op->a.i[0] * op->a.i[1]);
    mamba += 3 * tok * (5 * hp * (double)op->a.i[3] + 2 * (double)(cw->shape[1] - 1) * (double)xbc->shape[2]);
  }
  c->model_flops = 6 * params * tokens +
                   6 * (double)s->train.micro_batch_size * nmicro * attn_layers * (double)m->seq_length *
                       (double)m->seq_length * hd +
                   mamba * nmicro;
  return 0;
}

void cost_free(Cost *c) {
  free(c->op_time);
  memset(c, 0, sizeof *c);
}
