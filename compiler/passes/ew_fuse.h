/* ew_fuse — generated fused elementwise kernels (templates/elementwise.cu.in; docs/kernels.md).
 *
 * A chain is a run of ops with consecutive ids (apart from `passable` ones between them: ops that
 * launch nothing and touch no tensor of the chain, e.g. a weight-gradient ACCUM sunk into its
 * producer's kernel), each pointwise (its op table row has an `ew` fact, ir.h: the one place
 * the op's device expression lives), in one phase, all over
 * bf16 tensors of one shape, each op after the first reading a value an earlier op of the chain
 * produced. ew_chain_at finds one from the op structure; the caller (compiler/passes/fuse.c, before the
 * memory plan) records it with its decisions (fusions.h). ew_kernel_add turns a chain into its kernel — the
 * template filled for the chain's signature — shared by every chain of that signature.
 *
 * Kernel parameters, in order: each stored output (p), each external input (p), n (l), then each
 * op's scalars (OpEw.scalars: f a.f[0] as float, S the dropout seed slot (p), U a.i[0] as
 * unsigned). */
#ifndef STEPC_EW_FUSE_H
#define STEPC_EW_FUSE_H

#include <stdint.h>

#include "ir.h"
#include "passes/fusions.h"
#include "runtime/rt.h"

#define EW_MAX_KERNELS 32

typedef struct {
  char name[64];
  char sig[32];  /* kernel_list.h letters */
  char key[256]; /* the chain signature: kinds, wiring, stores */
  char *src;     /* the filled template (malloc'd) */
} EwKernel;

typedef struct {
  EwKernel k[EW_MAX_KERNELS];
  int n;
} EwKernels;

/* Whether op kind k may join a chain (its OpInfo's ew fact has an expression). */
int ew_pointwise(OpKind k);

/* The longest chain starting at op `first` (nops >= 2), from the structure: uses[t] = how many op
 * inputs read tensor t; blocked[o] nonzero for ops already skipped or fused; passable[o] nonzero
 * for ops that launch nothing (may be NULL). 1 found, else 0. */
int ew_chain_at(const Graph *g, int first, const int *uses, const uint8_t *blocked, const uint8_t *passable,
                EwChain *c);

/* The chain's kernel in ks (added, template filled, when its signature is new): sets c->kernel;
 * -1 when ks is full or out of memory. */
int ew_kernel_add(EwKernels *ks, const Graph *g, EwChain *c);
void ew_kernels_free(EwKernels *ks);
/* The kernels' names and signatures as the runtime looks them up in the cubin (RtDevice.gen). */
void ew_kernels_rt(const EwKernels *ks, RtGenKernels *out);

/* kernels.cu's generated part: every kernel's source, in index order (malloc'd; "" none). */
char *ew_kernels_text(const EwKernels *ks);
/* The whole kernels.cu: every hand-written file (kernel_text_assemble), then ks's kernels (NULL:
 * none). One function for `stepc build` and the runtime, so that both compile the same text (and
 * the runtime finds the artifact's cubin under its NVRTC cache key). Malloc'd, or NULL with err. */
char *ew_kernels_cu(const EwKernels *ks, char *err, size_t nerr);

#endif
