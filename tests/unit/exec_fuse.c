/* exec_fuse.c — the compiler's fusions (compiler/passes/fuse.c) as the executor runs them on the recording
 * device, no GPU: which ops fuse, what the fused op launches (always straight into the group's
 * output: the plan keeps it off every operand), that the bit-changing fusions (LINEAR+ADD, DROPOUT+ADD) pick the same forward pairs under every
 * recompute setting and fuse every replay of a fused pair, that a norm backward and the residual
 * ADD after it run as one launch (two per layer), and that none of them straddles a
 * CUDA-graph scope instance.
 *
 *   exec_fuse            the checks below (exit 0 ok, 1 a failure)
 *   exec_fuse RECIPE [K=V ...]   one recipe's fused pairs, printed */
#include <math.h>
#include <stdlib.h>

#include "ops/ops.h"
#include "record_run.h"

typedef struct {
  Plan p;
  RtDevice dev;
  RtRecorder rec;
  RtExec *x;
  int n[FUSE_COUNT];      /* pairs by kind (4: generated elementwise chains; 5, 6 the optimizer's
                             multi-tensor groups, checked in exec_optim.c) */
  char (*fwd_key)[160];   /* per op: "kind module" of fused forward LINEAR/DROPOUT+ADD pairs */
} Run;

static int load(Run *r, const char *recipe, const char **kv, int nkv) {
  memset(r, 0, sizeof *r);
  if (record_run_open(recipe, kv, nkv, &r->p, &r->dev, &r->rec, &r->x)) return -1;
  const Graph *g = r->p.g;
  r->fwd_key = calloc((size_t)g->nop + 1, sizeof *r->fwd_key);
  for (int o = 0; o < g->nop; o++) {
    int peer, k = rt_exec_fusion(r->x, o, &peer);
    if (!k) continue;
    r->n[k]++;
    if (k != 3 && k != 4 && g->op[o].tags.phase == IR_PHASE_FORWARD)
      snprintf(r->fwd_key[o], sizeof r->fwd_key[o], "%d %s", k, g->op[o].tags.module);
  }
  return 0;
}

static void unload(Run *r) {
  record_run_close(&r->p, &r->rec, r->x);
  free(r->fwd_key);
}

/* Ops o - 2, o - 1 and o share phase, layer and scopes. */
static int same_tags3(const Graph *g, int o) {
  for (int i = o - 2; i < o; i++) {
    const IrTags *a = &g->op[i].tags, *b = &g->op[o].tags;
    if (a->phase != b->phase || a->layer != b->layer || a->scopes != b->scopes) return 0;
  }
  return 1;
}

/* The chunked output layer (FUSE_LOSS_BWD at its backward op b, peer its forward f): b launches
 * nothing; f launches per chunk of n rows, in order, the logits GEMM into its chunk, the cross
 * entropy in place over the chunk (losses into the chunk's rows of token_loss, the gradient weight
 * 1 / tokens), the dgrad GEMM into the chunk's rows of dx and the wgrad GEMM added into the fp32
 * main gradient; then the mean of token_loss into the loss. */
