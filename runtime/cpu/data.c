/* data.c — micro-batch sources (data.h): mock tokens and byte-level text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "runtime/cpu/data.h"

static uint64_t batch_key(const CpuData *d, int64_t step, int64_t micro, int64_t row) {
  if (d->fixed) step = 0;
  return ops_mix64(ops_mix64(ops_mix64(d->seed ^ 0xda7a) ^ (uint64_t)step) ^ ((uint64_t)micro << 24) ^ (uint64_t)row);
}

static int mock_fill(CpuData *d, int64_t step, int64_t micro, int64_t b, int64_t t, int32_t *tok, int32_t *tg) {
  for (int64_t r = 0; r < b; r++) {
    uint64_t key = batch_key(d, step, micro, (uint64_t)r);
    for (int64_t i = 0; i <= t; i++) {
      int32_t v = (int32_t)(ops_mix64(key ^ ops_mix64((uint64_t)i)) % (uint64_t)d->vocab);
      if (i < t) tok[r * t + i] = v;
      if (i > 0) tg[r * t + i - 1] = v;
    }
  }
  return 0;
}

static int text_fill(CpuData *d, int64_t step, int64_t micro, int64_t b, int64_t t, int32_t *tok, int32_t *tg) {
  if (d->ntext < t + 2) return -1;
  for (int64_t r = 0; r < b; r++) {
    int64_t off = (int64_t)(batch_key(d, step, micro, (uint64_t)r) % (uint64_t)(d->ntext - t - 1));
    for (int64_t i = 0; i < t; i++) {
      tok[r * t + i] = d->text[off + i];
      tg[r * t + i] = d->text[off + i + 1];
    }
  }
  return 0;
}

static void text_free(CpuData *d) {
  free(d->text);
  d->text = NULL;
}

int cpu_data_open(CpuData *d, uint64_t seed, int64_t vocab, int64_t seq_length, const char *path, char *err, size_t nerr) {
  memset(d, 0, sizeof *d);
  d->seed = seed;
  d->vocab = vocab;
  if (!path) {
    d->fill = mock_fill;
    return 0;
  }
  if (vocab < 256) {
    snprintf(err, nerr, "data.path is read as bytes and needs model.vocab_size >= 256 (it is %lld)", (long long)vocab);
    return -1;
  }
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, nerr, "cannot open data.path %s", path);
    return -1;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  d->text = n > 0 ? malloc((size_t)n) : NULL;
  if (!d->text || fread(d->text, 1, (size_t)n, f) != (size_t)n) {
    fclose(f);
    free(d->text);
    snprintf(err, nerr, "cannot read data.path %s", path);
    return -1;
  }
  fclose(f);
  d->ntext = n;
  if (n < seq_length + 2) {
    free(d->text);
    snprintf(err, nerr, "data.path %s has %ld bytes, fewer than seq_length + 2", path, n);
    return -1;
  }
  d->fill = text_fill;
  d->free = text_free;
  return 0;
}

int cpu_data_feed(CpuExec *e, const Graph *g, CpuData *d, int64_t step, int64_t micro, int32_t *tok, int32_t *tg) {
  const Tensor *t = &g->t[g->tokens];
  int64_t b = t->shape[0], T = t->shape[1];
  if (d->fill(d, step, micro, b, T, tok, tg) != 0) return -1;
  memcpy(cpu_exec_ptr(e, g->tokens), tok, (size_t)(b * T) * sizeof *tok);
  memcpy(cpu_exec_ptr(e, g->targets), tg, (size_t)(b * T) * sizeof *tg);
  return 0;
}
