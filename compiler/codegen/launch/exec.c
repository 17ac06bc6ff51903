/* exec.c — the launch lowering (see exec.h): storage, the compiler's fusions, the launch scratch,
 * the dispatch table and the order ops are lowered in. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/launch/exec_internal.h"
#include "codegen/launch/launchers.h"

/* op kind -> launches, gathered from the families' rows (op_*.c: an op's launch and its row live
 * in one file); NULL = not run on CUDA yet (rt_exec_new reports it). */
static const RtOpRow *const FAMILIES[] = {RT_OPS_ATTN_LOSS, RT_OPS_ATTN_UNFUSED, RT_OPS_BASIC,
                                          RT_OPS_DENSE,     RT_OPS_FP8,          RT_OPS_MAMBA,
                                          RT_OPS_MOE,       RT_OPS_OPTIM,        RT_OPS_TP};
static RtOpFn DISPATCH[OP_COUNT];

static void dispatch_init(void) {
  static int done;
  if (done) return;
  for (size_t f = 0; f < sizeof FAMILIES / sizeof FAMILIES[0]; f++)
    for (const RtOpRow *r = FAMILIES[f]; r->kind != OP_COUNT; r++)
      DISPATCH[r->kind] = r->run;
  done = 1;
}

CUdeviceptr rt_exec_ptr(const RtExec *x, int tensor) {
  const Tensor *t = &x->g->t[x->fz->alias[tensor]];
  return x->arena + (CUdeviceptr)(x->buf_base[t->buffer] + t->offset);
}

int64_t rt_exec_arena_bytes(const RtExec *x) { return x->arena_bytes; }
CUdeviceptr rt_exec_base(const RtExec *x, int which) {
  return which == 0 ? x->arena : which == 1 ? x->scratch : 0;
}

uint64_t rt_exec_layout_hash(const RtExec *x) {
  const Graph *g = x->g;
  int64_t head[4] = {x->arena_bytes, x->scratch_bytes, g->nbuffers, g->nt};
  uint64_t h = ir_fnv1a(IR_FNV_OFFSET, head, sizeof head);
  h = ir_fnv1a(h, x->buf_base, (size_t)g->nbuffers * sizeof x->buf_base[0]);
  for (int i = 0; i < g->nt; i++) {
    /* the nominal size, not the held one: a distributed optimizer's rank holds only its own masters
     * and moments (0 bytes for the others' at the owners' offsets), and the program is the same for all */
    int64_t v[5] = {g->t[i].buffer, g->t[i].offset,
                    tensor_numel(&g->t[i]) * (int64_t)dtype_size(g->t[i].dtype), x->fz->alias[i],
                    x->fz->sink[i]};
    h = ir_fnv1a(h, v, sizeof v);
  }
  h = ir_fnv1a(h, x->fz->skip, (size_t)g->nop);
  h = ir_fnv1a(h, x->fz->fuse, (size_t)g->nop);
  h = ir_fnv1a(h, x->fz->amax, (size_t)g->nop * sizeof x->fz->amax[0]);
  for (int c = 0; c < x->fz->nchain; c++)
    h = ir_fnv1a(h, &x->fz->chain[c], sizeof x->fz->chain[c]);
  return ir_fnv1a(h, x->fz->peer, (size_t)g->nop * sizeof x->fz->peer[0]);
}
int64_t rt_exec_scratch_bytes(const RtExec *x) { return x->scratch_bytes; }

void rt_exec_free(RtExec *x) {
  if (!x) return;
  rt_free(x->d, x->arena, (size_t)(x->arena_bytes + x->scratch_bytes));
  free(x->attn_cudnn), free(x->slot), free(x->dloss);
  free(x->multi_at), free(x->multi_chunks), free(x->multi_host);
  free(x->tmap), free(x->tmap_of);
  free(x);
}

/* The chain ending at op o: one launch of its generated kernel, the arguments in ew_fuse.h's order.
 * Built by hand, unlike the static kernels' (launchers.h): a chain kernel's parameters are made per
 * step, so there is no table row to generate a launcher from. */
