/* zero_play DIR WORLD [unmasked] — the distributed optimizer's (ZeRO-1) collectives on cuda, checked for
 * every rank of a job of WORLD ranks without a GPU: each rank's plan (runtime/zero_coll.h, what
 * runtime/api_cuda_dp.c plays through NCCL or the host-staged communicator) is built from DIR's
 * step.img, then every rank's copies and collectives are simulated over host copies of its
 * allocation, the collectives' members matched by group (data-parallel: the ranks of one TP rank;
 * expert-data-parallel: the ranks of one EP rank, stride EP) and summed in member order as the
 * host-staged backend does:
 *
 *  - every group's members issue the same collectives (op, type, group, count, divisor) in the same
 *    order;
 *  - the buckets: each gradient a rank owns (its data-parallel member index, or for an expert its
 *    expert-data-parallel index, = the image's owner — the memory plan's shard) ends as the sum over
 *    its group in member order / DP, bitwise the CPU device's reduce-scatter; every other byte of the
 *    allocation is unchanged; each bucket gradient is received by exactly one member of each group,
 *    and a rank receives exactly the gradients whose AdamW it runs and whose state its region holds;
 *  - the norm: every GRAD_SUMSQ slice ends as its owner's partial on every rank;
 *  - the params: every bucket param ends as its owner's bytes on every rank (an fp8 primary weight's
 *    fp8 data, transpose and scale_inv where its fp32 master stays on its owner: model.fp8_param);
 *  - the staging: the memory plan's arena slot (ImgFacts.zero_stage_at / zero_stage_bytes) holds what
 *    every rank's zc_plan needs, and the simulation runs in it (a staging over a gradient or param the
 *    movement reads would show as a wrong gradient or param).
 *  - the initialisation (runtime/cuda/player.c rt_player_init): each rank's init records as it plays
 *    them (runtime/program.h lp_init_rec, the runtime's own rule, with the masters the rank holds:
 *    runtime/api_cuda.c hold_masters), each launch's writes modelled from its arguments (the f32
 *    range [f32, f32 + 4n) and the bf16 range [b16, b16 + 2n) of init_normal / init_normal_tp /
 *    init_ones): no write lands on a tensor of the optimizer-state region this rank holds other than
 *    the write's own master; every master the rank holds whose param is initialised (an fp32 param is
 *    its own: model.fp8_param's primary weights live in the region under ZeRO-1) is written
 *    exactly once, whole, by its own param's launch; no master it does not hold is written; every
 *    bf16 param initialised is written exactly once, whole, on every rank. With a third argument
 *    `unmasked` every rank plays every record as recorded (lp_init_rec without the held masters: the
 *    program before the fix), which must fail this check wherever another rank holds a master.
 * Prints one line a rank (its reduce-scatters, all-gathers, norm exchanges, staging) and exits 0,
 * or 1 with FAIL lines. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/image.h"
#include "runtime/zero_coll.h"

static int fails;
#define FAIL(...) (printf("FAIL " __VA_ARGS__), printf("\n"), fails++)

typedef struct {
  int tp_rank, ep_rank, dp_member, edp_member;
  ZcPlan p;
  unsigned char *mem, *orig; /* the allocation (the staging is the plan's arena slot) */
} Rank;

static int64_t alloc_bytes, stage_at, stage_bytes;

static unsigned char *at(Rank *r, CUdeviceptr a) { return r->mem + a; }
static int64_t tensor_at(const StepImage *im, int t) { return im->lp.tensor_at[t]; }

/* group g's key of rank r (the members share it) and r's index there */
static int key_of(const Rank *r, int64_t g) { return g == RT_COLL_GROUP_EDP ? r->ep_rank : r->tp_rank; }
static int member_of(const Rank *r, int64_t g) {
  return g == RT_COLL_GROUP_EDP ? r->edp_member : r->dp_member;
}

