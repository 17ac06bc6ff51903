/* op_ref.h — the GPU kernel tests' oracle: one op of the op table run through its own fp64 CPU
 * reference (ir/ops: op_info(kind)->cpu[1], the reference the CPU executor and the gradient checks
 * run), on host arrays of doubles. There is no second reference of an op in the tests: a kernel
 * is compared with the op it implements, in the op's layouts (ir/ops/<family>.c documents them).
 *
 * A tensor of the call is its dtype, shape and values: float tensors (any float dtype) are held
 * in fp64; integer and uint8 tensors are passed and returned as doubles too (converted). */
#ifndef STEPC_TESTS_GPU_OP_REF_H
#define STEPC_TESTS_GPU_OP_REF_H

#include <stdint.h>

#include "ir.h"

typedef struct {
  DType dtype;
  int ndim;
  int64_t shape[4];
  double *d;      /* float values; for an output, where its values are written */
  const int *ids; /* instead of d: int32 values (tokens, targets, segments) */
} RefT;

/* A float tensor (values d; written only where it is an output) and an int32 one (values ids), of
 * up to 4 dims (trailing 0s unused). */
RefT ref_f(const double *d, int64_t d0, int64_t d1, int64_t d2, int64_t d3);
RefT ref_i(const int *ids, int64_t d0, int64_t d1, int64_t d2, int64_t d3);

/* Builds a graph of the one op over in[0..nin) and runs its fp64 reference. Outputs come from the
 * op's shape inference and are written to out[i].d (skipped where NULL), whose shape must match
 * in element count (checked: a mismatch or a graph error ends the test program with a message). inplace: the
 * op is built with graph_op_into over out[]'s shapes, starting from out[]'s values (the optimizer ops, which
 * update persistent tensors). */
void ref_op(OpKind kind, const OpAttrs *a, const RefT *in, int nin, const RefT *out, int nout, int inplace);

/* Two readings of ops that several tests share:
 * causal attention, FLASH_ATTN's reference (FLASH_ATTN_DV's where dv != dk): q (B,T,H,dk),
 * k (B,T,G,dk), v (B,T,G,dv) -> O (B,T,H,dv), LSE (B,H,T); then, where dout (B,T,H,dv) is given,
 * FLASH_ATTN_BWD's dQ, dK, dV; */
void ref_attention(double *O, double *LSE, double *dQ, double *dK, double *dV, const double *q,
                   const double *k, const double *v, const double *dout, int B, int T, int H, int G, int dk,
                   int dv, double scale);
/* the loss kernels' per-token reading of CROSS_ENTROPY on logits (N, Vp) whose first V columns
 * are the vocabulary: losses[n] = lse - x[target] from the op's log-sum-exp (0 for an ignored
 * target), and CROSS_ENTROPY_BWD's dlogits for a loss gradient of dloss per token (padding: 0). */
void ref_cross_entropy_rows(double *losses, double *dlogits, const double *logits, const int *targets, int N,
                            int V, int Vp, double dloss);

#endif
