/* image.c — the step image, written and read (image.h). */
#include "runtime/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char MAGIC[8] = {'S', 'T', 'E', 'P', 'C', 'I', 'M', 'G'};

typedef struct {
  char magic[8];
  uint32_t version;
  uint32_t sizes[8]; /* sizeof ImgFacts, Tensor, Op, ImgScope, ImgBucket, LpFacts, RtRec, LpPoint: this
                        build's layout */
  uint64_t payload_bytes;
  uint64_t payload_hash; /* FNV-1a of the payload */
} ImgHeader;

/* The counts that size every array of the payload. */
typedef struct {
  int32_t nt, nop, nscope, npoints, micro_points, npoison, ngen;
  int32_t tokens, targets, loss, grad_norm, lr, num_microbatches, nbuffers, nbucket, nbucket_grad,
      has_program;
  int64_t buffer_bytes[IR_MAX_BUFFERS];
} ImgCounts;

/* ---- writing: the payload in memory, then header + payload ---- */

typedef struct {
  unsigned char *p;
  size_t n, cap;
  int oom;
} Buf;

static void put(Buf *b, const void *src, size_t n) {
  if (b->oom || n == 0) return;
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->n + n)
      cap *= 2;
    unsigned char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p, b->cap = cap;
  }
  memcpy(b->p + b->n, src, n);
  b->n += n;
}

static void sizes_of(uint32_t s[8]) {
  s[0] = sizeof(ImgFacts), s[1] = sizeof(Tensor), s[2] = sizeof(Op), s[3] = sizeof(ImgScope);
  s[4] = sizeof(ImgBucket), s[5] = sizeof(LpFacts), s[6] = sizeof(RtRec), s[7] = sizeof(LpPoint);
}

int image_write(const char *path, const StepImage *im, char *err, size_t nerr) {
  const Graph *g = im->g;
  ImgCounts c = {.nt = g->nt,
                 .nop = g->nop,
                 .nscope = im->nscope,
                 .npoints = im->npoints,
                 .micro_points = im->micro_points,
                 .npoison = im->npoison,
                 .ngen = im->gen.n,
                 .tokens = g->tokens,
                 .targets = g->targets,
                 .loss = g->loss,
                 .grad_norm = g->grad_norm,
                 .lr = g->lr,
                 .num_microbatches = g->num_microbatches,
                 .nbuffers = g->nbuffers,
                 .nbucket = im->nbucket,
                 .nbucket_grad = im->nbucket_grad,
                 .has_program = im->has_program};
  memcpy(c.buffer_bytes, g->buffer_bytes, sizeof c.buffer_bytes);
  Buf b = {0};
  put(&b, &im->f, sizeof im->f);
  put(&b, &c, sizeof c);
  put(&b, g->t, (size_t)g->nt * sizeof *g->t);
  put(&b, g->op, (size_t)g->nop * sizeof *g->op);
  put(&b, im->cpu_offset, (size_t)g->nt * sizeof *im->cpu_offset);
  put(&b, im->cpu_bytes, (size_t)g->nt * sizeof *im->cpu_bytes);
  put(&b, im->point_op, (size_t)im->npoints * sizeof *im->point_op);
  put(&b, im->poison_start, (size_t)(im->npoints + 1) * sizeof *im->poison_start);
  put(&b, im->poison, (size_t)im->npoison * sizeof *im->poison);
  put(&b, im->scope, (size_t)im->nscope * sizeof *im->scope);
  put(&b, im->gen.k, (size_t)im->gen.n * sizeof im->gen.k[0]);
  put(&b, im->bucket, (size_t)im->nbucket * sizeof *im->bucket);
  put(&b, im->bucket_grad, (size_t)im->nbucket_grad * sizeof *im->bucket_grad);
  put(&b, im->owner, (size_t)g->nt * sizeof *im->owner);
  put(&b, im->storage, (size_t)g->nt * sizeof *im->storage);
  if (im->has_program) {
    const LaunchProgram *lp = &im->lp;
    put(&b, &lp->f, sizeof lp->f);
    put(&b, lp->rec, (size_t)lp->f.nrec * sizeof *lp->rec);
    put(&b, lp->point, (size_t)im->npoints * sizeof *lp->point);
    put(&b, lp->micro, 2 * (size_t)lp->f.nmb * sizeof *lp->micro);
    put(&b, lp->tensor_at, (size_t)g->nt * sizeof *lp->tensor_at);
    put(&b, lp->table, (size_t)lp->f.ntable * sizeof *lp->table);
    put(&b, lp->row, (size_t)lp->f.nrow * sizeof *lp->row);
    put(&b, lp->tmap, (size_t)lp->f.ntmap * sizeof *lp->tmap);
    put(&b, lp->init_master, (size_t)lp->f.ninit_master * sizeof *lp->init_master);
  }
  if (b.oom) {
    free(b.p);
    return snprintf(err, nerr, "out of memory writing %s", path), -1;
  }
  int rc = image_seal(path, b.p, b.n, err, nerr);
  free(b.p);
  return rc;
}

