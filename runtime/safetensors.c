/* safetensors.c — the reader and writer of safetensors.h. */
#include "runtime/safetensors.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/safe_file.h"

/* Headers above this are refused (the format's own readers cap it at 100 MB). */
#define ST_HEADER_MAX (100u << 20)

size_t st_dtype_size(const char *d) {
  if (!strcmp(d, "F32") || !strcmp(d, "I32")) return 4;
  if (!strcmp(d, "BF16") || !strcmp(d, "F16") || !strcmp(d, "I16")) return 2;
  if (!strcmp(d, "F64") || !strcmp(d, "I64")) return 8;
  if (!strcmp(d, "U8") || !strcmp(d, "I8") || !strcmp(d, "BOOL")) return 1;
  return 0;
}

int64_t st_numel(const StEntry *e) {
  int64_t n = 1;
  for (int i = 0; i < e->ndim; i++)
    n *= e->shape[i];
  return n;
}

/* ---- a JSON subset: what safetensors headers hold (objects, arrays, strings, integers) ---- */

typedef struct {
  const char *p, *end;
  char *err;
  size_t nerr;
} Js;

static int js_fail(Js *j, const char *what) {
  if (j->err[0] == 0) snprintf(j->err, j->nerr, "header JSON: %s", what);
  return -1;
}

static void js_ws(Js *j) {
  while (j->p < j->end && isspace((unsigned char)*j->p))
    j->p++;
}

static int js_lit(Js *j, char c) {
  js_ws(j);
  if (j->p >= j->end || *j->p != c) {
    char m[48];
    snprintf(m, sizeof m, "expected '%c'", c);
    return js_fail(j, m);
  }
  j->p++;
  return 0;
}

static int js_peek(Js *j, char c) {
  js_ws(j);
  return j->p < j->end && *j->p == c;
}

/* A string into buf (escapes \" \\ \/ and \uXXXX below 0x80 kept; others refused). */
static int js_str(Js *j, char *buf, size_t n) {
  if (js_lit(j, '"')) return -1;
  size_t k = 0;
  while (j->p < j->end && *j->p != '"') {
    char c = *j->p++;
    if (c == '\\') {
      if (j->p >= j->end) return js_fail(j, "truncated escape");
      c = *j->p++;
      if (c == 'u') {
        if (j->end - j->p < 4) return js_fail(j, "truncated \\u escape");
        char hex[5] = {j->p[0], j->p[1], j->p[2], j->p[3], 0};
        long v = strtol(hex, NULL, 16);
        j->p += 4;
        c = v < 0x80 ? (char)v : '?';
      } else if (c == 'n')
        c = '\n';
      else if (c == 't')
        c = '\t';
    }
    if (k + 1 >= n) return js_fail(j, "a string is too long");
    buf[k++] = c;
  }
  buf[k] = 0;
  return js_lit(j, '"');
}

static int js_int(Js *j, int64_t *v) {
  js_ws(j);
  char *e;
  long long x = strtoll(j->p, &e, 10);
  if (e == j->p || e > j->end) return js_fail(j, "expected an integer");
  j->p = e;
  *v = x;
  return 0;
}

/* Skips any value (the __metadata__ object, unknown fields). */
static int js_skip(Js *j, int depth) {
  if (depth > 16) return js_fail(j, "nested too deeply");
  js_ws(j);
  if (j->p >= j->end) return js_fail(j, "truncated");
  char tmp[1024];
  if (*j->p == '"') return js_str(j, tmp, sizeof tmp);
  if (*j->p == '{' || *j->p == '[') {
    char close = *j->p == '{' ? '}' : ']';
    int obj = *j->p == '{';
    j->p++;
    if (js_peek(j, close)) return js_lit(j, close);
    for (;;) {
      if (obj && (js_str(j, tmp, sizeof tmp) || js_lit(j, ':'))) return -1;
      if (js_skip(j, depth + 1)) return -1;
      if (js_peek(j, ',')) {
        j->p++;
        continue;
      }
      return js_lit(j, close);
    }
  }
  while (j->p < j->end && (isalnum((unsigned char)*j->p) || strchr("+-.", *j->p)))
    j->p++;
  return 0;
}

