/* cache_dir.c — where the artifact cache lives, made so that no other user can plant a library in
 * it: stepc's own directories are created 0700 and refused unless they are this user's and
 * writable by nobody else, and a path through a shared directory (/tmp) is checked all the way. */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/cache.h"

/* A directory stepc owns: a real directory of this user's that no one else may write. */
static int check_own(const char *p, char *err, size_t nerr) {
  struct stat sb;
  if (lstat(p, &sb) != 0) return snprintf(err, nerr, "%s: %s", p, strerror(errno)), -1;
  if (S_ISLNK(sb.st_mode))
    return snprintf(err, nerr, "%s is a symbolic link: the artifact cache must be a real directory", p), -1;
  if (!S_ISDIR(sb.st_mode)) return snprintf(err, nerr, "%s is not a directory", p), -1;
  if (sb.st_uid != geteuid())
    return snprintf(err, nerr,
                    "%s belongs to uid %ld, not to this user (uid %ld): another user could put code there", p,
                    (long)sb.st_uid, (long)geteuid()),
           -1;
  if (sb.st_mode & (S_IWGRP | S_IWOTH))
    return snprintf(err, nerr, "%s is writable by %s (mode %03o): another user could put code there", p,
                    sb.st_mode & S_IWOTH ? "every user" : "its group", (unsigned)(sb.st_mode & 0777)),
           -1;
  return 0;
}

/* A directory above stepc's own: anyone's, as long as no one else can replace what lies below. */
static int check_above(const char *p, bool *shared, char *err, size_t nerr) {
  struct stat sb;
  if (stat(p, &sb) != 0) return snprintf(err, nerr, "%s: %s", p, strerror(errno)), -1;
  if (!S_ISDIR(sb.st_mode)) return snprintf(err, nerr, "%s is not a directory", p), -1;
  if ((sb.st_mode & S_IWOTH) && !(sb.st_mode & S_ISVTX))
    return snprintf(err, nerr,
                    "%s is writable by every user and not sticky: another user could replace the cache", p),
           -1;
  *shared = (sb.st_mode & S_IWOTH) != 0; /* /tmp: what lies in it must be ours */
  return 0;
}

int cache_dir_check(const char *path, size_t own, char *err, size_t nerr) {
  char p[PATH_MAX];
  if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p)
    return snprintf(err, nerr, "%s: path too long", path), -1;
  size_t n = strlen(p);
  bool shared = false;
  for (size_t i = 1; i <= n; i++) {
    if (i < n && p[i] != '/') continue;
    if (p[i - 1] == '/') continue; /* "a//b" */
    char c = p[i];
    p[i] = 0;
    bool created = mkdir(p, 0700) == 0;
    if (!created && errno != EEXIST) {
      snprintf(err, nerr, "cannot create %s: %s", p, strerror(errno));
      return -1;
    }
    bool strict = i > own || shared || created;
    int rc = strict ? check_own(p, err, nerr) : check_above(p, &shared, err, nerr);
    if (strict) shared = false;
    p[i] = c;
    if (rc != 0) return -1;
  }
  return 0;
}

/* s without its trailing slashes, into buf ("/" stays "/"). */
static const char *trim(const char *s, char *buf, size_t n) {
  snprintf(buf, n, "%s", s);
  for (size_t k = strlen(buf); k > 1 && buf[k - 1] == '/';)
    buf[--k] = 0;
  return buf;
}

int cache_root(char *out, size_t n, char *err, size_t nerr) {
  const char *v = getenv("STEPC_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME"),
             *t = getenv("TMPDIR");
  char base[PATH_MAX], cwd[PATH_MAX] = "";
  size_t own;
  if (v && v[0]) {
    trim(v, base, sizeof base);
    const char *slash = strrchr(base, '/');
    own = slash ? (size_t)(slash - base) : 0;
    snprintf(out, n, "%s/artifacts", base);
  } else if (x && x[0]) {
    own = strlen(trim(x, base, sizeof base));
    snprintf(out, n, "%s/stepc/artifacts", base);
  } else if (h && h[0]) {
    own = strlen(trim(h, base, sizeof base)) + strlen("/.cache");
    snprintf(out, n, "%s/.cache/stepc/artifacts", base);
  } else { /* cron, systemd, env -i: a directory of this user's in the shared temporary folder */
    own = strlen(trim(t && t[0] == '/' ? t : "/tmp", base, sizeof base));
    snprintf(out, n, "%s/stepc-%ld/artifacts", base, (long)geteuid());
  }
  if (out[0] != '/') { /* relative: check it from the root like any other */
    if (!getcwd(cwd, sizeof cwd))
      return snprintf(err, nerr, "cannot read the current directory: %s", strerror(errno)), -1;
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "%s", out);
    if (snprintf(out, n, "%s/%s", cwd, rel) >= (int)n)
      return snprintf(err, nerr, "%s: path too long", rel), -1;
    own += strlen(cwd) + 1;
  }
  return cache_dir_check(out, own, err, nerr);
}
