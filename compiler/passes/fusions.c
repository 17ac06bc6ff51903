/* fusions.c — the fusion decisions' container (fusions.h). */
#include "passes/fusions.h"

#include <stdlib.h>

Fusions *fusions_new(const Graph *g) {
  Fusions *fz = calloc(1, sizeof *fz);
  if (!fz) return NULL;
  fz->nop = g->nop, fz->nt = g->nt;
  fz->fuse = calloc((size_t)g->nop + 1, 1);
  fz->skip = calloc((size_t)g->nop + 1, 1);
  fz->peer = malloc(((size_t)g->nop + 1) * sizeof *fz->peer);
  fz->amax = malloc(((size_t)g->nop + 1) * sizeof *fz->amax);
  fz->alias = malloc(((size_t)g->nt + 1) * sizeof *fz->alias);
  fz->sink = malloc(((size_t)g->nt + 1) * sizeof *fz->sink);
  fz->norm_by = malloc(((size_t)g->nt + 1) * sizeof *fz->norm_by);
  fz->dp = 1;
  if (!fz->fuse || !fz->skip || !fz->peer || !fz->amax || !fz->alias || !fz->sink || !fz->norm_by) {
    fusions_free(fz);
    return NULL;
  }
  for (int o = 0; o < g->nop; o++)
    fz->peer[o] = fz->amax[o] = -1;
  for (int t = 0; t < g->nt; t++)
    fz->alias[t] = t, fz->sink[t] = -1, fz->norm_by[t] = -1;
  return fz;
}

void fusions_free(Fusions *fz) {
  if (!fz) return;
  free(fz->fuse), free(fz->skip), free(fz->peer), free(fz->amax), free(fz->alias), free(fz->sink),
      free(fz->norm_by), free(fz->chain);
  free(fz);
}

int fusions_storage(const Fusions *fz, int t) {
  return fz->alias[t] != t ? fz->alias[t] : fz->sink[t] >= 0 ? fz->sink[t] : t;
}
