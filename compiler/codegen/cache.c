/* cache.c — where artifacts are built: the cache behind `stepc run SPEC` (artifact_build_cached)
 * and `stepc build -o DIR` (artifact_build_dir), both built in a fresh directory and moved into
 * place whole. */
#define _GNU_SOURCE /* renameat2, O_DIRECTORY */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/layout.h"
#include "codegen/artifact.h"
#include "codegen/cache.h"
#include "ir.h"
#include "runtime/image.h"

/* FNV-1a of a file's bytes, continued from h; h unchanged with *ok = 0 when it cannot be read. */
static uint64_t hash_file(uint64_t h, const char *path, int *ok) {
  FILE *f = fopen(path, "rb");
  if (!f) return *ok = 0, h;
  char buf[1 << 16];
  size_t k;
  while ((k = fread(buf, 1, sizeof buf, f)) > 0)
    h = ir_fnv1a(h, buf, k);
  fclose(f);
  return h;
}

static int rm_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
  (void)sb, (void)type, (void)ftw;
  return remove(path);
}
static void rm_rf(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* The key: what the artifact runs, and everything the link step reads besides it: the runtime's
 * archives and headers wherever this stepc finds them (an installed stepc and a build tree's may
 * differ), the C compiler CC names, and this stepc itself (its link line and version script). */
static int cache_key(const char *tmp, uint64_t *key, char *err, size_t nerr) {
  StepcLayout lay;
  if (stepc_layout_self(&lay, err, nerr) != 0 || stepc_layout_check(&lay, err, nerr) != 0) return -1;
  const char *files[] = {STEPC_IMAGE_FILE, "kernels.cu"};
  uint64_t h = IR_FNV_OFFSET;
  int ok = 1;
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", tmp, files[i]);
    h = hash_file(h, p, &ok);
  }
  const char *linked[] = {lay.rt_archive, lay.ir_archive, lay.api_header, "/proc/self/exe"};
  for (size_t i = 0; i < sizeof linked / sizeof linked[0]; i++)
    h = hash_file(h, linked[i], &ok);
  const char *cc = getenv("CC");
  if (cc && cc[0]) h = ir_fnv1a(h, cc, strlen(cc) + 1);
  if (!ok) return snprintf(err, nerr, "cannot read the artifact's files or this stepc's runtime files"), -1;
  *key = h;
  return 0;
}

int artifact_build_cached(const Spec *raw, const Spec *spec, const ArtifactOptions *o, DiagList *d,
                          FILE *progress, char *dir, size_t ndir, char *err, size_t nerr) {
  char root[PATH_MAX], tmp[PATH_MAX + 32], why[400];
  if (cache_root(root, sizeof root, why, sizeof why) != 0)
    return snprintf(err, nerr,
                    "refusing the artifact cache: %s (set STEPC_CACHE_DIR to a directory of your own)", why),
           ARTIFACT_ERROR;
  snprintf(tmp, sizeof tmp, "%s/building.XXXXXX", root);
  if (!mkdtemp(tmp))
    return snprintf(err, nerr, "cannot create a directory in %s: %s", root, strerror(errno)), ARTIFACT_ERROR;
  ArtifactOptions bo = *o;
  bo.dir = tmp, bo.no_link = true;
  int rc = artifact_build(raw, spec, &bo, d, progress, err, nerr);
  if (rc != ARTIFACT_OK) {
    rm_rf(tmp);
    return rc;
  }
  uint64_t h;
  if (cache_key(tmp, &h, err, nerr) != 0) {
    rm_rf(tmp);
    return ARTIFACT_ERROR;
  }
  snprintf(dir, ndir, "%s/%016llx", root, (unsigned long long)h);
  if (cache_entry_ok(dir, why, sizeof why)) {
    rm_rf(tmp);
    if (progress) fprintf(progress, "run: the artifact is cached in %s\n", dir);
    return ARTIFACT_OK;
  }
  if (progress && strcmp(why, "not built yet") != 0)
    fprintf(progress, "run: the cached artifact in %s is not used (%s): building it again\n", dir, why);
  if ((rc = artifact_link(&bo, progress, err, nerr)) != ARTIFACT_OK) {
    rm_rf(tmp);
    return rc;
  }
  if (cache_manifest_write(tmp) != 0) { /* last: an entry without it is never used */
    rm_rf(tmp);
    return snprintf(err, nerr, "cannot write the manifest of the artifact in %s: %s", tmp, strerror(errno)),
           ARTIFACT_ERROR;
  }
  rm_rf(dir); /* a damaged or unfinished entry */
  if (rename(tmp, dir) != 0) {
    rm_rf(tmp);
    /* another stepc finished the same artifact first */
    if (!cache_entry_ok(dir, why, sizeof why))
      return snprintf(err, nerr, "cannot move the artifact to %s: %s", dir, strerror(errno)), ARTIFACT_ERROR;
  }
  if (progress) fprintf(progress, "run: built the artifact in %s\n", dir);
  return ARTIFACT_OK;
}