static int js_entry(Js *j, StEntry *e) {
  if (js_lit(j, '{')) return -1;
  int have = 0;
  for (;;) {
    char key[64];
    if (js_str(j, key, sizeof key) || js_lit(j, ':')) return -1;
    if (!strcmp(key, "dtype")) {
      if (js_str(j, e->dtype, sizeof e->dtype)) return -1;
      have |= 1;
    } else if (!strcmp(key, "shape") || !strcmp(key, "data_offsets")) {
      int shape = key[0] == 's', k = 0;
      int64_t v[ST_MAX_DIMS];
      if (js_lit(j, '[')) return -1;
      if (!js_peek(j, ']'))
        for (;;) {
          if (k == ST_MAX_DIMS) return js_fail(j, "too many dimensions");
          if (js_int(j, &v[k++])) return -1;
          if (!js_peek(j, ',')) break;
          j->p++;
        }
      if (js_lit(j, ']')) return -1;
      if (shape) {
        e->ndim = k;
        for (int i = 0; i < k; i++) {
          if (v[i] < 0) return js_fail(j, "a negative dimension");
          e->shape[i] = v[i];
        }
        have |= 2;
      } else {
        if (k != 2 || v[0] < 0 || v[1] < v[0]) return js_fail(j, "data_offsets must be [begin, end]");
        e->begin = (uint64_t)v[0], e->end = (uint64_t)v[1];
        have |= 4;
      }
    } else if (js_skip(j, 1))
      return -1;
    if (!js_peek(j, ',')) break;
    j->p++;
  }
  if (js_lit(j, '}')) return -1;
  if (have != 7) return js_fail(j, "an entry lacks dtype, shape or data_offsets");
  if (!st_dtype_size(e->dtype)) return js_fail(j, "an unknown dtype");
  int64_t numel = 1;
  for (int i = 0; i < e->ndim; i++)
    if (__builtin_mul_overflow(numel, e->shape[i], &numel)) return js_fail(j, "an entry's shape overflows");
  uint64_t bytes;
  if (__builtin_mul_overflow((uint64_t)numel, (uint64_t)st_dtype_size(e->dtype), &bytes) ||
      bytes != e->end - e->begin)
    return js_fail(j, "an entry's data_offsets do not match its shape and dtype");
  return 0;
}

