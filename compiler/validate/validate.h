/* validate.h — the rule checklist: Megatron Core's rules (MCORE-n, numbered as in
 * docs/megatron-rules.md §1) and stepc's own (STEPC-n). See docs/rules.md. */
#ifndef STEPC_VALIDATE_H
#define STEPC_VALIDATE_H

#include "frontend/spec.h"
#include "validate/diag.h"

/* Checks `in` and writes the normalized Spec to `out`: Megatron's normalizations applied
 * (recompute_modules null -> [core_attn]; cuda_graph_modules "full" -> []; a deprecated
 * "full_iteration" module -> cuda_graph_impl=full_iteration; local moe_router/moe_preprocess
 * pairing; sequence_parallel off at TP=1; cuda_graph_modules cleared when cuda_graph_impl=none),
 * each one that changes what the recipe says reported as a warning. Appends errors and warnings to
 * `diags` and returns the number of errors; prints nothing. `out` may equal `in`. */
int validate_spec(const Spec *in, Spec *out, DiagList *diags);

/* STEPC-32 alone, without diagnostics: 0 when every size product of `s` (tensor sizes, parameter
 * count, rank counts) fits stepc's bounds, else -1 with the first problem in `err`. Lowering calls
 * it, so that a caller that skipped validate_spec cannot plan wrapped sizes either. */
int validate_sizes_ok(const Spec *s, char *err, size_t nerr);

#endif