static int run_chain(RtExec *x, int o) {
  const Graph *g = x->g;
  const EwChain *c = NULL;
  for (int i = 0; i < x->fz->nchain && !c; i++)
    if (x->fz->chain[i].first == x->fz->peer[o]) c = &x->fz->chain[i];
  if (!c) return rt_fail(x->d, "op %d: no elementwise chain ends here", o);
  CUdeviceptr ptr[EW_MAX_CHAIN + EW_MAX_IO + EW_MAX_CHAIN];
  float fv[EW_MAX_CHAIN];
  unsigned uv[EW_MAX_CHAIN];
  void *args[2 * EW_MAX_CHAIN + EW_MAX_IO + 1 + 3 * EW_MAX_CHAIN];
  int na = 0, np = 0;
  for (int j = 0; j < c->nops; j++)
    if (c->store[j]) ptr[np] = rt_exec_ptr(x, g->op[c->op[j]].out[0]), args[na++] = &ptr[np++];
  for (int m = 0; m < c->nin; m++)
    ptr[np] = rt_exec_ptr(x, c->in[m]), args[na++] = &ptr[np++];
  long n = (long)tensor_numel(&g->t[g->op[c->first].out[0]]);
  args[na++] = &n;
  for (int j = 0; j < c->nops; j++) {
    const Op *op = &g->op[c->op[j]];
    for (const char *s = c->scalars[j]; *s; s++) {
      if (*s == 'f') /* a dropout's p: 0 in an evaluation */
        fv[j] = op->kind == OP_DROPOUT ? rt_dropout_p(x, op) : (float)op->a.f[0], args[na++] = &fv[j];
      else if (*s == 'S')
        ptr[np] = x->seed_cur, args[na++] = &ptr[np++];
      else
        uv[j] = (unsigned)op->a.i[0], args[na++] = &uv[j];
    }
  }
  return rt_launch(x->d, (RtKernel)(RT_K_COUNT + c->kernel), rt_grid1d(x->d, (n + 3) / 4), 1, 1, 256, 0,
                   args);
}

static int run_op(RtExec *x, const Op *op) {
  int o = rt_op_index(x, op);
  return x->fz->fuse[o] == RT_FUSE_EW ? run_chain(x, o) : DISPATCH[op->kind](x, op);
}

int rt_exec_fusion(const RtExec *x, int op, int *peer) {
  *peer = x->fz->peer[op];
  return x->fz->fuse[op];
}

/* Producers whose weight-gradient kernels only accumulate into an fp32 main gradient. */
static int accumulate_only(OpKind k) {
  return k == OP_LINEAR_BGRAD || k == OP_EMBED_BWD || k == OP_POS_ADD_BWD || k == OP_RMSNORM_BWD ||
         k == OP_LAYERNORM_BWD;
}

/* Checks the compiler's fusions (compiler/passes/fuse.c, RtExec.fz) against the graph and that what is
 * left to launch has a dispatch row. */
