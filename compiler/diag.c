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