static int by_begin(const void *a, const void *b) {
  const StEntry *x = *(const StEntry *const *)a, *y = *(const StEntry *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* The data section as the format has it: the entries' byte ranges tile [0, data bytes) with no
 * gap, overlap or trailing byte, and no name twice. NULL, or what is wrong. */
static const char *check_layout(const StReader *r, uint64_t data_bytes) {
  const StEntry **v = malloc(((size_t)r->n + 1) * sizeof *v);
  if (!v) return "out of memory";
  for (int i = 0; i < r->n; i++)
    v[i] = &r->e[i];
  qsort(v, (size_t)r->n, sizeof *v, by_begin);
  const char *why = NULL;
  uint64_t at = 0;
  for (int i = 0; i < r->n && !why; i++) {
    if (v[i]->begin != at)
      why = v[i]->begin < at ? "two tensors' data overlap" : "the data has a gap between tensors";
    at = v[i]->end;
  }
  if (!why && at != data_bytes)
    why =
        at < data_bytes ? "bytes follow the last tensor's data" : "a tensor's data runs past the file's end";
  for (int i = 0; i < r->n && !why; i++)
    for (int k = i + 1; k < r->n && !why; k++)
      if (!strcmp(r->e[i].name, r->e[k].name)) why = "a tensor name appears twice";
  free(v);
  return why;
}

int st_open(StReader *r, const char *path, char *err, size_t nerr) {
  memset(r, 0, sizeof *r);
  snprintf(r->path, sizeof r->path, "%s", path);
  /* followed: a Hugging Face snapshot's files are symbolic links into its blob store */
  r->f = rt_open_regular(path, RT_FOLLOW, 0, NULL, err, nerr);
  if (!r->f) return -1;
  unsigned char lb[8];
  if (fread(lb, 1, 8, r->f) != 8) {
    snprintf(err, nerr, "%s: too short for a safetensors file", path);
    st_close(r);
    return -1;
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--)
    n = n << 8 | lb[i];
  if (n == 0 || n > ST_HEADER_MAX) {
    snprintf(err, nerr, "%s: a header of %llu bytes is not a safetensors header", path,
             (unsigned long long)n);
    st_close(r);
    return -1;
  }
  char *h = malloc((size_t)n + 1);
  if (!h || fread(h, 1, (size_t)n, r->f) != (size_t)n) {
    snprintf(err, nerr, "%s: cannot read its %llu-byte header", path, (unsigned long long)n);
    free(h);
    st_close(r);
    return -1;
  }
  h[n] = 0;
  r->data_start = 8 + n;
  char jerr[200] = "";
  Js j = {h, h + n, jerr, sizeof jerr};
  int cap = 0, rc = js_lit(&j, '{');
  if (!rc && !js_peek(&j, '}'))
    for (;;) {
      char name[ST_NAME_MAX];
      if ((rc = js_str(&j, name, sizeof name)) || (rc = js_lit(&j, ':'))) break;
      if (!strcmp(name, "__metadata__")) {
        if ((rc = js_skip(&j, 1))) break;
      } else {
        if (r->n == cap) {
          cap = cap ? 2 * cap : 64;
          StEntry *ne = realloc(r->e, (size_t)cap * sizeof *ne);
          if (!ne) {
            rc = js_fail(&j, "out of memory");
            break;
          }
          r->e = ne;
        }
        StEntry *e = &r->e[r->n];
        memset(e, 0, sizeof *e);
        snprintf(e->name, sizeof e->name, "%s", name);
        if ((rc = js_entry(&j, e))) break;
        r->n++;
      }
      if (!js_peek(&j, ',')) break;
      j.p++;
    }
  if (!rc) rc = js_lit(&j, '}');
  free(h);
  if (rc) {
    snprintf(err, nerr, "%s: %s", path, jerr);
    st_close(r);
    return -1;
  }
  struct stat sb;
  const char *why = fstat(fileno(r->f), &sb) != 0 || (uint64_t)sb.st_size < r->data_start
                        ? "cannot size the file"
                        : check_layout(r, (uint64_t)sb.st_size - r->data_start);
  if (why) {
    snprintf(err, nerr, "%s: %s", path, why);
    st_close(r);
    return -1;
  }
  return 0;
}

const StEntry *st_find(const StReader *r, const char *name) {
  for (int i = 0; i < r->n; i++)
    if (!strcmp(r->e[i].name, name)) return &r->e[i];
  return NULL;
}

int st_read(StReader *r, const StEntry *e, void *dst, char *err, size_t nerr) {
  size_t n = (size_t)(e->end - e->begin);
  if (fseeko(r->f, (off_t)(r->data_start + e->begin), SEEK_SET) != 0 || fread(dst, 1, n, r->f) != n) {
    snprintf(err, nerr, "%s: cannot read tensor %s (%zu bytes at %llu)", r->path, e->name, n,
             (unsigned long long)(r->data_start + e->begin));
    return -1;
  }
  return 0;
}

void st_close(StReader *r) {
  if (r->f) fclose(r->f);
  free(r->e);
  r->f = NULL, r->e = NULL, r->n = 0;
}

/* ---- writer ---- */

/* Appends to a growing buffer; -1 when out of memory. */
typedef struct {
  char *s;
  size_t n, cap;
} Buf;

static int buf_add(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int buf_add(Buf *b, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) return -1;
    if (b->s && b->n + (size_t)k < b->cap) {
      b->n += (size_t)k;
      return 0;
    }
    size_t cap = (b->cap ? 2 * b->cap : 4096) + (size_t)k;
    char *ns = realloc(b->s, cap);
    if (!ns) return -1;
    b->s = ns, b->cap = cap;
  }
}

/* A JSON string; names are plain ASCII paths, anything else is escaped. */
static int buf_str(Buf *b, const char *s) {
  if (buf_add(b, "\"")) return -1;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      if (buf_add(b, "\\%c", c)) return -1;
    } else if (c < 0x20) {
      if (buf_add(b, "\\u%04x", c)) return -1;
    } else if (buf_add(b, "%c", c))
      return -1;
  }
  return buf_add(b, "\"");
}

/* The temporary file, created new: an existing PATH.tmp is someone's (or a killed write's) and is
 * left alone, and PATH itself must be absent or a regular file, since the rename replaces it. */
static FILE *open_tmp(StWriter *w, char *err, size_t nerr) {
  if (rt_check_replaceable(w->path, err, nerr) != 0) return NULL;
  int fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == EEXIST)
      snprintf(err, nerr, "%s already exists (left by a write that was stopped?): remove it and write again",
               w->tmp);
    else
      snprintf(err, nerr, "cannot write %s: %s", w->tmp, strerror(errno));
    return NULL;
  }
  FILE *f = fdopen(fd, "wb");
  if (!f) {
    snprintf(err, nerr, "cannot write %s: %s", w->tmp, strerror(errno));
    close(fd), remove(w->tmp);
  }
  return f;
}