static void check_loss_bwd(Run *r, const char *name, int b, int f) {
  const Graph *g = r->p.g;
  RtExec *x = r->x;
  const Op *bw = &g->op[b], *fw = &g->op[f];
  CHECK(bw->kind == OP_LINEAR_CROSS_ENTROPY_BWD && fw->kind == OP_LINEAR_CROSS_ENTROPY && f < b && !rt_exec_op_runs(x, b) &&
            rt_exec_op_runs(x, f) && fw->tags.phase == IR_PHASE_FORWARD,
        "%s op %d: the chunked loss's backward is not run by its forward %d", name, b, f);
  r->rec.n = 0;
  r->rec.op = b;
  CHECK(rt_exec_run_op(x, b) == 0 && r->rec.n == 0, "%s op %d: the fused backward launches something", name, b);
  r->rec.op = f;
  CHECK(rt_exec_run_op(x, f) == 0, "%s op %d: %s", name, f, r->dev.err);
  const Tensor *a = &g->t[fw->in[0]], *w = &g->t[fw->in[1]];
  int64_t N = ops_rows(a), K = ops_last(a), V = w->shape[0], C = fw->a.i[0], n = N / C, mg = r->p.fz->sink[bw->out[1]];
  /* one micro-batch: the main gradient's ZERO, between f and b (optimizer.c), is skipped and the
   * launch's first chunk stores the gradient instead of adding to it (no memset record) */
  int z0 = 0;
  for (int z = f + 1; z < b && mg >= 0; z++)
    z0 |= g->op[z].kind == OP_ZERO && g->op[z].out[0] == mg && !rt_exec_op_runs(x, z);
  CHECK(z0 == (g->num_microbatches == 1), "%s op %d: the main gradient's ZERO %s the fused loss", name, f,
        z0 ? "absorbed by" : "not absorbed by");
  CHECK(C > 1 && mg >= 0 && r->rec.n == 4 * C + 1, "%s op %d: %d records for %lld chunks", name, f, r->rec.n, (long long)C);
  if (r->rec.n != 4 * C + 1 || mg < 0) return;
  CUdeviceptr lg = rt_exec_ptr(x, fw->out[2]), tok = rt_exec_ptr(x, fw->out[1]), dx = rt_exec_ptr(x, bw->out[0]);
  CUdeviceptr xin = rt_exec_ptr(x, fw->in[0]), W = rt_exec_ptr(x, fw->in[1]), tg = rt_exec_ptr(x, fw->in[2]);
  float dl = 1.0f / (float)g->num_microbatches; /* the loss gradient; the kernel divides by the step's D */
  int64_t den_at = 0;
  rt_exec_scratch_part(x, RT_SCRATCH_LOSS_DEN, &den_at);
  CUdeviceptr den = rt_exec_base(x, 0) + (CUdeviceptr)den_at; /* where the step's D is staged */
  for (int64_t c = 0; c < C; c++) {
    const RtRec *q = &r->rec.r[4 * c];
    CUdeviceptr xc = xin + (CUdeviceptr)(c * n * K * 2);
    CHECK(q[0].kind == RT_REC_GEMM && q[0].gemm.kind == RT_GEMM_NT && q[0].gemm.m == n && q[0].gemm.n == V && q[0].gemm.k == K &&
              q[0].gemm.a == xc && q[0].gemm.b == W && q[0].gemm.c == lg && q[0].gemm.beta == 0.0f,
          "%s op %d chunk %lld: not the logits GEMM into the chunk", name, f, (long long)c);
    uint32_t bits;
    float got;
    memcpy(&bits, &q[1].arg[6], 4);
    memcpy(&got, &bits, 4);
    CHECK(q[1].kind == RT_REC_LAUNCH && (q[1].k == RT_K_cross_entropy_cluster || q[1].k == RT_K_cross_entropy_forward_backward) &&
              q[1].arg[0] == tok + (CUdeviceptr)(c * n * 4) && q[1].arg[1] == lg && q[1].arg[2] == tg + (CUdeviceptr)(c * n * 4) &&
              (uint32_t)q[1].arg[3] == (uint32_t)n && fabsf(got - dl) <= 1e-6f * dl && q[1].arg[7] == den,
          "%s op %d chunk %lld: not the cross entropy over the chunk (weight %g, want %g)", name, f, (long long)c, got, dl);
    CHECK(q[2].kind == RT_REC_GEMM && q[2].gemm.kind == RT_GEMM_NN && q[2].gemm.a == lg && q[2].gemm.b == W &&
              q[2].gemm.c == dx + (CUdeviceptr)(c * n * K * 2) && q[2].gemm.beta == 0.0f,
          "%s op %d chunk %lld: not the dgrad GEMM into the chunk's rows of dx", name, f, (long long)c);
    CHECK(q[3].kind == RT_REC_GEMM && q[3].gemm.kind == RT_GEMM_TN && q[3].gemm.a == lg && q[3].gemm.b == xc &&
              q[3].gemm.c == rt_exec_ptr(x, (int)mg) && q[3].gemm.c_f32 && q[3].gemm.beta == (z0 && c == 0 ? 0.0f : 1.0f),
          "%s op %d chunk %lld: not the wgrad GEMM %s the main gradient", name, f, (long long)c,
          z0 && c == 0 ? "stored into" : "added into");
  }
  const RtRec *l = &r->rec.r[4 * C];
  CHECK(l->kind == RT_REC_LAUNCH && l->k == RT_K_loss_reduce && l->arg[0] == rt_exec_ptr(x, fw->out[0]) && l->arg[1] == tok &&
            (uint32_t)l->arg[2] == (uint32_t)N && l->arg[3] == den,
        "%s op %d: not the loss's sum over token_loss / D", name, f);
  /* the plan keeps the logits chunk, dx and the forward's inputs apart across the group */
  CHECK(lg != dx && lg != xin && dx != xin, "%s op %d: the chunk, dx and x share storage", name, f);
}

