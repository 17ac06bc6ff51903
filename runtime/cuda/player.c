/* player.c — the launch-program player (player.h). */
#include "runtime/cuda/player.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct RtPlayer {
  RtDevice *d;
  const LaunchProgram *lp;
  CUdeviceptr base;
  uint64_t *table; /* the tables as last written, addresses relocated (rt_player_keep_rows rewrites them) */
  float loss_den;  /* the last staged step's loss denominator, the source of its copy */
  int flash;       /* LP_ATTN_AUTO with cuDNN unable: every point plays its flash alternative */
  RtSide comm;     /* the program's communication stream (RT_REC_FORK / RT_REC_JOIN), when it has one */
  int has_comm;
  int serial;                        /* STEPC_COMM_OVERLAP=0: every collective on the step's stream */
  RtMarks *marks;                    /* rt_player_comm_marks */
  int nmark, span_a, span_b, closed; /* marks used; the last window's two; a window closed since asked */
  char notice[1024];
  uint8_t *held; /* rt_player_hold_masters: the masters this rank holds (a byte a tensor); NULL every one */
};

static uint64_t at(const RtPlayer *p, uint64_t v) { return v & LP_PTR ? p->base + (v & ~LP_PTR) : v; }

/* Record r with its addresses relocated, in *c (only addresses: a launch's 64-bit key may have any
 * bits). */
static void relocated(const RtPlayer *p, const RtRec *r, RtRec *c) {
  uint64_t *slot[LP_MAX_ARGS];
  *c = *r;
  int n = lp_rec_addrs(c, c->kind == RT_REC_LAUNCH ? rt_ksig(p->d, (int)c->k) : NULL, slot);
  for (int i = 0; i < n; i++)
    *slot[i] = at(p, *slot[i]);
}

/* The program's tables with their addresses relocated: a table's addresses are stored as LP_PTR |
 * offset and its other words (counts, chunk indices, a float's bits, a dtype code) are small, so the
 * tag alone says which words are addresses. */
static void tables_from_program(RtPlayer *p) {
  const LaunchProgram *lp = p->lp;
  for (int64_t i = 0; i < lp->f.ntable; i++)
    p->table[i] = at(p, lp->table[i]);
}

/* cuDNN's attention plans now, so that no capture builds one (the alternatives hold no cuDNN call).
 * attention_backend=auto: the first shape cuDNN cannot run (it does not load, or it has no engine)
 * makes every point play its flash alternative, said once in the notice; fused: an error naming it. */
static int choose_attention(RtPlayer *p) {
  RtDevice *d = p->d;
  const LaunchProgram *lp = p->lp;
  const char *knob = getenv(RT_TEST_NO_CUDNN_ENV);
  int rc = RT_OK;
  for (int i = 0; i < lp->f.nrec && !rc; i++) {
    if (lp->rec[i].kind != RT_REC_SDPA) continue;
    RtRec c;
    relocated(p, &lp->rec[i], &c);
    if (knob && knob[0] && strcmp(knob, "0") != 0)
      rc = rt_fail(d, "cuDNN has no engine for this %s attention (simulated: %s is set)",
                   c.sdpa.bwd ? "backward" : "forward", RT_TEST_NO_CUDNN_ENV);
    else
      rc = rt_sdpa_prepare(d, &c.sdpa);
  }
  if (!rc) return RT_OK;
  char why[sizeof d->err];
  snprintf(why, sizeof why, "%s", d->err);
  rt_clear_error(d);
  if (lp->f.attn != LP_ATTN_AUTO)
    return rt_fail(d,
                   "%s: this artifact's attention runs on cuDNN alone (attention_backend=fused, or a shape "
                   "only cuDNN takes); build it with attention_backend=auto or flash to run here",
                   why);
  rt_dnn_close(d); /* its plans and workspace: nothing plays a cuDNN call now */
  p->flash = 1;
  snprintf(p->notice, sizeof p->notice,
           "attention: %s; stepc's own attention kernels run every attention op instead "
           "(attention_backend=auto)",
           why);
  return RT_OK;
}

/* Every collective's buffers sized by its communicator now, outside any capture; a program with
 * collectives and no communicator is refused here rather than halfway through a step. */
static int prepare_collectives(RtPlayer *p) {
  RtDevice *d = p->d;
  for (int i = 0; i < p->lp->f.nrec; i++) {
    if (p->lp->rec[i].kind != RT_REC_COLL || d->rec) continue;
    if (!d->coll)
      return rt_fail(d, "the launch program holds collectives (tensor parallelism) and the step was opened "
                        "without the job's ranks");
    RtRec c;
    relocated(p, &p->lp->rec[i], &c);
    if (d->coll->prepare(d->coll->ctx, d, &c.coll)) return RT_ERROR;
  }
  return RT_OK;
}

