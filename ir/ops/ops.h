/* ops.h — what an op family file needs: the IR, the CPU execution context its reference kernels
 * run in, and small helpers for shape inference and gradient rules.
 *
 * Reference kernels are written once over `real` and compiled twice (fp32 for training, fp64 for
 * gradient checks): a family file includes itself with OPS_KERNEL_PASS defined, once per
 * precision (see ops/real.h). */
#ifndef STEPC_OPS_H
#define STEPC_OPS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

/* Llama 3's RoPE frequency scaling (ir/ops/rope.c): the values Megatron-Core fixes in its
 * RotaryEmbedding (_apply_scaling) and Llama 3.1 / 3.2 ship in config.json's rope_scaling; the
 * factor is the recipe's (model.rope_scaling_factor). kernels/rope.cuh restates them. */
#define ROPE_LLAMA3_LOW_FREQ_FACTOR 1.0
#define ROPE_LLAMA3_HIGH_FREQ_FACTOR 4.0
#define ROPE_LLAMA3_ORIGINAL_MAX_POS 8192

/* A kernel's unit of parallel work: [lo, hi) of an index space the kernel chooses. Kernels must
 * compute each index's result the same way whatever the split, so results are bitwise
 * independent of the thread count (the executor's determinism rests on this). */
typedef void (*CpuRangeFn)(void *arg, int64_t lo, int64_t hi);

/* The tensor-parallel group an op's collectives run over (ir/ops/tp.c; the executor's driver
 * provides them: runtime/api_cpu.c over runtime/comm.h). Each call is made by every rank of the
 * group, in the same order, with the same count; 0, or -1 (the driver keeps the message and
 * fails the step after the op). Elements are the pass's `real` (f64 1: double, else float). */
typedef struct CpuTp {
  int rank, size;
  /* buf := the elementwise sum (max 1: maximum) of every group rank's buf, in group-rank order */
  int (*allreduce)(struct CpuTp *tp, void *buf, int64_t n, int f64, int max);
  /* recv (size * bytes) := every group rank's send, rank after rank */
  int (*all_gather)(struct CpuTp *tp, const void *send, void *recv, int64_t bytes);
  /* recv (n) := the sum over the group of send[rank * n .. (rank + 1) * n) */
  int (*reduce_scatter)(struct CpuTp *tp, const void *send, void *recv, int64_t n, int f64);
  void *user;
  int failed; /* set by a call that returned -1 */
} CpuTp;

typedef struct CpuCtx {
  const Graph *g;
  void (*parallel_for)(const struct CpuCtx *c, int64_t n, CpuRangeFn fn, void *arg);
  void *pool;
  /* RNG key: a dropout mask is a pure function of (seed, step, micro, the op's stream, index), so
   * a replay of the same op in the same step reproduces it exactly. */
  uint64_t seed;
  int64_t step;
  int64_t micro;
  /* The loss's denominator (ir/ops/loss.c): the kept tokens of the step's global batch over
   * num_microbatches * data-parallel ranks, which the step's driver counts before it runs
   * (runtime/api.c api_loss_den); <= 0: this op's own kept tokens (an op or micro-batch run alone). */
  double loss_den;
  /* Tensor parallelism: this rank's group (NULL: one rank, every TP op an identity) */
  CpuTp *tp;
  /* Expert parallelism: this rank's EP group (ir/ops/ep.c; NULL: one rank) */
  CpuTp *ep;
  /* Every rank of the job: fp8 delayed scaling's amax reduction group (ir/ops/fp8.c; NULL: one rank) */
  CpuTp *amax;
} CpuCtx;
static inline int ops_tp_rank(const CpuCtx *c) { return c->tp ? c->tp->rank : 0; }
static inline int ops_tp_size(const CpuCtx *c) { return c->tp ? c->tp->size : 1; }
static inline int ops_ep_rank(const CpuCtx *c) { return c->ep ? c->ep->rank : 0; }

/* A target in [0, v) is kept by the loss; any other (-100, PyTorch's ignore_index) masks its token. */
static inline int ops_target_kept(int64_t t, int64_t v) { return t >= 0 && t < v; }
/* The denominator the loss of targets tg (rows of them, vocabulary v) divides by (CpuCtx.loss_den). */
static inline double ops_loss_den(const CpuCtx *c, const int32_t *tg, int64_t rows, int64_t v) {
  if (c->loss_den > 0) return c->loss_den;
  int64_t kept = 0;
  for (int64_t r = 0; r < rows; r++)
    kept += ops_target_kept(tg[r], v);
  return (double)kept;
}

