/* exec.h — the CPU reference executor: runs a Graph's ops in order, in fp32 (training) or fp64
 * (gradient checks), on a fixed pool of threads, with results that do not depend on the number of
 * threads (kernels split work so that every output element is computed the same way).
 *
 * Tensors are reached only through their (buffer, offset, bytes) from the graph's memory plan;
 * the plan must size floating tensors at the executor's precision (graph_plan_trivial(g, 4 or 8)).
 * The executor owns one arena per plan buffer. A master or optimizer-state tensor of 0 bytes is
 * not held by this executor (another data-parallel rank's shard, runtime/api_dp.c): no op that
 * runs may touch it. */
#ifndef STEPC_CPU_EXEC_H
#define STEPC_CPU_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "ir.h"

typedef enum { CPU_F32 = 0, CPU_F64 = 1 } CpuPrecision;
typedef struct CpuExec CpuExec;

/* NULL on error with a message in err. nthreads <= 0 means 2. */
CpuExec *cpu_exec_new(const Graph *g, CpuPrecision prec, int nthreads, char *err, size_t nerr);
void cpu_exec_free(CpuExec *e);
/* The tensor's bytes in the arena (base of its buffer + offset). */
void *cpu_exec_ptr(CpuExec *e, int tensor);
/* Element i of a tensor as a double, and writing one; ints and uint8 are converted. */
double cpu_exec_get(CpuExec *e, int tensor, int64_t i);
void cpu_exec_set(CpuExec *e, int tensor, int64_t i, double v);
/* The RNG key for the ops that follow (dropout masks are a function of it). */
void cpu_exec_set_key(CpuExec *e, uint64_t seed, int64_t step, int64_t micro);
/* The loss denominator for the ops that follow (CpuCtx.loss_den, ir/ops/loss.c): the kept tokens
 * of the step's global batch / (num_microbatches * data-parallel ranks); <= 0 (the default): each
 * loss op divides by its own kept tokens. */
void cpu_exec_set_loss_den(CpuExec *e, double den);
/* Tensor parallelism: the group the TP ops' collectives run over (ir/ops/ops.h; NULL: one rank),
 * and whose rank's slice of each sharded param cpu_exec_init_params draws. Set before the init. */
struct CpuTp;
void cpu_exec_set_tp(CpuExec *e, struct CpuTp *tp);
/* Expert parallelism: the group the EP ops run over (ir/ops/ep.c), NULL for none. */
void cpu_exec_set_ep(CpuExec *e, struct CpuTp *ep);
/* every rank of the job: fp8 delayed scaling's amax reduction group (NULL: one rank) */
void cpu_exec_set_amax(CpuExec *e, struct CpuTp *amax);
/* Runs, in graph order, the ops whose phase bit (IR_PHASE_BIT) is in phase_mask. */
void cpu_exec_run(CpuExec *e, uint32_t phase_mask);
void cpu_exec_run_op(CpuExec *e, int op);
/* Op `op` as an evaluation runs it (op_for_eval: dropout off). 0, or -1 for an op whose random
 * numbers op_for_eval cannot turn off (nothing run). */
int cpu_exec_run_op_eval(CpuExec *e, int op);
/* An op of the graph (its tensors) with the attributes *op carries. */
void cpu_exec_run_as(CpuExec *e, const Op *op);
/* Zeroes the arena, then initializes params per their IrInit from a normal RNG keyed by seed and
 * the param's index; a master copy takes its param's values. */
void cpu_exec_init_params(CpuExec *e, uint64_t seed);

/* The thread pool used by the executor (exposed for tests). */
typedef struct CpuPool CpuPool;
CpuPool *cpu_pool_new(int nthreads);
void cpu_pool_free(CpuPool *p);

#endif