/* Each GEMM shape's cuBLASLt algorithm timed on the step's own memory (rt_gemm_tune, where
 * stepc_options.gemm_tuning asks for it), before anything is in that memory: the timing writes
 * random operands and products there, so it is zeroed again after. */
static int tune_gemms(RtPlayer *p) {
  RtDevice *d = p->d;
  if (!d->gemm_tune || d->rec) return RT_OK;
  int rc = RT_OK;
  for (int i = 0; i < p->lp->f.nrec && !rc; i++) {
    if (p->lp->rec[i].kind != RT_REC_GEMM) continue;
    RtRec c;
    relocated(p, &p->lp->rec[i], &c);
    rc = rt_gemm_tune(d, &c.gemm);
  }
  return rc ? rc : rt_memset0(d, p->base, (size_t)p->lp->f.alloc_bytes);
}

/* The TMA tensor maps (program.h), over their relocated addresses, into their part of the scratch. */
static int write_tmaps(RtPlayer *p) {
  const LpFacts *f = &p->lp->f;
  if (!f->ntmap || p->d->rec) return RT_OK;
  RtTmap *t = malloc((size_t)f->ntmap * sizeof *t);
  if (!t) return rt_fail(p->d, "out of memory");
  for (int64_t i = 0; i < f->ntmap; i++)
    t[i] = p->lp->tmap[i], t[i].ptr = at(p, t[i].ptr);
  int rc = rt_tmap_write(p->d, p->base + (CUdeviceptr)f->tmaps_at, t, f->ntmap);
  free(t);
  return rc;
}

RtPlayer *rt_player_new(RtDevice *d, const LaunchProgram *lp) {
  RtPlayer *p = calloc(1, sizeof *p);
  const LpFacts *f = &lp->f;
  if (!p || !(p->table = malloc((size_t)f->ntable * 8 + 8))) {
    free(p);
    rt_fail(d, "out of memory");
    return NULL;
  }
  p->d = d, p->lp = lp;
  if (rt_alloc(d, &p->base, (size_t)f->alloc_bytes, "the step's memory (plan buffers and launch scratch)")) {
    free(p->table), free(p);
    return NULL;
  }
  tables_from_program(p);
  int rc = rt_memset0(d, p->base, (size_t)f->alloc_bytes);
  if (!rc) rc = tune_gemms(p);
  /* (a recording device moves no data: it records what is launched) */
  if (!rc && f->ntable && !d->rec)
    rc = rt_copy_h2d(d, p->base + (CUdeviceptr)f->tables_at, p->table, (size_t)f->ntable * 8);
  if (!rc) rc = write_tmaps(p);
  if (!rc) rc = choose_attention(p);
  if (!rc && d->gemm_tune && !d->rec) { /* what the timed choice did, beside any attention notice */
    int timed, changed;
    rt_gemm_tuned(d, &timed, &changed);
    size_t n = strlen(p->notice);
    snprintf(p->notice + n, sizeof p->notice - n,
             "%s%d GEMM shapes tuned (up to %d of cuBLASLt's ranked algorithms timed for each), %d of them "
             "run another than its first-ranked",
             n ? "; " : "", timed, d->gemm_tune, changed);
  }
  if (!rc) rc = prepare_collectives(p);
  const char *ov = getenv(RT_COMM_OVERLAP_ENV);
  p->serial = ov && strcmp(ov, "0") == 0;
  for (int i = 0; i < f->nrec && !rc && !d->rec && !p->serial && !p->has_comm; i++)
    if (lp->rec[i].kind == RT_REC_FORK) rc = rt_side_new(d, &p->comm), p->has_comm = 1;
  if (!rc) rc = rt_sync(d);
  if (rc) {
    rt_player_free(p);
    return NULL;
  }
  return p;
}

void rt_player_free(RtPlayer *p) {
  if (!p) return;
  rt_free(p->d, p->base, (size_t)p->lp->f.alloc_bytes);
  if (p->has_comm) rt_side_free(p->d, &p->comm);
  free(p->table), free(p->held);
  free(p);
}

const LaunchProgram *rt_player_program(const RtPlayer *p) { return p->lp; }
CUdeviceptr rt_player_base(const RtPlayer *p) { return p->base; }
CUdeviceptr rt_player_tensor(const RtPlayer *p, int t) { return p->base + (CUdeviceptr)p->lp->tensor_at[t]; }

/* A mark of the profiling row on the communication stream, its index in *at. */
static int comm_mark(RtPlayer *p, int *at) {
  if (!p->marks) return RT_OK;
  if (p->nmark >= p->marks->n)
    return rt_fail(p->d, "profiling: more than %d marks on the communication stream", p->marks->n);
  *at = p->nmark;
  return rt_mark_on(p->d, p->marks, p->nmark++, p->comm.s);
}