/* Each fused op: its peer is the op before it, skipped, in its phase; it launches the fused
 * kernel / GEMM with the right operands. */
static void check_launches(Run *r, const char *name) {
  const Graph *g = r->p.g;
  RtExec *x = r->x;
  r->rec.on = 1;
  for (int o = 0; o < g->nop; o++) {
    int peer, k = rt_exec_fusion(x, o, &peer);
    if (!k || k == FUSE_SUMSQ_MULTI || k == FUSE_ADAMW_MULTI) continue;
    if (k == FUSE_WGRAD_STORE) { /* one GEMM storing into the main gradient, whose ZERO is skipped */
      const Op *w = &g->op[o];
      int mg = w->nout == 1 ? r->p.fz->sink[w->out[0]] : -1, zeros = 0;
      for (int z = 0; z < g->nop; z++)
        zeros += g->op[z].kind == OP_ZERO && g->op[z].out[0] == mg && !rt_exec_op_runs(x, z);
      CHECK(w->kind == OP_LINEAR_WGRAD && peer == -1 && mg >= 0 && zeros == 1 && g->num_microbatches == 1,
            "%s op %d: a stored weight gradient without its skipped ZERO", name, o);
      r->rec.n = 0;
      r->rec.op = o;
      CHECK(rt_exec_run_op(x, o) == 0, "%s op %d: %s", name, o, r->dev.err);
      CHECK(r->rec.n == 1 && r->rec.r[0].kind == RT_REC_GEMM && r->rec.r[0].gemm.beta == 0.0f &&
                mg >= 0 && r->rec.r[0].gemm.c == rt_exec_ptr(x, mg),
            "%s op %d: not one GEMM storing into the main gradient", name, o);
      continue;
    }
    const Op *op = &g->op[o], *pr = &g->op[peer];
    if (k == FUSE_NORM_BWD_ADD) { /* the norm backward's one-pass kernel into the ADD's output, adding its other input */
      int ln = pr->kind == OP_LAYERNORM_BWD, other = op->in[0] == pr->out[0] ? op->in[1] : op->in[0];
      CHECK(peer == o - 1 && !rt_exec_op_runs(x, peer) && rt_exec_op_runs(x, o) && op->kind == OP_ADD &&
                (pr->kind == OP_RMSNORM_BWD || ln) && op->tags.phase == IR_PHASE_BACKWARD && pr->tags.phase == op->tags.phase,
            "%s op %d: norm backward + ADD from %d", name, o, peer);
      r->rec.n = 0;
      r->rec.op = o;
      CHECK(rt_exec_run_op(x, o) == 0, "%s op %d: %s", name, o, r->dev.err);
      const RtRec *a = &r->rec.r[0];
      CHECK(r->rec.n == 2 + ln && a->kind == RT_REC_LAUNCH && a->k == (ln ? RT_K_layernorm_backward : RT_K_rmsnorm_backward) &&
                a->arg[0] == rt_exec_ptr(x, op->out[0]) && a->arg[2] == rt_exec_ptr(x, pr->in[0]) &&
                a->arg[3] == rt_exec_ptr(x, other) && a->arg[0] != a->arg[3],
            "%s op %d: not the norm backward writing dx + the addend into the ADD's output", name, o);
      continue;
    }
    if (k == FUSE_LOSS_BWD) {
      check_loss_bwd(r, name, o, peer);
      continue;
    }
    if (k == 4) { /* a generated chain: its ops from peer to o, all but o skipped, one launch */
      CHECK(peer < o && !rt_exec_op_runs(x, peer) && rt_exec_op_runs(x, o) && op->tags.phase == pr->tags.phase,
            "%s op %d: chain from %d", name, o, peer);
      for (int q = peer; q < o; q++) CHECK(!rt_exec_op_runs(x, q), "%s op %d: chain op %d still runs", name, o, q);
      r->rec.n = 0;
      r->rec.op = o;
      CHECK(rt_exec_run_op(x, o) == 0, "%s op %d: %s", name, o, r->dev.err);
      const RtGenKernels *ks = r->dev.gen;
      CHECK(r->rec.n == 1 && r->rec.r[0].kind == RT_REC_LAUNCH && (int)r->rec.r[0].k >= RT_K_COUNT &&
                (int)r->rec.r[0].k < RT_K_COUNT + ks->n,
            "%s op %d: not one launch of a generated kernel", name, o);
      if (r->rec.n == 1 && op->kind == OP_DROPOUT_BWD) { /* the last output stored; mask arguments as rt_op_dropout_bwd's */
        const RtRec *a = &r->rec.r[0];
        const char *sig = ks->k[a->k - RT_K_COUNT].sig;
        int n = (int)strlen(sig);
        uint32_t pbits;
        float p = (float)op->a.f[0];
        memcpy(&pbits, &p, 4);
        CHECK(n >= 3 && sig[n - 3] == 'f' && (uint32_t)a->arg[n - 3] == pbits &&
                  (uint32_t)a->arg[n - 1] == (uint32_t)op->a.i[0],
              "%s op %d: chain dropout arguments", name, o);
        int found = 0;
        for (int i = 0; i < n; i++) found |= sig[i] == 'p' && a->arg[i] == rt_exec_ptr(x, op->out[0]);
        CHECK(found, "%s op %d: the chain does not write the last op's output", name, o);
      }
      continue;
    }
    if (k == FUSE_ROPE_QKV) { /* split + 2 RoPEs, or 2 inverse RoPEs + concat: one launch over the QKV row */
      int fwd = pr->kind == OP_SPLIT_QKV;
      const Op *qkv = fwd ? pr : op;
      CHECK(peer == o - 2 && !rt_exec_op_runs(x, o - 2) && !rt_exec_op_runs(x, o - 1) && rt_exec_op_runs(x, o) &&
                same_tags3(g, o) && (fwd ? op->kind == OP_ROPE : op->kind == OP_CONCAT_QKV),
            "%s op %d: QKV RoPE group from %d", name, o, peer);
      r->rec.n = 0;
      r->rec.op = o;
      CHECK(rt_exec_run_op(x, o) == 0, "%s op %d: %s", name, o, r->dev.err);
      const RtRec *a = &r->rec.r[0];
      CHECK(r->rec.n == 1 && a->kind == RT_REC_LAUNCH && a->k == (fwd ? RT_K_rope_split_qkv : RT_K_rope_concat_qkv),
            "%s op %d: not one rope_%s_qkv launch", name, o, fwd ? "split" : "concat");
      if (r->rec.n == 1 && fwd) { /* rotated q and k (the RoPEs' outputs), v, from the projection */
        const Op *rq = g->op[o - 1].in[0] == qkv->out[0] ? &g->op[o - 1] : op, *rk = rq == op ? &g->op[o - 1] : op;
        CHECK(a->arg[0] == rt_exec_ptr(x, rq->out[0]) && a->arg[1] == rt_exec_ptr(x, rk->out[0]) &&
                  a->arg[2] == rt_exec_ptr(x, qkv->out[2]) && a->arg[3] == rt_exec_ptr(x, qkv->in[0]),
              "%s op %d: rope_split_qkv operands", name, o);
      } else if (r->rec.n == 1) { /* the projection's gradient from the RoPEs' inputs and dv */
        const Op *rq = g->op[o - 2].out[0] == qkv->in[0] ? &g->op[o - 2] : &g->op[o - 1];
        const Op *rk = rq == &g->op[o - 2] ? &g->op[o - 1] : &g->op[o - 2];
        CHECK(a->arg[0] == rt_exec_ptr(x, qkv->out[0]) && a->arg[1] == rt_exec_ptr(x, rq->in[0]) &&
                  a->arg[2] == rt_exec_ptr(x, rk->in[0]) && a->arg[3] == rt_exec_ptr(x, qkv->in[2]) &&
                  rq->out[0] == qkv->in[0] && rk->out[0] == qkv->in[1],
              "%s op %d: rope_concat_qkv operands", name, o);
      }
      continue;
    }
    CHECK(peer == o - 1 && !rt_exec_op_runs(x, peer) && rt_exec_op_runs(x, o), "%s op %d: peer %d", name, o, peer);
    CHECK(op->tags.phase == pr->tags.phase, "%s op %d: pair in two phases", name, o);
    if (k != 3)
      CHECK(op->tags.layer == pr->tags.layer && op->tags.scopes == pr->tags.scopes,
            "%s op %d: a bit-changing pair across a tag difference", name, o);
    r->rec.n = 0;
    r->rec.op = o;
    CHECK(rt_exec_run_op(x, o) == 0, "%s op %d: %s", name, o, r->dev.err);
    CHECK(r->rec.n == 1, "%s op %d: %d records for a pair", name, o, r->rec.n);
    if (r->rec.n < 1) continue;
    const RtRec *a = &r->rec.r[0];
    CUdeviceptr out = rt_exec_ptr(x, op->kind == OP_ADD ? op->out[0] : pr->out[0]);
    if (k == 1) {
      int y = pr->out[0], res = op->in[0] == y ? op->in[1] : op->in[0];
      CUdeviceptr d = a->gemm.d ? a->gemm.d : a->gemm.c;
      CHECK(a->kind == RT_REC_GEMM && a->gemm.beta == 1.0f && a->gemm.c == rt_exec_ptr(x, res) &&
                a->gemm.a == rt_exec_ptr(x, pr->in[0]) && a->gemm.b == rt_exec_ptr(x, pr->in[1]) &&
                d == out && d != a->gemm.c && a->gemm.bias == (pr->nin == 3 ? rt_exec_ptr(x, pr->in[2]) : 0),
            "%s op %d: LINEAR+ADD is not one GEMM D = A W^T + residual", name, o);
    } else if (k == 2) {
      CHECK(a->kind == RT_REC_LAUNCH && a->k == RT_K_dropout_residual_forward, "%s op %d: not dropout_residual_forward", name, o);
      /* the mask's (p, stream) are the dropout's, as rt_op_dropout passes them */
      uint32_t pbits;
      float p = (float)pr->a.f[0];
      memcpy(&pbits, &p, 4);
      CHECK((uint32_t)a->arg[4] == pbits && (uint32_t)a->arg[6] == (uint32_t)pr->a.i[0], "%s op %d: dropout mask arguments", name, o);
    } else {
      RtKernel want = op->kind == OP_RMSNORM ? RT_K_residual_rmsnorm_forward : RT_K_residual_layernorm_forward;
      CHECK(a->kind == RT_REC_LAUNCH && a->k == want && a->arg[0] == out, "%s op %d: not %s", name, o, rt_kernel_name[want]);
    }
  }
  r->rec.on = 0;
  /* every replay of a bit-changing pair is fused exactly when its forward pair is */
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    if (op->tags.phase != IR_PHASE_REPLAY || op->kind != OP_ADD || op->tags.fwd < 0) continue;
    int p1, p2, kr = rt_exec_fusion(x, o, &p1), kf = rt_exec_fusion(x, op->tags.fwd, &p2);
    if (kr == 3) kr = 0;
    if (kf == 3) kf = 0;
    CHECK(kr == kf, "%s: replay op %d fused %d, its forward op %d fused %d", name, o, kr, op->tags.fwd, kf);
  }
}

