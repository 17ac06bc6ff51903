/* exec.c — the CPU reference executor (see exec.h). */
#include "runtime/cpu/exec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

void cpu_pool_for(const CpuCtx *c, int64_t count, CpuRangeFn fn, void *arg);

struct CpuExec {
  const Graph *g;
  CpuPrecision prec;
  CpuPool *pool;
  CpuCtx ctx;
  uint8_t *arena[IR_MAX_BUFFERS];
};

CpuExec *cpu_exec_new(const Graph *g, CpuPrecision prec, int nthreads, char *err, size_t nerr) {
  size_t fb = prec == CPU_F64 ? 8 : 4;
  if (g->nbuffers <= 0) {
    snprintf(err, nerr, "the graph has no memory plan");
    return NULL;
  }
  for (int i = 0; i < g->nt; i++) {
    const Tensor *t = &g->t[i];
    size_t es = dtype_is_float(t->dtype) ? fb : dtype_size(t->dtype);
    /* 0 bytes: another rank's master or moment (the distributed optimizer's region): not held here */
    bool away = t->bytes == 0 && t->buffer == 1;
    if (t->buffer < 0 || t->buffer >= g->nbuffers || (t->bytes != tensor_numel(t) * (int64_t)es && !away) ||
        t->offset < 0 || t->offset + t->bytes > g->buffer_bytes[t->buffer]) {
      snprintf(
          err, nerr, "tensor %s: the plan's (buffer %d, offset %lld, %lld bytes) does not fit a %s executor",
          t->name, t->buffer, (long long)t->offset, (long long)t->bytes, prec == CPU_F64 ? "fp64" : "fp32");
      return NULL;
    }
  }
  CpuExec *e = calloc(1, sizeof *e);
  if (!e) {
    snprintf(err, nerr, "out of memory");
    return NULL;
  }
  e->g = g;
  e->prec = prec;
  for (int b = 0; b < g->nbuffers; b++) {
    e->arena[b] = calloc(1, (size_t)g->buffer_bytes[b] + 64);
    if (!e->arena[b]) {
      snprintf(err, nerr, "cannot allocate a %lld-byte arena", (long long)g->buffer_bytes[b]);
      cpu_exec_free(e);
      return NULL;
    }
  }
  e->pool = cpu_pool_new(nthreads);
  if (!e->pool) {
    snprintf(err, nerr, "cannot start threads");
    cpu_exec_free(e);
    return NULL;
  }
  e->ctx = (CpuCtx){.g = g, .parallel_for = cpu_pool_for, .pool = e->pool};
  return e;
}

void cpu_exec_free(CpuExec *e) {
  if (!e) return;
  for (int b = 0; b < IR_MAX_BUFFERS; b++)
    free(e->arena[b]);
  cpu_pool_free(e->pool);
  free(e);
}

void *cpu_exec_ptr(CpuExec *e, int tensor) {
  const Tensor *t = &e->g->t[tensor];
  return e->arena[t->buffer] + t->offset;
}

double cpu_exec_get(CpuExec *e, int tensor, int64_t i) {
  const Tensor *t = &e->g->t[tensor];
  void *p = cpu_exec_ptr(e, tensor);
  if (dtype_is_float(t->dtype)) return e->prec == CPU_F64 ? ((double *)p)[i] : ((float *)p)[i];
  switch (t->dtype) {
  case DT_I32: return ((int32_t *)p)[i];
  case DT_I64: return (double)((int64_t *)p)[i];
  default: return ((uint8_t *)p)[i];
  }
}

void cpu_exec_set(CpuExec *e, int tensor, int64_t i, double v) {
  const Tensor *t = &e->g->t[tensor];
  void *p = cpu_exec_ptr(e, tensor);
  if (dtype_is_float(t->dtype)) {
    if (e->prec == CPU_F64)
      ((double *)p)[i] = v;
    else
      ((float *)p)[i] = (float)v;
    return;
  }
  switch (t->dtype) {
  case DT_I32: ((int32_t *)p)[i] = (int32_t)v; break;
  case DT_I64: ((int64_t *)p)[i] = (int64_t)v; break;
  default: ((uint8_t *)p)[i] = (uint8_t)v; break;
  }
}

