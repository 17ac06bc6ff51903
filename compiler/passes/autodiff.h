/* autodiff.h — backward graph construction from the per-op gradient rules, and the optimizer
 * step as ops. */
#ifndef STEPC_AUTODIFF_H
#define STEPC_AUTODIFF_H

#include "ir.h"

struct Spec;

/* Appends the backward of the graph's forward ops (phase IR_PHASE_BACKWARD), seeded with the
 * gradients seeds[i] of outputs outs[i] (tensors the caller fills). Every ROLE_PARAM tensor that
 * influences the outputs gets a persistent fp32 main gradient "<param>.main_grad" (ROLE_GRAD,
 * of = param) into which each micro-batch's contributions are accumulated (ACCUM), so gradients
 * sum over micro-batches until the optimizer zeroes them. Gradients of a tensor with several
 * consumers are summed with ADD. Returns 0, or -1 with g->err. */
int autodiff_build(Graph *g, const int *outs, const int *seeds, int n);

/* The training step's backward: seeds the loss (g->loss) with 1 / g->num_microbatches (a FILL
 * op), so that the main gradients hold the gradient of the mean loss over the global batch. */
int autodiff_build_loss(Graph *g);

/* Appends the optimizer (phase IR_PHASE_OPTIMIZER): the LR schedule, the global gradient norm,
 * clipping, AdamW on fp32 masters (bf16 params) or on the params (fp32), and zeroing of the main
 * gradients for the next step. Sets g->lr and g->grad_norm. */
int optimizer_build(Graph *g, const struct Spec *s);

/* The LR at a (1-based) step: linear warm-up to lr over `warmup` steps, then constant (style 0),
 * linear (1) or cosine (2) decay to min_lr at step `decay`, min_lr after. */
double optim_lr_at(double lr, double min_lr, int64_t warmup, int64_t decay, int style, int64_t step);

#endif