/* Pairs that straddle a scope instance of the plan (schedule positions of the two ops). */
static int straddles(Run *r, int want_kind) {
  const Graph *g = r->p.g;
  const Schedule *sc = &r->p.sc;
  const ScopeResult *sr = &r->p.sr;
  int *inst = malloc((size_t)g->nop * sizeof *inst), n = 0;
  for (int o = 0; o < g->nop; o++) inst[o] = -1;
  for (int k = 0; k < sr->n; k++)
    for (int i = sr->s[k].first; i <= sr->s[k].last; i++)
      if (sc->it[i].kind == SCHED_OP) inst[sc->it[i].id] = k;
  for (int o = 0; o < g->nop; o++) {
    int peer, k = rt_exec_fusion(r->x, o, &peer);
    if (k && (want_kind == 0 ? k < 3 : k == want_kind) && inst[o] != inst[peer]) n++;
  }
  free(inst);
  return n;
}

static void print(Run *r, const char *name) {
  printf("%-44s LINEAR+ADD %3d  DROPOUT+ADD %3d  ADD+norm %3d  ew chains %3d  QKV RoPE %3d  stored wgrad %3d  chunked loss %d"
         "  norm bwd+ADD %3d\n",
         name, r->n[1], r->n[2], r->n[3], r->n[4], r->n[FUSE_ROPE_QKV], r->n[FUSE_WGRAD_STORE], r->n[FUSE_LOSS_BWD],
         r->n[FUSE_NORM_BWD_ADD]);
}