static int analyse(RtExec *x, int *unsupported) {
  const Graph *g = x->g;
  const Fusions *fz = x->fz;
  RtDevice *d = x->d;
  for (int t = 0; t < g->nt; t++) {
    int a = fz->alias[t], k = fz->sink[t];
    if (a < 0 || a >= g->nt || k < -1 || k >= g->nt)
      return rt_fail(d, "tensor %s: a fusion names no tensor of the step", g->t[t].name);
  }
  for (int o = 0; o < g->nop; o++) {
    if (fz->fuse[o] >= FUSE_COUNT || fz->peer[o] < -1 || fz->peer[o] >= o + (fz->fuse[o] == FUSE_NONE))
      return rt_fail(d, "op %d (%s): a fusion the executor does not know", o, g->op[o].tags.module);
    x->nfused[fz->fuse[o]]++;
  }
  for (int c = 0; c < fz->nchain; c++)
    if (fz->chain[c].kernel < 0 || !d->gen || fz->chain[c].kernel >= d->gen->n)
      return rt_fail(d, "elementwise chain %d: its kernel %d is not among the step's %d generated kernels", c,
                     fz->chain[c].kernel, d->gen ? d->gen->n : 0);
  int rc = RT_OK;
  for (int o = 0; o < g->nop && rc == RT_OK; o++) {
    const Op *op = &g->op[o];
    /* kernels that only accumulate: every weight-gradient output needs its main gradient */
    if (accumulate_only(op->kind))
      for (int i = op->kind == OP_RMSNORM_BWD || op->kind == OP_LAYERNORM_BWD ? 1 : 0;
           i < op->nout && rc == RT_OK; i++)
        if (x->fz->sink[op->out[i]] < 0)
          rc = rt_fail(d, "%s in %s: its weight gradient %s is not accumulated into an fp32 main gradient",
                       op_name(op->kind), op->tags.module, g->t[op->out[i]].name);
  }
  /* the fused loss: the constant loss gradient of its backward (the kernels divide it by the
   * step's loss denominator, read on the device); the chunked output layer's forward also learns
   * which backward it runs */
  for (int o = 0; o < g->nop && rc == RT_OK; o++) {
    const Op *op = &g->op[o];
    if (op->kind != OP_CROSS_ENTROPY && op->kind != OP_LINEAR_CROSS_ENTROPY) continue;
    for (int b = o + 1; b < g->nop; b++) {
      const Op *bw = &g->op[b];
      if (op->kind == OP_CROSS_ENTROPY
              ? bw->kind != OP_CROSS_ENTROPY_BWD || bw->in[1] != op->in[0] || !fz->skip[b]
              : x->fz->fuse[b] != RT_FUSE_LOSS_BWD || x->fz->peer[b] != o)
        continue;
      if (op->kind == OP_LINEAR_CROSS_ENTROPY) x->slot[o] = b;
      for (int f = 0; f < g->nop; f++)
        if (g->op[f].kind == OP_FILL && g->op[f].nout == 1 && g->op[f].out[0] == bw->in[0])
          x->dloss[o] = (float)g->op[f].a.f[0];
    }
  }
  for (int o = 0; o < g->nop && rc == RT_OK; o++) { /* after the fusions: what is left must have a row */
    const Op *op = &g->op[o];
    if (!x->fz->skip[o] && !DISPATCH[op->kind]) {
      *unsupported = 1;
      rc = rt_fail(d, "op %s (%s) does not run on CUDA yet", op_name(op->kind), op->tags.module);
    } else if ((op->kind == OP_FLASH_ATTN || op->kind == OP_FLASH_ATTN_BWD) && op->a.f[1] > 0) {
      /* the flash kernels draw no dropout mask yet; the unfused backend runs attention dropout as
       * a DROPOUT op on the probabilities */
      *unsupported = 1;
      rc = rt_fail(
          d,
          "op %s (%s): attention dropout inside flash attention (p = %g) is not built on CUDA yet: use "
          "model.attention_backend=unfused or model.attention_dropout=0",
          op_name(op->kind), op->tags.module, op->a.f[1]);
    }
  }
  for (int o = 0; o < g->nop && rc == RT_OK;
       o++) /* a stored weight gradient: a GEMM into its main gradient */
    if (x->fz->fuse[o] == RT_FUSE_WGRAD_STORE &&
        ((g->op[o].kind != OP_LINEAR_WGRAD && g->op[o].kind != OP_GROUPED_LINEAR_WGRAD &&
          g->op[o].kind != OP_FP8_GEMM && g->op[o].kind != OP_GROUPED_FP8_WGRAD) ||
         x->fz->sink[g->op[o].out[0]] < 0))
      rc = rt_fail(d, "op %d (%s): a stored weight gradient on a %s op", o, g->op[o].tags.module,
                   op_name(g->op[o].kind));
  for (int o = 0; o < g->nop && rc == RT_OK; o++) { /* a norm backward summed into the ADD after it */
    if (x->fz->fuse[o] != RT_FUSE_NORM_BWD_ADD) continue;
    const Op *add = &g->op[o], *n = x->fz->peer[o] >= 0 ? &g->op[x->fz->peer[o]] : NULL;
    if (add->kind != OP_ADD || add->nin != 2 || !n ||
        (n->kind != OP_RMSNORM_BWD && n->kind != OP_LAYERNORM_BWD) ||
        (add->in[0] != n->out[0] && add->in[1] != n->out[0]))
      rc = rt_fail(d, "op %d (%s): a norm-backward fusion on a %s op", o, add->tags.module,
                   op_name(add->kind));
  }
  /* multi-tensor groups: their tables' places (written once the arena exists) */
  for (int o = 0; o < g->nop && rc == RT_OK; o++) {
    int64_t chunks = 0;
    if (x->fz->fuse[o] != RT_FUSE_SUMSQ_MULTI && x->fz->fuse[o] != RT_FUSE_ADAMW_MULTI) continue;
    if ((x->fz->fuse[o] == RT_FUSE_SUMSQ_MULTI) != (g->op[o].kind == OP_GRAD_SUMSQ) ||
        (x->fz->fuse[o] == RT_FUSE_ADAMW_MULTI) != (g->op[o].kind == OP_ADAMW) || x->fz->peer[o] < 0)
      rc = rt_fail(d, "op %d (%s): a multi-tensor fusion on a %s op", o, g->op[o].tags.module,
                   op_name(g->op[o].kind));
    else if ((rc = rt_multi_rows(x, o, NULL, &chunks)) == RT_OK) {
      x->multi_at[o] = x->multi_words;
      x->multi_chunks[o] = chunks;
      x->multi_words += (int64_t)(o - x->fz->peer[o] + 1) * (g->op[o].kind == OP_GRAD_SUMSQ ? 4 : 8);
    }
  }
  /* global-norm slices (the ops that run) and AdamW hyper-parameter slots */
  float hpk[RT_MAX_HP][3];
  int nhp = 0;
  /* 2 per SM of the device the program is lowered for (stepc build --sms): the scratch is sized
   * at build time, and a program plays the same on any GPU (its kernels are grid-stride) */
  x->gn_groups = 2 * (d->sm_count > 0 ? d->sm_count : 132);
  int64_t npart = 0;
  for (int o = 0; o < g->nop && rc == RT_OK; o++) {
    const Op *op = &g->op[o];
    if (x->fz->skip[o]) continue;
    if (op->kind == OP_GRAD_SUMSQ) {
      x->slot[o] = (int)npart;
      npart += x->multi_at[o] >= 0 ? x->multi_chunks[o] : x->gn_groups;
      if (npart > 0x7fffffff)
        rc = rt_fail(d, "%lld global-norm partials: more than an int counts", (long long)npart);
      x->n_partial = (int)npart;
    }
    if (op->kind != OP_ADAMW) continue;
    float k[3] = {(float)op->a.f[0], (float)op->a.f[1], (float)op->a.f[2]};
    int s = 0;
    while (s < nhp && memcmp(hpk[s], k, sizeof k) != 0)
      s++;
    if (s == nhp) {
      if (nhp == RT_MAX_HP) {
        rc = rt_fail(d, "more than %d AdamW settings", RT_MAX_HP);
        break;
      }
      memcpy(hpk[nhp++], k, sizeof k);
      x->slot[o] = s + RT_MAX_HP; /* first of its slot: computes the values each step */
    } else
      x->slot[o] = s;
  }
  return rc;
}

