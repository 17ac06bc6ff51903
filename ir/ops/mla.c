/* mla.c — the per-head split and concat of multi-latent attention (the rope/nope split of q and
 * k, k_nope/v out of the kv up-projection, the shared k_pe broadcast to every head), and the
 * zero padding of v when the attention kernel wants one head dim for q, k and v.
 *
 * A "joined" tensor holds per token and head [part1 (a) | part2 (b)]:
 *   HEAD_SPLIT   joined -> part1 (B,T,H,a), part2 (B,T,H2,b)
 *   HEAD_CONCAT  part1 (B,T,H,a) [, part2 (B,T,H2,b)] -> joined (B,T,H,a+b); without part2 the
 *                b columns are zero (padding)
 * Attributes: i[0] = H, i[1] = a, i[2] = b, i[3] = H2, the heads of part2: H, or 1 for a part
 * shared by all heads (MLA's k_pe): CONCAT broadcasts it and SPLIT sums it over the heads, which
 * is the broadcast's adjoint, so each op is the other's gradient. i[4] = layout flags: bit 0 the
 * joined tensor is (B,T,H*(a+b)) rather than (B,T,H,a+b); bit 1 part1 is (B,T,H*a); bit 2 part2 is
 * (B,T,H2*b). B and T are the first two dims of the input; the element count must match. */
#ifndef OPS_KERNEL_PASS
#include "ops/ops.h"

typedef struct {
  int64_t b, t, h, a, w2, h2;
  int flags;
} HeadDims;

static int head_dims(const Tensor *x, const Op *op, HeadDims *d, char *err, size_t n) {
  *d = (HeadDims){x->ndim >= 3 ? x->shape[0] : 0,
                  x->ndim >= 3 ? x->shape[1] : 0,
                  op->a.i[0],
                  op->a.i[1],
                  op->a.i[2],
                  op->a.i[3],
                  (int)op->a.i[4]};
  if (d->b < 1 || d->h < 1 || d->a < 1 || d->w2 < 1 || (d->h2 != d->h && d->h2 != 1))
    return ops_err(err, n, "expects (B,T,...) input, H, a, b >= 1 and H2 in {1, H}");
  return 0;
}

static void head_shape(OpOut *o, DType dt, const char *suffix, const HeadDims *d, int64_t h, int64_t w,
                       bool flat) {
  if (flat)
    ops_out_shape(o, dt, suffix, 3, d->b, d->t, h * w, 1);
  else
    ops_out_shape(o, dt, suffix, 4, d->b, d->t, h, w);
}

static int split_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0);
  HeadDims d;
  if (head_dims(x, op, &d, err, n)) return -1;
  if (tensor_numel(x) != d.b * d.t * d.h * (d.a + d.w2))
    return ops_err(err, n, "%s has %lld elements, not B*T*H*(a+b)", x->name, (long long)tensor_numel(x));
  head_shape(&out[0], x->dtype, "part1", &d, d.h, d.a, d.flags & 2);
  head_shape(&out[1], x->dtype, "part2", &d, d.h2, d.w2, d.flags & 4);
  return 0;
}

static int concat_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *p1 = ops_in(g, op, 0);
  HeadDims d;
  if (head_dims(p1, op, &d, err, n)) return -1;
  if (tensor_numel(p1) != d.b * d.t * d.h * d.a) return ops_err(err, n, "part1 %s is not B*T*H*a", p1->name);
  if (op->nin == 2) {
    const Tensor *p2 = ops_in(g, op, 1);
    if (p2->ndim < 3 || p2->shape[0] != d.b || p2->shape[1] != d.t ||
        tensor_numel(p2) != d.b * d.t * d.h2 * d.w2)
      return ops_err(err, n, "part2 %s is not B*T*H2*b", p2->name);
  }
  head_shape(&out[0], p1->dtype, "joined", &d, d.h, d.a + d.w2, d.flags & 1);
  return 0;
}

