/* readfile.c — reading a recipe file: the top-level one the user names and those stepc.recipe(name)
 * loads. Opened without blocking (a FIFO as the recipe is refused at once, never waited on), and
 * only a regular file is read: never a FIFO, a device (/dev/zero) or a directory. A shipped recipe
 * is opened without following a symbolic link, so that a link in a recipe folder cannot make a
 * recipe read some other file (a token in ~/.config) as Lua and show it in an error. */
#define _GNU_SOURCE /* O_NOFOLLOW, O_CLOEXEC */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

static const char *kind(mode_t m) {
  return S_ISDIR(m)                 ? "a directory"
         : S_ISFIFO(m)              ? "a FIFO"
         : S_ISCHR(m) || S_ISBLK(m) ? "a device"
                                    : "a socket";
}

/* The file's bytes (NUL-terminated) from an open descriptor of a regular file, at most max. */
static char *read_all(int fd, size_t max, size_t *len, char *why, size_t nwhy) {
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  for (ssize_t k = 1; buf && k > 0;) {
    if (n + 1 == cap) {
      char *nb = cap * 2 <= max + 1 ? realloc(buf, cap * 2) : NULL;
      if (!nb) {
        free(buf);
        snprintf(why, nwhy, "larger than %zu MiB", max >> 20);
        return NULL;
      }
      buf = nb, cap *= 2;
    }
    k = read(fd, buf + n, cap - n - 1);
    if (k < 0) {
      free(buf);
      snprintf(why, nwhy, "%s", strerror(errno));
      return NULL;
    }
    n += (size_t)k;
  }
  if (!buf) return snprintf(why, nwhy, "out of memory"), NULL;
  buf[n] = 0;
  *len = n;
  return buf;
}

char *fe_read_file(const char *path, bool follow, size_t max, size_t *len, int *err, char *why, size_t nwhy) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
  struct stat sb;
  *err = 0;
  if (fd < 0) {
    *err = errno;
    if (errno == ELOOP && !follow)
      snprintf(why, nwhy, "a symbolic link (recipes are read only as plain files)");
    else
      snprintf(why, nwhy, "%s", strerror(errno));
    return NULL;
  }
  char *text = NULL;
  if (fstat(fd, &sb) != 0)
    *err = errno, snprintf(why, nwhy, "%s", strerror(errno));
  else if (!S_ISREG(sb.st_mode))
    *err = EINVAL, snprintf(why, nwhy, "not a regular file (%s)", kind(sb.st_mode));
  else if (!(text = read_all(fd, max, len, why, nwhy)))
    *err = EIO;
  close(fd);
  return text;
}