/* Scratch sizes from the graph's shapes: the parts of the launch scratch (exec.h's RT_SCRATCH_*),
 * laid out after the plan's buffers in the one allocation (rt_exec_new). */
static int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }

static void carve_scratch(RtExec *x) {
  const Graph *g = x->g;
  int64_t maxc = 8, maxrows = 1, maxwork = 4;
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    const Tensor *a = &g->t[op->in[0]];
    if (op->kind == OP_RMSNORM_BWD || op->kind == OP_LAYERNORM_BWD || op->kind == OP_LINEAR_BGRAD) {
      if (ops_last(a) > maxc) maxc = ops_last(a);
      if (ops_rows(a) > maxrows) maxrows = ops_rows(a);
    }
    if (op->kind == OP_FLASH_ATTN_BWD) {
      const Tensor *q = &g->t[op->in[1]];
      int64_t n = q->shape[0] * q->shape[1] * q->shape[2];
      if (4 * n > maxwork) maxwork = 4 * n;
    }
    if (rt_tp_workspace(g, op) > maxwork) maxwork = rt_tp_workspace(g, op);
  }
  /* row groups of the norm and bias gradients' partial sums: 16 rows or more each, at most 512
   * (M's 8192 rows: 512 blocks of the one-pass norm backward, about 4 per SM) */
  x->norm_groups = (int)(maxrows / 16 < 1 ? 1 : maxrows / 16 > 512 ? 512 : maxrows / 16);
  x->nmb = g->num_microbatches > 0 ? g->num_microbatches : 1;
  x->tp = 1;
  for (int t = 0; t < g->nt; t++)
    if (g->t[t].tp_nseg > 0 && !g->t[t].tp_ep && g->t[t].tp_size > x->tp) x->tp = g->t[t].tp_size;
  x->ntok = tensor_numel(&g->t[g->tokens]);
  int64_t *sz = x->scratch_part;
  sz[RT_SCRATCH_NORM] = (int64_t)x->norm_groups * 2 * maxc * 4;
  sz[RT_SCRATCH_GNORM] = (int64_t)(x->n_partial > 0 ? x->n_partial : 1) * 4;
  sz[RT_SCRATCH_WORK] = maxwork;
  sz[RT_SCRATCH_HPARAMS] = RT_MAX_HP * 8 * 4;
  sz[RT_SCRATCH_SEEDS] = (int64_t)x->nmb * 8;
  sz[RT_SCRATCH_LOSSES] = (int64_t)x->nmb * 4;
  sz[RT_SCRATCH_INPUTS] = (int64_t)x->nmb * 2 * x->ntok * 4;
  sz[RT_SCRATCH_SEED_CUR] = 8;
  sz[RT_SCRATCH_TABLES] = x->multi_words * 8;
  sz[RT_SCRATCH_INIT_SEED] = 16; /* the seed, then the rank slots: TP rank, EP rank (int32) */
  sz[RT_SCRATCH_LOSS_DEN] = 4;
  /* the fp8 casts' partials, which a producer folding its output's amax (fusions.h amax) uses too,
   * then one (value, ticket) pair per fused amax */
  x->amax_parts = x->gn_groups;
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    int64_t grouped = rt_fp8_grouped_scratch(x, op); /* a grouped cast's partials and scales */
    if (grouped > x->amax_parts) x->amax_parts = (int)grouped;
    if (x->fz->amax[o] < 0 || op->kind == OP_FP8_QUANT || op->kind == OP_LINEAR_FP8) continue;
    int glu = op->kind == OP_SWIGLU || op->kind == OP_GEGLU || op->kind == OP_SWIGLU_BWD ||
              op->kind == OP_GEGLU_BWD;
    /* a norm backward with its residual add runs at the ADD, its peer the norm */
    const Op *n = op->kind == OP_ADD ? &g->op[x->fz->peer[o]] : op;
    unsigned b = glu                         ? rt_glu_blocks(x, op)
                 : op->kind == OP_CONCAT_QKV ? rt_rope_qkv_blocks(x, op)
                 : op->kind == OP_ADAMW      ? rt_adamw_blocks(x, op)
                                             : rt_norm_blocks(x, n);
    if ((int)b > x->amax_parts) x->amax_parts = (int)b;
  }
  sz[RT_SCRATCH_AMAX] = ((int64_t)x->amax_parts + 1) / 2 * 8 + (int64_t)x->fz->namax * 8;
  x->ntmap = 0;
  for (int o = 0; o < g->nop; o++) {
    int n = rt_op_tmaps(x, &g->op[o], NULL);
    x->tmap_of[o] = n ? x->ntmap : -1, x->ntmap += n;
  }
  sz[RT_SCRATCH_TMAPS] = (int64_t)x->ntmap * RT_TMAP_BYTES;
  int64_t total = 0;
  for (int i = 0; i < RT_SCRATCH_PARTS; i++)
    x->scratch_at[i] = total, total += align256(sz[i]);
  x->scratch_bytes = total;
}

