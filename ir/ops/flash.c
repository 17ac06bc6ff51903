/* flash.c — FLASH_ATTN: causal attention that keeps only q, k, v, o and the row log-sum-exp
 * (B,H,T) for the backward, which recomputes the probabilities (FlashAttention-2's recipe).
 * Backends flash, fused and auto all lower to it on the CPU.
 *
 * Attributes: f[0] = softmax scale, f[1] = attention-dropout p (0 = none), i[0] = RNG stream,
 * i[1] = causal, i[2] = the CUDA kernels (ATTN_IMPL_*; an `auto` forward's backward may be
 * ATTN_IMPL_FLASH: det_backward_on_flash), i[3] = deterministic_mode, i[4] = 1 when the heads are
 * this tensor-parallel rank's block of the one-rank heads (CpuCtx.tp). Dropout on the
 * probabilities is drawn from the counter-based RNG at element ((b*H + h)*T + i)*T + j of the one-rank heads
 * (H, h offset by the rank's block under i[4]), so forward and backward (and any replay) see the same mask
 * without storing it, and TP ranks draw the one-rank mask's slices. GQA: head h reads group h / (H/G).
 *
 * FLASH_ATTN_DV is the same attention with a value head dim of its own: q, k (B,T,H|G,D), v
 * (B,T,G,Dv) -> context (B,T,H*Dv). It is what Transformer Engine's fused (cuDNN) attention
 * computes for MLA, whose value heads are narrower than its q/k heads (Megatron pads V only for
 * packed THD batches: multi_latent_attention.py, _prepare_mla_core_attention_value). A kind of
 * its own, because stepc's CUDA flash kernels take one head dim: the executor reports it as not
 * run on CUDA yet instead of reading V with the wrong stride. */
#ifndef OPS_KERNEL_PASS
#include "kernels/launch.h"
#include "ops/ops.h"

static int flash_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *q = ops_in(g, op, 0), *k = ops_in(g, op, 1), *v = ops_in(g, op, 2);
  bool own_dv = op->kind == OP_FLASH_ATTN_DV;
  if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || q->shape[0] != k->shape[0] ||
      q->shape[1] != k->shape[1] || q->shape[3] != k->shape[3] || q->shape[2] % k->shape[2] ||
      v->shape[0] != k->shape[0] || v->shape[1] != k->shape[1] || v->shape[2] != k->shape[2] ||
      (!own_dv && v->shape[3] != k->shape[3]))
    return ops_err(err, n,
                   own_dv ? "expects q (B,T,H,D), k (B,T,G,D) and v (B,T,G,Dv) with G dividing H"
                          : "expects q (B,T,H,D), k and v (B,T,G,D) with G dividing H");
  if (op->a.f[1] < 0 || op->a.f[1] >= 1) return ops_err(err, n, "dropout p = %g", op->a.f[1]);
  ops_out_shape(&out[0], q->dtype, "context", 3, q->shape[0], q->shape[1], q->shape[2] * v->shape[3], 1);
  ops_out_shape(&out[1], DT_F32, "lse", 3, q->shape[0], q->shape[2], q->shape[1], 1);
  return 0;
}

/* q.k^T takes 2 T D and p.v 2 T Dv per query row and head */
static double flash_flops(const Graph *g, const Op *op) {
  const Tensor *q = ops_in(g, op, 0), *v = ops_in(g, op, 2);
  double f = 2.0 * (double)(q->shape[0] * q->shape[1] * q->shape[2]) * (double)(q->shape[3] + v->shape[3]) *
             (double)q->shape[1];
  return op->a.i[1] ? f / 2 : f;
}

/* The backward of an `auto` attention with deterministic_mode (i[3]) runs on stepc's own kernels
 * where they beat cuDNN's deterministic backward: head dim 64 (both) on a shape the flash kernels
 * take (stepc_flash_supported), no dropout. Measured on an
 * H100 (bench/RESULTS.md, session 26): at M (b2 h32/8 s4096 d64) 1.161 ms against cuDNN's 1.307 and no
 * (B,H,T,T) bf16 workspace (2.15 GB); at S (d64) 0.284 against 0.358; at L8 (d128) cuDNN's is faster (3.120
 * against 3.819), so head dim 128 keeps it. Both are deterministic. The forward stays cuDNN's (its
 * log-sum-exp is the one stepc's backward reads). */
static bool det_backward_on_flash(const Graph *g, const Op *o) {
  const Tensor *q = ops_in(g, o, 0), *v = ops_in(g, o, 2);
  return o->kind == OP_FLASH_ATTN && o->a.i[2] == ATTN_IMPL_AUTO && o->a.i[3] && o->a.f[1] == 0 &&
         q->shape[3] == 64 && v->shape[3] == 64 && stepc_flash_supported(q->shape[1], 64);
}