static void copies(const StepImage *im, Rank *r, const ZcPart *pt, int pack) {
  for (int j = 0; j < (pack ? pt->npack : pt->nunpack); j++) {
    const ZcPiece *x = &r->p.piece[(pack ? pt->pack : pt->unpack) + j];
    unsigned char *t = at(r, (CUdeviceptr)tensor_at(im, x->tensor)),
                  *s = at(r, (CUdeviceptr)(stage_at + x->at));
    memmove(pack ? s : t, pack ? t : s, (size_t)x->bytes);
  }
}

/* Collective c as issued by every rank (cs[r], addresses in each rank's memory): simulated per group. */
static void simulate(Rank *rk, int world, const RtColl *cs, const char *what) {
  for (int r = 0; r < world; r++) {
    const RtColl *c = &cs[r];
    int mine = member_of(&rk[r], c->group), size = 0;
    int mem[64];
    for (int o = 0; o < world; o++)
      if (key_of(&rk[o], c->group) == key_of(&rk[r], c->group) && cs[o].group == c->group)
        mem[member_of(&rk[o], c->group)] = o, size++;
    for (int o = 0; o < size; o++) {
      const RtColl *d = &cs[mem[o]];
      if (d->op != c->op || d->dtype != c->dtype || d->count != c->count || d->div != c->div)
        FAIL("%s: rank %d and rank %d (members of one group) issue different collectives", what, r, mem[o]);
    }
    size_t es = c->dtype == RT_COLL_BF16 ? 2 : 4, n = (size_t)c->count;
    unsigned char *dst = malloc(n * es * (size_t)size + 1);
    if (c->op == RT_COLL_REDUCE_SCATTER || c->op == RT_COLL_ALLREDUCE_SUM) {
      size_t off = c->op == RT_COLL_REDUCE_SCATTER ? (size_t)mine * n : 0;
      for (size_t i = 0; i < n; i++) {
        float acc = 0;
        for (int o = 0; o < size; o++) {
          float v;
          memcpy(&v, rk[mem[o]].orig + cs[mem[o]].src + (off + i) * 4, 4);
          acc = o == 0 ? v : acc + v;
        }
        if (c->div > 1) acc /= (float)c->div;
        memcpy(dst + i * 4, &acc, 4);
      }
      memcpy(rk[r].mem + c->dst, dst, n * 4);
    } else if (c->op == RT_COLL_ALL_GATHER) {
      for (int o = 0; o < size; o++)
        memcpy(dst + (size_t)o * n * es, rk[mem[o]].orig + cs[mem[o]].src, n * es);
      memcpy(rk[r].mem + c->dst, dst, (size_t)size * n * es);
    } else
      FAIL("%s: op %lld", what, (long long)c->op);
    free(dst);
  }
}

/* every rank's memory as the collectives' inputs (they read what every rank had before) */
static void snapshot(Rank *rk, int world, int64_t bytes) {
  for (int r = 0; r < world; r++)
    memcpy(rk[r].orig, rk[r].mem, (size_t)bytes);
}

static float fget(const unsigned char *p) {
  float v;
  memcpy(&v, p, 4);
  return v;
}

/* ---- the initialisation ---- */

/* Does rank r (its data-parallel member dp, expert-data-parallel member edp) hold tensor t: runtime/api_dp.c
 * api_dp_absent's negation (a tensor of the optimizer-state region another rank owns is absent). */
static int holds(const StepImage *im, const Rank *r, int t) {
  const Graph *g = im->g;
  if (g->t[t].buffer != 1 || im->owner[t] < 0) return 1;
  return im->owner[t] == (graph_expert_state(g, t) ? r->edp_member : r->dp_member);
}

typedef struct {
  int64_t at, bytes;
  int master; /* the master an f32 write is for (its LpInitMaster row), -1 none */
  int param;  /* the param whose launch it is (-1 unknown) */
  int f32;
} Write;

static int overlaps(int64_t a, int64_t na, int64_t b, int64_t nb) { return a < b + nb && b < a + na; }

