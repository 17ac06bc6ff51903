/* textbuf.c — a growing text buffer (textbuf.h). */
#include "codegen/cubin/textbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int grow(TextBuf *b, size_t n) {
  if (b->oom) return -1;
  if (b->len + n + 1 <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 1024;
  while (cap < b->len + n + 1)
    cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) return b->oom = 1, -1;
  b->p = p, b->cap = cap;
  return 0;
}

void textbuf_put(TextBuf *b, const char *s, size_t n) {
  if (grow(b, n)) return;
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

void textbuf_puts(TextBuf *b, const char *s) { textbuf_put(b, s, strlen(s)); }

void textbuf_printf(TextBuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || grow(b, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

char *textbuf_take(TextBuf *b) {
  char *p = b->oom ? NULL : b->p ? b->p : calloc(1, 1);
  if (b->oom) free(b->p);
  *b = (TextBuf){0};
  return p;
}
