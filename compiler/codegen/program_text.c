/* program_text.c — program.txt, the launch program as text (program_text.h). */
#include "codegen/program_text.h"

#include <math.h>
#include <string.h>

/* A stored argument or field: A+offset for an address in the step's allocation, else the value. */
static void addr(FILE *f, uint64_t v) {
  if (v & LP_PTR)
    fprintf(f, "A+0x%llx", (unsigned long long)(v & ~LP_PTR));
  else
    fprintf(f, "0x%llx", (unsigned long long)v);
}

static void arg(FILE *f, char letter, uint64_t a) {
  switch (letter) {
  case 'p': addr(f, a); break;
  case 'q': fprintf(f, "0x%llxULL", (unsigned long long)a); break;
  case 'i': fprintf(f, "%d", (int)(int32_t)(uint32_t)a); break;
  case 'u': fprintf(f, "%uu", (unsigned)(uint32_t)a); break;
  case 'l': fprintf(f, "%lldL", (long long)(int64_t)a); break;
  case 'f': {
    uint32_t u = (uint32_t)a;
    float v;
    memcpy(&v, &u, 4);
    fprintf(f, "%.9gf", (double)v);
    break;
  }
  case 'd': {
    double v;
    memcpy(&v, &a, 8);
    fprintf(f, "%.17g", v);
    break;
  }
  default: fprintf(f, "?"); break;
  }
}

static void record(FILE *f, const RtRec *r, const RtGenKernels *gen) {
  switch (r->kind) {
  case RT_REC_LAUNCH: {
    int k = (int)r->k;
    const char *name = k < RT_K_COUNT ? rt_kernel_name[k] : gen->k[k - RT_K_COUNT].name;
    const char *sig = k < RT_K_COUNT ? rt_kernel_sig[k] : gen->k[k - RT_K_COUNT].sig;
    fprintf(f, "  LAUNCH %s grid (%u,%u,%u) block %u smem %u (", name, r->grid[0], r->grid[1], r->grid[2],
            r->block, r->smem);
    for (int i = 0; i < r->nargs; i++)
      fprintf(f, "%s", i ? ", " : ""), arg(f, sig[i], r->arg[i]);
    fprintf(f, ")\n");
    break;
  }
#define TX_I(fl) fprintf(f, " " #fl "=%lld", (long long)c->fl);
#define TX_P(fl) fprintf(f, " " #fl "="), addr(f, c->fl);
#define TX_F(fl) fprintf(f, " " #fl "=%.9g", (double)c->fl);
  case RT_REC_GEMM: {
    const RtGemm *c = &r->gemm;
    fprintf(f, "  GEMM");
    RT_GEMM_FIELDS(TX_I, TX_P, TX_F)
    fprintf(f, "\n");
    break;
  }
  case RT_REC_SDPA: {
    const RtSdpa *c = &r->sdpa;
    fprintf(f, "  SDPA");
    RT_SDPA_FIELDS(TX_I, TX_P, TX_F)
    fprintf(f, "\n");
    break;
  }
  case RT_REC_COLL: {
    static const char *const opn[RT_COLL_OPS] = {"allreduce_sum", "allreduce_max", "all_gather",
                                                 "reduce_scatter", "all_to_all"};
    const RtColl *c = &r->coll;
    fprintf(f, "  COLL %s %s %s", c->op >= 0 && c->op < RT_COLL_OPS ? opn[c->op] : "?",
            c->dtype == RT_COLL_BF16 ? "bf16" : "f32",
            c->group == RT_COLL_GROUP_EP     ? "ep"
            : c->group == RT_COLL_GROUP_AMAX ? "amax"
                                             : "tp");
    RT_COLL_FIELDS(TX_I, TX_P, TX_F)
    fprintf(f, "\n");
    break;
  }
#undef TX_I
#undef TX_P
#undef TX_F
  case RT_REC_FORK: fprintf(f, "  FORK (the communication stream waits for the step's stream)\n"); break;
  case RT_REC_JOIN: fprintf(f, "  JOIN (the step's stream waits for the communication stream)\n"); break;
  case RT_REC_MEMSET:
    fprintf(f, "  MEMSET "), addr(f, r->dst), fprintf(f, " %llu B\n", (unsigned long long)r->bytes);
    break;
  case RT_REC_COPY:
    fprintf(f, "  COPY "), addr(f, r->dst), fprintf(f, " <- "), addr(f, r->src);
    fprintf(f, " %llu B\n", (unsigned long long)r->bytes);
    break;
  }
}

static void section(FILE *f, const LaunchProgram *lp, LpRange r, const RtGenKernels *gen) {
  for (int i = r.first; i < r.first + r.count; i++)
    record(f, &lp->rec[i], gen);
}

