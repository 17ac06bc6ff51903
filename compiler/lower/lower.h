/* lower.h — Spec -> forward Graph (the single-rank math of one micro-batch), and the whole
 * training step (forward, backward, optimizer). */
#ifndef STEPC_LOWER_H
#define STEPC_LOWER_H

#include <stddef.h>

#include "frontend/spec.h"
#include "ir.h"

enum { LOWER_OK = 0, LOWER_ERROR = -1, LOWER_UNSUPPORTED = -2 };

/* The forward graph: inputs g->tokens/g->targets (B, T) int32, output g->loss. Returns LOWER_OK,
 * LOWER_UNSUPPORTED for layer kinds not lowered yet (Mamba in hybrid recipes, GDN), or
 * LOWER_ERROR; the message is in err. *out is NULL unless LOWER_OK. */
int lower_forward(const Spec *s, Graph **out, char *err, size_t nerr);

/* lower_forward + autodiff of the loss + the optimizer. */
int lower_step(const Spec *s, Graph **out, char *err, size_t nerr);

#endif
