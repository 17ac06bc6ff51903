/* validate_internal.h — what the validator's files share; not a public API (see validate.h).
 *
 * The checklist is split by subject, one file each:
 *   validate.c           entry point, helpers, Megatron's normalizations (MCORE-1, 6, 7, 12, 22, STEPC-24)
 *   validate_recompute.c granularity, method, labels, CPU offloading (MCORE-15..37, 60 for fused norms,
 *                        STEPC-1, 19, 21, 22, 23, 25)
 *   validate_graphs.c    CUDA-graph modules and recompute under graphs (MCORE-44..61, 70, STEPC-28, 29)
 *   validate_parallel.c  parallel sizes that must divide, MoE/EP rules (MCORE-62, 63, 68, STEPC-2..12, 26,
 * 27) validate_model.c     architecture, data and precision (STEPC-13..18, 20, 51) Rule ids are written as
 * string literals ("MCORE-24") so that tests/rules can grep them. validate_sizes.c     every size product
 * fits in int64 within stepc's bounds (STEPC-32); runs first */
#ifndef STEPC_VALIDATE_INTERNAL_H
#define STEPC_VALIDATE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "frontend/spec.h"
#include "validate/diag.h"

typedef struct {
  const Spec *in; /* as loaded: tells what the recipe set itself (before normalization) */
  Spec *s;        /* normalized; every check reads this one */
  DiagList *d;
} VCtx;

/* One diagnostic about `field` (a SpecFieldId); its location is the field's recipe line, or the
 * recipe file marked "(default)" when the field was not set. Returns the Diag for diag_hint. */
Diag *v_error(VCtx *v, const char *rule, int field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
Diag *v_warn(VCtx *v, const char *rule, int field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A field's location for use inside a message: "models/x.lua:12", or "default". */
const char *v_at(const VCtx *v, int field);
/* Of two fields, the one the recipe set itself (a conflict is best reported where the user wrote
 * it); `a` when both or neither were set. */
int v_pick(const VCtx *v, int a, int b);

bool v_str_is(const Spec *s, int field, const char *value); /* present and equal */
bool v_set_in(const VCtx *v, int field);                    /* set by the recipe or an override */
bool v_full(const Spec *s);                                 /* recompute_granularity == full */
bool v_selective(const Spec *s);
bool v_label(const Spec *s, const char *label);   /* in recompute_modules */
bool v_module(const Spec *s, const char *module); /* in cuda_graph_modules */
bool v_graph_impl(const Spec *s, const char *impl);

/* The layer stack as the model builds it (hybrid pattern or plain GPT layers). */
bool v_has_attention(const Spec *s); /* some layer has self-attention */
bool v_has_dense_mlp(const Spec *s); /* some layer has a dense MLP */
bool v_has_moe_layer(const Spec *s); /* some layer is MoE */
bool v_has_mamba(const Spec *s);     /* some layer is Mamba */
bool v_is_hybrid(const Spec *s);
/* Layers in one model chunk (per PP stage and VPP chunk); 0 when the sizes do not divide. */
int64_t v_layers_per_chunk(const Spec *s);

void validate_normalize(VCtx *v);
int validate_sizes(VCtx *v); /* STEPC-32; returns the number of errors */
void validate_recompute(VCtx *v);
void validate_graphs(VCtx *v);
void validate_parallel(VCtx *v);
void validate_model(VCtx *v);

#endif
