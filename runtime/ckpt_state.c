/* ckpt_state.c — a checkpoint's state.json (ckpt_state.h). */
#include "runtime/ckpt_state.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first occurrence of pat in text that is not inside a string (an escaped quote before it:
 * the recipe path is a string in the file and may hold any text). */
static const char *find_key(const char *text, const char *pat) {
  const char *p = strstr(text, pat);
  while (p && p > text && p[-1] == '\\')
    p = strstr(p + 1, pat);
  return p;
}

/* The integer after "key": in text; -1 when absent, not a number or out of range. */
static int json_int(const char *text, const char *key, long long *v) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = find_key(text, pat);
  if (!p) return -1;
  const char *at = p + strlen(pat);
  while (*at == ' ')
    at++;
  char *end;
  errno = 0;
  *v = strtoll(at, &end, 10);
  return end == at || errno == ERANGE ? -1 : 0;
}

/* The string after "key": in text into out (escapes dropped, cut at n - 1); "" when absent. */
static void json_str(const char *text, const char *key, char *out, size_t n) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": \"", key);
  const char *p = find_key(text, pat);
  size_t k = 0;
  for (p = p ? p + strlen(pat) : NULL; p && *p && *p != '"' && k + 1 < n; p++) {
    if (*p == '\\' && p[1]) p++;
    out[k++] = *p;
  }
  out[k] = 0;
}

int ckpt_state_parse(const char *text, size_t n, bool truncated, CkptState *st, char *err, size_t nerr) {
  memset(st, 0, sizeof *st);
  const char *t0 = text, *t1 = text + n;
  while (t0 < t1 && isspace((unsigned char)*t0))
    t0++;
  while (t1 > t0 && isspace((unsigned char)t1[-1]))
    t1--;
  if (truncated || t0 == t1 || *t0 != '{' || t1[-1] != '}' || strlen(text) != n ||
      !find_key(text, "\"stepc-checkpoint\"") || json_int(text, "step", &st->step) ||
      json_int(text, "seed", &st->seed) || json_int(text, "version", &st->version)) {
    snprintf(err, nerr, "not a stepc checkpoint state (a JSON object with format, version, step and seed)");
    return -1;
  }
  if (st->version < 1 || st->version > 2) {
    snprintf(err, nerr, "checkpoint format version %lld (this library reads 1 and 2)", st->version);
    return -1;
  }
  if (st->step < 0 || st->step > (1LL << 30)) {
    snprintf(err, nerr, "step %lld is outside [0, 2^30]", st->step);
    return -1;
  }
  if (json_int(text, "world_size", &st->world) != 0) st->world = 1;
  if (st->world < 1 || st->world > (1 << 20)) {
    snprintf(err, nerr, "world_size %lld is outside [1, 2^20]", st->world);
    return -1;
  }
  if (json_int(text, "tensor_parallel", &st->tp) != 0) st->tp = 1;
  if (json_int(text, "expert_parallel", &st->ep) != 0) st->ep = 1;
  if (st->tp < 1 || st->tp > st->world || st->ep < 1 || st->ep > st->world) {
    snprintf(err, nerr, "tensor_parallel %lld or expert_parallel %lld is outside [1, world_size %lld]",
             st->tp, st->ep, st->world);
    return -1;
  }
  st->sharded = find_key(text, "\"distributed_optimizer\": true") != NULL && st->world > 1;
  json_str(text, "recipe", st->recipe, sizeof st->recipe);
  char fp[40];
  json_str(text, "step_fingerprint", fp, sizeof fp);
  if (fp[0] && (strlen(fp) != 16 || strspn(fp, "0123456789abcdef") != 16)) {
    snprintf(err, nerr, "step_fingerprint \"%s\" is not 16 hex digits", fp);
    return -1;
  }
  snprintf(st->fingerprint, sizeof st->fingerprint, "%s", fp);
  return 0;
}

int ckpt_state_file(const char *text, const char *name, unsigned long long *bytes, char sum[17]) {
  char key[160];
  snprintf(key, sizeof key, "\"%s\": {\"bytes\": ", name);
  const char *at = find_key(text, key);
  sum[0] = 0;
  if (!at || sscanf(at + strlen(key), "%llu, \"fnv1a\": \"%16[0-9a-f]\"", bytes, sum) != 2 ||
      strlen(sum) != 16)
    return -1;
  return 0;
}