int program_text_write(const Plan *p, FILE *f) {
  const Graph *g = p->g;
  const LaunchProgram *lp = &p->lp;
  RtGenKernels gen;
  ew_kernels_rt(&p->ew, &gen);
  fprintf(
      f,
      "# program.txt — the launch program of %s, as stepc build stored it in step.img (a listing:\n"
      "# the runtime plays step.img). LAUNCH kernel grid block dynamic-shared-bytes (arguments), GEMM (one\n"
      "# cuBLASLt call), SDPA (one cuDNN fused attention call), MEMSET, COPY, COLL (a collective over\n"
      "# the rank's TP or EP group, or every rank: amax; side=1: on the communication stream), FORK /\n"
      "# JOIN (that stream waits for the step's / the step's waits for it); A+0x.. is an offset in the\n"
      "# step's one allocation: the plan's buffers, then the launch scratch.\n",
      p->spec.recipe_path);
  if (!p->lp_ok) {
    fprintf(f, "# The CUDA backend does not run this step: %s\n", p->lp_why);
    return ferror(f) ? -1 : 0;
  }
  const LpFacts *lf = &lp->f;
  fprintf(f, "# allocation %lld B: plan buffers %lld B, launch scratch %lld B (lowered for %d SMs)\n",
          (long long)lf->alloc_bytes, (long long)lf->buffers_bytes, (long long)lf->scratch_bytes,
          lf->sm_count);
  for (int k = 0; k < LP_SCRATCH_PARTS; k++)
    fprintf(f, "#   scratch: %-28s A+0x%llx %lld B\n", lp_scratch_part_name[k],
            (unsigned long long)lf->part_at[k], (long long)lf->part_bytes[k]);
  for (int64_t k = 0; k < lf->ntmap; k++) {
    const RtTmap *t = &lp->tmap[k];
    fprintf(f, "#   tensor map %lld at A+0x%llx: ", (long long)k,
            (unsigned long long)(lf->tmaps_at + k * RT_TMAP_BYTES));
    addr(f, t->ptr);
    fprintf(f, " %s (%llu", t->elem == 1 ? "fp8" : "bf16", (unsigned long long)t->dim[0]);
    for (int i = 1; i < t->rank; i++)
      fprintf(f, ", %llu", (unsigned long long)t->dim[i]);
    fprintf(f, ") box (%u", t->box[0]);
    for (int i = 1; i < t->rank; i++)
      fprintf(f, ", %u", t->box[i]);
    fprintf(f, ") 128-byte swizzle\n");
  }
  fprintf(f, "\ninit (train.seed read from A+0x%llx)\n", (unsigned long long)lf->init_seed_at);
  section(f, lp, lf->init, &gen);
  for (int mb = 0; mb < lf->nmb; mb++) {
    fprintf(f, "\nbegin micro-batch %d\n", mb);
    section(f, lp, lp->micro[2 * mb], &gen);
    fprintf(f, "end micro-batch %d\n", mb);
    section(f, lp, lp->micro[2 * mb + 1], &gen);
  }
  int q = 0;
  for (int i = 0; i < p->sc.n; i++) {
    if (i == p->sc.micro_end) fprintf(f, "\n# the tail (once per step)\n");
    if (p->sc.it[i].kind != SCHED_OP) continue;
    const Op *op = &g->op[p->sc.it[i].id];
    fprintf(f, "\npoint %d: op %d %s %s [%s, layer %d]%s\n", q, p->sc.it[i].id, op_name(op->kind),
            op->tags.module, phase_name(op->tags.phase), op->tags.layer,
            lp->point[q].rec.count ? "" : " (fused into a neighbour's launch)");
    section(f, lp, lp->point[q].rec, &gen);
    if (lp->point[q].alt.count) {
      fprintf(f, "  alternative (stepc's flash kernels, played when cuDNN has no engine at open):\n");
      section(f, lp, lp->point[q].alt, &gen);
    }
    if (lp->point[q].solo.count) {
      fprintf(f, "  alone (after open, init or a load: the cast with its own amax pass):\n");
      section(f, lp, lp->point[q].solo, &gen);
    }
    q++;
  }
  /* stepc_eval's section: the micro program's forward points as an evaluation lowers them */
  if (!lf->has_eval) {
    fprintf(f, "\n# no evaluation section (stepc_eval refuses): %s\n", lf->eval_refusal);
    return ferror(f) ? -1 : 0;
  }
  fprintf(f,
          "\n# the evaluation (stepc_eval: begin, these points, end per micro-batch; per-token losses at "
          "A+0x%llx)\n",
          (unsigned long long)lf->eval_token_at);
  q = 0;
  for (int i = 0; i < p->sc.n; i++) {
    if (p->sc.it[i].kind != SCHED_OP) continue;
    LpRange r = lp->point[q++].eval;
    if (!r.count) continue;
    const Op *op = &g->op[p->sc.it[i].id];
    fprintf(f, "\neval point %d: op %d %s %s\n", q - 1, p->sc.it[i].id, op_name(op->kind), op->tags.module);
    section(f, lp, r, &gen);
  }
  return ferror(f) ? -1 : 0;
}
