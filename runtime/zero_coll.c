/* zero_coll.c — ZeRO-1's data movement on the GPU for one rank, as data (zero_coll.h). */
#include "runtime/zero_coll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A kind's group: the data-parallel one (dense state), the expert-data-parallel one (an expert's). */
static void kind_group(const ZcRank *r, int expert, int *group, int *n, int *me) {
  *group = expert ? RT_COLL_GROUP_EDP : RT_COLL_GROUP_DP;
  *n = expert ? r->edp : r->dp, *me = expert ? r->edp_member : r->dp_member;
}

static int expert_of(const ZcRank *r, int t) { return r->ep > 1 && graph_expert_state(r->g, t); }

static int64_t tbytes(const ZcRank *r, int t) { return r->bytes ? r->bytes[t] : r->g->t[t].bytes; }

static int grow(void **p, int *cap, int n, size_t size) {
  if (n < *cap) return 0;
  int c = *cap ? 2 * *cap : 64;
  void *q = realloc(*p, (size_t)c * size);
  if (!q) return -1;
  *p = q, *cap = c;
  return 0;
}

typedef struct {
  ZcPlan *p;
  int cap_part, cap_piece, cap_norm;
} Build;

static int add_piece(Build *b, int t, int64_t at, int64_t bytes) {
  ZcPlan *p = b->p;
  if (grow((void **)&p->piece, &b->cap_piece, p->npiece, sizeof *p->piece)) return -1;
  p->piece[p->npiece++] = (ZcPiece){.tensor = t, .at = at, .bytes = bytes};
  return 0;
}

/* The tensors a part moves for gradient t, into m (their count): the gradient; or (params) its
 * parameter — for an fp8 primary weight (model.fp8_param), whose fp32 master lies in the
 * optimizer-state region on its owner only under ZeRO-1, its fp8 data, transpose and scale_inv
 * instead. graph_fp8_master, not the planned buffer, so that the compiler sizing the staging before
 * the plan places the region (compiler/plan/memplan.c) counts what the runtime moves. */
static int moved(const ZcRank *r, int t, int params, int m[3]) {
  if (!params) return m[0] = t, 1;
  const Graph *g = r->g;
  int p = g->t[t].of, n = 0;
  if (!graph_fp8_master(g, p)) return m[0] = p, 1;
  for (int x = 0; x < g->nt && n < 3; x++)
    if (g->t[x].role == ROLE_PARAM_FP8 && g->t[x].of == p) m[n++] = x;
  return n;
}

/* Bucket k's part of one kind: its gradients reduce-scattered (params 0), or their params
 * all-gathered (params 1), at staging offset *base (moved past it). Nothing when the bucket holds none
 * of that kind. */
static int add_part(Build *b, const ZcRank *r, int k, int expert, int params, int64_t *base) {
  ZcPlan *p = b->p;
  const ImgBucket *bk = &r->bucket[k];
  const int32_t *gr = r->bucket_grad + bk->first;
  int group, n, me;
  kind_group(r, expert, &group, &n, &me);
  int64_t unit = params ? 2 : 4, seg = 0, any = 0; /* seg: a block's units */
  for (int o = 0; o < n; o++) {
    int64_t m = 0;
    for (int i = 0; i < bk->ngrads; i++) {
      int mv[3],
          nmv = r->owner[gr[i]] == o && expert_of(r, gr[i]) == expert ? moved(r, gr[i], params, mv) : 0;
      for (int j = 0; j < nmv; j++)
        m += (tbytes(r, mv[j]) + unit - 1) / unit;
    }
    seg = m > seg ? m : seg, any += m;
  }
  if (any == 0) return 0; /* the same on every rank: one graph */
  if (grow((void **)&p->part, &b->cap_part, p->npart, sizeof *p->part)) return -1;
  ZcPart *pt = &p->part[p->npart++];
  int64_t mine = *base + me * seg * unit;
  *pt = (ZcPart){.bucket = k, .expert = expert, .pack = p->npiece};
  pt->coll = params ? (RtColl){.op = RT_COLL_ALL_GATHER,
                               .dtype = RT_COLL_BF16,
                               .group = group,
                               .count = seg,
                               .src = (CUdeviceptr)mine,
                               .dst = (CUdeviceptr)*base}
                    : (RtColl){.op = RT_COLL_REDUCE_SCATTER,
                               .dtype = RT_COLL_F32,
                               .group = group,
                               .count = seg,
                               .div = r->dp > 1 ? r->dp : 0,
                               .src = (CUdeviceptr)*base,
                               .dst = (CUdeviceptr)mine};
  /* copied in: every gradient into its owner's block (a reduce-scatter's input), or this rank's
   * params into its own (an all-gather's); copied out: this rank's gradients, or the others' params */
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) pt = &p->part[p->npart - 1], pt->npack = p->npiece - pt->pack, pt->unpack = p->npiece;
    for (int o = 0; o < n; o++) {
      int64_t at = *base + o * seg * unit;
      for (int i = 0; i < bk->ngrads; i++) {
        if (r->owner[gr[i]] != o || expert_of(r, gr[i]) != expert) continue;
        int mv[3], nmv = moved(r, gr[i], params, mv);
        for (int j = 0; j < nmv; j++) {
          int t = mv[j];
          bool in = pass == 0 ? !params || o == me : params ? o != me : o == me;
          if (in && add_piece(b, t, at, tbytes(r, t))) return -1;
          at += (tbytes(r, t) + unit - 1) / unit * unit; /* an odd fp8 tensor padded to a whole unit */
        }
      }
    }
  }
  pt = &p->part[p->npart - 1];
  pt->nunpack = p->npiece - pt->unpack;
  *base += n * seg * unit;
  if (*base > p->staging_bytes) p->staging_bytes = *base;
  return 0;
}

