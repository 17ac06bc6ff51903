/* data.c — micro-batch sources (data.h): mock tokens and byte-level text. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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
  if (d->text) munmap(d->text, (size_t)d->ntext);
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
  /* the user's file, mapped (never read whole into memory); O_NONBLOCK so that a FIFO cannot
   * hang the open; anything but a regular file is refused */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0) {
    snprintf(err, nerr, "cannot open data.path %s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    snprintf(err, nerr, "data.path %s is not a regular file (%s)", path, S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode) ? "a FIFO" : "a device or socket");
    return -1;
  }
  int64_t n = (int64_t)sb.st_size;
  if (n < seq_length + 2) {
    close(fd);
    snprintf(err, nerr, "data.path %s has %lld bytes, fewer than seq_length + 2", path, (long long)n);
    return -1;
  }
  void *m = mmap(NULL, (size_t)n, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    snprintf(err, nerr, "cannot map data.path %s: %s", path, strerror(errno));
    return -1;
  }
  d->text = m;
  d->ntext = n;
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
