/* kernel_text.c — assembles kernels.cu from the embedded kernels/ (the .cuh files) (see kernel_text.h). */
#include "codegen/cubin/kernel_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cubin/textbuf.h"

const struct kernel_file *kernel_file_find(const char *name) {
  for (int i = 0; i < kernel_file_count; i++)
    if (strcmp(kernel_files[i].name, name) == 0) return &kernel_files[i];
  return NULL;
}

/* If `line` (length n) is `#include "NAME"`, copy NAME into out and return 1. */
static int local_include(const char *line, size_t n, char *out, size_t outsz) {
  size_t i = 0;
  while (i < n && (line[i] == ' ' || line[i] == '\t'))
    i++;
  if (n - i < 8 || strncmp(line + i, "#include", 8) != 0) return 0;
  i += 8;
  while (i < n && (line[i] == ' ' || line[i] == '\t'))
    i++;
  if (i >= n || line[i] != '"') return 0;
  size_t start = ++i;
  while (i < n && line[i] != '"')
    i++;
  if (i >= n || i - start + 1 > outsz) return 0;
  memcpy(out, line + start, i - start);
  out[i - start] = '\0';
  return 1;
}

static int is_pragma_once(const char *line, size_t n) {
  size_t i = 0;
  while (i < n && (line[i] == ' ' || line[i] == '\t'))
    i++;
  return n - i >= 12 && strncmp(line + i, "#pragma once", 12) == 0;
}

/* Depth-first: a file's local includes are emitted before the file itself. `state` per file:
 * 0 unseen, 1 in progress (a cycle if met again), 2 emitted. */
static int emit(TextBuf *b, const struct kernel_file *f, unsigned char *state, char *err, size_t errsz) {
  int idx = (int)(f - kernel_files);
  if (state[idx] == 2) return 0;
  if (state[idx] == 1) {
    snprintf(err, errsz, "kernels/%s: #include cycle", f->name);
    return -1;
  }
  state[idx] = 1;
  const char *s = f->text, *end = f->text + f->size;
  for (const char *line = s; line < end;) {
    const char *nl = memchr(line, '\n', (size_t)(end - line));
    size_t n = nl ? (size_t)(nl - line) : (size_t)(end - line);
    char inc[128];
    if (local_include(line, n, inc, sizeof inc)) {
      const struct kernel_file *dep = kernel_file_find(inc);
      if (!dep) {
        snprintf(err, errsz, "kernels/%s: #include \"%s\" is not an embedded kernels/ (the .cuh files) file",
                 f->name, inc);
        return -1;
      }
      if (emit(b, dep, state, err, errsz) != 0) return -1;
    }
    line = nl ? nl + 1 : end;
  }
  textbuf_puts(b, KERNEL_FILE_MARKER);
  textbuf_puts(b, f->name);
  textbuf_puts(b, "\n");
  for (const char *line = s; line < end;) {
    const char *nl = memchr(line, '\n', (size_t)(end - line));
    size_t n = nl ? (size_t)(nl - line) : (size_t)(end - line);
    char inc[128];
    if (local_include(line, n, inc, sizeof inc) || is_pragma_once(line, n)) textbuf_puts(b, "// (inlined) ");
    textbuf_put(b, line, n);
    textbuf_puts(b, "\n");
    line = nl ? nl + 1 : end;
  }
  textbuf_puts(b, KERNEL_FILE_END_MARKER);
  textbuf_puts(b, f->name);
  textbuf_puts(b, "\n");
  state[idx] = 2;
  return 0;
}

char *kernel_text_assemble(const char *const *names, int n, char *err, size_t errsz) {
  TextBuf b = {0};
  unsigned char *state = calloc((size_t)kernel_file_count + 1, 1);
  if (!state) {
    snprintf(err, errsz, "out of memory");
    return NULL;
  }
  textbuf_puts(&b, "// kernels.cu — assembled by stepc from kernels/ (the .cuh files)\n");
  int count = names ? n : kernel_file_count;
  for (int i = 0; i < count; i++) {
    const struct kernel_file *f = names ? kernel_file_find(names[i]) : &kernel_files[i];
    if (!f) {
      snprintf(err, errsz, "no kernel file named '%s'", names[i]);
      goto fail;
    }
    if (emit(&b, f, state, err, errsz) != 0) goto fail;
  }
  free(state);
  char *text = textbuf_take(&b);
  if (!text) snprintf(err, errsz, "out of memory");
  return text;
fail:
  free(state);
  free(textbuf_take(&b));
  return NULL;
}
