/* image.c — the step image, written and read (image.h). */
#include "runtime/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char MAGIC[8] = {'S', 'T', 'E', 'P', 'C', 'I', 'M', 'G'};

typedef struct {
  char magic[8];
  uint32_t version;
  uint32_t sizes[6];      /* sizeof ImgFacts, Tensor, Op, IrChain, ImgScope, ImgBucket: this build's layout */
  uint64_t payload_bytes;
  uint64_t payload_hash;  /* FNV-1a of the payload */
} ImgHeader;

/* The counts that size every array of the payload. */
typedef struct {
  int32_t nt, nop, nchain, nscope, npoints, micro_points, npoison, ngen;
  int32_t tokens, targets, loss, grad_norm, lr, num_microbatches, nbuffers, nbucket, nbucket_grad, pad;
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
    while (cap < b->n + n) cap *= 2;
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

static void sizes_of(uint32_t s[6]) {
  s[0] = sizeof(ImgFacts), s[1] = sizeof(Tensor), s[2] = sizeof(Op), s[3] = sizeof(IrChain), s[4] = sizeof(ImgScope);
  s[5] = sizeof(ImgBucket);
}

int image_write(const char *path, const StepImage *im, char *err, size_t nerr) {
  const Graph *g = im->g;
  ImgCounts c = {.nt = g->nt, .nop = g->nop, .nchain = g->nchain, .nscope = im->nscope, .npoints = im->npoints,
                 .micro_points = im->micro_points, .npoison = im->npoison, .ngen = im->gen.n, .tokens = g->tokens,
                 .targets = g->targets, .loss = g->loss, .grad_norm = g->grad_norm, .lr = g->lr,
                 .num_microbatches = g->num_microbatches, .nbuffers = g->nbuffers, .nbucket = im->nbucket,
                 .nbucket_grad = im->nbucket_grad};
  memcpy(c.buffer_bytes, g->buffer_bytes, sizeof c.buffer_bytes);
  Buf b = {0};
  put(&b, &im->f, sizeof im->f);
  put(&b, &c, sizeof c);
  put(&b, g->t, (size_t)g->nt * sizeof *g->t);
  put(&b, g->op, (size_t)g->nop * sizeof *g->op);
  put(&b, g->chain, (size_t)g->nchain * sizeof *g->chain);
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
  if (b.oom) {
    free(b.p);
    return snprintf(err, nerr, "out of memory writing %s", path), -1;
  }
  ImgHeader h = {.version = STEPC_IMAGE_VERSION, .payload_bytes = b.n, .payload_hash = ir_fnv1a(IR_FNV_OFFSET, b.p, b.n)};
  memcpy(h.magic, MAGIC, sizeof MAGIC);
  sizes_of(h.sizes);
  FILE *f = fopen(path, "wb");
  int ok = f && fwrite(&h, sizeof h, 1, f) == 1 && fwrite(b.p, 1, b.n, f) == b.n;
  if (f && fclose(f) != 0) ok = 0;
  free(b.p);
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

static int in_range(int v, int n) { return v >= 0 && v < n; }

/* Every index the runtime will follow, checked once here. */
static const char *validate(StepImage *im) {
  Graph *g = im->g;
  int nt = g->nt, nop = g->nop;
  if (!in_range(g->tokens, nt) || !in_range(g->targets, nt) || !in_range(g->loss, nt) || !in_range(g->grad_norm, nt) ||
      !in_range(g->lr, nt) || g->num_microbatches < 1 || g->nbuffers < 1 || g->nbuffers > IR_MAX_BUFFERS)
    return "the step's tensors (tokens, targets, loss, grad norm, lr, buffers) are out of range";
  for (int i = 0; i < nt; i++) {
    Tensor *t = &g->t[i];
    t->name[IR_NAME_MAX - 1] = 0;
    if (t->ndim < 0 || t->ndim > IR_MAX_DIMS || (unsigned)t->dtype >= DT_COUNT || (unsigned)t->role >= ROLE_COUNT ||
        !in_range(t->buffer, g->nbuffers) || t->offset < 0 || t->bytes < 0 || t->offset > g->buffer_bytes[t->buffer] - t->bytes ||
        !in_range(t->alias, nt) || t->sink < -1 || t->sink >= nt || t->of < -1 || t->of >= nt || t->producer < -1 ||
        t->producer >= nop || im->cpu_offset[i] < 0 || im->cpu_bytes[i] < 0 ||
        im->cpu_offset[i] > (t->buffer == 1 ? im->f.cpu_region : im->f.cpu_arena) - im->cpu_bytes[i] || im->owner[i] < -1 ||
        im->owner[i] >= im->f.dp_size)
      return "a tensor's shape, role, slot or owner is out of range";
    /* the region (buffer 1) holds a distributed-optimizer step's masters and Adam moments only */
    if (t->buffer == 1 && (!im->f.dist_opt || g->nbuffers != 2 || !(t->role == ROLE_MASTER || (t->role == ROLE_OPTIM && t->of >= 0))))
      return "a tensor other than a distributed optimizer's master or moment lies in the optimizer-state region";
    if (t->buffer > 1) return "a tensor lies in a buffer the step does not have";
    for (int d = 0; d < IR_MAX_DIMS; d++)
      if (t->shape[d] < 1) return "a tensor has a dimension below 1";
  }
  for (int o = 0; o < nop; o++) {
    Op *op = &g->op[o];
    op->tags.module[IR_MODULE_MAX - 1] = 0;
    if ((unsigned)op->kind >= OP_COUNT || op->nin < 0 || op->nin > IR_MAX_IN || op->nout < 0 || op->nout > IR_MAX_OUT ||
        (unsigned)op->tags.phase >= IR_PHASE_COUNT || op->fuse >= FUSE_COUNT || op->peer < -1 || op->peer >= nop)
      return "an op's kind, arity, phase or fusion is out of range";
    for (int i = 0; i < op->nin; i++)
      if (!in_range(op->in[i], nt)) return "an op reads a tensor that is not in the step";
    for (int i = 0; i < op->nout; i++)
      if (!in_range(op->out[i], nt)) return "an op writes a tensor that is not in the step";
  }
  for (int c = 0; c < g->nchain; c++) {
    IrChain *ch = &g->chain[c];
    if (ch->nops < 1 || ch->nops > IR_MAX_CHAIN || ch->nin < 0 || ch->nin > IR_MAX_CHAIN_IO || !in_range(ch->kernel, im->gen.n))
      return "an elementwise chain is out of range";
    for (int j = 0; j < ch->nops; j++) {
      ch->scalars[j][3] = 0;
      if (!in_range(ch->op[j], nop)) return "an elementwise chain names an op that is not in the step";
    }
    for (int m = 0; m < ch->nin; m++)
      if (!in_range(ch->in[m], nt)) return "an elementwise chain reads a tensor that is not in the step";
  }
  if (im->micro_points < 0 || im->micro_points > im->npoints || im->poison_start[0] != 0 ||
      im->poison_start[im->npoints] != im->npoison)
    return "the program is out of range";
  for (int q = 0; q < im->npoints; q++)
    if (!in_range(im->point_op[q], nop) || im->poison_start[q + 1] < im->poison_start[q]) return "the program is out of range";
  for (int k = 0; k < im->npoison; k++)
    if (!in_range(im->poison[k], nt)) return "the poison list names a tensor that is not in the step";
  for (int s = 0; s < im->nscope; s++)
    if (!in_range(im->scope[s].first, nop) || !in_range(im->scope[s].last, nop) || im->scope[s].last < im->scope[s].first)
      return "a graph scope is out of range";
  if (im->f.dp_size < 1 || im->f.dp_size > 65536 || im->f.cpu_region < 0 || (im->f.cpu_region > 0) != (g->nbuffers == 2))
    return "the data-parallel size or the optimizer-state region is out of range";
  for (int k = 0; k < im->nbucket; k++) {
    const ImgBucket *b = &im->bucket[k];
    if (!in_range(b->after_op, nop) || !in_range(b->fire_op, nop) || b->first < 0 || b->ngrads < 1 || b->first > im->nbucket_grad - b->ngrads)
      return "a gradient bucket is out of range";
  }
  for (int k = 0; k < im->nbucket_grad; k++)
    if (!in_range(im->bucket_grad[k], nt) || g->t[im->bucket_grad[k]].role != ROLE_GRAD)
      return "a gradient bucket names a tensor that is not a main gradient";
  for (int k = 0; k < im->gen.n; k++) im->gen.k[k].name[sizeof im->gen.k[k].name - 1] = im->gen.k[k].sig[sizeof im->gen.k[k].sig - 1] = 0;
  return NULL;
}

int image_read(const char *path, StepImage *im, char *err, size_t nerr) {
  memset(im, 0, sizeof *im);
  FILE *f = fopen(path, "rb");
  if (!f) return snprintf(err, nerr, "cannot open %s", path), -1;
  ImgHeader h;
  uint32_t want[6];
  sizes_of(want);
  if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, MAGIC, sizeof MAGIC) != 0) {
    fclose(f);
    return snprintf(err, nerr, "%s is not a stepc step image", path), -1;
  }
  if (h.version != STEPC_IMAGE_VERSION || memcmp(h.sizes, want, sizeof want) != 0) {
    fclose(f);
    return snprintf(err, nerr, "%s is a step image of format %u (this library reads %d, or another build's layout): rebuild "
                    "the artifact with the stepc that matches this library", path, h.version, STEPC_IMAGE_VERSION), -1;
  }
  unsigned char *p = h.payload_bytes < ((uint64_t)1 << 40) ? malloc(h.payload_bytes + 1) : NULL;
  int ok = p && fread(p, 1, h.payload_bytes, f) == h.payload_bytes && fgetc(f) == EOF;
  fclose(f);
  if (!ok || ir_fnv1a(IR_FNV_OFFSET, p, h.payload_bytes) != h.payload_hash) {
    free(p);
    return snprintf(err, nerr, "%s is damaged (truncated, or its checksum does not match): rebuild the artifact", path), -1;
  }
  Rd r = {.p = p, .n = h.payload_bytes};
  int bad = 0;
  ImgCounts c;
  if (r.n < sizeof im->f + sizeof c) bad = 1;
  else {
    memcpy(&im->f, p, sizeof im->f);
    memcpy(&c, p + sizeof im->f, sizeof c);
    r.at = sizeof im->f + sizeof c;
  }
  im->f.data_path[sizeof im->f.data_path - 1] = im->f.recipe[sizeof im->f.recipe - 1] = 0;
  im->f.cuda_refusal[sizeof im->f.cuda_refusal - 1] = im->f.cubin[sizeof im->f.cubin - 1] = 0;
  if (!bad && (c.nt < 1 || c.nop < 1 || c.nchain < 0 || c.nscope < 0 || c.npoints < 1 || c.npoison < 0 || c.ngen < 0 ||
               c.ngen > RT_GEN_MAX))
    bad = 1;
  Graph *g = im->g = bad ? NULL : graph_new();
  if (!bad && !g) bad = 2;
  if (!bad) {
    g->t = take(&r, (size_t)c.nt, sizeof *g->t, &bad);
    g->op = take(&r, (size_t)c.nop, sizeof *g->op, &bad);
    g->chain = take(&r, (size_t)c.nchain, sizeof *g->chain, &bad);
    g->nt = g->capt = c.nt, g->nop = g->capop = c.nop, g->nchain = c.nchain;
    g->tokens = c.tokens, g->targets = c.targets, g->loss = c.loss, g->grad_norm = c.grad_norm, g->lr = c.lr;
    g->num_microbatches = c.num_microbatches, g->nbuffers = c.nbuffers;
    memcpy(g->buffer_bytes, c.buffer_bytes, sizeof c.buffer_bytes);
    im->cpu_offset = take(&r, (size_t)c.nt, sizeof *im->cpu_offset, &bad);
    im->cpu_bytes = take(&r, (size_t)c.nt, sizeof *im->cpu_bytes, &bad);
    im->npoints = c.npoints, im->micro_points = c.micro_points, im->npoison = c.npoison, im->nscope = c.nscope;
    im->point_op = take(&r, (size_t)c.npoints, sizeof *im->point_op, &bad);
    im->poison_start = take(&r, (size_t)c.npoints + 1, sizeof *im->poison_start, &bad);
    im->poison = take(&r, (size_t)c.npoison, sizeof *im->poison, &bad);
    im->scope = take(&r, (size_t)c.nscope, sizeof *im->scope, &bad);
    if (!bad && (size_t)c.ngen * sizeof im->gen.k[0] <= r.n - r.at) {
      memcpy(im->gen.k, p + r.at, (size_t)c.ngen * sizeof im->gen.k[0]);
      r.at += (size_t)c.ngen * sizeof im->gen.k[0];
      im->gen.n = c.ngen;
    } else if (!bad) bad = 1;
    im->nbucket = c.nbucket, im->nbucket_grad = c.nbucket_grad;
    if (!bad && (c.nbucket < 0 || c.nbucket_grad < 0)) bad = 1;
    im->bucket = take(&r, (size_t)c.nbucket, sizeof *im->bucket, &bad);
    im->bucket_grad = take(&r, (size_t)c.nbucket_grad, sizeof *im->bucket_grad, &bad);
    im->owner = take(&r, (size_t)c.nt, sizeof *im->owner, &bad);
    if (!bad && (r.at != r.n || (c.npoison > 0 && !im->poison))) bad = 1;
  }
  free(p);
  const char *why = bad ? (bad == 2 ? "out of memory" : "its sections do not add up") : validate(im);
  if (why) {
    image_free(im);
    return snprintf(err, nerr, "%s: %s: rebuild the artifact", path, why), -1;
  }
  return 0;
}