/* The scratch's parts at their places, once the allocation exists. */
static void place_scratch(RtExec *x) {
  x->scratch = x->arena + (CUdeviceptr)x->arena_bytes;
  CUdeviceptr s = x->scratch;
  const int64_t *at = x->scratch_at;
  x->norm_partial = s + (CUdeviceptr)at[RT_SCRATCH_NORM];
  x->gn_partial = s + (CUdeviceptr)at[RT_SCRATCH_GNORM];
  x->work = s + (CUdeviceptr)at[RT_SCRATCH_WORK];
  x->hp = s + (CUdeviceptr)at[RT_SCRATCH_HPARAMS];
  x->seeds = s + (CUdeviceptr)at[RT_SCRATCH_SEEDS];
  x->losses = s + (CUdeviceptr)at[RT_SCRATCH_LOSSES];
  x->inputs = s + (CUdeviceptr)at[RT_SCRATCH_INPUTS];
  x->seed_cur = s + (CUdeviceptr)at[RT_SCRATCH_SEED_CUR];
  x->multi_table = s + (CUdeviceptr)at[RT_SCRATCH_TABLES];
  x->init_seed = s + (CUdeviceptr)at[RT_SCRATCH_INIT_SEED];
  x->rank = x->init_seed + 8;
  x->loss_den = s + (CUdeviceptr)at[RT_SCRATCH_LOSS_DEN];
  x->amax_partial = s + (CUdeviceptr)at[RT_SCRATCH_AMAX];
  x->amax_slot = x->amax_partial + (CUdeviceptr)(((int64_t)x->amax_parts + 1) / 2 * 8);
  x->tmaps = s + (CUdeviceptr)at[RT_SCRATCH_TMAPS];
}

int rt_exec_refuse(RtExec *x, const char *fmt, ...) {
  char msg[sizeof x->d->err];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  x->refused = 1;
  return rt_fail(x->d, "%s", msg);
}

int rt_exec_refused(const RtExec *x) { return x->refused; }

int rt_op_tmaps(const RtExec *x, const Op *op, RtTmap *t) {
  int n = rt_moe_tmaps(x, op, t);
  return n ? n : rt_fp8_tmaps(x, op, t);
}

CUdeviceptr rt_exec_tmap(const RtExec *x, const Op *op, int i) {
  int first = x->tmap_of[rt_op_index(x, op)];
  return first < 0 ? 0 : x->tmaps + (CUdeviceptr)((int64_t)(first + i) * RT_TMAP_BYTES);
}

/* The TMA tensor maps, from the plan's addresses: encoded to the device by the driver (a recording
 * device keeps the descriptors only: the launch program carries them, and the player encodes and
 * writes them into the scratch at open). */
static int write_tmaps(RtExec *x) {
  if (!x->ntmap) return RT_OK;
  if (!(x->tmap = calloc((size_t)x->ntmap, sizeof *x->tmap))) return rt_fail(x->d, "out of memory");
  for (int o = 0; o < x->g->nop; o++)
    if (x->tmap_of[o] >= 0) rt_op_tmaps(x, &x->g->op[o], x->tmap + x->tmap_of[o]);
  return rt_tmap_write(x->d, x->tmaps, x->tmap, x->ntmap);
}

