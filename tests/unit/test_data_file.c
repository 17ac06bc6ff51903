/* test_data_file.c — data.path read while it changes (runtime/cpu/data.c): a file truncated after
 * the run opened it makes the next draw fail with a message that says so (it used to be mapped,
 * and a draw past the new end was a SIGBUS that killed the process); a file that keeps its size
 * draws the same windows as before, and reading whole windows of its bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/cpu/data.h"

static int fails;

/* A failed check, printed with the data source's last message. */
static void check(int ok, const char *what, const CpuData *d) {
  if (ok) return;
  printf("FAIL: %s (%s)\n", what, d->err);
  fails++;
}

enum { T = 64, B = 4, BYTES = 1 << 20 };

static int write_text(const char *path) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  for (int i = 0; i < BYTES; i++)
    fputc('a' + i % 26, f);
  return fclose(f);
}

int main(void) {
  char path[] = "/tmp/stepc_test_data.XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0 || write_text(path) != 0) return printf("FAIL: cannot write %s\n", path), 1;
  close(fd);
  CpuData d;
  char err[512] = "";
  int32_t tok[B * T], tg[B * T];
  if (cpu_data_open(&d, 7, 256, T, path, err, sizeof err) != 0) return printf("FAIL: open: %s\n", err), 1;
  check(d.fill(&d, 1, 0, B, T, tok, tg) == 0, "the first draw failed", &d);
  /* the windows are the file's bytes: each target the next byte */
  int ok = 1;
  for (int i = 0; i < B * T; i++)
    ok &= tok[i] >= 'a' && tok[i] <= 'z' && tg[i] == 'a' + (tok[i] - 'a' + 1) % 26;
  check(ok, "the window is not the file's bytes", &d);
  /* truncated under the run: every later draw past the new end is an error, not a signal */
  check(truncate(path, 100) == 0, "cannot truncate the file", &d);
  int failed = 0;
  for (int step = 2; step < 40 && !failed; step++)
    failed = d.fill(&d, step, 0, B, T, tok, tg) != 0;
  check(failed, "no draw failed after the file shrank to 100 bytes", &d);
  check(strstr(d.err, "truncated") != NULL, "the message does not say the file was truncated", &d);
  d.free(&d);
  remove(path);
  if (fails) return printf("%d check(s) failed\n", fails), 1;
  printf("data.path truncated during a run: an error with a message\n");
  return 0;
}