void image_free(StepImage *im) {
  graph_free(im->g);
  free(im->cpu_offset), free(im->cpu_bytes), free(im->point_op), free(im->poison_start), free(im->poison), free(im->scope);
  free(im->bucket), free(im->bucket_grad), free(im->owner);
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
  g->chain = s->nchain ? malloc((size_t)s->nchain * sizeof *g->chain) : NULL;
  g->cur = keep.cur;
  if (!g->t || !g->op || (s->nchain && !g->chain)) {
    graph_free(g);
    return NULL;
  }
  memcpy(g->t, s->t, (size_t)s->nt * sizeof *g->t);
  memcpy(g->op, s->op, (size_t)s->nop * sizeof *g->op);
  if (s->nchain) memcpy(g->chain, s->chain, (size_t)s->nchain * sizeof *g->chain);
  for (int i = 0; i < g->nt; i++) g->t[i].offset = im->cpu_offset[i], g->t[i].bytes = im->cpu_bytes[i];
  g->nbuffers = im->f.cpu_region > 0 ? 2 : 1;
  memset(g->buffer_bytes, 0, sizeof g->buffer_bytes);
  g->buffer_bytes[0] = im->f.cpu_arena;
  g->buffer_bytes[1] = im->f.cpu_region;
  return g;
}