const RtTmap *rt_exec_tmaps(const RtExec *x, int *n) {
  *n = x->ntmap;
  return x->tmap;
}

CUdeviceptr rt_amax_slot(const RtExec *x, const Op *op) {
  int s = x->solo ? -1 : x->fz->amax[rt_op_index(x, op)];
  return s >= 0 ? x->amax_slot + (CUdeviceptr)(8 * s) : 0;
}

int64_t rt_exec_scratch_part(const RtExec *x, int part, int64_t *at) {
  if (part < 0 || part >= RT_SCRATCH_PARTS) return -1;
  if (at) *at = x->arena_bytes + x->scratch_at[part];
  return x->scratch_part[part];
}

/* The multi-tensor groups' tables, from the plan's addresses, to the device (a recording device
 * keeps the host copy only: the launch program carries it, and the player writes it into the
 * scratch at open). */
static int write_tables(RtExec *x) {
  if (!x->multi_words) return RT_OK;
  if (!(x->multi_host = calloc((size_t)x->multi_words, sizeof *x->multi_host)))
    return rt_fail(x->d, "out of memory");
  int64_t chunks;
  for (int o = 0; o < x->g->nop; o++)
    if (x->multi_at[o] >= 0 && rt_multi_rows(x, o, x->multi_host + x->multi_at[o], &chunks)) return RT_ERROR;
  if (x->d->rec) return RT_OK;
  return rt_copy_h2d(x->d, x->multi_table, x->multi_host, (size_t)x->multi_words * 8);
}

const uint64_t *rt_exec_tables(const RtExec *x, int64_t *words) {
  *words = x->multi_words;
  return x->multi_host;
}

RtExec *rt_exec_new(RtDevice *d, const Graph *g, const Fusions *fz, int *unsupported) {
  *unsupported = 0;
  dispatch_init();
  if (g->nbuffers <= 0) {
    rt_fail(d, "the graph has no memory plan");
    return NULL;
  }
  if (fz->nop != g->nop || fz->nt != g->nt) {
    rt_fail(d, "the fusions are another graph's (%d ops, %d tensors; the graph has %d, %d)", fz->nop, fz->nt,
            g->nop, g->nt);
    return NULL;
  }
  /* a bf16 recipe may keep single weights in fp32 (the MoE router's, as Megatron does); an fp32
   * recipe does not run on CUDA */
  int bf16_params = 0;
  for (int i = 0; i < g->nt; i++)
    bf16_params += g->t[i].role == ROLE_PARAM && g->t[i].dtype == DT_BF16;
  for (int i = 0; i < g->nt; i++) {
    const Tensor *t = &g->t[i];
    /* a weight gradient sunk into its main gradient has no bytes (memplan.c): nothing writes it */
    int64_t want = fz->sink[i] >= 0 ? 0 : tensor_numel(t) * (int64_t)dtype_size(t->dtype);
    /* 0 bytes: another rank's master or moment (the distributed optimizer's region): not held here */
    bool away = t->bytes == 0 && t->buffer == 1;
    if (t->buffer < 0 || t->buffer >= g->nbuffers || (t->bytes != want && !away) || t->offset < 0 ||
        t->offset % 16 || t->offset + t->bytes > g->buffer_bytes[t->buffer]) {
      rt_fail(d,
              "tensor %s: the plan's (buffer %d, offset %lld, %lld bytes) is not a 16-byte-aligned slot at "
              "its nominal "
              "dtype size",
              t->name, t->buffer, (long long)t->offset, (long long)t->bytes);
      return NULL;
    }
    if (dtype_is_float(t->dtype) && t->dtype != DT_F32 && t->dtype != DT_BF16 && t->dtype != DT_F8E4M3 &&
        t->dtype != DT_F8E5M2) {
      *unsupported = 1;
      rt_fail(d, "tensor %s is %s: the CUDA backend runs bf16, fp32 and fp8 tensors", t->name,
              dtype_name(t->dtype));
      return NULL;
    }
    if (t->role == ROLE_PARAM && t->dtype != DT_BF16 && !(t->dtype == DT_F32 && bf16_params)) {
      *unsupported = 1;
      rt_fail(d, "parameter %s is %s: the CUDA backend runs bf16 recipes (model.bf16=true)", t->name,
              dtype_name(t->dtype));
      return NULL;
    }
  }
  RtExec *x = calloc(1, sizeof *x);
  if (!x) {
    rt_fail(d, "out of memory");
    return NULL;
  }
  x->d = d;
  x->g = g;
  x->fz = fz;
  x->attn_cudnn = calloc((size_t)g->nop + 1, 1);
  x->slot = calloc((size_t)g->nop + 1, sizeof *x->slot);
  x->dloss = calloc((size_t)g->nop + 1, sizeof *x->dloss);
  x->multi_at = malloc(((size_t)g->nop + 1) * sizeof *x->multi_at);
  x->multi_chunks = calloc((size_t)g->nop + 1, sizeof *x->multi_chunks);
  x->tmap_of = calloc((size_t)g->nop + 1, sizeof *x->tmap_of);
  if (!x->attn_cudnn || !x->slot || !x->dloss || !x->multi_at || !x->multi_chunks || !x->tmap_of) {
    rt_fail(d, "out of memory");
    rt_exec_free(x);
    return NULL;
  }
  for (int o = 0; o <= g->nop; o++)
    x->multi_at[o] = -1;
  int64_t total = 0;
  for (int b = 0; b < g->nbuffers; b++)
    x->buf_base[b] = total, total += align256(g->buffer_bytes[b]);
  x->arena_bytes = total;
  if (analyse(x, unsupported)) {
    rt_exec_free(x);
    return NULL;
  }
  carve_scratch(x);
  /* one allocation: the plan's buffers, then the launch scratch */
  if (rt_alloc(d, &x->arena, (size_t)(total + x->scratch_bytes), "the plan's arena and launch scratch") ||
      (place_scratch(x), rt_memset0(d, x->scratch, (size_t)x->scratch_bytes)) || write_tables(x) ||
      write_tmaps(x) || rt_attn_resolve(x, unsupported)) {
    rt_exec_free(x);
    return NULL;
  }
  return x;
}

