/* program.c — the launch program of a planned step (program.h): the launch lowering run on a
 * recording device, its records relocated against the step's one allocation. */
#include "codegen/launch/program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/launch/exec_internal.h"
#include "kernels/launch.h"
#include "runtime/record.h"

/* p as LP_PTR | its offset in [base, base + bytes]; 0 stays 0. 1 when it is elsewhere. */
static int reloc(uint64_t *p, CUdeviceptr base, int64_t bytes) {
  if (!*p) return 0;
  if (*p < base || *p > base + (CUdeviceptr)bytes) return 1;
  *p = LP_PTR | (*p - base);
  return 0;
}

static int reloc_rec(RtRec *r, const RtDevice *d, CUdeviceptr base, int64_t bytes) {
  uint64_t *slot[LP_MAX_ARGS];
  int n = lp_rec_addrs(r, r->kind == RT_REC_LAUNCH ? rt_ksig(d, (int)r->k) : NULL, slot), bad = 0;
  for (int i = 0; i < n; i++)
    bad |= reloc(slot[i], base, bytes);
  return bad;
}

/* Records what fn(x, arg) launches as one range. */
typedef int (*RecordFn)(RtExec *x, int arg);
static int record(RtExec *x, RtRecorder *rec, RecordFn fn, int arg, int op, LpRange *r) {
  rec->on = 1, rec->op = op;
  r->first = rec->n;
  int rc = fn(x, arg);
  rec->on = 0;
  r->count = rec->n - r->first;
  return rc;
}

static int rec_init_zero(RtExec *x, int arg) { return (void)arg, rt_exec_init_zero(x); }

/* The initialisation as one range (exec.h: the buffers zeroed, then each param's launch), with each
 * record that writes an fp32 master named (LpInitMaster: its f32 argument, the first; an fp32 param
 * is its own master), so that a rank of the distributed optimizer plays it without a master it does
 * not hold (runtime/program.h lp_init_rec). */
static int record_init(RtExec *x, RtRecorder *rec, LaunchProgram *lp) {
  const Graph *g = x->g;
  LpRange r;
  lp->f.init.first = rec->n;
  if (record(x, rec, rec_init_zero, 0, -1, &r)) return RT_ERROR;
  if (!(lp->init_master = calloc((size_t)g->nt + 1, sizeof *lp->init_master))) return RT_ERROR;
  for (int i = 0; i < g->nt; i++) {
    if (record(x, rec, rt_exec_init_param, i, -1, &r)) return RT_ERROR;
    int m = rt_exec_init_master(x, i);
    if (r.count == 1 && m >= 0)
      lp->init_master[lp->f.ninit_master++] = (LpInitMaster){.rec = r.first, .arg = 0, .tensor = m};
  }
  lp->f.init.count = rec->n - lp->f.init.first;
  return RT_OK;
}

/* A collective that runs on the communication stream (Schedule.comm_end): the fork, then the op
 * lowered with its collectives on that stream. */
static int rec_comm_op(RtExec *x, int o) {
  if (rt_comm_fork(x->d)) return RT_ERROR;
  rt_exec_set_comm_side(x, 1);
  int rc = rt_exec_run_op(x, o);
  rt_exec_set_comm_side(x, 0);
  return rc;
}

/* The step's stream waits for the communication stream (the end of a window). */
static int rec_join(RtExec *x, int arg) { return (void)arg, rt_comm_join(x->d); }

/* The multi-tensor tables' rows: the word of each row's element count, and its gradient; and each
 * row's addresses (kernels/launch.h: a norm row's first word, an AdamW row's first five) relocated
 * like the records' (the tables were written with the recording device's addresses). */
static int table_rows(const RtExec *x, LaunchProgram *lp) {
  CUdeviceptr base = rt_exec_base(x, 0);
  const Graph *g = x->g;
  int n = 0;
  for (int pass = 0; pass < 2; pass++) {
    n = 0;
    for (int o = 0; o < g->nop; o++) {
      if (x->multi_at[o] < 0) continue;
      int sumsq = g->op[o].kind == OP_GRAD_SUMSQ, width = sumsq ? STEPC_SUMSQ_ROW : STEPC_ADAMW_ROW;
      for (int k = x->fz->peer[o]; k <= o; k++, n++) {
        if (!pass) continue;
        int64_t row = x->multi_at[o] + (int64_t)(k - x->fz->peer[o]) * width;
        lp->row[n] = (LpRow){.word = row + (sumsq ? 1 : 5), .tensor = g->op[k].in[0], .adamw = !sumsq};
        for (int w = 0; w < (sumsq ? 1 : 5); w++)
          if (reloc(&lp->table[row + w], base, lp->f.alloc_bytes)) return -1;
      }
    }
    if (!pass && !(lp->row = calloc((size_t)n + 1, sizeof *lp->row))) return -1;
  }
  lp->f.nrow = n;
  return 0;
}