/* Rank r's initialisation as it plays it; 0 or the failures found. */
static int check_init(const StepImage *im, const Rank *rk, int r, int unmasked, int *nwrites, int *nskipped) {
  const Graph *g = im->g;
  const LaunchProgram *lp = &im->lp;
  const Rank *x = &rk[r];
  int before = fails, n = 0, cap = 2 * lp->f.init.count + 2;
  uint8_t *held = malloc((size_t)g->nt + 1);
  Write *w = malloc((size_t)cap * sizeof *w);
  for (int t = 0; t < g->nt; t++)
    held[t] = (uint8_t)holds(im, x, t);
  *nskipped = 0;
  for (int i = lp->f.init.first; i < lp->f.init.first + lp->f.init.count; i++) {
    RtRec c;
    *nskipped += lp_init_rec(lp, i, unmasked ? NULL : held, &c);
    if (c.kind == RT_REC_MEMSET) {
      if (i != lp->f.init.first || c.dst != LP_PTR || (int64_t)c.bytes != lp->f.buffers_bytes)
        FAIL("rank %d: init record %d: a memset that is not the leading one of the plan's buffers", r, i);
      continue;
    }
    if (c.kind != RT_REC_LAUNCH ||
        (c.k != RT_K_init_normal && c.k != RT_K_init_ones && c.k != RT_K_init_normal_tp)) {
      FAIL("rank %d: init record %d: kind %d kernel %d, not an init launch", r, i, (int)c.kind, (int)c.k);
      continue;
    }
    int master = -1, param = -1;
    for (int k = 0; k < lp->f.ninit_master; k++)
      if (lp->init_master[k].rec == i) master = lp->init_master[k].tensor;
    uint64_t f32 = c.arg[0], b16 = c.arg[1];
    int64_t numel = (int64_t)c.arg[2];
    if (master >= 0) /* the named master's param (an fp32 param is its own) */
      param = g->t[master].role == ROLE_PARAM ? master : g->t[master].of;
    else /* else the bf16 param the launch writes (the params of the main arena do not share offsets) */
      for (int t = 0; t < g->nt; t++)
        if (g->t[t].role == ROLE_PARAM && g->t[t].buffer != 1 && b16 == (LP_PTR | (uint64_t)lp->tensor_at[t]))
          param = t;
    if (param >= 0 && tensor_numel(&g->t[param]) != numel) param = -1;
    if (param < 0)
      FAIL("rank %d: init record %d: no param of %lld elements it is for", r, i, (long long)numel);
    if (f32) w[n++] = (Write){(int64_t)(f32 & ~LP_PTR), 4 * numel, master, param, 1};
    if (b16) w[n++] = (Write){(int64_t)(b16 & ~LP_PTR), 2 * numel, -1, param, 0};
  }
  /* (1) no write on a region tensor this rank holds, but the write's own master */
  for (int k = 0; k < n; k++)
    for (int t = 0; t < g->nt; t++)
      if (g->t[t].buffer == 1 && held[t] && t != w[k].master && g->t[t].bytes > 0 &&
          overlaps(w[k].at, w[k].bytes, lp->tensor_at[t], g->t[t].bytes)) {
        FAIL("rank %d: the init launch of %s (%s) writes over %s, which this rank holds", r,
             w[k].param >= 0 ? g->t[w[k].param].name : "?",
             w[k].master >= 0 ? g->t[w[k].master].name
             : w[k].f32       ? "its fp32"
                              : "its bf16",
             g->t[t].name);
        break;
      }
  /* (2) every master held whose param is initialised (an fp32 param: itself, model.fp8_param's primary
   * weights in the region under ZeRO-1) written once, whole, by its param's launch; (3) none other;
   * and every initialised bf16 param written once, whole */
  for (int t = 0; t < g->nt; t++) {
    const Tensor *m = &g->t[t];
    int of = m->role == ROLE_MASTER ? m->of : m->role == ROLE_PARAM && m->dtype == DT_F32 ? t : -1;
    if (of >= 0) {
      const Tensor *p = &g->t[of];
      int last = of; /* the param's master: its last (compiler/codegen/launch/exec.c rt_exec_init_master) */
      for (int j = 0; j < g->nt && p->dtype != DT_F32; j++)
        if (g->t[j].role == ROLE_MASTER && g->t[j].of == of) last = j;
      int init = p->init != IR_INIT_NONE && p->init != IR_INIT_ZEROS && last == t;
      int whole = 0, any = 0;
      for (int k = 0; k < n; k++) {
        if (!w[k].f32 || w[k].master != t) continue;
        any++;
        whole += w[k].param == of && w[k].at == lp->tensor_at[t] && w[k].bytes == 4 * tensor_numel(m);
      }
      if (held[t] && init && (any != 1 || whole != 1))
        FAIL("rank %d: master %s (held here) written %d time(s), %d whole by %s's launch", r, m->name, any,
             whole, p->name);
      if (!held[t] && any) FAIL("rank %d: master %s (another rank's) written %d time(s)", r, m->name, any);
      if (held[t] && !init && any) FAIL("rank %d: master %s of an uninitialised param written", r, m->name);
    }
    if (m->role == ROLE_PARAM && m->dtype != DT_F32 && m->init != IR_INIT_NONE && m->init != IR_INIT_ZEROS) {
      int whole = 0, any = 0;
      for (int k = 0; k < n; k++)
        if (!w[k].f32 && overlaps(w[k].at, w[k].bytes, lp->tensor_at[t], m->bytes))
          any++, whole += w[k].param == t && w[k].at == lp->tensor_at[t] && w[k].bytes == 2 * tensor_numel(m);
      if (any != 1 || whole != 1)
        FAIL("rank %d: bf16 param %s written %d time(s), %d whole", r, m->name, any, whole);
    }
  }
  for (int k = 0; k < n; k++) /* every fp32 write names its master */
    if (w[k].f32 && w[k].master < 0)
      FAIL("rank %d: an init launch writes fp32 at A+0x%llx that no LpInitMaster row names", r,
           (unsigned long long)w[k].at);
  *nwrites = n;
  free(held), free(w);
  return fails - before;
}

