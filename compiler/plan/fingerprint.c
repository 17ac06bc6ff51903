/* fingerprint.c — the step's identity: a hash of its op sequence (fingerprint.h). */
#include "plan/fingerprint.h"

#include <string.h>

#include "codegen/cubin/cubin.h"

static bool in_micro(Phase ph) {
  return ph == IR_PHASE_FORWARD || ph == IR_PHASE_BACKWARD || ph == IR_PHASE_REPLAY;
}

static uint64_t mix(uint64_t h, const void *p, size_t n) { return cubin_fnv1a(h, p, n); }

static uint64_t mix_tensor(uint64_t h, const Tensor *t) {
  int32_t v[3] = {t->dtype, t->role, t->ndim};
  h = mix(h, v, sizeof v);
  h = mix(h, t->shape, sizeof t->shape);
  return mix(h, t->name, strlen(t->name));
}

uint64_t step_fingerprint(const Graph *g) {
  uint64_t h = CUBIN_FNV_OFFSET;
  /* 2: the generated-step ABI the fingerprint was first seeded with, kept so that checkpoints keep
   * naming their step */
  int32_t head[3] = {2, g->nop, g->num_microbatches};
  h = mix(h, head, sizeof head);
  for (int pass = 0; pass < 2; pass++)
    for (int o = 0; o < g->nop; o++) {
      const Op *op = &g->op[o];
      if (in_micro(op->tags.phase) != (pass == 0)) continue;
      int32_t v[5] = {o, op->kind, op->tags.phase, op->nin, op->nout};
      h = mix(h, v, sizeof v);
      h = mix(h, op->tags.module, strlen(op->tags.module));
      h = mix(h, op->a.i, sizeof op->a.i);
      h = mix(h, op->a.f, sizeof op->a.f);
      for (int i = 0; i < op->nin; i++)
        h = mix_tensor(h, &g->t[op->in[i]]);
      for (int i = 0; i < op->nout; i++)
        h = mix_tensor(h, &g->t[op->out[i]]);
    }
  return h;
}

uint64_t plan_layout_digest(const Graph *g) {
  uint64_t h = CUBIN_FNV_OFFSET;
  for (int t = 0; t < g->nt; t++) {
    const Tensor *x = &g->t[t];
    int64_t v[3] = {x->buffer, x->offset, x->bytes};
    h = mix(h, x->name, strlen(x->name) + 1);
    h = mix(h, v, sizeof v);
  }
  return h;
}
