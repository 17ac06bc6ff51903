/* optim.c — the optimizer step as ops (phase optimizer), so that a full-iteration CUDA graph can
 * hold it: nothing is decided on the host between steps. All write persistent tensors in place
 * (graph_op_into).
 *
 *   GRAD_SUMSQ  in [g]                 out [acc (1)]          acc += sum g^2
 *               i[0] = 1: may run in one multi-tensor launch with its neighbours (compiler/passes/fuse.c)
 *   CLIP_COEF   in [acc]               out [norm, coef]       norm = sqrt(acc);
 *               f[0] = clip_grad       coef = min(1, clip / (norm + 1e-6)), 1 when clip = 0 (Megatron)
 *   LR_SCHED    in []                  out [step, lr]         step += 1; lr = schedule(step)
 *               f[0] = lr, f[1] = min_lr, i[0] = warmup, i[1] = decay iters, i[2] = style
 *               (0 constant, 1 linear, 2 cosine)
 *   ADAMW       in [grad, coef, lr, step]  out [param, m, v (, master)]
 *               f[0] = beta1, f[1] = beta2, f[2] = eps, f[3] = weight decay, i[0] as GRAD_SUMSQ's;
 *               with a master the update runs on the fp32 master and the param receives a copy
 *               (the device rounds to bf16 there; the CPU executor stores both at its own
 *               precision). */
#ifndef OPS_KERNEL_PASS
#include "ops/ops.h"

static int inplace_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  (void)g, (void)op, (void)out;
  return ops_err(err, n, "an optimizer op is built with graph_op_into");
}

static double adamw_flops(const Graph *g, const Op *op) {
  return 12.0 * (double)tensor_numel(ops_in(g, op, 0));
}

/* What the CUDA kernels move (kernels/optimizer.cuh adamw_update / adamw_multi, one element
 * adamw_element): read the gradient, m, v and the fp32 weight (the master, else the fp32 parameter
 * itself), write m, v, the weight and, with a master, the bf16 parameter: every tensor once
 * (op_tensor_bytes: the scalars coef, lr and step too) and the reads of m, v and the weight, which
 * are updated in place. With an fp32 main gradient and a bf16 parameter: 16 B read + 14 B written =
 * 30 B per parameter (tests/unit/test_op_facts.c). The kernel zeroes no gradient. */