static int flash_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  int in[6] = {dout[0], o.in[0], o.in[1], o.in[2], o.out[0], o.out[1]}, of[3] = {o.in[0], o.in[1], o.in[2]};
  OpKind bk = o.kind == OP_FLASH_ATTN_DV ? OP_FLASH_ATTN_DV_BWD : OP_FLASH_ATTN_BWD;
  OpAttrs a = o.a;
  if (det_backward_on_flash(g, &o)) a.i[2] = ATTN_IMPL_FLASH;
  return ops_grad_op(g, bk, in, 6, &a, din, of) < 0 ? -1 : 0;
}

static int flash_bwd_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  (void)err, (void)n;
  for (int i = 0; i < 3; i++)
    ops_out_like(&out[i], ops_in(g, op, 1 + i), i == 0 ? "dq" : i == 1 ? "dk" : "dv");
  return 0;
}

/* recompute q.k^T, then dP = dO v^T (Dv), dV = P^T dO (Dv), dQ = dS k (D), dK = dS^T q (D) */
static double flash_bwd_flops(const Graph *g, const Op *op) {
  const Tensor *q = ops_in(g, op, 1), *v = ops_in(g, op, 3);
  double rows = (double)(q->shape[0] * q->shape[1] * q->shape[2]);
  double f = 2.0 * rows * (double)(3 * q->shape[3] + 2 * v->shape[3]) * (double)q->shape[1];
  return op->a.i[1] ? f / 2 : f;
}

int64_t attn_cudnn_workspace(const Graph *g, const Op *op) {
  if ((op->kind != OP_FLASH_ATTN_BWD && op->kind != OP_FLASH_ATTN_DV_BWD) || op->a.i[2] == ATTN_IMPL_FLASH)
    return 0;
  const Tensor *q = ops_in(g, op, 1);
  int64_t b = q->shape[0], t = q->shape[1], h = q->shape[2], d = q->shape[3], t64 = (t + 63) / 64 * 64;
  int64_t rows = (b * h * t * 4 + 255) / 256 * 256, acc = (b * h * t * d * 4 + 255) / 256 * 256;
  return rows + acc + (op->a.i[3] ? b * h * t64 * t64 * 2 : b * h * t * d * 4);
}

int64_t attn_cudnn_workspace_max(const Graph *g, const uint8_t *only) {
  int64_t w = 0;
  for (int o = 0; o < g->nop; o++) {
    int64_t b = !only || only[o] ? attn_cudnn_workspace(g, &g->op[o]) : 0;
    if (b > w) w = b;
  }
  return w;
}

#define OPS_KERNEL_PASS
#define OPS_REAL 32
#include "ops/real.h"
#include __FILE__
#undef OPS_REAL
#define OPS_REAL 64
#include "ops/real.h"
#include __FILE__
#undef OPS_KERNEL_PASS

/* rng: with attention dropout (a.f[1] > 0) */
const OpInfo op_flash_attn_info = {"flash_attn",
                                   3,
                                   3,
                                   2,
                                   flash_infer,
                                   flash_flops,
                                   flash_backward,
                                   {flash_cpu_f32, flash_cpu_f64},
                                   .facts = {.cost = COST_ATTN_FWD,
                                             .ceiling = CEIL_ATTN,
                                             .inplace = INPLACE_NONE,
                                             .rng = RNG_ATTN_DROPOUT,
                                             .sink = SINK_NO,
                                             .matmul = MATMUL_NONE,
                                             .ew = &OP_EW_NONE}};
const OpInfo op_flash_attn_bwd_info = {"flash_attn_bwd",
                                       6,
                                       6,
                                       3,
                                       flash_bwd_infer,
                                       flash_bwd_flops,
                                       NULL,
                                       {flash_bwd_cpu_f32, flash_bwd_cpu_f64},
                                       .facts = {.cost = COST_ATTN_BWD,
                                                 .ceiling = CEIL_ATTN,
                                                 .inplace = INPLACE_NONE,
                                                 .rng = RNG_NONE,
                                                 .sink = SINK_NO,
                                                 .matmul = MATMUL_NONE,
                                                 .ew = &OP_EW_NONE}};
const OpInfo op_flash_attn_dv_info = {"flash_attn_dv",
                                      3,
                                      3,
                                      2,
                                      flash_infer,
                                      flash_flops,
                                      flash_backward,
                                      {flash_cpu_f32, flash_cpu_f64},
                                      .facts = {.cost = COST_ATTN_FWD,
                                                .ceiling = CEIL_ATTN,
                                                .inplace = INPLACE_NONE,
                                                .rng = RNG_ATTN_DROPOUT,
                                                .sink = SINK_NO,
                                                .matmul = MATMUL_NONE,
                                                .ew = &OP_EW_NONE}};