void cpu_exec_set_key(CpuExec *e, uint64_t seed, int64_t step, int64_t micro) {
  e->ctx.seed = seed;
  e->ctx.step = step;
  e->ctx.micro = micro;
}

void cpu_exec_set_loss_den(CpuExec *e, double den) { e->ctx.loss_den = den; }

void cpu_exec_set_tp(CpuExec *e, CpuTp *tp) { e->ctx.tp = tp; }
void cpu_exec_set_ep(CpuExec *e, CpuTp *ep) { e->ctx.ep = ep; }
void cpu_exec_set_amax(CpuExec *e, CpuTp *amax) { e->ctx.amax = amax; }

void cpu_exec_run_op(CpuExec *e, int id) { cpu_exec_run_as(e, &e->g->op[id]); }

int cpu_exec_run_op_eval(CpuExec *e, int id) {
  Op op = e->g->op[id];
  if (op_for_eval(&op) != 0) return -1;
  cpu_exec_run_as(e, &op);
  return 0;
}

void cpu_exec_run_as(CpuExec *e, const Op *op) {
  void *in[IR_MAX_IN], *out[IR_MAX_OUT];
  for (int i = 0; i < op->nin; i++)
    in[i] = cpu_exec_ptr(e, op->in[i]);
  for (int i = 0; i < op->nout; i++)
    out[i] = cpu_exec_ptr(e, op->out[i]);
  op_info(op->kind)->cpu[e->prec](&e->ctx, op, in, out);
}

void cpu_exec_run(CpuExec *e, uint32_t phase_mask) {
  for (int i = 0; i < e->g->nop; i++)
    if (phase_mask & IR_PHASE_BIT(e->g->op[i].tags.phase)) cpu_exec_run_op(e, i);
}

/* Box-Muller over the counter-based RNG: a param's values depend only on (seed, its index). */
static double normal_at(uint64_t key, uint64_t i) {
  double u1 = ((double)(ops_mix64(key ^ ops_mix64(2 * i)) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  double u2 = (double)(ops_mix64(key ^ ops_mix64(2 * i + 1)) >> 11) * (1.0 / 9007199254740992.0);
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void cpu_exec_init_params(CpuExec *e, uint64_t seed) {
  const Graph *g = e->g;
  for (int b = 0; b < g->nbuffers; b++)
    memset(e->arena[b], 0, (size_t)g->buffer_bytes[b]);
  for (int i = 0; i < g->nt; i++) {
    const Tensor *t = &g->t[i];
    int64_t n = tensor_numel(t);
    if (t->bytes == 0) continue; /* not held here (another rank's optimizer state) */
    uint64_t key = ops_init_key(seed, t->name);
    /* a TP (or EP) shard takes its slice of the one-rank tensor's values */
    int tp_rank = t->tp_ep ? ops_ep_rank(&e->ctx) : ops_tp_rank(&e->ctx);
    if (t->init == IR_INIT_ONES)
      for (int64_t j = 0; j < n; j++)
        cpu_exec_set(e, i, j, 1.0);
    else if (t->init == IR_INIT_NORMAL)
      for (int64_t j = 0; j < n; j++)
        cpu_exec_set(e, i, j, t->init_std * normal_at(key, (uint64_t)tensor_tp_full_index(t, tp_rank, j)));
  }
  for (int i = 0; i < g->nt; i++)
    if (g->t[i].role == ROLE_MASTER && g->t[i].of >= 0 && g->t[i].bytes > 0)
      memcpy(cpu_exec_ptr(e, i), cpu_exec_ptr(e, g->t[i].of), (size_t)g->t[i].bytes);
}
