/* flash_variants.h — the tuning variants of the flash kernels (tests/gpu/flash_variants.cuh), added
 * to the assembled kernel text by the tests that compile them: gpu_kernels with
 * STEPC_FLASH_VARIANTS set, and test_nvrtc. Run from the repository root. */
#ifndef STEPC_TEST_FLASH_VARIANTS_H
#define STEPC_TEST_FLASH_VARIANTS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FLASH_VARIANTS_FILE "tests/gpu/flash_variants.cuh"

/* src (malloc'd) with the variants file appended (realloc'd), or NULL with err (src freed). */
static inline char *flash_variants_append(char *src, char *err, size_t nerr) {
  FILE *f = fopen(FLASH_VARIANTS_FILE, "rb");
  long n = -1;
  if (f && fseek(f, 0, SEEK_END) == 0) n = ftell(f), rewind(f);
  size_t have = strlen(src);
  char *out = n >= 0 ? realloc(src, have + (size_t)n + 2) : NULL;
  if (!out || fread(out + have + 1, 1, (size_t)n, f) != (size_t)n) {
    snprintf(err, nerr, "cannot read %s (run from the repository root)", FLASH_VARIANTS_FILE);
    if (f) fclose(f);
    free(out ? out : src);
    return NULL;
  }
  fclose(f);
  out[have] = '\n', out[have + 1 + n] = 0;
  return out;
}

#endif