static int facts(RtExec *x, LaunchProgram *lp) {
  LpFacts *f = &lp->f;
  const Graph *g = x->g;
  f->buffers_bytes = rt_exec_arena_bytes(x);
  f->scratch_bytes = rt_exec_scratch_bytes(x);
  f->alloc_bytes = f->buffers_bytes + f->scratch_bytes;
  for (int i = 0; i < LP_SCRATCH_PARTS; i++)
    f->part_bytes[i] = rt_exec_scratch_part(x, i, &f->part_at[i]);
  f->ntok = x->ntok, f->nmb = x->nmb, f->sm_count = x->d->sm_count;
  f->inputs_at = f->part_at[RT_SCRATCH_INPUTS], f->seeds_at = f->part_at[RT_SCRATCH_SEEDS];
  f->losses_at = f->part_at[RT_SCRATCH_LOSSES], f->init_seed_at = f->part_at[RT_SCRATCH_INIT_SEED];
  f->loss_den_at = f->part_at[RT_SCRATCH_LOSS_DEN];
  f->norm_at = f->part_at[RT_SCRATCH_GNORM], f->norm_count = x->n_partial;
  f->tables_at = f->part_at[RT_SCRATCH_TABLES];
  f->attn_workspace = rt_exec_attn_workspace(x);
  CUdeviceptr base = rt_exec_base(x, 0);
  if (!(lp->tensor_at = malloc(((size_t)g->nt + 1) * sizeof *lp->tensor_at))) return -1;
  for (int t = 0; t < g->nt; t++)
    lp->tensor_at[t] = (int64_t)(rt_exec_ptr(x, t) - base);
  int64_t words;
  const uint64_t *tw = rt_exec_tables(x, &words);
  f->ntable = words;
  if (!(lp->table = calloc((size_t)words + 1, 8))) return -1;
  if (words) memcpy(lp->table, tw, (size_t)words * 8);
  int nmap;
  const RtTmap *tm = rt_exec_tmaps(x, &nmap);
  f->tmaps_at = f->part_at[RT_SCRATCH_TMAPS], f->ntmap = nmap;
  if (!(lp->tmap = calloc((size_t)nmap + 1, sizeof *lp->tmap))) return -1;
  for (int i = 0; i < nmap; i++) { /* their addresses relocated like the records' */
    lp->tmap[i] = tm[i];
    uint64_t p = tm[i].ptr;
    if (reloc(&p, base, f->alloc_bytes)) return -1;
    lp->tmap[i].ptr = p;
  }
  return table_rows(x, lp);
}

/* The evaluation section (program.h): every forward point of the micro program lowered again as an
 * evaluation, and where the loss op leaves its per-token losses; or, when the forward cannot be
 * played alone, no section and why. */
static int record_eval(RtExec *x, RtRecorder *rec, const Graph *g, const Schedule *sc, LaunchProgram *lp) {
  LpFacts *f = &lp->f;
  int lo = graph_lm_loss_op(g);
  f->eval_token_at = -1;
  if (lo < 0)
    snprintf(f->eval_refusal, sizeof f->eval_refusal, "the step has no single language-model loss op");
  else
    rt_exec_eval_refusal(x, f->eval_refusal, sizeof f->eval_refusal);
  if (f->eval_refusal[0]) return 0;
  rt_exec_set_eval(x, 1);
  f->eval_alt_ok = 1;
  int q = 0, rc = 0;
  for (int i = 0; i < sc->n && !rc; i++) {
    if (sc->it[i].kind != SCHED_OP) continue;
    int o = sc->it[i].id, p = q++;
    if (i < sc->micro_end && g->op[o].tags.phase == IR_PHASE_FORWARD)
      rc = record(x, rec, rt_exec_run_op, o, o, &lp->point[p].eval);
    /* a flash alternative serves an evaluation too when the evaluation lowers the op as training
     * does (nothing for op_for_eval to turn off: no attention dropout) */
    Op e = g->op[o];
    if (rt_exec_attn_kind(x, o) == 3 && (op_for_eval(&e) != 0 || memcmp(&e.a, &g->op[o].a, sizeof e.a) != 0))
      f->eval_alt_ok = 0;
  }
  rt_exec_set_eval(x, 0);
  f->eval_token_at = lp->tensor_at[g->op[lo].out[1]];
  f->has_eval = 1;
  return rc;
}

/* LpFacts.attn: the attention lowerings the program holds; flash alternatives (auto) only where
 * every cuDNN call has one, else the program is cuDNN's alone. */
static int attn_lowerings(const RtExec *x) {
  int seen[4] = {0};
  for (int o = 0; o < x->g->nop; o++)
    seen[rt_exec_attn_kind(x, o)] = 1;
  return seen[2] ? LP_ATTN_CUDNN : seen[3] ? LP_ATTN_AUTO : seen[1] ? LP_ATTN_FLASH : LP_ATTN_NONE;
}