/* ---- running ---- */

int rt_exec_op_runs(const RtExec *x, int op) {
  return !x->fz->skip[op] && DISPATCH[x->g->op[op].kind] != NULL;
}

/* Micro-batch mb's staged tokens (B*T int32), its targets right after. */
static CUdeviceptr inputs_of(const RtExec *x, int mb) {
  return x->inputs + (CUdeviceptr)((int64_t)mb * 2 * x->ntok * 4);
}

int rt_exec_micro_begin(RtExec *x, int micro) {
  const Graph *g = x->g;
  RtDevice *d = x->d;
  CUdeviceptr in = inputs_of(x, micro);
  return rt_copy_d2d(d, rt_exec_ptr(x, g->tokens), in, (size_t)x->ntok * 4) ||
                 rt_copy_d2d(d, rt_exec_ptr(x, g->targets), in + (CUdeviceptr)(x->ntok * 4),
                             (size_t)x->ntok * 4) ||
                 rt_copy_d2d(d, x->seed_cur, x->seeds + (CUdeviceptr)(8 * micro), 8)
             ? RT_ERROR
             : RT_OK;
}

int rt_exec_micro_end(RtExec *x, int micro) {
  return rt_copy_d2d(x->d, x->losses + (CUdeviceptr)(micro * 4), rt_exec_ptr(x, x->g->loss), 4);
}

/* ---- initialisation, as cpu_exec_init_params ---- */

int rt_exec_init_master(const RtExec *x, int i) {
  const Graph *g = x->g;
  /* an fp32 parameter is its own master (the MoE router's; model.fp8_param's primary weights, which
   * the distributed optimizer keeps in its optimizer-state region) */
  if (g->t[i].dtype == DT_F32) return i;
  /* every master, the ones other ranks of the distributed optimizer hold too: the program names it
   * (LpInitMaster) and such a rank plays the launch without it (runtime/program.h lp_init_rec) */
  int master = -1;
  for (int j = 0; j < g->nt; j++)
    if (g->t[j].role == ROLE_MASTER && g->t[j].of == i) master = j;
  return master;
}

int rt_exec_init_zero(RtExec *x) {
  return rt_memset0(x->d, x->arena, (size_t)x->arena_bytes); /* the plan's buffers, not the scratch */
}

