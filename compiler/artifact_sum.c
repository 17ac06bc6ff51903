/* artifact_sum.c — libstep.so's size and hash beside it (artifact_sum.h). */
#include "artifact_sum.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "ir.h"
#include "runtime/safe_file.h"

/* The size and FNV-1a hash of a file, read in pieces (never mapped: a file that shrinks while it
 * is read is a short count here, not a signal). 0, or -1 when it cannot be read. */
static int file_sum(const char *path, long long *bytes, uint64_t *hash, char *err, size_t nerr) {
  FILE *f = rt_open_regular(path, RT_FOLLOW, 0, NULL, err, nerr);
  if (!f) return -1;
  unsigned char buf[1 << 16];
  uint64_t h = IR_FNV_OFFSET;
  long long n = 0;
  size_t k;
  while ((k = fread(buf, 1, sizeof buf, f)) > 0)
    h = ir_fnv1a(h, buf, k), n += (long long)k;
  int rc = ferror(f) ? -1 : 0;
  fclose(f);
  *bytes = n, *hash = h;
  return rc;
}

int artifact_sum_write(const char *dir, char *err, size_t nerr) {
  char lib[4200], sum[4200];
  snprintf(lib, sizeof lib, "%s/libstep.so", dir);
  snprintf(sum, sizeof sum, "%s/%s", dir, ARTIFACT_SUM_FILE);
  long long n;
  uint64_t h;
  if (file_sum(lib, &n, &h, err, nerr) != 0) return -1;
  FILE *f = fopen(sum, "w");
  int ok = f && fprintf(f, "libstep.so %lld %016llx\n", n, (unsigned long long)h) > 0;
  if (f && fclose(f) != 0) ok = 0;
  return ok ? 0 : (snprintf(err, nerr, "cannot write %s", sum), -1);
}

int artifact_sum_check(const char *dir, char *why, size_t nwhy) {
  char lib[4200], sum[4200];
  snprintf(lib, sizeof lib, "%s/libstep.so", dir);
  snprintf(sum, sizeof sum, "%s/%s", dir, ARTIFACT_SUM_FILE);
  struct stat sb;
  if (lstat(sum, &sb) != 0) return snprintf(why, nwhy, "%s is missing (an artifact of an older stepc, or damaged)", sum), -1;
  FILE *f = rt_open_regular(sum, RT_FOLLOW, 4096, NULL, why, nwhy);
  long long want_n = -1, n;
  unsigned long long want_h = 0;
  uint64_t h;
  if (!f) return -1; /* why names it: a FIFO, a directory, ... */
  int got = fscanf(f, "libstep.so %lld %16llx", &want_n, &want_h);
  fclose(f);
  if (got != 2) return snprintf(why, nwhy, "%s is malformed (damaged): rebuild the artifact", sum), -1;
  if (file_sum(lib, &n, &h, why, nwhy) != 0) return -1;
  if (n != want_n || h != want_h)
    return snprintf(why, nwhy,
                    "%s is damaged: %lld bytes with hash %016llx, %s records %lld bytes with hash %016llx "
                    "(truncated or "
                    "changed since stepc build)",
                    lib, n, (unsigned long long)h, ARTIFACT_SUM_FILE, want_n, want_h),
           -1;
  return 0;
}