int main(int argc, char **argv) {
  /* every line out before an exit that skips stdio's flush (a sanitizer's leak report) */
  setvbuf(stdout, NULL, _IOLBF, 0);
  int unmasked = argc == 4 && strcmp(argv[3], "unmasked") == 0;
  if (argc != 3 && !unmasked) return fprintf(stderr, "usage: zero_play DIR WORLD [unmasked]\n"), 2;
  char path[4096], err[512] = "";
  snprintf(path, sizeof path, "%s/%s", argv[1], STEPC_IMAGE_FILE);
  StepImage im;
  if (image_read(path, &im, err, sizeof err) != 0) return fprintf(stderr, "zero_play: %s\n", err), 1;
  int world = atoi(argv[2]);
  if (!im.has_program || !im.f.dist_opt || !im.owner || world < 1 || world > 64)
    return fprintf(stderr, "zero_play: %s has no launch program, no distributed optimizer, or WORLD is bad\n",
                   argv[1]),
           1;
  const Graph *g = im.g;
  int tp = im.f.tp_size > 1 ? im.f.tp_size : 1, ep = im.f.ep_size > 1 ? im.f.ep_size : 1, dp = world / tp;
  alloc_bytes = (im.lp.f.alloc_bytes + 255) / 256 * 256;
  stage_at = im.f.zero_stage_at, stage_bytes = im.f.zero_stage_bytes;
  Rank *rk = calloc((size_t)world, sizeof *rk);
  int64_t total = 0;
  for (int r = 0; r < world; r++) {
    Rank *x = &rk[r];
    x->tp_rank = r % tp, x->ep_rank = r % ep, x->dp_member = r / tp, x->edp_member = r / ep;
    ZcRank zr = {.g = g,
                 .owner = im.owner,
                 .bucket = im.bucket,
                 .nbucket = im.nbucket,
                 .bucket_grad = im.bucket_grad,
                 .dp = dp,
                 .dp_member = x->dp_member,
                 .edp = world / ep,
                 .edp_member = x->edp_member,
                 .ep = ep,
                 .npoints = im.npoints,
                 .nmicro = im.micro_points,
                 .point_op = im.point_op,
                 .point = im.lp.point,
                 .norm_at = (CUdeviceptr)im.lp.f.norm_at,
                 .norm_count = im.lp.f.norm_count};
    if (zc_plan(&zr, &x->p, err, sizeof err)) return fprintf(stderr, "zero_play: rank %d: %s\n", r, err), 1;
    if (r && (x->p.npart != rk[0].p.npart || x->p.params_first != rk[0].p.params_first ||
              x->p.nnorm != rk[0].p.nnorm))
      FAIL("rank %d: %d parts (%d of params), %d norm collectives; rank 0: %d (%d), %d", r, x->p.npart,
           x->p.npart - x->p.params_first, x->p.nnorm, rk[0].p.npart, rk[0].p.npart - rk[0].p.params_first,
           rk[0].p.nnorm);
  }
  for (int r = 0; r < world; r++)
    if (rk[r].p.staging_bytes > stage_bytes || stage_at < 0 || stage_at + stage_bytes > im.g->buffer_bytes[0])
      FAIL("rank %d: its plan needs %lld staging bytes, the image plans %lld at %lld (arena %lld)", r,
           (long long)rk[r].p.staging_bytes, (long long)stage_bytes, (long long)stage_at,
           (long long)im.g->buffer_bytes[0]);
  if (fails) return 1;
  /* ---- the initialisation ---- */
  for (int r = 0; r < world; r++) {
    int nw = 0, nskip = 0, bad = check_init(&im, rk, r, unmasked, &nw, &nskip);
    printf("rank %d: init: %d writes, %d master(s) of other ranks skipped (of %d named)%s%s\n", r, nw, nskip,
           im.lp.f.ninit_master, unmasked ? ", unmasked" : "", bad ? ": FAILED" : ": ok");
  }
  if (unmasked) { /* the program before the fix: only its initialisation is of interest */
    printf("%s: %d ranks: the initialisation unmasked %s\n", argv[1], world,
           fails ? "fails the check" : "passes the check");
    for (int r = 0; r < world; r++)
      zc_free(&rk[r].p);
    free(rk);
    image_free(&im);
    return fails ? 1 : 0;
  }
  total = alloc_bytes;
  srand(1);
  for (int r = 0; r < world; r++) {
    rk[r].mem = malloc((size_t)total), rk[r].orig = malloc((size_t)total);
    for (int64_t i = 0; i < total / 4; i++) {
      float v = (float)(rand() % 2000001 - 1000000) / 1048576.0f;
      memcpy(rk[r].mem + 4 * i, &v, 4);
    }
  }
  /* ---- the buckets ---- */
  unsigned char **before = calloc((size_t)world, sizeof *before);
  for (int r = 0; r < world; r++)
    before[r] = malloc((size_t)alloc_bytes), memcpy(before[r], rk[r].mem, (size_t)alloc_bytes);
  RtColl *cs = calloc((size_t)world, sizeof *cs);
  for (int i = 0; i < rk[0].p.params_first; i++) {
    for (int r = 0; r < world; r++)
      copies(&im, &rk[r], &rk[r].p.part[i], 1), cs[r] = zc_coll(&rk[r].p, i, (CUdeviceptr)stage_at);
    snapshot(rk, world, total);
    simulate(rk, world, cs, "bucket reduce-scatter");
    for (int r = 0; r < world; r++)
      copies(&im, &rk[r], &rk[r].p.part[i], 0);
  }
  uint8_t *got = calloc((size_t)g->nt * (size_t)world + 1, 1);
  for (int k = 0; k < im.nbucket; k++)
    for (int i = im.bucket[k].first; i < im.bucket[k].first + im.bucket[k].ngrads; i++) {
      int t = im.bucket_grad[i], e = ep > 1 && graph_expert_state(g, t);
      int64_t g0 = RT_COLL_GROUP_DP + e, n = tensor_numel(&g->t[t]);
      for (int r = 0; r < world; r++) {
        int owns = member_of(&rk[r], g0) == im.owner[t];
        for (int64_t a = 0; a < n; a++) {
          float want = 0;
          if (owns) {
            int m = 0;
            for (int mm = 0; mm < world / (e ? ep : tp); mm++)
              for (int o = 0; o < world; o++)
                if (key_of(&rk[o], g0) == key_of(&rk[r], g0) && member_of(&rk[o], g0) == mm) {
                  float v = fget(before[o] + tensor_at(&im, t) + 4 * a);
                  want = m++ == 0 ? v : want + v;
                }
            if (dp > 1) want /= (float)dp;
          } else
            want = fget(before[r] + tensor_at(&im, t) + 4 * a);
          float have = fget(rk[r].mem + tensor_at(&im, t) + 4 * a);
          if (memcmp(&want, &have, 4)) {
            FAIL("rank %d: gradient %s[%lld] %g, want %g (%s)", r, g->t[t].name, (long long)a, have, want,
                 owns ? "its owner" : "not its");
            break;
          }
        }
        if (owns) got[(size_t)t * world + r] = 1;
        memcpy(before[r] + tensor_at(&im, t), rk[r].mem + tensor_at(&im, t), (size_t)n * 4);
      }
      for (int r = 0; r < world; r++) { /* one receiver a group */
        int n1 = 0;
        for (int o = 0; o < world; o++)
          n1 += key_of(&rk[o], g0) == key_of(&rk[r], g0) && got[(size_t)t * world + o];
        if (n1 != 1) FAIL("gradient %s: %d receivers in rank %d's group", g->t[t].name, n1, r);
      }
    }
  for (int r = 0; r < world; r++) {
    memcpy(before[r] + stage_at, rk[r].mem + stage_at, (size_t)stage_bytes); /* the staging's bytes: any */
    if (memcmp(before[r], rk[r].mem, (size_t)alloc_bytes))
      FAIL("rank %d: the buckets wrote outside the gradients it owns", r);
    /* what it receives = the AdamW it runs = the state its shard holds */
    for (int o = 0; o < g->nop; o++) {
      const Op *op = &g->op[o];
      if (op->kind != OP_ADAMW || im.owner[op->in[0]] < 0) continue;
      int t = op->in[0], runs = rk[r].p.keep_adamw[t], recv = got[(size_t)t * world + r];
      int e = ep > 1 && graph_expert_state(g, t),
          holds = im.owner[t] == (e ? rk[r].edp_member : rk[r].dp_member);
      for (int j = 1; j < op->nout; j++)
        if (g->t[op->out[j]].buffer == 1 && im.owner[op->out[j]] != im.owner[t]) holds = -1;
      if (runs != recv || recv != holds)
        FAIL("rank %d: %s: receives %d, runs AdamW %d, holds its state %d", r, g->t[t].name, recv, runs,
             holds);
    }
  }
  /* ---- the norm ---- */
  int64_t norm_at = im.lp.f.norm_at;
  for (int r = 0; r < world; r++) {
    memcpy(before[r], rk[r].mem, (size_t)alloc_bytes);
    for (int i = 0; i < rk[r].p.nclear; i++)
      memset(rk[r].mem + norm_at + 4 * rk[r].p.clear[i][0], 0, (size_t)rk[r].p.clear[i][1] * 4);
  }
  for (int i = 0; i < rk[0].p.nnorm; i++) {
    for (int r = 0; r < world; r++)
      cs[r] = rk[r].p.norm[i];
    snapshot(rk, world, total);
    simulate(rk, world, cs, "norm exchange");
  }
  int slices = 0;
  for (int q = im.micro_points; q < im.npoints; q++) {
    const Op *op = &g->op[im.point_op[q]];
    const LpPoint *pt = &im.lp.point[q];
    if (op->kind != OP_GRAD_SUMSQ || pt->norm_count <= 0) continue;
    int t = op->in[0], e = ep > 1 && graph_expert_state(g, t);
    int64_t g0 = RT_COLL_GROUP_DP + e;
    int own = im.owner[t] < 0 ? 0 : im.owner[t];
    slices++;
    for (int r = 0; r < world; r++)
      for (int o = 0; o < world; o++)
        if (key_of(&rk[o], g0) == key_of(&rk[r], g0) && member_of(&rk[o], g0) == own &&
            memcmp(rk[r].mem + norm_at + 4 * pt->norm_first, before[o] + norm_at + 4 * pt->norm_first,
                   (size_t)pt->norm_count * 4))
          FAIL("rank %d: the norm partials of %s are not rank %d's (its owner)", r, g->t[t].name, o);
  }
  /* ---- the params ---- */
  for (int i = rk[0].p.params_first; i < rk[0].p.npart; i++) {
    for (int r = 0; r < world; r++)
      memcpy(before[r], rk[r].mem, (size_t)alloc_bytes);
    for (int r = 0; r < world; r++)
      copies(&im, &rk[r], &rk[r].p.part[i], 1), cs[r] = zc_coll(&rk[r].p, i, (CUdeviceptr)stage_at);
    snapshot(rk, world, total);
    simulate(rk, world, cs, "param all-gather");
    for (int r = 0; r < world; r++)
      copies(&im, &rk[r], &rk[r].p.part[i], 0);
    const ImgBucket *b = &im.bucket[rk[0].p.part[i].bucket];
    for (int j = b->first; j < b->first + b->ngrads; j++) {
      int t = im.bucket_grad[j], e = ep > 1 && graph_expert_state(g, t);
      if (e != rk[0].p.part[i].expert) continue;
      int64_t g0 = RT_COLL_GROUP_DP + e;
      /* the param, or for an fp8 primary weight whose fp32 master stays on its owner (model.fp8_param
       * under ZeRO-1: buffer 1) its fp8 data, transpose and scale_inv */
      int m = g->t[t].of;
      for (int p = 0; p < g->nt; p++) {
        if (g->t[m].buffer == 1 ? g->t[p].role != ROLE_PARAM_FP8 || g->t[p].of != m : p != m) continue;
        for (int r = 0; r < world; r++)
          for (int o = 0; o < world; o++)
            if (key_of(&rk[o], g0) == key_of(&rk[r], g0) && member_of(&rk[o], g0) == im.owner[t] &&
                memcmp(rk[r].mem + tensor_at(&im, p), before[o] + tensor_at(&im, p), (size_t)g->t[p].bytes))
              FAIL("rank %d: param %s is not rank %d's (its owner)", r, g->t[p].name, o);
      }
    }
  }
  for (int r = 0; r < world; r++) {
    const ZcPlan *p = &rk[r].p;
    printf("rank %d:", r);
    for (int i = 0; i < p->npart; i++) {
      const RtColl *c = &p->part[i].coll;
      printf(" %s %s %lld", c->op == RT_COLL_REDUCE_SCATTER ? "rs" : "ag",
             c->group == RT_COLL_GROUP_EDP ? "edp" : "dp", (long long)c->count);
    }
    printf("; norm");
    for (int i = 0; i < p->nnorm; i++)
      printf(" %s %lld", p->norm[i].group == RT_COLL_GROUP_EDP ? "edp" : "dp", (long long)p->norm[i].count);
    printf("; %d partial range(s) cleared; staging %lld B (planned %lld B at arena %lld)\n", p->nclear,
           (long long)p->staging_bytes, (long long)stage_bytes, (long long)stage_at);
  }
  printf("%s: %d ranks (TP %d, EP %d, DP %d, expert-DP %d): %d bucket parts, %d param parts, %d norm slices "
         "checked%s\n",
         argv[1], world, tp, ep, dp, world / ep, rk[0].p.params_first, rk[0].p.npart - rk[0].p.params_first,
         slices, fails ? "" : ": ok");
  for (int r = 0; r < world; r++)
    zc_free(&rk[r].p), free(rk[r].mem), free(rk[r].orig), free(before[r]);
  free(rk), free(before), free(cs), free(got);
  image_free(&im);
  return fails ? 1 : 0;
}