int rt_exec_init_param(RtExec *x, int i) {
  const Graph *g = x->g;
  RtDevice *d = x->d;
  const Tensor *t = &g->t[i];
  if (t->role != ROLE_PARAM || t->init == IR_INIT_NONE || t->init == IR_INIT_ZEROS) return RT_OK;
  int master = rt_exec_init_master(x, i), fp32 = t->dtype == DT_F32;
  CUdeviceptr f32 = master >= 0 ? rt_exec_ptr(x, master) : 0, b16 = fp32 ? 0 : rt_exec_ptr(x, i);
  long n = (long)tensor_numel(t);
  if (t->init != IR_INIT_ONES && t->tp_nseg > 0) { /* a shard: each element at its one-rank place */
    long inner = 1, seg[IR_TP_MAX_SEGS] = {0};
    int rep[IR_TP_MAX_SEGS] = {0};
    int64_t full[IR_MAX_DIMS];
    tensor_tp_full_shape(t, full);
    for (int k = t->tp_dim + 1; k < t->ndim; k++)
      inner *= (long)t->shape[k];
    for (int k = 0; k < t->tp_nseg && k < IR_TP_MAX_SEGS; k++)
      seg[k] = (long)t->tp_seg[k], rep[k] = tensor_tp_rep(t, k);
    return rt_launch_init_normal_tp(d, rt_grid_stride(d, n), 256, 0, f32, b16, n, x->init_seed,
                                    ops_init_name_hash(t->name), t->init_std, inner,
                                    (long)t->shape[t->tp_dim], (long)full[t->tp_dim], t->tp_size, t->tp_nseg,
                                    seg[0], seg[1], seg[2], seg[3], seg[4], rep[0], rep[1], rep[2], rep[3],
                                    rep[4], x->rank + (t->tp_ep ? 4 : 0))
               ? RT_ERROR
               : RT_OK;
  }
  int rc = t->init == IR_INIT_ONES
               ? rt_launch_init_ones(d, rt_grid_stride(d, n), 256, 0, f32, b16, n)
               /* the key is the CPU executor's ops_init_key(seed, name), made on the device from the seed
                  slot */
               : rt_launch_init_normal(d, rt_grid_stride(d, n), 256, 0, f32, b16, n, x->init_seed,
                                       ops_init_name_hash(t->name), t->init_std);
  return rc ? RT_ERROR : RT_OK;
}

/* ---- one op at a time (program.c lowers them in the program's order; tests/unit too) ---- */

int rt_exec_run_op(RtExec *x, int o) {
  if (o < 0 || o >= x->g->nop) return rt_fail(x->d, "op %d is not in the step", o);
  const Op *op = &x->g->op[o];
  if (x->fz->skip[o]) return RT_OK; /* fused into a neighbour (see analyse) */
  if (run_op(x, op) != RT_OK) {
    char msg[sizeof x->d->err];
    snprintf(msg, sizeof msg, "%s", x->d->err);
    rt_clear_error(x->d);
    return rt_fail(x->d, "op %d %s in %s: %s", o, op_name(op->kind), op->tags.module, msg);
  }
  return RT_OK;
}

/* ---- the evaluation's lowering (exec.h) ---- */

void rt_exec_set_eval(RtExec *x, int on) { x->eval = on != 0; }
void rt_exec_set_solo(RtExec *x, int on) { x->solo = on != 0; }
void rt_exec_set_comm_side(RtExec *x, int on) { x->comm_side = on != 0; }

int rt_exec_eval_refusal(const RtExec *x, char *why, size_t nwhy) {
  const Graph *g = x->g;
  const Fusions *fz = x->fz;
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    int fwd = op->tags.phase == IR_PHASE_FORWARD, p = fz->peer[o];
    if (fwd) {
      Op e = *op;
      if (op_for_eval(&e) != 0)
        return snprintf(why, nwhy, "op %d %s (%s) draws random numbers an evaluation cannot turn off", o,
                        op_name(op->kind), op->tags.module);
      for (int i = 0; i < op->nout; i++)
        if (role_is_persistent(g->t[op->out[i]].role))
          return snprintf(why, nwhy, "forward op %d %s (%s) writes %s", o, op_name(op->kind), op->tags.module,
                          g->t[op->out[i]].name);
    }
    /* a group run by op o: every op of it must be of o's phase, but the loss's fused backward */
    if (p < 0 || fz->fuse[o] == RT_FUSE_NONE || fz->skip[o]) continue;
    for (int k = p; k < o; k++) {
      if (!fz->skip[k] || fz->peer[k] > o) continue;
      int kf = g->op[k].tags.phase == IR_PHASE_FORWARD;
      if (kf != fwd)
        return snprintf(why, nwhy, "%s op %d %s (%s) runs in the launch of %s op %d %s",
                        kf ? "forward" : "backward", k, op_name(g->op[k].kind), g->op[k].tags.module,
                        fwd ? "forward" : "backward", o, op_name(op->kind));
    }
  }
  for (int b = 0; b < g->nop; b++) /* FUSE_LOSS_BWD: the backward is skipped, its forward runs it */
    if (fz->fuse[b] == RT_FUSE_LOSS_BWD &&
        (fz->peer[b] < 0 || g->op[fz->peer[b]].kind != OP_LINEAR_CROSS_ENTROPY))
      return snprintf(why, nwhy,
                      "op %d %s: its backward fused into a forward launch an evaluation does not lower", b,
                      op_name(g->op[b].kind));
  return 0;
}
