/* diag.c — the diagnostics list and its two renderings. */
#include "validate/diag.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

void diag_init(DiagList *d) { memset(d, 0, sizeof *d); }

void diag_free(DiagList *d) {
  free(d->items);
  memset(d, 0, sizeof *d);
}

/* Bytes of the valid UTF-8 sequence at s (1..4), or 0 when it is not one. */
static int utf8_len(const unsigned char *s) {
  int n = s[0] < 0x80             ? 1
          : (s[0] & 0xe0) == 0xc0 ? 2
          : (s[0] & 0xf0) == 0xe0 ? 3
          : (s[0] & 0xf8) == 0xf0 ? 4
                                  : 0;
  if (n == 2 && s[0] < 0xc2) return 0; /* overlong */
  for (int i = 1; i < n; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  return n;
}

size_t diag_escape(char *dst, size_t n, const char *src) {
  size_t o = 0;
  if (!src) src = "";
  for (const unsigned char *s = (const unsigned char *)src; *s;) {
    int k = utf8_len(s);
    /* C0 controls but tab, DEL, and the C1 controls that some terminals obey as ESC sequences:
     * U+0080..U+009F, or a lone byte 0x80..0x9F. Other bytes that are not UTF-8 stay (the JSON
     * writer shows them as U+FFFD). */
    if (k == 0) k = -1;
    bool bad = (k == 1 && ((*s < 0x20 && *s != '\t') || *s == 0x7f)) ||
               (k == 2 && s[0] == 0xc2 && s[1] < 0xa0) || (k < 0 && *s >= 0x80 && *s < 0xa0);
    int len = k < 0 ? 1 : k, w = bad ? 4 * len : len;
    if (o + (size_t)w >= n) break;
    for (int i = 0; i < len; i++, s++)
      if (bad)
        o += (size_t)snprintf(dst + o, n - o, "\\x%02x", *s);
      else
        dst[o++] = (char)*s;
  }
  if (n) dst[o < n ? o : n - 1] = 0;
  return o;
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
  diag_escape(g->rule, sizeof g->rule, rule);
  diag_escape(g->field, sizeof g->field, field);
  diag_escape(g->where, sizeof g->where, where);
  char raw[sizeof g->message];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(raw, sizeof raw, fmt, ap);
  va_end(ap);
  diag_escape(g->message, sizeof g->message, raw);
  return g;
}

void diag_hint(Diag *g, const char *fmt, ...) {
  if (!g) return;
  char raw[sizeof g->hint];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(raw, sizeof raw, fmt, ap);
  va_end(ap);
  diag_escape(g->hint, sizeof g->hint, raw);
}

int diag_count(const DiagList *d, DiagSeverity sev) {
  int n = 0;
  for (int i = 0; i < d->n; i++)
    n += d->items[i].severity == sev;
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