static int add_norm(Build *b, const ZcRank *r, int64_t first, int64_t count, int expert) {
  ZcPlan *p = b->p;
  if (count <= 0) return 0;
  if (grow((void **)&p->norm, &b->cap_norm, p->nnorm, sizeof *p->norm)) return -1;
  CUdeviceptr at = r->norm_at + (CUdeviceptr)(first * 4);
  p->norm[p->nnorm++] = (RtColl){.op = RT_COLL_ALLREDUCE_SUM,
                                 .dtype = RT_COLL_F32,
                                 .group = expert ? RT_COLL_GROUP_EDP : RT_COLL_GROUP_DP,
                                 .count = count,
                                 .src = at,
                                 .dst = at};
  return 0;
}

static int cmp_range(const void *a, const void *b) {
  int64_t x = ((const int64_t *)a)[0], y = ((const int64_t *)b)[0];
  return x < y ? -1 : x > y;
}

/* Sorted, adjacent ranges merged; their number. */
static int merge(int64_t (*v)[2], int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_range);
  int m = 0;
  for (int i = 0; i < n; i++)
    if (m > 0 && v[m - 1][0] + v[m - 1][1] == v[i][0])
      v[m - 1][1] += v[i][1];
    else
      v[m][0] = v[i][0], v[m++][1] = v[i][1];
  return m;
}

/* The masks, the skipped points, the partials cleared and the norm's exchange: the dense partials
 * (everything outside the experts' slices) over the data-parallel group, the experts' slices over the
 * expert-data-parallel group. */
static int norm_plan(Build *b, const ZcRank *r, char *err, size_t nerr) {
  ZcPlan *p = b->p;
  const Graph *g = r->g;
  int64_t(*ex)[2] = malloc(((size_t)r->npoints + 1) * sizeof *ex);
  if (!ex) return snprintf(err, nerr, "out of memory"), -1;
  int nex = 0;
  for (int t = 0; t < g->nt; t++) {
    int group, n, me, e = expert_of(r, t);
    kind_group(r, e, &group, &n, &me);
    p->keep_adamw[t] = r->owner[t] < 0 || r->owner[t] == me;
    p->keep_sumsq[t] = p->keep_adamw[t] && (r->owner[t] >= 0 || me == 0);
  }
  p->norm_point = -1;
  for (int q = r->nmicro; q < r->npoints; q++) {
    const Op *op = &g->op[r->point_op[q]];
    const LpPoint *pt = &r->point[q];
    if (op->kind == OP_CLIP_COEF && p->norm_point < 0) p->norm_point = q;
    if (op->kind == OP_GRAD_SUMSQ) {
      int t = op->in[0];
      if (!p->keep_sumsq[t]) {
        if (pt->norm_count < 0) {
          free(ex);
          return snprintf(
                     err, nerr,
                     "the distributed optimizer on cuda: GRAD_SUMSQ op %d launches nothing and belongs to "
                     "no multi-tensor group",
                     r->point_op[q]),
                 -1;
        }
        p->clear[p->nclear][0] = pt->norm_first, p->clear[p->nclear++][1] = pt->norm_count;
        p->skip_point[q] = (uint8_t)pt->alone;
      }
      if (expert_of(r, t) && pt->norm_count > 0) ex[nex][0] = pt->norm_first, ex[nex++][1] = pt->norm_count;
    }
    if (op->kind == OP_ADAMW && !p->keep_adamw[op->in[0]]) p->skip_point[q] = (uint8_t)pt->alone;
    /* model.fp8_param: an fp8 primary weight's cast runs on the rank holding its fp32 master (in the
     * optimizer-state region, buffer 1); the others receive its bytes with the params */
    if ((op->kind == OP_FP8_QUANT || op->kind == OP_FP8_QUANT_GROUPED) && g->t[op->in[0]].buffer == 1 &&
        !p->keep_adamw[op->in[0]]) {
      if (!pt->alone) {
        free(ex);
        return snprintf(
                   err, nerr,
                   "the distributed optimizer on cuda: the cast of fp8 primary weight %s launches with other "
                   "ops",
                   g->t[op->in[0]].name),
               -1;
      }
      p->skip_point[q] = 1;
    }
  }
  p->nclear = merge(p->clear, p->nclear);
  nex = merge(ex, nex);
  int64_t at = 0;
  int rc = 0;
  for (int i = 0; i < nex && !rc; i++) {
    rc = add_norm(b, r, at, ex[i][0] - at, 0) || add_norm(b, r, ex[i][0], ex[i][1], 1);
    at = ex[i][0] + ex[i][1];
  }
  rc = rc || add_norm(b, r, at, r->norm_count - at, 0);
  free(ex);
  if (rc) return snprintf(err, nerr, "out of memory"), -1;
  if (p->nclear > 0 && p->norm_point < 0)
    return snprintf(
               err, nerr,
               "the distributed optimizer on cuda: the step computes a gradient norm without a CLIP_COEF "
               "op to exchange its partial sums before"),
           -1;
  return 0;
}

