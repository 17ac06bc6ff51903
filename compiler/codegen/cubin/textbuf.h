/* textbuf.h — a growing NUL-terminated text buffer (kernels.cu assembly, generated kernels, NVRTC
 * messages). Out of memory sets `oom` and drops later writes; textbuf_take returns NULL then. */
#ifndef STEPC_TEXTBUF_H
#define STEPC_TEXTBUF_H

#include <stddef.h>

typedef struct {
  char *p; /* NULL until the first write */
  size_t len, cap;
  int oom;
} TextBuf;

void textbuf_put(TextBuf *b, const char *s, size_t n);
void textbuf_puts(TextBuf *b, const char *s);
void textbuf_printf(TextBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The text (malloc'd, "" when nothing was written), or NULL after an allocation failed; the buffer
 * is empty afterwards. */
char *textbuf_take(TextBuf *b);

#endif
