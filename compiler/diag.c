/* diag.c — the diagnostics list and its two renderings. */
#include "diag.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void diag_init(DiagList *d) { memset(d, 0, sizeof *d); }

void diag_free(DiagList *d) {
  free(d->items);
  memset(d, 0, sizeof *d);
}

static void copy(char *dst, size_t n, const char *src) {
  if (!src) src = "";
  size_t len = strlen(src);
  if (len >= n) len = n - 1;
  memcpy(dst, src, len);
  dst[len] = 0;
}

Diag *diag_add(DiagList *d, DiagSeverity sev, const char *rule, const char *field, const char *where,
               const char *fmt, ...) {
  if (d->n == d->cap) {
    int cap = d->cap ? d->cap * 2 : 16;
    Diag *items = realloc(d->items, sizeof(Diag) * (size_t)cap);
    if (!items) return NULL;
    d->items = items, d->cap = cap;
  }
  Diag *g = &d->items[d->n++];
  memset(g, 0, sizeof *g);
  g->severity = sev;
  copy(g->rule, sizeof g->rule, rule);
  copy(g->field, sizeof g->field, field);
  copy(g->where, sizeof g->where, where);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->message, sizeof g->message, fmt, ap);
  va_end(ap);
  return g;
}

void diag_hint(Diag *g, const char *fmt, ...) {
  if (!g) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->hint, sizeof g->hint, fmt, ap);
  va_end(ap);
}

int diag_count(const DiagList *d, DiagSeverity sev) {
  int n = 0;
  for (int i = 0; i < d->n; i++) n += d->items[i].severity == sev;
  return n;
}

static const char *sev_name(DiagSeverity s) {
  return s == DIAG_ERROR ? "error" : s == DIAG_WARNING ? "warning" : "note";
}

void diag_print(const DiagList *d, FILE *out) {
  for (int i = 0; i < d->n; i++) {
    const Diag *g = &d->items[i];
    if (g->where[0]) fprintf(out, "%s: ", g->where);
    fprintf(out, "%s [%s]", sev_name(g->severity), g->rule);
    if (g->field[0]) fprintf(out, " %s", g->field);
    fprintf(out, ": %s\n", g->message);
    if (g->hint[0]) fprintf(out, "  hint: %s\n", g->hint);
  }
}

size_t text_utf8_len(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  if (p[0] < 0x80) return 1;
  /* RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF */
  unsigned char lo = 0x80, hi = 0xbf;
  size_t n;
  if (p[0] >= 0xc2 && p[0] <= 0xdf) n = 2;
  else if (p[0] >= 0xe0 && p[0] <= 0xef) n = 3, lo = p[0] == 0xe0 ? 0xa0 : 0x80, hi = p[0] == 0xed ? 0x9f : 0xbf;
  else if (p[0] >= 0xf0 && p[0] <= 0xf4) n = 4, lo = p[0] == 0xf0 ? 0x90 : 0x80, hi = p[0] == 0xf4 ? 0x8f : 0xbf;
  else return 0;
  if (p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if (p[i] < 0x80 || p[i] > 0xbf) return 0;
  return n;
}

/* Recipe strings and file names may hold any bytes; a byte that is not part of valid UTF-8 is
 * written as U+FFFD, so that the output stays JSON that every parser accepts. */
void json_write_string(FILE *out, const char *s) {
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    size_t n = text_utf8_len((const char *)p);
    switch (*p) {
    case '"': fputs("\\\"", out); break;
    case '\\': fputs("\\\\", out); break;
    case '\n': fputs("\\n", out); break;
    case '\t': fputs("\\t", out); break;
    case '\r': fputs("\\r", out); break;
    default:
      if (n == 0) fputs("\\ufffd", out);
      else if (*p < 0x20 || *p == 0x7f) fprintf(out, "\\u%04x", *p);
      else fwrite(p, 1, n, out);
    }
    p += n ? n : 1;
  }
  fputc('"', out);
}

void diag_print_json(const DiagList *d, FILE *out) {
  fputc('[', out);
  for (int i = 0; i < d->n; i++) {
    const Diag *g = &d->items[i];
    fprintf(out, "%s{\"rule\": ", i ? ", " : "");
    json_write_string(out, g->rule);
    fprintf(out, ", \"severity\": \"%s\", \"field\": ", sev_name(g->severity));
    json_write_string(out, g->field);
    fputs(", \"message\": ", out);
    json_write_string(out, g->message);
    fputs(", \"where\": ", out);
    json_write_string(out, g->where);
    fputs(", \"hint\": ", out);
    json_write_string(out, g->hint);
    fputc('}', out);
  }
  fputc(']', out);
}
