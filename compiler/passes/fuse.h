/* fuse.h — the fusion pass: which ops the CUDA executor runs as one launch, decided from the op
 * structure alone, before the memory plan (docs/gpu-runtime.md, "Fusions").
 *
 * It records in a Fusions beside the graph (fusions.h; the graph itself is not changed): weight
 * gradients accumulated straight into their fp32 main gradients (sink, the ACCUM skipped); the
 * cross-entropy backward fused into the forward over the logits (alias, the backward skipped);
 * the chunked output layer's backward run by its forward's launch (FUSE_LOSS_BWD: the backward
 * skipped, peer its forward, the span between one group); LINEAR/DROPOUT -> ADD, ADD -> norm and
 * norm backward -> ADD pairs and generated elementwise chains (fuse / peer / skip, chain); runs of
 * optimizer ops (every GRAD_SUMSQ into one accumulator, every ADAMW of one setting) as one
 * multi-tensor launch each, where the recipe allows it (optimizer.multi_tensor); current-scaling fp8
 * casts reading the amax their input's producer folded into a slot (amax). The memory plan
 * then keeps every tensor a fused group reads or writes live across the whole group and never
 * writes a group's output over its input (memplan.c), so every fused launch reads what its ops
 * would have read, whatever the plan; fuse_verify checks that on the planned graph. The CPU
 * executor runs every op on its own and never sees them. */
#ifndef STEPC_FUSE_H
#define STEPC_FUSE_H

#include <stddef.h>

#include "ir.h"
#include "passes/ew_fuse.h"
#include "passes/fusions.h"

/* Decides the fusions of g and records them in fz (fusions_new(g), no fusion yet); the chains'
 * generated kernels go to ks (their index in EwChain.kernel). The decisions read the op structure
 * alone (kinds, attributes, tags, shapes, dtypes, roles, uses), never the memory plan, so the same
 * graph gives the same fusions. 0, or -1 with err. */
int fuse_build(const Graph *g, Fusions *fz, EwKernels *ks, char *err, size_t nerr);
/* The optimizer's multi-tensor groups (part of fuse_build): each maximal run of two or more
 * consecutive GRAD_SUMSQ ops writing one accumulator, or ADAMW ops sharing their master layout,
 * setting and step inputs, runs at its last op (fuse FUSE_SUMSQ_MULTI / FUSE_ADAMW_MULTI, peer the
 * first) and the others skip; the CUDA executor builds each group's tensor table, in op order,
 * when it opens. Only ops with i[0] set join. Returns the number of groups. */
int fuse_optimizer(const Graph *g, Fusions *fz);
/* The first and last op ids of the group op o runs (first = last = o when it runs alone). */
void fuse_group(const Fusions *fz, int o, int *first, int *last);
/* On the planned graph: no output of a fused group overlaps a tensor the group reads (other than
 * itself). 0, or -1 with err. */
int fuse_verify(const Graph *g, const Fusions *fz, char *err, size_t nerr);

#endif