const OpInfo op_flash_attn_dv_bwd_info = {"flash_attn_dv_bwd",
                                          6,
                                          6,
                                          3,
                                          flash_bwd_infer,
                                          flash_bwd_flops,
                                          NULL,
                                          {flash_bwd_cpu_f32, flash_bwd_cpu_f64},
                                          .facts = {.cost = COST_ATTN_BWD,
                                                    .ceiling = CEIL_ATTN,
                                                    .inplace = INPLACE_NONE,
                                                    .rng = RNG_NONE,
                                                    .sink = SINK_NO,
                                                    .matmul = MATMUL_NONE,
                                                    .ew = &OP_EW_NONE}};

#else /* OPS_KERNEL_PASS */

typedef struct {
  const real *q, *k, *v, *o, *lse, *dout;
  real *out, *olse, *dq, *dk, *dvo, *delta;
  int64_t b, t, h, g, d, dv; /* d: q/k head dim, dv: value head dim */
  int64_t hfull, hoff;       /* the one-rank heads and this rank's first (i[4]: a TP block) */
  real scale;
  float p;
  uint64_t key;
  int causal;
} K(FlashArgs);

#define FQ(a, b_, t_, h_) ((((b_) * (a)->t + (t_)) * (a)->h + (h_)) * (a)->d)
#define FK(a, b_, t_, g_) ((((b_) * (a)->t + (t_)) * (a)->g + (g_)) * (a)->d)
#define FO(a, b_, t_, h_) ((((b_) * (a)->t + (t_)) * (a)->h + (h_)) * (a)->dv)
#define FV(a, b_, t_, g_) ((((b_) * (a)->t + (t_)) * (a)->g + (g_)) * (a)->dv)

static real K(flash_score)(const K(FlashArgs) * a, int64_t b, int64_t h, int64_t i, int64_t j) {
  const real *q = a->q + FQ(a, b, i, h), *k = a->k + FK(a, b, j, h / (a->h / a->g));
  real s = 0;
  for (int64_t d = 0; d < a->d; d++)
    s += q[d] * k[d];
  return s * a->scale;
}

/* The dropout keep factor of probability (b,h,i,j): 0 or 1/(1-p). */
static real K(flash_keep)(const K(FlashArgs) * a, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (a->p <= 0) return 1;
  uint64_t idx = (uint64_t)(((b * a->hfull + a->hoff + h) * a->t + i) * a->t + j);
  return ops_rng_uniform(a->key, idx) >= a->p ? (real)(1.0 / (1.0 - a->p)) : 0;
}

/* rows (b, h, i) */
static void K(flash_fwd_range)(void *p, int64_t lo, int64_t hi) {
  const K(FlashArgs) *a = p;
  for (int64_t r = lo; r < hi; r++) {
    int64_t i = r % a->t, h = (r / a->t) % a->h, b = r / (a->t * a->h), gq = h / (a->h / a->g);
    int64_t jend = a->causal ? i + 1 : a->t;
    real m = -INFINITY, l = 0;
    for (int64_t j = 0; j < jend; j++) {
      real s = K(flash_score)(a, b, h, i, j);
      m = s > m ? s : m;
    }
    for (int64_t j = 0; j < jend; j++)
      l += REXP(K(flash_score)(a, b, h, i, j) - m);
    real lse = m + RLOG(l);
    real *o = a->out + FO(a, b, i, h);
    for (int64_t d = 0; d < a->dv; d++)
      o[d] = 0;
    for (int64_t j = 0; j < jend; j++) {
      real pij = REXP(K(flash_score)(a, b, h, i, j) - lse) * K(flash_keep)(a, b, h, i, j);
      const real *v = a->v + FV(a, b, j, gq);
      for (int64_t d = 0; d < a->dv; d++)
        o[d] += pij * v[d];
    }
    a->olse[r] = lse;
  }
}

static void K(flash_dims)(const CpuCtx *c, const Op *op, int qin, K(FlashArgs) * a) {
  const Tensor *q = &c->g->t[op->in[qin]], *k = &c->g->t[op->in[qin + 1]], *v = &c->g->t[op->in[qin + 2]];
  a->b = q->shape[0], a->t = q->shape[1], a->h = q->shape[2], a->g = k->shape[2], a->d = q->shape[3],
  a->dv = v->shape[3];
  a->scale = (real)op->a.f[0];
  a->p = (float)op->a.f[1];
  a->key = ops_rng_key(c, op->a.i[0]);
  a->causal = (int)op->a.i[1];
  a->hfull = a->h, a->hoff = 0;
  if (op->a.i[4] && c->tp) a->hfull = a->h * c->tp->size, a->hoff = (int64_t)c->tp->rank * a->h;
}