static int comm_fork(RtPlayer *p) {
  return rt_side_fork(p->d, &p->comm) || comm_mark(p, &p->span_a) ? RT_ERROR : RT_OK;
}

static int comm_join(RtPlayer *p) {
  if (comm_mark(p, &p->span_b)) return RT_ERROR;
  p->closed = p->marks != NULL;
  return rt_side_join(p->d, &p->comm);
}

static int play_one(RtPlayer *p, const RtRec *r) {
  RtDevice *d = p->d;
  RtRec c;
  relocated(p, r, &c);
  switch (c.kind) {
  case RT_REC_LAUNCH: {
    void *args[LP_MAX_ARGS];
    for (int i = 0; i < c.nargs; i++)
      args[i] = &c.arg[i]; /* 4-byte ones in the low half */
    return rt_launch(d, c.k, c.grid[0], c.grid[1], c.grid[2], c.block, c.smem, args);
  }
  case RT_REC_GEMM: return rt_gemm_run(d, &c.gemm);
  case RT_REC_SDPA: return rt_sdpa_run(d, &c.sdpa);
  case RT_REC_MEMSET: return rt_memset0(d, c.dst, (size_t)c.bytes);
  case RT_REC_COPY: return rt_copy_d2d(d, c.dst, c.src, (size_t)c.bytes);
  case RT_REC_COLL: {
    if (!c.coll.side || d->rec || p->serial) return rt_coll(d, &c.coll);
    CUstream step = d->stream; /* the collective on the communication stream, between its fork and join */
    d->stream = p->comm.s;
    int rc = rt_coll(d, &c.coll);
    d->stream = step;
    return rc;
  }
  case RT_REC_FORK: return d->rec ? rt_comm_fork(d) : p->serial ? RT_OK : comm_fork(p);
  case RT_REC_JOIN: return d->rec ? rt_comm_join(d) : p->serial ? RT_OK : comm_join(p);
  }
  return rt_fail(d, "a launch-program record of kind %d", (int)c.kind);
}

int rt_player_play(RtPlayer *p, LpRange r) {
  for (int i = r.first; i < r.first + r.count; i++)
    if (play_one(p, &p->lp->rec[i])) return RT_ERROR;
  return RT_OK;
}

int rt_player_set_ranks(RtPlayer *p, int tp_rank, int ep_rank) {
  int32_t r[2] = {tp_rank, ep_rank};
  if (p->d->rec) return RT_OK;
  return rt_copy_h2d(p->d, p->base + (CUdeviceptr)p->lp->f.init_seed_at + 8, r, sizeof r) || rt_sync(p->d)
             ? RT_ERROR
             : RT_OK;
}

int rt_player_init(RtPlayer *p, uint64_t seed) {
  const LpFacts *f = &p->lp->f;
  if (!p->d->rec && (rt_copy_h2d(p->d, p->base + (CUdeviceptr)f->init_seed_at, &seed, 8) || rt_sync(p->d)))
    return RT_ERROR;
  for (int i = f->init.first; i < f->init.first + f->init.count; i++) {
    RtRec r; /* a master another rank holds is not written (lp_init_rec: its argument null) */
    lp_init_rec(p->lp, i, p->held, &r);
    if (play_one(p, &r)) return RT_ERROR;
  }
  return rt_sync(p->d) ? RT_ERROR : RT_OK;
}

int rt_player_hold_masters(RtPlayer *p, const uint8_t *held, int nt) {
  free(p->held), p->held = NULL;
  if (!held) return RT_OK;
  if (!(p->held = malloc((size_t)nt + 1))) return rt_fail(p->d, "out of memory");
  memcpy(p->held, held, (size_t)nt);
  return RT_OK;
}

int rt_player_point(RtPlayer *p, int q) {
  const LpPoint *pt = &p->lp->point[q];
  return rt_player_play(p, p->flash && pt->alt.count ? pt->alt : pt->rec);
}
int rt_player_point_solo(RtPlayer *p, int q) {
  const LpPoint *pt = &p->lp->point[q];
  return pt->solo.count ? rt_player_play(p, pt->solo) : rt_player_point(p, q);
}
int rt_player_flash_fallback(const RtPlayer *p) { return p->flash; }

