/* layout.c — where this stepc's files are (layout.h). */
#include "cli/layout.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The layout file's keys, in StepcLayout's order. */
static const char *const KEYS[] = {"rt_archive", "ir_archive", "api_header", "models"};
enum { NKEYS = sizeof KEYS / sizeof KEYS[0] };

static char *field(StepcLayout *l, int k) {
  char *f[NKEYS] = {l->rt_archive, l->ir_archive, l->api_header, l->models};
  return f[k];
}

/* dir/rel into out (rel as it is when absolute); -1 when it does not fit. */
static int join(char *out, const char *dir, const char *rel) {
  int n = rel[0] == '/' ? snprintf(out, PATH_MAX, "%s", rel) : snprintf(out, PATH_MAX, "%s/%s", dir, rel);
  return n < 0 || n >= PATH_MAX ? -1 : 0;
}

static int layout_error(char *err, size_t nerr, const char *path, int line, const char *what,
                        const char *arg) {
  snprintf(err, nerr, "%s:%d: %s%s", path, line, what, arg);
  return -1;
}

/* Reads the build tree's layout file at path (in dir); every key once. */
static int read_layout_file(FILE *f, const char *path, const char *dir, StepcLayout *l, char *err,
                            size_t nerr) {
  char buf[PATH_MAX + 64];
  int seen[NKEYS] = {0}, line = 0;
  while (fgets(buf, sizeof buf, f)) {
    line++;
    size_t n = strlen(buf);
    if (n && buf[n - 1] != '\n' && !feof(f)) return layout_error(err, nerr, path, line, "line too long", "");
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
      buf[--n] = 0;
    if (!n || buf[0] == '#') continue;
    char *sp = strchr(buf, ' ');
    if (!sp || !sp[1]) return layout_error(err, nerr, path, line, "expected `key path`, got: ", buf);
    *sp = 0;
    int k = 0;
    while (k < NKEYS && strcmp(buf, KEYS[k]))
      k++;
    if (k == NKEYS) return layout_error(err, nerr, path, line, "unknown key ", buf);
    if (join(field(l, k), dir, sp + 1) != 0)
      return layout_error(err, nerr, path, line, "path too long for ", buf);
    seen[k] = 1;
  }
  for (int k = 0; k < NKEYS; k++)
    if (!seen[k]) return layout_error(err, nerr, path, line, "no line for ", KEYS[k]);
  return 0;
}

/* PREFIX/bin/stepc's installed files. */
static int install_layout(const char *dir, StepcLayout *l) {
  static const char *const REL[NKEYS] = {"../lib/stepc/libstepc_rt.a", "../lib/stepc/libstepc_ir.a",
                                         "../include/stepc.h", "../share/stepc/models"};
  for (int k = 0; k < NKEYS; k++)
    if (join(field(l, k), dir, REL[k]) != 0) return -1;
  return 0;
}

int stepc_layout_find(const char *exe, StepcLayout *l, char *err, size_t nerr) {
  memset(l, 0, sizeof *l);
  char dir[PATH_MAX], path[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", exe);
  char *slash = strrchr(dir, '/');
  if (slash == dir)
    dir[1] = 0;
  else if (slash)
    *slash = 0;
  else
    snprintf(dir, sizeof dir, ".");
  if (join(path, dir, STEPC_LAYOUT_FILE) != 0)
    return snprintf(err, nerr, "the path of %s is too long", exe), -1;
  FILE *f = fopen(path, "r");
  if (f) {
    snprintf(l->origin, sizeof l->origin, "named by %s", path);
    int rc = read_layout_file(f, path, dir, l, err, nerr);
    fclose(f);
    return rc;
  }
  snprintf(l->origin, sizeof l->origin, "installed around %s", exe);
  if (install_layout(dir, l) != 0) return snprintf(err, nerr, "the path of %s is too long", exe), -1;
  return 0;
}

int stepc_layout_self(StepcLayout *l, char *err, size_t nerr) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0 || n >= (ssize_t)sizeof exe - 1) {
    memset(l, 0, sizeof *l);
    return snprintf(err, nerr, "cannot tell where this stepc is (/proc/self/exe)"), -1;
  }
  exe[n] = 0;
  if (stepc_layout_find(exe, l, err, nerr) != 0) return -1;
  const char *rt = getenv("STEPC_RT_ARCHIVE"), *ir = getenv("STEPC_IR_ARCHIVE");
  if (rt && rt[0]) snprintf(l->rt_archive, sizeof l->rt_archive, "%s", rt);
  if (ir && ir[0]) snprintf(l->ir_archive, sizeof l->ir_archive, "%s", ir);
  return 0;
}

int stepc_layout_check(const StepcLayout *l, char *err, size_t nerr) {
  const char *need[] = {l->rt_archive, l->ir_archive, l->api_header};
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
    if (access(need[i], R_OK) != 0)
      return snprintf(err, nerr,
                      "stepc's runtime file %s cannot be read: %s (its files are %s; docs/install.md)",
                      need[i], strerror(errno), l->origin),
             -1;
  return 0;
}

static char models_dir[PATH_MAX];
static pthread_once_t models_once = PTHREAD_ONCE_INIT;

static void find_models(void) {
  static StepcLayout l; /* large; filled once */
  char err[256];
  struct stat sb;
  if (stepc_layout_self(&l, err, sizeof err) == 0 && stat(l.models, &sb) == 0 && S_ISDIR(sb.st_mode))
    snprintf(models_dir, sizeof models_dir, "%s", l.models);
}

const char *stepc_models_dir(void) {
  pthread_once(&models_once, find_models);
  return models_dir[0] ? models_dir : NULL;
}
