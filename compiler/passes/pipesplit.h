/* pipesplit.h — which transformer layers each pipeline stage and virtual chunk builds, as
 * Megatron Core does (pipesplit.c names the source), and what split it refuses. */
#ifndef STEPC_PIPESPLIT_H
#define STEPC_PIPESPLIT_H

#include <stdbool.h>
#include <stddef.h>

#include "frontend/spec.h"

typedef struct {
  int num_layers, pp, vpp; /* vpp 1: no interleaving */
  int first, last;         /* num_layers_in_first/last_pipeline_stage; -1: not set */
  bool embed, loss;        /* account_for_embedding/loss_in_pipeline_split */
} PipeSplit;

void pipe_split_from_spec(const Spec *s, PipeSplit *p);
/* Megatron's refusal of the split, written into buf; NULL when Megatron builds it. */
const char *pipe_split_check(const PipeSplit *p, char *buf, size_t n);
/* The layers that virtual chunk vc of pipeline stage `stage` builds: [*offset, *offset + return). */
int pipe_chunk_layers(const PipeSplit *p, int stage, int vc, int *offset);
/* The pipeline stage that builds layer l. */
int pipe_layer_stage(const PipeSplit *p, int l);

#endif
