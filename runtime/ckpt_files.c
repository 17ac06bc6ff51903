/* ckpt_files.c — a checkpoint directory's files (ckpt_state.h): state.json read safely, and
 * whether a save may replace a directory. A save swaps its new directory in with one rename and
 * removes what was there, so anything but a checkpoint (or nothing) there is refused: a user's
 * folder, an artifact, a checkpoint with a stranger's file added are never removed. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/ckpt_state.h"
#include "runtime/safe_file.h"

int ckpt_state_read(const char *dir, char *text, size_t cap, size_t *n, bool *truncated, char *err,
                    size_t nerr) {
  char path[1100];
  snprintf(path, sizeof path, "%s/state.json", dir);
  FILE *f = rt_open_regular(path, RT_NOFOLLOW, 0, NULL, err, nerr);
  if (!f) return -1;
  *n = fread(text, 1, cap - 1, f);
  *truncated = fgetc(f) != EOF;
  int bad = ferror(f);
  fclose(f);
  text[*n] = 0;
  if (bad) snprintf(err, nerr, "cannot read %s", path);
  return bad ? -1 : 0;
}

bool ckpt_is_own_file(const char *name, bool partial) {
  char base[96];
  size_t n = strlen(name);
  if (n >= sizeof base) return false;
  memcpy(base, name, n + 1);
  if (partial && n > 4 && !strcmp(base + n - 4, ".tmp")) base[n - 4] = 0;
  if (!strcmp(base, "state.json") || !strcmp(base, "model.safetensors") ||
      !strcmp(base, "optimizer.safetensors"))
    return true;
  static const char *const ranked[] = {"optimizer.rank", "shard.rank"};
  for (int k = 0; k < 2; k++) {
    size_t len = strlen(ranked[k]);
    const char *r = base + len;
    if (strncmp(base, ranked[k], len) || !*r) continue;
    size_t digits = strspn(r, "0123456789");
    return digits > 0 && digits < 8 && !strcmp(r + digits, ".safetensors");
  }
  return false;
}

/* The first entry of dir that is not a checkpoint's regular file, into bad (""); whether it holds
 * state.json; its entries' count. -1 when dir cannot be read. */
static int scan(const char *dir, bool partial, char *bad, size_t nbad, bool *state, int *entries) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  bad[0] = 0, *state = false, *entries = 0;
  for (struct dirent *e; !bad[0] && (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    ++*entries;
    char p[1400];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (!ckpt_is_own_file(e->d_name, partial))
      snprintf(bad, nbad, "%s, which no checkpoint holds", e->d_name);
    else if (lstat(p, &sb) != 0 || !S_ISREG(sb.st_mode))
      snprintf(bad, nbad, "%s, which is not a regular file", e->d_name);
    else if (!strcmp(e->d_name, "state.json"))
      *state = true;
  }
  closedir(d);
  return 0;
}

int ckpt_dir_replaceable(const char *dir, bool partial, char *err, size_t nerr) {
  struct stat sb;
  if (lstat(dir, &sb) != 0) {
    if (errno == ENOENT) return 0;
    return snprintf(err, nerr, "cannot check %s: %s", dir, strerror(errno)), -1;
  }
  if (!S_ISDIR(sb.st_mode))
    return snprintf(err, nerr, "%s exists and is %s, not a checkpoint directory: refusing to replace it%s",
                    dir, rt_file_kind(sb.st_mode),
                    S_ISLNK(sb.st_mode) ? " (a symbolic link is not followed)" : ""),
           -1;
  char bad[200];
  bool state;
  int entries;
  if (scan(dir, partial, bad, sizeof bad, &state, &entries) != 0)
    return snprintf(err, nerr, "cannot read %s: %s", dir, strerror(errno)), -1;
  const char *how = partial ? "the staging directory of a save" : "a stepc checkpoint";
  if (bad[0])
    return snprintf(err, nerr,
                    "%s holds %s: it is not %s, refusing to replace it (save into a new or empty directory, "
                    "or over an "
                    "earlier checkpoint)",
                    dir, bad, how),
           -1;
  if (partial || entries == 0) return 0;
  char text[STEPC_STATE_MAX_BYTES], why[300];
  size_t n = 0;
  bool more = false;
  CkptState cs;
  if (state && ckpt_state_read(dir, text, sizeof text, &n, &more, why, sizeof why) == 0 &&
      ckpt_state_parse(text, n, more, &cs, why, sizeof why) == 0)
    return 0;
  if (!state) snprintf(why, sizeof why, "it has no state.json");
  return snprintf(
             err, nerr,
             "%s is not a stepc checkpoint (%s): refusing to replace it (save into a new or empty directory)",
             dir, why),
         -1;
}
