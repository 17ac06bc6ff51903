/* data.c — micro-batch sources (data.h): mock tokens and byte-level text. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ops/ops.h"
#include "runtime/cpu/data.h"

static uint64_t batch_key(const CpuData *d, int64_t step, int64_t micro, int64_t row) {
  if (d->fixed) step = 0;
  return ops_mix64(ops_mix64(ops_mix64(d->seed ^ 0xda7a) ^ (uint64_t)step) ^ ((uint64_t)micro << 24) ^
                   (uint64_t)row);
}

static int mock_fill(CpuData *d, int64_t step, int64_t micro, int64_t b, int64_t t, int32_t *tok,
                     int32_t *tg) {
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

/* Bytes [off, off + n) of the file into d->text: -1 with d->err when the file no longer holds
 * them (truncated or replaced since it was opened). */
static int text_read(CpuData *d, int64_t off, int64_t n) {
  int64_t got = 0;
  while (got < n) {
    ssize_t k = pread(d->fd, d->text + got, (size_t)(n - got), (off_t)(off + got));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      snprintf(d->err, sizeof d->err,
               "data.path: reading %lld bytes at offset %lld %s (the file had %lld bytes when the run opened "
               "it: it was truncated or replaced during the run)",
               (long long)n, (long long)off, k < 0 ? strerror(errno) : "reached the end of the file",
               (long long)d->ntext);
      return -1;
    }
    got += k;
  }
  return 0;
}

static int text_fill(CpuData *d, int64_t step, int64_t micro, int64_t b, int64_t t, int32_t *tok,
                     int32_t *tg) {
  if (d->ntext < t + 2 || t + 1 > d->nwin) {
    snprintf(d->err, sizeof d->err, "data.path: a window of %lld tokens does not fit the file's %lld bytes",
             (long long)t, (long long)d->ntext);
    return -1;
  }
  for (int64_t r = 0; r < b; r++) {
    int64_t off = (int64_t)(batch_key(d, step, micro, (uint64_t)r) % (uint64_t)(d->ntext - t - 1));
    if (text_read(d, off, t + 1) != 0) return -1;
    for (int64_t i = 0; i < t; i++) {
      tok[r * t + i] = d->text[i];
      tg[r * t + i] = d->text[i + 1];
    }
  }
  return 0;
}

static void text_free(CpuData *d) {
  free(d->text);
  if (d->fd >= 0) close(d->fd);
  d->text = NULL;
  d->fd = -1;
}

int cpu_data_open(CpuData *d, uint64_t seed, int64_t vocab, int64_t seq_length, const char *path, char *err,
                  size_t nerr) {
  memset(d, 0, sizeof *d);
  d->seed = seed;
  d->vocab = vocab;
  d->fd = -1;
  if (!path) {
    d->fill = mock_fill;
    return 0;
  }
  if (vocab < 256) {
    snprintf(err, nerr, "data.path is read as bytes and needs model.vocab_size >= 256 (it is %lld)",
             (long long)vocab);
    return -1;
  }
  if (seq_length < 1 || seq_length > ((int64_t)1 << 30)) {
    snprintf(err, nerr, "data.path: seq_length %lld is out of range [1, 2^30]", (long long)seq_length);
    return -1;
  }
  /* O_NONBLOCK so that a FIFO cannot hang the open; anything but a regular file is refused */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0) {
    snprintf(err, nerr, "cannot open data.path %s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    snprintf(err, nerr, "data.path %s is not a regular file (%s)", path,
             S_ISDIR(sb.st_mode)    ? "a directory"
             : S_ISFIFO(sb.st_mode) ? "a FIFO"
                                    : "a device or socket");
    return -1;
  }
  int64_t n = (int64_t)sb.st_size;
  if (n < seq_length + 2) {
    close(fd);
    snprintf(err, nerr, "data.path %s has %lld bytes, fewer than seq_length + 2", path, (long long)n);
    return -1;
  }
  if (!(d->text = malloc((size_t)seq_length + 1))) {
    close(fd);
    snprintf(err, nerr, "out of memory (a data.path window of %lld bytes)", (long long)seq_length + 1);
    return -1;
  }
  d->fd = fd;
  d->ntext = n;
  d->nwin = seq_length + 1;
  d->fill = text_fill;
  d->free = text_free;
  return 0;
}

int cpu_data_feed(CpuExec *e, const Graph *g, CpuData *d, int64_t step, int64_t micro, int32_t *tok,
                  int32_t *tg) {
  const Tensor *t = &g->t[g->tokens];
  int64_t b = t->shape[0], T = t->shape[1];
  if (d->fill(d, step, micro, b, T, tok, tg) != 0) return -1;
  memcpy(cpu_exec_ptr(e, g->tokens), tok, (size_t)(b * T) * sizeof *tok);
  memcpy(cpu_exec_ptr(e, g->targets), tg, (size_t)(b * T) * sizeof *tg);
  return 0;
}

int64_t cpu_data_count_kept(const int32_t *tg, int64_t n, int64_t vocab) {
  int64_t kept = 0;
  for (int64_t i = 0; i < n; i++)
    kept += ops_target_kept(tg[i], vocab);
  return kept;
}

int cpu_data_kept(CpuData *d, int64_t step, const int64_t *micro, int nmb, int64_t b, int64_t t, int32_t *tok,
                  int32_t *tg, int64_t *kept) {
  *kept = 0;
  for (int mb = 0; mb < nmb; mb++) {
    if (d->fill(d, step, micro[mb], b, t, tok, tg) != 0) return -1;
    *kept += cpu_data_count_kept(tg, b * t, d->vocab);
  }
  return 0;
}