/* Counter-based RNG: splitmix64 finalizer chained over the key parts. */
static inline uint64_t ops_mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
static inline uint64_t ops_rng_key(const CpuCtx *c, int64_t stream) {
  return ops_mix64(ops_mix64(ops_mix64(c->seed) ^ (uint64_t)c->step) ^ ((uint64_t)c->micro << 20) ^
                   ((uint64_t)stream * 0x632be59bd9b4e019ull));
}
/* A parameter's initialisation key: keyed by its name, not its index, so that graphs differing
 * elsewhere start from the same weights; the CPU and CUDA executors both draw from it. */
static inline uint64_t ops_init_name_hash(const char *name) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a of the name, from the basis the weights were first
                                         drawn with (not the standard one, CUBIN_FNV_OFFSET) */
  for (; *name; name++)
    h = (h ^ (uint8_t)*name) * 1099511628211ull;
  return h;
}
/* (the CUDA init kernel makes the same key on the device: kernels/rtops.cuh init_normal) */
static inline uint64_t ops_init_key(uint64_t seed, const char *name) {
  return ops_mix64(ops_mix64(seed) ^ ops_init_name_hash(name));
}
/* Uniform in [0, 1) with 24 bits, for element `i` of the stream keyed by `key`. */
static inline float ops_rng_uniform(uint64_t key, uint64_t i) {
  return (float)(ops_mix64(key ^ ops_mix64(i)) >> 40) * (1.0f / 16777216.0f);
}

/* Shape helpers. */
static inline const Tensor *ops_in(const Graph *g, const Op *op, int i) { return &g->t[op->in[i]]; }
static inline int64_t ops_rows(const Tensor *t) { /* product of all dims but the last */
  int64_t r = 1;
  for (int d = 0; d < t->ndim - 1; d++)
    r *= t->shape[d];
  return r;
}
static inline int64_t ops_last(const Tensor *t) { return t->shape[t->ndim - 1]; }
static inline void ops_out_like(OpOut *o, const Tensor *t, const char *suffix) {
  o->dtype = t->dtype;
  o->role = ROLE_ACT;
  o->ndim = t->ndim;
  for (int d = 0; d < IR_MAX_DIMS; d++)
    o->shape[d] = d < t->ndim ? t->shape[d] : 1;
  o->suffix = suffix;
}
static inline void ops_out_shape(OpOut *o, DType dt, const char *suffix, int ndim, int64_t d0, int64_t d1,
                                 int64_t d2, int64_t d3) {
  o->dtype = dt;
  o->role = ROLE_ACT;
  o->ndim = ndim;
  o->shape[0] = d0, o->shape[1] = d1, o->shape[2] = d2, o->shape[3] = d3;
  o->suffix = suffix;
}
int ops_err(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
bool ops_same_shape(const Tensor *a, const Tensor *b);

/* Gradient-rule helpers: the name of the gradient of tensor `t` ("<name>.grad"), and a graph_op
 * whose outputs are ROLE_ACT_GRAD tensors named after the tensors they are gradients of (`of[i]`,
 * -1 = keep the default name); an output its kind's infer makes ROLE_WORKSPACE stays one. */
int ops_grad_op(Graph *g, OpKind kind, const int *in, int nin, const OpAttrs *a, int *out, const int *of);

/* linear.c: out (M, N) = a (M, K) b (N, K)^T (+ bias), each element summed over k in order, rows
 * split over the executor's threads (the LINEAR reference's own product). */
void ops_gemm_nt_f32(const CpuCtx *c, const float *a, const float *b, const float *bias, float *out,
                     int64_t m, int64_t n, int64_t k);
void ops_gemm_nt_f64(const CpuCtx *c, const double *a, const double *b, const double *bias, double *out,
                     int64_t m, int64_t n, int64_t k);

/* Default FLOPs: one per output element. */
double ops_flops_elementwise(const Graph *g, const Op *op);
/* flash.c: the device workspace of an attention op run by cuDNN (a.i[2] fused or auto): 0 for the
 * forward; the backward's row sums (B,H,T) and two (B,H,T,Dqk) fp32 dQ accumulators (ours and
 * cuDNN's), or deterministic (a.i[3]) one accumulator and cuDNN's (B,H,T64,T64) bf16 dP buffer, T64
 * = T rounded up to 64 — runtime/cudnn.c's layout and cuDNN 9's, measured on the H200 (cuDNN 9.14). */
int64_t attn_cudnn_workspace(const Graph *g, const Op *op);
/* The widest of the graph's (one buffer serves them all), over the ops whose only[op] is set (only
 * NULL: every op). */
int64_t attn_cudnn_workspace_max(const Graph *g, const uint8_t *only);

#endif