/* The same forward pairs (by kind and module) fuse in a and b. */
static void same_forward(Run *a, Run *b, const char *name) {
  int na = 0, nb = 0;
  for (int o = 0; o < a->p.g->nop; o++) na += a->fwd_key[o][0] != 0;
  for (int o = 0; o < b->p.g->nop; o++) nb += b->fwd_key[o][0] != 0;
  CHECK(na == nb, "%s: %d forward pairs fused, %d without recompute", name, nb, na);
  for (int o = 0; o < a->p.g->nop; o++) {
    if (!a->fwd_key[o][0]) continue;
    int found = 0;
    for (int q = 0; q < b->p.g->nop && !found; q++) found = strcmp(a->fwd_key[o], b->fwd_key[q]) == 0;
    CHECK(found, "%s: forward pair %s not fused under recompute", name, a->fwd_key[o]);
  }
}

static void recipe(const char *title, const char *path, const char **base, int nbase, const char *const *variants, int nvar,
                   int min1, int min2, int n4, int nrope, int nstore, int nnorm) {
  Run on;
  CHECK(load(&on, path, base, nbase) == 0, "%s: load", title);
  check_launches(&on, title);
  print(&on, title);
  CHECK(on.n[1] >= min1 && on.n[2] >= min2, "%s: fewer pairs than expected", title);
  CHECK(on.n[4] == n4, "%s: %d elementwise chains, expected %d", title, on.n[4], n4);
  CHECK(on.n[FUSE_ROPE_QKV] == nrope, "%s: %d QKV RoPE groups, expected %d", title, on.n[FUSE_ROPE_QKV], nrope);
  CHECK(on.n[FUSE_WGRAD_STORE] == nstore, "%s: %d stored weight gradients, expected %d", title, on.n[FUSE_WGRAD_STORE], nstore);
  CHECK(on.n[FUSE_NORM_BWD_ADD] == nnorm, "%s: %d norm backward + ADD pairs, expected %d", title, on.n[FUSE_NORM_BWD_ADD], nnorm);
  int nlce = 0;
  for (int o = 0; o < on.p.g->nop; o++) nlce += on.p.g->op[o].kind == OP_LINEAR_CROSS_ENTROPY;
  CHECK(on.n[FUSE_LOSS_BWD] == nlce, "%s: %d chunked losses fused of %d", title, on.n[FUSE_LOSS_BWD], nlce);
  CHECK(nlce == (strstr(title, "chunks") || !strcmp(title, "bench_m")), "%s: %d chunked output layers", title, nlce);
  CHECK(straddles(&on, 0) == 0, "%s: a bit-changing pair straddles a scope instance", title);
  for (int v = 0; v < nvar; v++) {
    const char *kv[16];
    int n = 0;
    for (int i = 0; i < nbase; i++) kv[n++] = base[i];
    char buf[512], *save = NULL;
    snprintf(buf, sizeof buf, "%s", variants[v]);
    for (char *t = strtok_r(buf, " ", &save); t && n < 16; t = strtok_r(NULL, " ", &save)) kv[n++] = t;
    Run r;
    char name[600];
    snprintf(name, sizeof name, "%s %s", title, variants[v]);
    if (load(&r, path, kv, n) != 0) {
      CHECK(0, "%s: load", name);
      continue;
    }
    check_launches(&r, name);
    print(&r, name);
    CHECK(r.n[FUSE_ROPE_QKV] >= nrope, "%s: %d QKV RoPE groups, fewer than without the variant", name, r.n[FUSE_ROPE_QKV]);
    CHECK(r.n[FUSE_WGRAD_STORE] == nstore, "%s: %d stored weight gradients, expected %d", name, r.n[FUSE_WGRAD_STORE], nstore);
    same_forward(&on, &r, name);
    int s0 = straddles(&r, 0), s3 = straddles(&r, 3);
    CHECK(s0 == 0, "%s: %d bit-changing pairs straddle a scope instance", name, s0);
    if (s3) printf("  %d ADD+norm pairs cross a scope-instance boundary (bit-identical to the two kernels)\n", s3);
    unload(&r);
  }
  unload(&on);
}