int image_seal(const char *path, const void *payload, size_t n, char *err, size_t nerr) {
  ImgHeader h = {.version = STEPC_IMAGE_VERSION,
                 .payload_bytes = n,
                 .payload_hash = ir_fnv1a(IR_FNV_OFFSET, payload, n)};
  memcpy(h.magic, MAGIC, sizeof MAGIC);
  sizes_of(h.sizes);
  FILE *f = fopen(path, "wb");
  int ok = f && fwrite(&h, sizeof h, 1, f) == 1 && fwrite(payload, 1, n, f) == n;
  if (f && fclose(f) != 0) ok = 0;
  if (!ok) return snprintf(err, nerr, "cannot write %s", path), -1;
  return 0;
}

/* ---- reading ---- */

typedef struct {
  const unsigned char *p;
  size_t n, at;
} Rd;

/* n elements of size es, copied into fresh memory (NULL when n == 0 or short: *short_ set) */
static void *take(Rd *r, size_t n, size_t es, int *bad) {
  if (*bad || n == 0) return NULL;
  if (n > (r->n - r->at) / es) {
    *bad = 1;
    return NULL;
  }
  void *dst = malloc(n * es);
  if (!dst) {
    *bad = 2;
    return NULL;
  }
  memcpy(dst, r->p + r->at, n * es);
  r->at += n * es;
  return dst;
}