static double adamw_bytes(const Graph *g, const Op *op) {
  double b = op_tensor_bytes(g, op);
  int rmw[3] = {op->out[1], op->out[2], op->out[op->nout == 4 ? 3 : 0]};
  for (int k = 0; k < 3; k++)
    b += (double)tensor_numel(&g->t[rmw[k]]) * (double)dtype_size(g->t[rmw[k]].dtype);
  return b;
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

double optim_lr_at(double lr, double min_lr, int64_t warmup, int64_t decay, int style, int64_t step) {
  if (warmup > 0 && step <= warmup) return lr * (double)step / (double)warmup;
  if (style == 0) return lr;
  if (step > decay) return min_lr;
  double ratio = decay > warmup ? (double)(step - warmup) / (double)(decay - warmup) : 1.0;
  double coeff = style == 1 ? 1.0 - ratio : 0.5 * (cos(M_PI * ratio) + 1.0);
  return min_lr + coeff * (lr - min_lr);
}

const OpInfo op_grad_sumsq_info = {"grad_sumsq",
                                   1,
                                   1,
                                   0,
                                   inplace_infer,
                                   ops_flops_elementwise,
                                   NULL,
                                   {sumsq_cpu_f32, sumsq_cpu_f64},
                                   .facts = {.cost = COST_GRAD_NORM,
                                             .ceiling = CEIL_DRAM,
                                             .inplace = INPLACE_NONE,
                                             .rng = RNG_NONE,
                                             .sink = SINK_NO,
                                             .matmul = MATMUL_NONE,
                                             .ew = &OP_EW_NONE}};
const OpInfo op_clip_coef_info = {"clip_coef",
                                  1,
                                  1,
                                  0,
                                  inplace_infer,
                                  NULL,
                                  NULL,
                                  {clip_cpu_f32, clip_cpu_f64},
                                  .facts = {.cost = COST_OPTIMIZER,
                                            .ceiling = CEIL_DRAM,
                                            .inplace = INPLACE_NONE,
                                            .rng = RNG_NONE,
                                            .sink = SINK_NO,
                                            .matmul = MATMUL_NONE,
                                            .ew = &OP_EW_NONE}};
const OpInfo op_lr_sched_info = {"lr_sched",
                                 0,
                                 0,
                                 0,
                                 inplace_infer,
                                 NULL,
                                 NULL,
                                 {lr_cpu_f32, lr_cpu_f64},
                                 .facts = {.cost = COST_OPTIMIZER,
                                           .ceiling = CEIL_DRAM,
                                           .inplace = INPLACE_NONE,
                                           .rng = RNG_NONE,
                                           .sink = SINK_NO,
                                           .matmul = MATMUL_NONE,
                                           .ew = &OP_EW_NONE}};
const OpInfo op_adamw_info = {"adamw",
                              4,
                              4,
                              0,
                              inplace_infer,
                              adamw_flops,
                              NULL,
                              {adamw_cpu_f32, adamw_cpu_f64},
                              .facts = {.cost = COST_OPTIMIZER,
                                        .ceiling = CEIL_DRAM,
                                        .inplace = INPLACE_NONE,
                                        .rng = RNG_NONE,
                                        .sink = SINK_NO,
                                        .matmul = MATMUL_NONE,
                                        .ew = &OP_EW_NONE},
                              .bytes = adamw_bytes};

#else /* OPS_KERNEL_PASS */

double optim_lr_at(double lr, double min_lr, int64_t warmup, int64_t decay, int style, int64_t step);

/* Fixed chunks of 4096 summed in double, then added in chunk order: the same bits for any
 * number of threads. */
#define SUMSQ_CHUNK 4096
typedef struct {
  const real *g;
  double *part;
  int64_t n;
} K(SumsqArgs);

static void K(sumsq_range)(void *p, int64_t lo, int64_t hi) {
  const K(SumsqArgs) *a = p;
  for (int64_t ch = lo; ch < hi; ch++) {
    double s = 0;
    int64_t end = (ch + 1) * SUMSQ_CHUNK < a->n ? (ch + 1) * SUMSQ_CHUNK : a->n;
    for (int64_t i = ch * SUMSQ_CHUNK; i < end; i++)
      s += (double)a->g[i] * (double)a->g[i];
    a->part[ch] = s;
  }
}

static void K(sumsq_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  int64_t n = tensor_numel(&c->g->t[op->in[0]]), nch = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
  double *part = malloc((size_t)nch * sizeof *part);
  if (!part) return;
  K(SumsqArgs) a = {in[0], part, n};
  c->parallel_for(c, nch, K(sumsq_range), &a);
  double s = 0;
  for (int64_t i = 0; i < nch; i++)
    s += part[i];
  free(part);
  ((real *)out[0])[0] += (real)s;
}

static void K(clip_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  (void)c;
  double norm = sqrt((double)((const real *)in[0])[0]), clip = op->a.f[0], coef = 1.0;
  if (clip > 0 && clip / (norm + 1e-6) < 1.0) coef = clip / (norm + 1e-6);
  ((real *)out[0])[0] = (real)norm;
  ((real *)out[1])[0] = (real)coef;
}

static void K(lr_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  (void)c, (void)in;
  int32_t *step = out[0];
  *step += 1;
  ((real *)out[1])[0] =
      (real)optim_lr_at(op->a.f[0], op->a.f[1], op->a.i[0], op->a.i[1], (int)op->a.i[2], *step);
}

typedef struct {
  const real *g;
  real *p, *m, *v, *master;
  real coef, lr, b1, b2, eps, wd, bc1, bc2;
} K(AdamArgs);

static void K(adamw_range)(void *p, int64_t lo, int64_t hi) {
  const K(AdamArgs) *a = p;
  real *w = a->master ? a->master : a->p;
  for (int64_t i = lo; i < hi; i++) {
    real g = a->g[i] * a->coef;
    a->m[i] = a->b1 * a->m[i] + (1 - a->b1) * g;
    a->v[i] = a->b2 * a->v[i] + (1 - a->b2) * g * g;
    real upd = (a->m[i] / a->bc1) / (RSQRT(a->v[i] / a->bc2) + a->eps);
    w[i] -= a->lr * (upd + a->wd * w[i]);
    if (a->master) a->p[i] = w[i];
  }
}

static void K(adamw_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  int32_t step = *(const int32_t *)in[3];
  double b1 = op->a.f[0], b2 = op->a.f[1];
  K(AdamArgs)
  a = {in[0],
       out[0],
       out[1],
       out[2],
       op->nout == 4 ? out[3] : NULL,
       ((const real *)in[1])[0],
       ((const real *)in[2])[0],
       (real)b1,
       (real)b2,
       (real)op->a.f[2],
       (real)op->a.f[3],
       (real)(1 - pow(b1, step)),
       (real)(1 - pow(b2, step))};
  c->parallel_for(c, tensor_numel(&c->g->t[op->in[0]]), K(adamw_range), &a);
}

#endif