int launch_program_build(const Graph *g, const Fusions *fz, const Schedule *sc, const EwKernels *ew,
                         int sm_count, LaunchProgram *lp, char *why, size_t nwhy, char *err, size_t nerr) {
  memset(lp, 0, sizeof *lp);
  why[0] = 0;
  RtDevice d;
  RtRecorder rec;
  rt_record_open(&d, &rec, sm_count);
  RtGenKernels gk; /* the plan's generated kernels: their handles follow kernel_list.h's */
  ew_kernels_rt(ew, &gk);
  d.gen = &gk;
  int unsupported = 0;
  RtExec *x = rt_exec_new(&d, g, fz, &unsupported);
  if (!x) {
    if (unsupported)
      snprintf(why, nwhy, "%s", d.err);
    else
      snprintf(err, nerr, "lowering the step to launches: %s", d.err);
    return unsupported ? 1 : -1;
  }
  int rc = -1, nmb = x->nmb;
  lp->point = calloc((size_t)sc->nops + 1, sizeof *lp->point);
  lp->micro = calloc(2 * (size_t)nmb, sizeof *lp->micro);
  if (!lp->point || !lp->micro || facts(x, lp) != 0) {
    snprintf(err, nerr, "out of memory");
    goto done;
  }
  lp->f.attn = attn_lowerings(x);
  if (record_init(x, &rec, lp)) goto failed;
  int q = 0,
      join_at = -1; /* the point after whose launches the step's stream joins the communication stream */
  for (int i = 0; i < sc->n; i++) {
    if (sc->it[i].kind != SCHED_OP) continue;
    int o = sc->it[i].id, peer, comm = sc->comm_end ? sc->comm_end[o] : -1;
    const Op *op = &g->op[o];
    LpPoint *p = &lp->point[q];
    if (comm >= 0) join_at = comm;
    if (record(x, &rec, comm >= 0 ? rec_comm_op : rt_exec_run_op, o, o, &p->rec)) goto failed;
    int joins = join_at == q;
    if (joins) { /* appended to this point's range */
      LpRange j;
      if (record(x, &rec, rec_join, 0, o, &j)) goto failed;
      p->rec.count += j.count;
      join_at = -1;
    }
    q++;
    if (lp->f.attn == LP_ATTN_AUTO && rt_exec_attn_kind(x, o) == 3 &&
        record(x, &rec, rt_exec_run_attn_flash, o, o, &p->alt))
      goto failed;
    if (op->kind == OP_ADAMW && record(x, &rec, rt_exec_adamw_hparams, o, o, &p->hparams)) goto failed;
    if (op->kind == OP_FP8_QUANT && g->t[op->out[0]].role == ROLE_PARAM_FP8 && fz->amax[o] >= 0) {
      rt_exec_set_solo(x, 1);
      int bad = record(x, &rec, rt_exec_run_op, o, o, &p->solo);
      rt_exec_set_solo(x, 0);
      if (bad) goto failed;
    }
    p->alone = rt_exec_op_runs(x, o) && !rt_exec_fusion(x, o, &peer) && comm < 0 && !joins;
    p->norm_count = -1; /* no slice of its own (a fused GRAD_SUMSQ outside every group) */
    if (op->kind == OP_GRAD_SUMSQ && rt_exec_norm_partials(x, o, &p->norm_first, &p->norm_count)) {
      rt_clear_error(&d);
      p->norm_first = 0, p->norm_count = -1;
    }
  }
  if (record_eval(x, &rec, g, sc, lp)) goto failed;
  for (int mb = 0; mb < nmb; mb++)
    if (record(x, &rec, rt_exec_micro_begin, mb, -1, &lp->micro[2 * mb]) ||
        record(x, &rec, rt_exec_micro_end, mb, -1, &lp->micro[2 * mb + 1]))
      goto failed;
  CUdeviceptr base = rt_exec_base(x, 0);
  for (int i = 0; i < rec.n; i++)
    if (reloc_rec(&rec.r[i], &d, base, lp->f.alloc_bytes)) {
      snprintf(err, nerr, "op %d: a launch argument points outside the step's allocation", rec.r[i].op);
      goto done;
    }
  lp->rec = rec.r, lp->f.nrec = rec.n;
  rec.r = NULL;
  rc = 0;
  goto done;
failed:
  if (rt_exec_refused(x)) /* shapes the kernels do not take: no launch program, and why */
    snprintf(why, nwhy, "%s", d.err), rc = 1;
  else
    snprintf(err, nerr, "lowering the step to launches: %s", d.err);
done:
  rt_exec_free(x);
  rt_recorder_free(&rec);
  if (rc) lp_free(lp);
  return rc;
}

int launch_program_stats(const LaunchProgram *lp, LaunchStats *st) {
  memset(st, 0, sizeof *st);
  for (int i = 0; i < lp->f.nrec; i++) {
    const RtRec *r = &lp->rec[i];
    st->launches += r->kind == RT_REC_LAUNCH, st->gemms += r->kind == RT_REC_GEMM,
        st->sdpas += r->kind == RT_REC_SDPA;
    st->memsets += r->kind == RT_REC_MEMSET, st->copies += r->kind == RT_REC_COPY;
    if (r->kind == RT_REC_LAUNCH && (int)r->k < RT_K_COUNT + RT_GEN_MAX) st->kernel_used[r->k] = 1;
  }
  return 0;
}