/* ---- stepc build -o DIR ---- */

int artifact_build_dir(const Spec *raw, const Spec *spec, const ArtifactOptions *o, DiagList *d,
                       FILE *progress, char *err, size_t nerr) {
  const char *dir = o->dir;
  char parent[PATH_MAX], tmp[PATH_MAX + 64];
  struct stat sb;
  int exists = lstat(dir, &sb) == 0;
  if (exists && S_ISLNK(sb.st_mode))
    return snprintf(
               err, nerr,
               "%s is a symbolic link: stepc build writes a directory of its own there, give its real path",
               dir),
           ARTIFACT_ERROR;
  if (exists && !S_ISDIR(sb.st_mode))
    return snprintf(err, nerr, "%s exists and is not a directory", dir), ARTIFACT_ERROR;
  if (exists && artifact_dir_replaceable(dir, err, nerr) != 0) return ARTIFACT_ERROR;
  /* the parent, where the new artifact is built beside the old one and swapped in */
  snprintf(parent, sizeof parent, "%s", dir);
  size_t n = strlen(parent);
  while (n > 1 && parent[n - 1] == '/')
    parent[--n] = 0;
  char *slash = strrchr(parent, '/');
  const char *base = slash ? slash + 1 : parent;
  if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
    return snprintf(err, nerr, "%s: name the artifact's directory itself", dir), ARTIFACT_ERROR;
  char name[PATH_MAX];
  snprintf(name, sizeof name, "%s", base);
  if (slash == parent)
    snprintf(parent, sizeof parent, "/");
  else if (slash)
    *slash = 0;
  else
    snprintf(parent, sizeof parent, ".");
  if (artifact_mkdirs(parent) != 0)
    return snprintf(err, nerr, "cannot create %s: %s", parent, strerror(errno)), ARTIFACT_ERROR;
  /* one build at a time into this folder: a second waits rather than interleaving its files */
  int lk = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (lk < 0 || flock(lk, LOCK_EX) != 0) {
    if (lk >= 0) close(lk);
    return snprintf(err, nerr, "cannot lock %s: %s", parent, strerror(errno)), ARTIFACT_ERROR;
  }
  snprintf(tmp, sizeof tmp, "%s/.%s.building.XXXXXX", parent, name);
  int rc = ARTIFACT_ERROR;
  if (!mkdtemp(tmp)) {
    snprintf(err, nerr, "cannot create a directory in %s: %s", parent, strerror(errno));
    goto out;
  }
  ArtifactOptions bo = *o;
  bo.dir = tmp;
  if ((rc = artifact_build(raw, spec, &bo, d, progress, err, nerr)) != ARTIFACT_OK) {
    rm_rf(tmp); /* DIR is as it was */
    goto out;
  }
  exists = lstat(dir, &sb) == 0;
  /* swap atomically: at every moment DIR is the old artifact or the new one, never a mixture */
  if (exists ? renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) : rename(tmp, dir)) {
    snprintf(err, nerr, "cannot move the new artifact to %s: %s", dir, strerror(errno));
    rm_rf(tmp);
    rc = ARTIFACT_ERROR;
    goto out;
  }
  if (exists) rm_rf(tmp); /* now the old artifact */
out:
  flock(lk, LOCK_UN);
  close(lk);
  return rc;
}