int image_read(const char *path, StepImage *im, char *err, size_t nerr) {
  memset(im, 0, sizeof *im);
  FILE *f = fopen(path, "rb");
  if (!f) return snprintf(err, nerr, "cannot open %s", path), -1;
  ImgHeader h;
  uint32_t want[8];
  sizes_of(want);
  if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, MAGIC, sizeof MAGIC) != 0) {
    fclose(f);
    return snprintf(err, nerr, "%s is not a stepc step image", path), -1;
  }
  if (h.version != STEPC_IMAGE_VERSION || memcmp(h.sizes, want, sizeof want) != 0) {
    fclose(f);
    return snprintf(
               err, nerr,
               "%s is a step image of format %u (this library reads %d, or another build's layout): rebuild "
               "the artifact with the stepc that matches this library",
               path, h.version, STEPC_IMAGE_VERSION),
           -1;
  }
  unsigned char *p = h.payload_bytes < ((uint64_t)1 << 40) ? malloc(h.payload_bytes + 1) : NULL;
  int ok = p && fread(p, 1, h.payload_bytes, f) == h.payload_bytes && fgetc(f) == EOF;
  fclose(f);
  if (!ok || ir_fnv1a(IR_FNV_OFFSET, p, h.payload_bytes) != h.payload_hash) {
    free(p);
    return snprintf(err, nerr,
                    "%s is damaged (truncated, or its checksum does not match): rebuild the artifact", path),
           -1;
  }
  Rd r = {.p = p, .n = h.payload_bytes};
  int bad = 0;
  ImgCounts c;
  if (r.n < sizeof im->f + sizeof c)
    bad = 1;
  else {
    memcpy(&im->f, p, sizeof im->f);
    memcpy(&c, p + sizeof im->f, sizeof c);
    r.at = sizeof im->f + sizeof c;
  }
  im->f.data_path[sizeof im->f.data_path - 1] = im->f.recipe[sizeof im->f.recipe - 1] = 0;
  im->f.cuda_refusal[sizeof im->f.cuda_refusal - 1] = im->f.cubin[sizeof im->f.cubin - 1] = 0;
  if (!bad && (c.nt < 1 || c.nop < 1 || c.nscope < 0 || c.npoints < 1 || c.npoison < 0 || c.ngen < 0 ||
               c.ngen > RT_GEN_MAX))
    bad = 1;
  Graph *g = im->g = bad ? NULL : graph_new();
  if (!bad && !g) bad = 2;
  if (!bad) {
    g->t = take(&r, (size_t)c.nt, sizeof *g->t, &bad);
    g->op = take(&r, (size_t)c.nop, sizeof *g->op, &bad);
    g->nt = g->capt = c.nt, g->nop = g->capop = c.nop;
    g->tokens = c.tokens, g->targets = c.targets, g->loss = c.loss, g->grad_norm = c.grad_norm, g->lr = c.lr;
    g->num_microbatches = c.num_microbatches, g->nbuffers = c.nbuffers;
    memcpy(g->buffer_bytes, c.buffer_bytes, sizeof c.buffer_bytes);
    im->cpu_offset = take(&r, (size_t)c.nt, sizeof *im->cpu_offset, &bad);
    im->cpu_bytes = take(&r, (size_t)c.nt, sizeof *im->cpu_bytes, &bad);
    im->npoints = c.npoints, im->micro_points = c.micro_points, im->npoison = c.npoison,
    im->nscope = c.nscope;
    im->point_op = take(&r, (size_t)c.npoints, sizeof *im->point_op, &bad);
    im->poison_start = take(&r, (size_t)c.npoints + 1, sizeof *im->poison_start, &bad);
    im->poison = take(&r, (size_t)c.npoison, sizeof *im->poison, &bad);
    im->scope = take(&r, (size_t)c.nscope, sizeof *im->scope, &bad);
    if (!bad && (size_t)c.ngen * sizeof im->gen.k[0] <= r.n - r.at) {
      memcpy(im->gen.k, p + r.at, (size_t)c.ngen * sizeof im->gen.k[0]);
      r.at += (size_t)c.ngen * sizeof im->gen.k[0];
      im->gen.n = c.ngen;
    } else if (!bad)
      bad = 1;
    im->nbucket = c.nbucket, im->nbucket_grad = c.nbucket_grad;
    if (!bad && (c.nbucket < 0 || c.nbucket_grad < 0)) bad = 1;
    im->bucket = take(&r, (size_t)c.nbucket, sizeof *im->bucket, &bad);
    im->bucket_grad = take(&r, (size_t)c.nbucket_grad, sizeof *im->bucket_grad, &bad);
    im->owner = take(&r, (size_t)c.nt, sizeof *im->owner, &bad);
    im->storage = take(&r, (size_t)c.nt, sizeof *im->storage, &bad);
    if (!bad && c.has_program) {
      LaunchProgram *lp = &im->lp;
      LpFacts *lf = take(&r, 1, sizeof *lf, &bad);
      if (lf) lp->f = *lf, free(lf);
      if (!bad &&
          (lp->f.nrec < 0 || lp->f.nmb < 1 || lp->f.ntable < 0 || lp->f.nrow < 0 || lp->f.ninit_master < 0 ||
           lp->f.ntable > ((int64_t)1 << 40) || lp->f.ntmap < 0 || lp->f.ntmap > ((int64_t)1 << 30)))
        bad = 1;
      if (!bad) {
        im->has_program = 1;
        lp->rec = take(&r, (size_t)lp->f.nrec, sizeof *lp->rec, &bad);
        lp->point = take(&r, (size_t)c.npoints, sizeof *lp->point, &bad);
        lp->micro = take(&r, 2 * (size_t)lp->f.nmb, sizeof *lp->micro, &bad);
        lp->tensor_at = take(&r, (size_t)c.nt, sizeof *lp->tensor_at, &bad);
        lp->table = take(&r, (size_t)lp->f.ntable, sizeof *lp->table, &bad);
        lp->row = take(&r, (size_t)lp->f.nrow, sizeof *lp->row, &bad);
        lp->tmap = take(&r, (size_t)lp->f.ntmap, sizeof *lp->tmap, &bad);
        lp->init_master = take(&r, (size_t)lp->f.ninit_master, sizeof *lp->init_master, &bad);
      }
    }
    if (!bad && (r.at != r.n || (c.npoison > 0 && !im->poison))) bad = 1;
  }
  free(p);
  char why[400];
  snprintf(why, sizeof why, "%s", bad == 2 ? "out of memory" : "its sections do not add up");
  if (bad || image_check(im, why, sizeof why) != 0) {
    image_free(im);
    return snprintf(err, nerr, "%s: %s: rebuild the artifact", path, why), -1;
  }
  return 0;
}

void image_free(StepImage *im) {
  graph_free(im->g);
  free(im->cpu_offset), free(im->cpu_bytes), free(im->point_op), free(im->poison_start), free(im->poison),
      free(im->scope);
  free(im->bucket), free(im->bucket_grad), free(im->owner), free(im->storage);
  lp_free(&im->lp);
  memset(im, 0, sizeof *im);
}

Graph *image_cpu_graph(const StepImage *im) {
  const Graph *s = im->g;
  Graph *g = graph_new();
  if (!g) return NULL;
  Graph keep = *g;
  *g = *s;
  g->t = malloc((size_t)s->nt * sizeof *g->t);
  g->op = malloc((size_t)s->nop * sizeof *g->op);
  g->cur = keep.cur;
  if (!g->t || !g->op) {
    graph_free(g);
    return NULL;
  }
  memcpy(g->t, s->t, (size_t)s->nt * sizeof *g->t);
  memcpy(g->op, s->op, (size_t)s->nop * sizeof *g->op);
  for (int i = 0; i < g->nt; i++)
    g->t[i].offset = im->cpu_offset[i], g->t[i].bytes = im->cpu_bytes[i];
  g->nbuffers = im->f.cpu_region > 0 ? 2 : 1;
  memset(g->buffer_bytes, 0, sizeof g->buffer_bytes);
  g->buffer_bytes[0] = im->f.cpu_arena;
  g->buffer_bytes[1] = im->f.cpu_region;
  return g;
}