int st_write_begin(StWriter *w, const char *path, StEntry *e, int n, const char *const *meta, int n_meta,
                   char *err, size_t nerr) {
  memset(w, 0, sizeof *w);
  snprintf(w->path, sizeof w->path, "%s", path);
  snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path);
  Buf b = {0};
  uint64_t off = 0;
  int rc = buf_add(&b, "{");
  if (n_meta > 0) {
    rc |= buf_add(&b, "\"__metadata__\":{");
    for (int i = 0; i < n_meta; i++)
      rc |= (i ? buf_add(&b, ",") : 0) | buf_str(&b, meta[2 * i]) | buf_add(&b, ":") |
            buf_str(&b, meta[2 * i + 1]);
    rc |= buf_add(&b, "}");
  }
  for (int i = 0; i < n && !rc; i++) {
    size_t es = st_dtype_size(e[i].dtype);
    if (!es) {
      snprintf(err, nerr, "%s: tensor %s has an unknown dtype %s", path, e[i].name, e[i].dtype);
      free(b.s);
      return -1;
    }
    e[i].begin = off;
    e[i].end = off += (uint64_t)st_numel(&e[i]) * es;
    rc |= buf_add(&b, "%s", i || n_meta > 0 ? "," : "") | buf_str(&b, e[i].name) |
          buf_add(&b, ":{\"dtype\":\"%s\",\"shape\":[", e[i].dtype);
    for (int k = 0; k < e[i].ndim; k++)
      rc |= buf_add(&b, "%s%lld", k ? "," : "", (long long)e[i].shape[k]);
    rc |= buf_add(&b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)e[i].begin,
                  (unsigned long long)e[i].end);
  }
  rc |= buf_add(&b, "}");
  while (!rc && b.n % 8)
    rc |= buf_add(&b, " "); /* the data starts 8-byte aligned */
  if (rc) {
    free(b.s);
    snprintf(err, nerr, "out of memory");
    return -1;
  }
  w->f = open_tmp(w, err, nerr);
  if (!w->f) {
    free(b.s);
    return -1;
  }
  unsigned char lb[8];
  for (int i = 0; i < 8; i++)
    lb[i] = (unsigned char)((uint64_t)b.n >> (8 * i));
  int ok = fwrite(lb, 1, 8, w->f) == 8 && fwrite(b.s, 1, b.n, w->f) == b.n;
  free(b.s);
  w->e = e, w->n = n;
  if (!ok) {
    snprintf(err, nerr, "cannot write %s", w->tmp);
    st_write_abort(w);
    return -1;
  }
  return 0;
}

int st_write_next(StWriter *w, const void *data, char *err, size_t nerr) {
  if (!w->f || w->next >= w->n) {
    snprintf(err, nerr, "%s: more tensors written than declared", w->path);
    return -1;
  }
  size_t n = (size_t)(w->e[w->next].end - w->e[w->next].begin);
  if (n && fwrite(data, 1, n, w->f) != n) {
    snprintf(err, nerr, "cannot write %s (disk full?)", w->tmp);
    st_write_abort(w);
    return -1;
  }
  w->next++;
  return 0;
}

int st_write_end(StWriter *w, char *err, size_t nerr) {
  if (!w->f) return -1;
  if (w->next != w->n) {
    snprintf(err, nerr, "%s: %d of %d tensors written", w->path, w->next, w->n);
    st_write_abort(w);
    return -1;
  }
  /* on the disk before the rename makes it the file's content */
  int rc = fflush(w->f) != 0 || fsync(fileno(w->f)) != 0;
  rc |= fclose(w->f);
  w->f = NULL;
  /* checked again: PATH may have been replaced while the tensors were written */
  if (rc == 0 && rt_check_replaceable(w->path, err, nerr) != 0) {
    remove(w->tmp);
    return -1;
  }
  if (rc != 0 || rename(w->tmp, w->path) != 0) {
    snprintf(err, nerr, "cannot write %s", w->path);
    remove(w->tmp);
    return -1;
  }
  return 0;
}

void st_write_abort(StWriter *w) {
  if (w->f) fclose(w->f);
  w->f = NULL;
  remove(w->tmp);
}
