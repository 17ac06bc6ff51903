/* rope.c — ROPE: rotary position embedding on x (B, T, H, D), Megatron's non-interleaved form
 * (rotate_half over the two halves of the head dim, rotary_percent 1):
 *   y[j] = x[j] cos(t w_j) - x[j+D/2] sin(t w_j),  y[j+D/2] = x[j+D/2] cos(t w_j) + x[j] sin(t w_j),
 *   w_j = base^(-2j/D), or with Llama 3's frequency scaling (below) llama3(w_j).
 * Attributes: f[0] = base, f[1] = the Llama 3 scaling factor (model.rope_scaling_factor; 0 = no
 * scaling), i[0] = +1 forward, -1 the inverse rotation, which is the gradient (a rotation's
 * transpose); so the backward reads no forward tensor.
 *
 * Llama 3's scaling (Megatron-Core's RotaryEmbedding with rope_scaling=True, _apply_scaling; Hugging
 * Face's rope_type "llama3", _compute_llama3_parameters), with Megatron's fixed low_freq_factor
 * L = 1, high_freq_factor Hf = 4, original_max_position_embeddings O = 8192 and the factor F: a
 * frequency w has the wavelength l = 2 pi / w;
 *   l < O / Hf (short waves, high frequencies)  w unchanged
 *   l > O / L  (long waves, low frequencies)    w / F
 *   otherwise, with s = (O / l - L) / (Hf - L)  (1 - s) w / F + s w
 * (stepc's CPU reference evaluates it in double, kernels/rope.cuh in fp32 as PyTorch does.) */
#ifndef OPS_KERNEL_PASS
#include <math.h>

#include "ops/ops.h"

/* w_j, scaled as the comment above says when factor > 0. */
static double rope_freq(double base, int64_t j, int64_t d, double factor) {
  double w = pow(base, -2.0 * (double)j / (double)d);
  if (factor <= 0) return w;
  const double L = ROPE_LLAMA3_LOW_FREQ_FACTOR, Hf = ROPE_LLAMA3_HIGH_FREQ_FACTOR,
               O = ROPE_LLAMA3_ORIGINAL_MAX_POS;
  double l = 2 * M_PI / w;
  if (l < O / Hf) return w;
  if (l > O / L) return w / factor;
  double sm = (O / l - L) / (Hf - L);
  return (1 - sm) * w / factor + sm * w;
}

static int rope_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0);
  if (x->ndim != 4 || x->shape[3] % 2) return ops_err(err, n, "expects (B, T, H, D) with D even");
  if (op->a.i[0] != 1 && op->a.i[0] != -1) return ops_err(err, n, "i[0] must be +1 or -1");
  if (op->a.f[0] <= 0) return ops_err(err, n, "f[0] (rotary base) must be > 0");
  if (op->a.f[1] < 0) return ops_err(err, n, "f[1] (the Llama 3 scaling factor) must be > 0, or 0 for none");
  ops_out_like(&out[0], x, "rope");
  return 0;
}

static int rope_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  OpAttrs a = o.a;
  a.i[0] = -a.i[0];
  int of[1] = {o.in[0]};
  return ops_grad_op(g, OP_ROPE, &dout[0], 1, &a, &din[0], of) < 0 ? -1 : 0;
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

const OpInfo op_rope_info = {"rope",
                             1,
                             1,
                             1,
                             rope_infer,
                             ops_flops_elementwise,
                             rope_backward,
                             {rope_cpu_f32, rope_cpu_f64},
                             .facts = {.cost = COST_ROPE_QKV,
                                       .ceiling = CEIL_DRAM,
                                       .inplace = INPLACE_NONE,
                                       .rng = RNG_NONE,
                                       .sink = SINK_NO,
                                       .matmul = MATMUL_NONE,
                                       .ew = &OP_EW_NONE}};

#else /* OPS_KERNEL_PASS */

typedef struct {
  const real *x;
  real *y;
  int64_t t, h, d;
  double base, factor, sign;
} K(RopeArgs);

static void K(rope_range)(void *p, int64_t lo, int64_t hi) {
  const K(RopeArgs) *a = p;
  int64_t half = a->d / 2;
  for (int64_t r = lo; r < hi; r++) { /* r = (b * T + t) * H + h */
    int64_t t = (r / a->h) % a->t;
    const real *x = a->x + r * a->d;
    real *y = a->y + r * a->d;
    for (int64_t j = 0; j < half; j++) {
      /* angles in double so that fp32 and fp64 passes rotate by the same angle */
      double ang = (double)t * rope_freq(a->base, j, a->d, a->factor);
      real cs = (real)cos(ang), sn = (real)(a->sign * sin(ang));
      real x1 = x[j], x2 = x[j + half];
      y[j] = x1 * cs - x2 * sn;
      y[j + half] = x2 * cs + x1 * sn;
    }
  }
}

static void K(rope_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]];
  K(RopeArgs)
  a = {in[0], out[0], x->shape[1], x->shape[2], x->shape[3], op->a.f[0], op->a.f[1], (double)op->a.i[0]};
  c->parallel_for(c, x->shape[0] * x->shape[1] * x->shape[2], K(rope_range), &a);
}

#endif