int main(int argc, char **argv) {
  if (argc > 2 && !strcmp(argv[1], "--dump")) {
    Run r;
    if (load(&r, argv[2], (const char **)argv + 3, argc - 3) != 0) return 2;
    graph_dump(r.p.g, stdout);
    return 0;
  }
  if (argc > 1) {
    Run r;
    if (load(&r, argv[1], (const char **)argv + 2, argc - 2) != 0) return 2;
    check_launches(&r, argv[1]);
    print(&r, argv[1]);
    const Graph *g = r.p.g;
    for (int o = 0; o < g->nop; o++) {
      int peer, k = rt_exec_fusion(r.x, o, &peer);
      if (k) printf("  %4d %-10s <- %4d %-10s %-8s %s\n", o, op_name(g->op[o].kind), peer, op_name(g->op[peer].kind),
                    phase_name(g->op[o].tags.phase), g->op[o].tags.module);
    }
    unload(&r);
    return failures ? 1 : 0;
  }
  const char *bf16[] = {"model.bf16=true"}, *whole[] = {"model.output_layer_chunks=1"};
  const char *chunks4[] = {"model.output_layer_chunks=4"}, *gpt3_chunks[] = {"model.bf16=true", "model.output_layer_chunks=2"};
  static const char *const gpt3_var[] = {
      "model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1",
      "model.recompute_granularity=selective model.recompute_modules=[core_attn,mlp,layernorm]",
      "model.cuda_graph_impl=transformer_engine",
      "model.cuda_graph_impl=transformer_engine model.cuda_graph_modules=[attn,mlp]",
      "model.cuda_graph_impl=local",
  };
  recipe("gpt3_tiny bf16", "tests/recipes/gpt3_tiny.lua", bf16, 1, gpt3_var, 5, 0, 4, 4, 0, 0, 0);
  static const char *const tiny_var[] = {
      "model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1",
      "model.recompute_granularity=full model.recompute_method=block model.recompute_num_layers=2",
      "model.recompute_granularity=selective model.recompute_modules=[core_attn,mlp,layernorm]",
      "model.cuda_graph_impl=transformer_engine model.cuda_graph_modules=[attn]",
  };
  recipe("tiny", "models/tiny.lua", NULL, 0, tiny_var, 4, 8, 0, 0, 8, 0, 8);
  /* one micro-batch a step: every linear weight gradient (4 a layer and the output layer's) stores
   * into its main gradient and that gradient's ZERO is skipped, under recompute and scoped graphs */
  const char *one_micro[] = {"train.global_batch_size=4"};
  recipe("tiny, one micro-batch", "models/tiny.lua", one_micro, 1, tiny_var, 4, 8, 0, 0, 8, 17, 8);
  /* its output layer runs in 8 chunks (model.output_layer_chunks null: 2 x 4096 tokens x 128256
   * bf16 logits is 2 GB): its weight gradient adds into the main gradient chunk by chunk */
  recipe("bench_m", "models/bench_m.lua", NULL, 0, NULL, 0, 32, 0, 0, 32, 64, 32);
  recipe("bench_m, output layer whole", "models/bench_m.lua", whole, 1, NULL, 0, 32, 0, 0, 32, 65, 32);
  /* chunked output layers on the small recipes, tied (gpt3_tiny) and untied (tiny), under
   * recompute and scoped graphs */
  recipe("tiny, 4 output chunks", "models/tiny.lua", chunks4, 1, tiny_var, 4, 8, 0, 0, 8, 0, 8);
  recipe("gpt3_tiny bf16, 2 output chunks", "tests/recipes/gpt3_tiny.lua", gpt3_chunks, 2, gpt3_var, 5, 0, 4, 4, 0, 0, 0);
  if (failures) fprintf(stderr, "%d failures\n", failures);
  return failures ? 1 : 0;
}