static void K(flash_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  K(FlashArgs) a = {.q = in[0], .k = in[1], .v = in[2], .out = out[0], .olse = out[1]};
  K(flash_dims)(c, op, 0, &a);
  c->parallel_for(c, a.b * a.h * a.t, K(flash_fwd_range), &a);
}

/* delta_i = do_i . o_i, and dq_i = scale sum_j ds_ij k_j with ds_ij = P_ij (dp_ij - delta_i),
 * dp_ij = keep_ij do_i . v_j; rows (b, h, i). */
static void K(flash_bwd_q)(void *p, int64_t lo, int64_t hi) {
  const K(FlashArgs) *a = p;
  for (int64_t r = lo; r < hi; r++) {
    int64_t i = r % a->t, h = (r / a->t) % a->h, b = r / (a->t * a->h), gq = h / (a->h / a->g);
    const real *dout = a->dout + FO(a, b, i, h), *o = a->o + FO(a, b, i, h);
    real delta = 0;
    for (int64_t d = 0; d < a->dv; d++)
      delta += dout[d] * o[d];
    a->delta[r] = delta;
    real *dq = a->dq + FQ(a, b, i, h);
    for (int64_t d = 0; d < a->d; d++)
      dq[d] = 0;
    int64_t jend = a->causal ? i + 1 : a->t;
    for (int64_t j = 0; j < jend; j++) {
      const real *v = a->v + FV(a, b, j, gq), *k = a->k + FK(a, b, j, gq);
      real pij = REXP(K(flash_score)(a, b, h, i, j) - a->lse[r]), dp = 0;
      for (int64_t d = 0; d < a->dv; d++)
        dp += dout[d] * v[d];
      real ds = pij * (dp * K(flash_keep)(a, b, h, i, j) - delta);
      for (int64_t d = 0; d < a->d; d++)
        dq[d] += ds * k[d];
    }
    for (int64_t d = 0; d < a->d; d++)
      dq[d] *= a->scale;
  }
}

/* dk_j, dv_j summed over the group's heads and the queries i, in order; rows (b, j, g). */
static void K(flash_bwd_kv)(void *p, int64_t lo, int64_t hi) {
  const K(FlashArgs) *a = p;
  int64_t rep = a->h / a->g;
  for (int64_t r = lo; r < hi; r++) {
    int64_t gq = r % a->g, j = (r / a->g) % a->t, b = r / (a->g * a->t);
    real *dk = a->dk + r * a->d, *dv = a->dvo + r * a->dv;
    const real *v = a->v + r * a->dv;
    for (int64_t d = 0; d < a->d; d++)
      dk[d] = 0;
    for (int64_t d = 0; d < a->dv; d++)
      dv[d] = 0;
    for (int64_t h = gq * rep; h < (gq + 1) * rep; h++)
      for (int64_t i = a->causal ? j : 0; i < a->t; i++) {
        int64_t row = (b * a->h + h) * a->t + i;
        const real *dout = a->dout + FO(a, b, i, h), *q = a->q + FQ(a, b, i, h);
        real pij = REXP(K(flash_score)(a, b, h, i, j) - a->lse[row]), keep = K(flash_keep)(a, b, h, i, j),
             dp = 0;
        for (int64_t d = 0; d < a->dv; d++)
          dp += dout[d] * v[d];
        real ds = pij * (dp * keep - a->delta[row]);
        for (int64_t d = 0; d < a->d; d++)
          dk[d] += ds * q[d];
        for (int64_t d = 0; d < a->dv; d++)
          dv[d] += pij * keep * dout[d];
      }
    for (int64_t d = 0; d < a->d; d++)
      dk[d] *= a->scale;
  }
}

static void K(flash_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  K(FlashArgs)
  a = {.dout = in[0],
       .q = in[1],
       .k = in[2],
       .v = in[3],
       .o = in[4],
       .lse = in[5],
       .dq = out[0],
       .dk = out[1],
       .dvo = out[2]};
  K(flash_dims)(c, op, 1, &a);
  a.delta = malloc((size_t)(a.b * a.h * a.t) * sizeof(real)); /* per-row scratch, like the kernel's */
  if (!a.delta) return;
  c->parallel_for(c, a.b * a.h * a.t, K(flash_bwd_q), &a);
  c->parallel_for(c, a.b * a.t * a.g, K(flash_bwd_kv), &a);
  free(a.delta);
}

#undef FQ
#undef FK
#undef FO
#undef FV
#endif
