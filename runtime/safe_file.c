/* safe_file.c — safe_file.h. */
#include "runtime/safe_file.h"

#include "ir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *rt_file_kind(unsigned mode) {
  switch (mode & S_IFMT) {
  case S_IFREG: return "a regular file";
  case S_IFDIR: return "a directory";
  case S_IFLNK: return "a symbolic link";
  case S_IFIFO: return "a FIFO";
  case S_IFCHR: return "a character device";
  case S_IFBLK: return "a block device";
  case S_IFSOCK: return "a socket";
  default: return "not a regular file";
  }
}

FILE *rt_open_regular(const char *path, int follow, uint64_t max_bytes, uint64_t *size, char *err,
                      size_t nerr) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
  if (fd < 0) {
    if (errno == ELOOP && !follow)
      snprintf(err, nerr, "%s is a symbolic link (not followed here)", path);
    else
      snprintf(err, nerr, "cannot open %s: %s", path, strerror(errno));
    return NULL;
  }
  struct stat sb;
  const char *why = NULL;
  if (fstat(fd, &sb) != 0)
    why = strerror(errno);
  else if (!S_ISREG(sb.st_mode))
    why = rt_file_kind(sb.st_mode);
  if (why)
    snprintf(err, nerr, "%s is %s, not a regular file: refused", path, why);
  else if (max_bytes && (uint64_t)sb.st_size > max_bytes)
    snprintf(err, nerr, "%s is %lld bytes, more than the %llu this file may hold", path,
             (long long)sb.st_size, (unsigned long long)max_bytes),
        why = "too large";
  /* a regular file: reads block as usual from here on */
  if (!why && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
    snprintf(err, nerr, "cannot read %s", path), why = "fcntl";
  FILE *f = why ? NULL : fdopen(fd, "rb");
  if (!f) {
    if (!why) snprintf(err, nerr, "cannot read %s: %s", path, strerror(errno));
    close(fd);
    return NULL;
  }
  if (size) *size = (uint64_t)sb.st_size;
  return f;
}

int rt_check_replaceable(const char *path, char *err, size_t nerr) {
  struct stat sb;
  if (lstat(path, &sb) != 0) {
    if (errno == ENOENT) return 0;
    snprintf(err, nerr, "cannot check %s: %s", path, strerror(errno));
    return -1;
  }
  if (S_ISREG(sb.st_mode)) return 0;
  snprintf(err, nerr, "%s exists and is %s: refusing to replace it (only a regular file is written over)",
           path, rt_file_kind(sb.st_mode));
  return -1;
}

int rt_file_fnv1a(const char *path, int follow, uint64_t *hash, uint64_t *bytes, char *err, size_t nerr) {
  FILE *f = rt_open_regular(path, follow, 0, NULL, err, nerr);
  if (!f) return -1;
  unsigned char *buf = malloc(1 << 20);
  size_t k;
  *hash = IR_FNV_OFFSET, *bytes = 0;
  while (buf && (k = fread(buf, 1, 1 << 20, f)) > 0)
    *hash = ir_fnv1a(*hash, buf, k), *bytes += k;
  int bad = !buf || ferror(f);
  free(buf);
  fclose(f);
  if (bad) snprintf(err, nerr, "cannot read %s", path);
  return bad ? -1 : 0;
}