/* The buckets' parts and the params': p->part, p->piece, p->bucket_part (allocated by the caller) and
 * p->staging_bytes. 0, or -1 out of memory. */
static int plan_parts(Build *b, const ZcRank *r) {
  ZcPlan *p = b->p;
  int rc = 0;
  /* a bucket's parts side by side (both in flight together), the params' one at a time */
  for (int k = 0; k < r->nbucket && rc == 0; k++) {
    p->bucket_part[k] = p->npart;
    int64_t base = 0;
    for (int e = 0; e < (r->ep > 1 ? 2 : 1) && rc == 0; e++)
      rc = add_part(b, r, k, e, 0, &base);
  }
  p->bucket_part[r->nbucket] = p->params_first = p->npart;
  for (int k = 0; k < r->nbucket && rc == 0; k++)
    for (int e = 0; e < (r->ep > 1 ? 2 : 1) && rc == 0; e++) {
      int64_t base = 0;
      rc = add_part(b, r, k, e, 1, &base);
    }
  return rc;
}

static int parts_fail(char *err, size_t nerr) { return snprintf(err, nerr, "out of memory"), -1; }

int64_t zc_staging_bytes(const ZcRank *r, char *err, size_t nerr) {
  ZcPlan p;
  memset(&p, 0, sizeof p);
  Build b = {.p = &p};
  if (!(p.bucket_part = malloc(((size_t)r->nbucket + 1) * sizeof *p.bucket_part)))
    return snprintf(err, nerr, "out of memory"), -1;
  int rc = plan_parts(&b, r);
  int64_t n = p.staging_bytes;
  zc_free(&p);
  return rc ? parts_fail(err, nerr) : n;
}

int zc_plan(const ZcRank *r, ZcPlan *p, char *err, size_t nerr) {
  memset(p, 0, sizeof *p);
  Build b = {.p = p};
  const Graph *g = r->g;
  p->bucket_part = malloc(((size_t)r->nbucket + 1) * sizeof *p->bucket_part);
  p->keep_sumsq = calloc((size_t)g->nt + 1, 1), p->keep_adamw = calloc((size_t)g->nt + 1, 1);
  p->skip_point = calloc((size_t)r->npoints + 1, 1);
  p->clear = malloc(((size_t)r->npoints + 1) * sizeof *p->clear);
  if (!p->bucket_part || !p->keep_sumsq || !p->keep_adamw || !p->skip_point || !p->clear)
    return snprintf(err, nerr, "out of memory"), -1;
  int rc = plan_parts(&b, r);
  if (rc) return parts_fail(err, nerr);
  return norm_plan(&b, r, err, nerr);
}

void zc_free(ZcPlan *p) {
  free(p->part), free(p->bucket_part), free(p->piece), free(p->norm), free(p->clear);
  free(p->keep_sumsq), free(p->keep_adamw), free(p->skip_point);
  memset(p, 0, sizeof *p);
}

RtColl zc_coll(const ZcPlan *p, int i, CUdeviceptr staging) {
  RtColl c = p->part[i].coll;
  c.src += staging, c.dst += staging;
  return c;
}