static int split_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0 && dout[1] < 0) return 0;
  if (dout[0] < 0) return graph_fail(g, "head_split: part1 has no gradient");
  int in[2] = {dout[0], dout[1]}, of[1] = {o.in[0]};
  if (ops_grad_op(g, OP_HEAD_CONCAT, in, dout[1] < 0 ? 1 : 2, &o.a, &din[0], of) < 0) return -1;
  return 0;
}

static int concat_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  int outs[2], of[2] = {o.in[0], o.nin == 2 ? o.in[1] : -1};
  if (ops_grad_op(g, OP_HEAD_SPLIT, &dout[0], 1, &o.a, outs, of) < 0) return -1;
  din[0] = outs[0];
  if (o.nin == 2) din[1] = outs[1];
  return 0;
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

const OpInfo op_head_split_info = {"head_split",
                                   1,
                                   1,
                                   2,
                                   split_infer,
                                   NULL,
                                   split_backward,
                                   {head_split_cpu_f32, head_split_cpu_f64},
                                   .facts = {.cost = COST_MOE_ROUTING,
                                             .ceiling = CEIL_DRAM,
                                             .inplace = INPLACE_NONE,
                                             .rng = RNG_NONE,
                                             .sink = SINK_NO,
                                             .matmul = MATMUL_NONE,
                                             .ew = &OP_EW_NONE}};
const OpInfo op_head_concat_info = {"head_concat",
                                    1,
                                    2,
                                    1,
                                    concat_infer,
                                    NULL,
                                    concat_backward,
                                    {head_concat_cpu_f32, head_concat_cpu_f64},
                                    .facts = {.cost = COST_MOE_ROUTING,
                                              .ceiling = CEIL_DRAM,
                                              .inplace = INPLACE_NONE,
                                              .rng = RNG_NONE,
                                              .sink = SINK_NO,
                                              .matmul = MATMUL_NONE,
                                              .ew = &OP_EW_NONE}};

#else /* OPS_KERNEL_PASS */

typedef struct {
  real *j, *p1, *p2; /* joined, parts (p2 NULL: zero padding on concat) */
  int64_t h, a, w2, h2;
  int split;
} K(HeadArgs);

/* Per token: the layouts are row-major over (head, width), so every flag combination shares
 * the same element order and only the shapes differ. */
static void K(head_range)(void *arg, int64_t lo, int64_t hi) {
  const K(HeadArgs) *q = arg;
  int64_t wj = q->a + q->w2;
  for (int64_t t = lo; t < hi; t++) {
    real *j = q->j + t * q->h * wj, *p1 = q->p1 + t * q->h * q->a,
         *p2 = q->p2 ? q->p2 + t * q->h2 * q->w2 : NULL;
    if (q->split && p2 && q->h2 != q->h)
      for (int64_t i = 0; i < q->w2; i++)
        p2[i] = 0;
    for (int64_t h = 0; h < q->h; h++) {
      real *jh = j + h * wj, *p1h = p1 + h * q->a, *p2h = p2 ? p2 + (q->h2 == q->h ? h : 0) * q->w2 : NULL;
      if (q->split) {
        memcpy(p1h, jh, (size_t)q->a * sizeof(real));
        if (q->h2 == q->h)
          memcpy(p2h, jh + q->a, (size_t)q->w2 * sizeof(real));
        else /* summed over heads in head order */
          for (int64_t i = 0; i < q->w2; i++)
            p2h[i] += jh[q->a + i];
      } else {
        memcpy(jh, p1h, (size_t)q->a * sizeof(real));
        for (int64_t i = 0; i < q->w2; i++)
          jh[q->a + i] = p2h ? p2h[i] : 0;
      }
    }
  }
}

static void K(head_split_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]];
  K(HeadArgs) a = {in[0], out[0], out[1], op->a.i[0], op->a.i[1], op->a.i[2], op->a.i[3], 1};
  c->parallel_for(c, x->shape[0] * x->shape[1], K(head_range), &a);
}

static void K(head_concat_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]];
  K(HeadArgs)
  a = {out[0], in[0], op->nin == 2 ? in[1] : NULL, op->a.i[0], op->a.i[1], op->a.i[2], op->a.i[3], 0};
  c->parallel_for(c, x->shape[0] * x->shape[1], K(head_range), &a);
}

#endif