void rt_player_comm_marks(RtPlayer *p, RtMarks *m) { p->marks = m, p->nmark = 0, p->closed = 0; }
int rt_player_comm_span(RtPlayer *p, int *a, int *b) {
  if (!p->closed) return 0;
  p->closed = 0, *a = p->span_a, *b = p->span_b;
  return 1;
}
int rt_player_point_forks(const RtPlayer *p, int q) {
  LpRange r = p->lp->point[q].rec;
  int n = 0;
  for (int i = r.first; i < r.first + r.count; i++)
    n += p->lp->rec[i].kind == RT_REC_FORK;
  return n;
}
const char *rt_player_notice(const RtPlayer *p) { return p->notice; }
int rt_player_eval_point(RtPlayer *p, int q) {
  const LpPoint *pt = &p->lp->point[q];
  if (!(p->flash && pt->alt.count && pt->eval.count)) return rt_player_play(p, pt->eval);
  /* cuDNN fell back at open: the evaluation's attention is the flash alternative, which is also its
   * evaluation lowering when the compiler said so (no attention dropout) */
  if (!p->lp->f.eval_alt_ok)
    return rt_fail(p->d, "stepc_eval: cuDNN has no engine here (stepc's flash kernels run the attention) and "
                         "the artifact's attention dropout makes the flash alternatives training-only: build "
                         "with attention_backend=flash to evaluate on this machine");
  return rt_player_play(p, pt->alt);
}
int rt_player_read_token_losses(RtPlayer *p, float *dst) {
  const LpFacts *f = &p->lp->f;
  if (!f->has_eval) return rt_fail(p->d, "the launch program has no evaluation section: %s", f->eval_refusal);
  return rt_copy_d2h(p->d, dst, p->base + (CUdeviceptr)f->eval_token_at, (size_t)f->ntok * 4);
}
int rt_player_micro_begin(RtPlayer *p, int mb) { return rt_player_play(p, p->lp->micro[2 * mb]); }
int rt_player_micro_end(RtPlayer *p, int mb) { return rt_player_play(p, p->lp->micro[2 * mb + 1]); }

/* Micro-batch mb's staged tokens (ntok int32), its targets right after. */
static CUdeviceptr inputs_of(const RtPlayer *p, int mb) {
  const LpFacts *f = &p->lp->f;
  return p->base + (CUdeviceptr)(f->inputs_at + (int64_t)mb * 2 * f->ntok * 4);
}

int rt_player_stage(RtPlayer *p, const int32_t *tokens, const int32_t *targets, const uint64_t *seeds,
                    double loss_den) {
  const LpFacts *f = &p->lp->f;
  size_t nb = (size_t)f->ntok * 4;
  p->loss_den = (float)loss_den; /* the copy may be asynchronous: from storage that outlives it */
  if (rt_copy_h2d(p->d, p->base + (CUdeviceptr)f->loss_den_at, &p->loss_den, 4)) return RT_ERROR;
  for (int mb = 0; mb < f->nmb; mb++) {
    CUdeviceptr in = inputs_of(p, mb);
    if (rt_copy_h2d(p->d, in, tokens + (int64_t)mb * f->ntok, nb) ||
        rt_copy_h2d(p->d, in + nb, targets + (int64_t)mb * f->ntok, nb))
      return RT_ERROR;
  }
  return rt_copy_h2d(p->d, p->base + (CUdeviceptr)f->seeds_at, seeds, (size_t)f->nmb * 8);
}

int rt_player_stage_device(RtPlayer *p, CUdeviceptr tokens, CUdeviceptr targets) {
  const LpFacts *f = &p->lp->f;
  size_t nb = (size_t)f->ntok * 4;
  for (int mb = 0; mb < f->nmb; mb++) {
    CUdeviceptr in = inputs_of(p, mb), off = (CUdeviceptr)((int64_t)mb * f->ntok * 4);
    if (rt_copy_d2d(p->d, in, tokens + off, nb) || rt_copy_d2d(p->d, in + nb, targets + off, nb))
      return RT_ERROR;
  }
  return RT_OK;
}

int rt_player_read_losses(RtPlayer *p, float *losses) {
  const LpFacts *f = &p->lp->f;
  return rt_copy_d2h(p->d, losses, p->base + (CUdeviceptr)f->losses_at, (size_t)f->nmb * 4);
}

int rt_player_keep_rows(RtPlayer *p, const uint8_t *keep_sumsq, const uint8_t *keep_adamw) {
  const LaunchProgram *lp = p->lp;
  if (!lp->f.ntable) return RT_OK;
  if (rt_sync(p->d)) return RT_ERROR; /* the tables' last copy has left the host buffer */
  tables_from_program(p);
  for (int i = 0; i < lp->f.nrow; i++) {
    const LpRow *r = &lp->row[i];
    if (!(r->adamw ? keep_adamw : keep_sumsq)[r->tensor])
      p->table[r->word] = 0; /* n = 0: its chunks do nothing */
  }
  return rt_copy_h2d(p->d, p->base + (CUdeviceptr)lp->f.tables_at, p->table, (size_t)lp->f.ntable * 8) ||
                 rt_sync(p->d)
             ? RT_ERROR
             : RT_OK;
}
