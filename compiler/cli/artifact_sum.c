/* artifact_sum.c — libstep.so's size and hash beside it (artifact_sum.h). */
#include "cli/artifact_sum.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/safe_file.h"

int artifact_sum_write(const char *dir, char *err, size_t nerr) {
  char lib[4200], sum[4200];
  snprintf(lib, sizeof lib, "%s/libstep.so", dir);
  snprintf(sum, sizeof sum, "%s/%s", dir, ARTIFACT_SUM_FILE);
  uint64_t n, h;
  if (rt_file_fnv1a(lib, RT_FOLLOW, &h, &n, err, nerr) != 0) return -1;
  FILE *f = fopen(sum, "w");
  int ok = f && fprintf(f, "libstep.so %llu %016llx\n", (unsigned long long)n, (unsigned long long)h) > 0;
  if (f && fclose(f) != 0) ok = 0;
  return ok ? 0 : (snprintf(err, nerr, "cannot write %s", sum), -1);
}

int artifact_sum_check(const char *dir, char *why, size_t nwhy) {
  char lib[4200], sum[4200];
  snprintf(lib, sizeof lib, "%s/libstep.so", dir);
  snprintf(sum, sizeof sum, "%s/%s", dir, ARTIFACT_SUM_FILE);
  struct stat sb;
  if (lstat(sum, &sb) != 0)
    return snprintf(why, nwhy, "%s is missing (an artifact of an older stepc, or damaged)", sum), -1;
  FILE *f = rt_open_regular(sum, RT_FOLLOW, 4096, NULL, why, nwhy);
  long long want_n = -1;
  unsigned long long want_h = 0;
  uint64_t n, h;
  if (!f) return -1; /* why names it: a FIFO, a directory, ... */
  int got = fscanf(f, "libstep.so %lld %16llx", &want_n, &want_h);
  fclose(f);
  if (got != 2) return snprintf(why, nwhy, "%s is malformed (damaged): rebuild the artifact", sum), -1;
  if (rt_file_fnv1a(lib, RT_FOLLOW, &h, &n, why, nwhy) != 0) return -1;
  if ((long long)n != want_n || h != want_h)
    return snprintf(why, nwhy,
                    "%s is damaged: %lld bytes with hash %016llx, %s records %lld bytes with hash %016llx "
                    "(truncated or "
                    "changed since stepc build)",
                    lib, (long long)n, (unsigned long long)h, ARTIFACT_SUM_FILE, want_n, want_h),
           -1;
  return 0;
}
