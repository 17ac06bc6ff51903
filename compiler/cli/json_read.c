/* json_read.c — JSON object members read in place (json_read.h). */
#include "cli/json_read.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

enum { JSON_MAX_DEPTH = 32 };

static const char *ws(const char *p, const char *end) {
  while (p < end && isspace((unsigned char)*p))
    p++;
  return p;
}

/* The end of the string starting at p (at its opening quote), or NULL. */
static const char *skip_string(const char *p, const char *end) {
  for (p++; p < end; p++) {
    if (*p == '"') return p + 1;
    if (*p == '\\' && ++p >= end) return NULL;
    if ((unsigned char)*p < 0x20) return NULL;
  }
  return NULL;
}

static const char *skip_value(const char *p, const char *end, int depth);

/* The end of the object or array starting at p, or NULL. */
static const char *skip_container(const char *p, const char *end, int depth) {
  char close = *p == '{' ? '}' : ']';
  bool obj = *p == '{';
  p = ws(p + 1, end);
  if (p < end && *p == close) return p + 1;
  for (;;) {
    if (obj) {
      if (p >= end || *p != '"' || !(p = skip_string(p, end))) return NULL;
      p = ws(p, end);
      if (p >= end || *p != ':') return NULL;
      p++;
    }
    if (!(p = skip_value(p, end, depth + 1))) return NULL;
    p = ws(p, end);
    if (p < end && *p == ',') {
      p = ws(p + 1, end);
      continue;
    }
    return p < end && *p == close ? p + 1 : NULL;
  }
}

static const char *skip_value(const char *p, const char *end, int depth) {
  p = ws(p, end);
  if (p >= end || depth > JSON_MAX_DEPTH) return NULL;
  if (*p == '"') return skip_string(p, end);
  if (*p == '{' || *p == '[') return skip_container(p, end, depth);
  const char *q = p;
  while (q < end && (isalnum((unsigned char)*q) || strchr("+-.", *q)))
    q++;
  return q > p ? q : NULL;
}

int json_value(const char *text, size_t n, JsonSpan *v) {
  const char *end = text + n, *p = ws(text, end), *q = skip_value(p, end, 0);
  if (!q || ws(q, end) != end) return -1;
  *v = (JsonSpan){p, q};
  return 0;
}

bool json_is_object(JsonSpan v) { return v.p < v.end && *v.p == '{'; }

int json_member_next(JsonSpan obj, size_t *at, char *key, size_t nkey, JsonSpan *val) {
  if (!json_is_object(obj)) return -1;
  const char *p = ws(obj.p + (*at ? *at : 1), obj.end);
  if (p < obj.end && *p == ',') p = ws(p + 1, obj.end);
  if (p < obj.end && *p == '}') return 0;
  JsonSpan k = {p, p < obj.end && *p == '"' ? skip_string(p, obj.end) : NULL};
  if (!k.end || json_string(k, key, nkey) != 0) return -1;
  p = ws(k.end, obj.end);
  if (p >= obj.end || *p != ':') return -1;
  p = ws(p + 1, obj.end);
  const char *q = skip_value(p, obj.end, 1);
  if (!q) return -1;
  *val = (JsonSpan){p, q};
  *at = (size_t)(q - obj.p);
  return 1;
}

int json_member(JsonSpan obj, const char *key, JsonSpan *val) {
  char k[256];
  size_t at = 0;
  int rc;
  while ((rc = json_member_next(obj, &at, k, sizeof k, val)) == 1)
    if (!strcmp(k, key)) return 1;
  return rc;
}

bool json_is_null(JsonSpan v) { return v.end - v.p == 4 && !memcmp(v.p, "null", 4); }

int json_number(JsonSpan v, double *out) {
  if (v.p >= v.end || !(isdigit((unsigned char)*v.p) || *v.p == '-')) return -1;
  char buf[64];
  size_t n = (size_t)(v.end - v.p);
  if (n >= sizeof buf) return -1;
  memcpy(buf, v.p, n), buf[n] = 0;
  char *e;
  *out = strtod(buf, &e);
  return *e ? -1 : 0;
}

int json_bool(JsonSpan v, bool *out) {
  size_t n = (size_t)(v.end - v.p);
  if (n == 4 && !memcmp(v.p, "true", 4)) return *out = true, 0;
  if (n == 5 && !memcmp(v.p, "false", 5)) return *out = false, 0;
  return -1;
}

int json_string(JsonSpan v, char *buf, size_t n) {
  if (v.end - v.p < 2 || *v.p != '"' || v.end[-1] != '"' || n == 0) return -1;
  size_t k = 0;
  for (const char *p = v.p + 1; p < v.end - 1; p++) {
    char c = *p;
    if (c == '\\') {
      c = *++p;
      if (c == 'n')
        c = '\n';
      else if (c == 't')
        c = '\t';
      else if (c != '"' && c != '\\' && c != '/')
        return -1;
    }
    if (k + 1 >= n) return -1;
    buf[k++] = c;
  }
  buf[k] = 0;
  return 0;
}
