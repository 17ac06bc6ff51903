/* cache_manifest.c — a cache entry's manifest: the size and SHA-256 of each of its files, written
 * last, so that an entry is used only when it is whole (a build that died, a truncated libstep.so,
 * a missing file or a flipped bit all fail the check, and the entry is built again). */
#define _GNU_SOURCE /* O_NOFOLLOW, O_CLOEXEC */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/cache.h"
#include "runtime/image.h"

#define MANIFEST_HEAD "stepc cache manifest 1\n"

void sha256_hex(Sha256 *s, char out[65]) {
  unsigned char d[SHA256_BYTES];
  sha256_final(s, d);
  for (int i = 0; i < SHA256_BYTES; i++)
    snprintf(out + 2 * i, 3, "%02x", d[i]);
  out[64] = 0;
}

/* Size and SHA-256 of DIR/NAME, a regular file of this user's opened without following a link.
 * 0, or -1 with the reason in why. */
static int file_sum(const char *dir, const char *name, long long *size, char hex[65], char *why,
                    size_t nwhy) {
  char p[PATH_MAX + 256];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  int fd = open(p, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0) {
    snprintf(why, nwhy, "%s: %s", name, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  if (!S_ISREG(sb.st_mode) || sb.st_uid != geteuid() || (sb.st_mode & (S_IWGRP | S_IWOTH))) {
    snprintf(why, nwhy, "%s is not a regular file of this user's that only this user may write", name);
    close(fd);
    return -1;
  }
  Sha256 s;
  sha256_init(&s);
  char buf[1 << 16];
  ssize_t k;
  long long total = 0;
  while ((k = read(fd, buf, sizeof buf)) > 0)
    sha256_update(&s, buf, (size_t)k), total += k;
  close(fd);
  if (k < 0) return snprintf(why, nwhy, "%s: %s", name, strerror(errno)), -1;
  sha256_hex(&s, hex);
  *size = total;
  return 0;
}

int cache_manifest_write(const char *dir) {
  char p[PATH_MAX + 64], tmp[PATH_MAX + 64], why[300], hex[65];
  snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, CACHE_MANIFEST);
  snprintf(p, sizeof p, "%s/%s", dir, CACHE_MANIFEST);
  DIR *d = opendir(dir);
  FILE *f = d ? fopen(tmp, "w") : NULL;
  if (!f) {
    if (d) closedir(d);
    return -1;
  }
  fputs(MANIFEST_HEAD, f);
  int rc = 0;
  for (struct dirent *e; rc == 0 && (e = readdir(d));) {
    if (e->d_name[0] == '.' || !strcmp(e->d_name, CACHE_MANIFEST)) continue;
    long long size;
    if (file_sum(dir, e->d_name, &size, hex, why, sizeof why) != 0)
      rc = -1, errno = EINVAL;
    else
      fprintf(f, "%s %lld %s\n", hex, size, e->d_name);
  }
  closedir(d);
  if (fclose(f) != 0) rc = -1;
  if (rc == 0 && rename(tmp, p) != 0) rc = -1;
  if (rc != 0) unlink(tmp);
  return rc;
}

/* Checks one manifest line "HEX SIZE NAME"; notes whether it names libstep.so or step.img. */
static int check_line(const char *dir, char *line, int *need, char *why, size_t nwhy) {
  char want[65], hex[65], name[256];
  long long size, got;
  line[strcspn(line, "\n")] = 0;
  if (sscanf(line, "%64s %lld %255s", want, &size, name) != 3 || strchr(name, '/') || name[0] == '.')
    return snprintf(why, nwhy, "the manifest has a malformed line"), -1;
  if (file_sum(dir, name, &got, hex, why, nwhy) != 0) return -1;
  if (got != size || strcmp(hex, want) != 0)
    return snprintf(why, nwhy, "%s does not match its checksum (%lld bytes, %lld expected)", name, got, size),
           -1;
  *need |= !strcmp(name, "libstep.so") ? 1 : !strcmp(name, STEPC_IMAGE_FILE) ? 2 : 0;
  return 0;
}

int cache_entry_ok(const char *dir, char *why, size_t nwhy) {
  struct stat sb;
  if (lstat(dir, &sb) != 0) return snprintf(why, nwhy, "not built yet"), 0;
  if (!S_ISDIR(sb.st_mode) || sb.st_uid != geteuid() || (sb.st_mode & (S_IWGRP | S_IWOTH)))
    return snprintf(why, nwhy, "it is not a directory of this user's that only this user may write"), 0;
  char p[PATH_MAX + 64], line[512];
  snprintf(p, sizeof p, "%s/%s", dir, CACHE_MANIFEST);
  int fd = open(p, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  bool mine = fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == geteuid() &&
              !(sb.st_mode & (S_IWGRP | S_IWOTH));
  FILE *f = mine ? fdopen(fd, "r") : NULL;
  if (!f) {
    if (fd >= 0) close(fd);
    return snprintf(why, nwhy, "it has no manifest (an unfinished or foreign entry)"), 0;
  }
  int need = 0, ok = fgets(line, sizeof line, f) && !strcmp(line, MANIFEST_HEAD);
  if (!ok) snprintf(why, nwhy, "its manifest is damaged");
  while (ok && fgets(line, sizeof line, f))
    ok = check_line(dir, line, &need, why, nwhy) == 0;
  fclose(f);
  if (ok && need != 3)
    snprintf(why, nwhy, "its manifest does not list libstep.so and %s", STEPC_IMAGE_FILE), ok = 0;
  return ok;
}
