/* test_nvrtc.c — the device code compiles without a GPU: every kernel of kernels/ (the .cuh
 * files) goes through NVRTC to an sm_90 cubin that defines each expected extern "C" name; the
 * second compile is a cache hit with the same bytes; compile errors point at the generated line,
 * the `// op:` marker and the hand-written file and line they came from. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/cubin/kernel_text.h"
#include "compiler/codegen/cubin/cubin.h"
#include "tests/gpu/flash_variants.h"

static int failures;
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                     \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static const char *const expected[] = {
#define STEPC_KERNEL(name, sig) #name,
#include "kernels/kernel_list.h"
#undef STEPC_KERNEL
};

static int line_of(const char *text, const char *needle) {
  const char *p = strstr(text, needle);
  if (!p) return 0;
  int line = 1;
  for (const char *q = text; q < p; q++) line += *q == '\n';
  return line;
}

/* source with the first occurrence of `from` replaced by `to` (malloc'd). */
static char *replace(const char *source, const char *from, const char *to) {
  const char *p = strstr(source, from);
  if (!p) return NULL;
  size_t n = strlen(source) - strlen(from) + strlen(to) + 1;
  char *s = malloc(n);
  if (!s) return NULL;
  snprintf(s, n, "%.*s%s%s", (int)(p - source), source, to, p + strlen(from));
  return s;
}

static void test_all_kernels(const char *cache) {
  char err[256];
  char *src = kernel_text_assemble(NULL, 0, err, sizeof err);
  CHECK(src != NULL);
  if (!src) {
    fprintf(stderr, "%s\n", err);
    return;
  }
  CubinOptions opt = {.arch = "sm_90", .cache_dir = cache};
  Cubin c1, c2;
  char *msg = NULL;
  CubinStatus st = cubin_compile(src, &opt, &c1, &msg);
  if (msg) fprintf(stderr, "%s\n", msg);
  free(msg);
  CHECK(st == CUBIN_OK);
  if (st != CUBIN_OK) {
    free(src);
    return;
  }
  CHECK(!c1.from_cache);
  for (size_t i = 0; i < sizeof expected / sizeof *expected; i++) {
    int found = cubin_has_function(c1.data, c1.size, expected[i]);
    if (!found) fprintf(stderr, "kernel %s missing from the cubin\n", expected[i]);
    CHECK(found);
  }
  CHECK(!cubin_has_function(c1.data, c1.size, "no_such_kernel"));
  CHECK(!cubin_has_function(c1.data, c1.size, "flash_wg_fwd_v64_128")); /* tuning variants never ship */
  CHECK(!cubin_has_function(c1.data, c1.size, "load8")); /* inlined device helpers leave no symbol */

  st = cubin_compile(src, &opt, &c2, &msg);
  free(msg);
  CHECK(st == CUBIN_OK && c2.from_cache);
  CHECK(c2.key == c1.key && c2.size == c1.size && memcmp(c1.data, c2.data, c1.size) == 0);
  char path[4200];
  snprintf(path, sizeof path, "%s/%016llx.sm_90.cubin", cache, (unsigned long long)c1.key);
  CHECK(access(path, R_OK) == 0);

  /* The key moves with anything that changes the cubin. */
  CubinOptions other = opt;
  other.arch = "sm_100";
  CHECK(cubin_cache_key(src, &other) != c1.key);
  const char *lineinfo[] = {"-lineinfo"};
  other = opt;
  other.extra = lineinfo;
  other.n_extra = 1;
  CHECK(cubin_cache_key(src, &other) != c1.key);
  CHECK(cubin_cache_key(src, &opt) == c1.key);

  cubin_free(&c1);
  cubin_free(&c2);
  free(src);
}

/* An error in generated code: reported at its line, with the op marker above it. */
static void test_error_in_op(const char *cache) {
  char err[256];
  char *base = kernel_text_assemble((const char *const[]){"elementwise.cuh"}, 1, err, sizeof err);
  CHECK(base != NULL);
  if (!base) return;
  const char *tail = "\n// op: layers.3.mlp.broken_add\n"
                     "extern \"C\" __global__ void broken_add(float* x) {\n"
                     "  x[threadIdx.x] = x[threadIdx.x] + ;\n"
                     "}\n";
  size_t n = strlen(base) + strlen(tail) + 1;
  char *src = malloc(n);
  snprintf(src, n, "%s%s", base, tail);
  int bad = line_of(src, "x[threadIdx.x] + ;"), op = line_of(src, "// op: layers.3.mlp.broken_add");

  CubinOptions opt = {.cache_dir = cache, .source_name = "kernels.cu"};
  Cubin c;
  char *msg = NULL;
  CHECK(cubin_compile(src, &opt, &c, &msg) == CUBIN_ERR_COMPILE);
  CHECK(msg != NULL && c.data == NULL);
  if (msg) {
    char want[128];
    snprintf(want, sizeof want, "kernels.cu:%d: error:", bad);
    CHECK(strstr(msg, want) != NULL);
    CHECK(strstr(msg, "x[threadIdx.x] = x[threadIdx.x] + ;") != NULL); /* the source line itself */
    snprintf(want, sizeof want, "in op 'layers.3.mlp.broken_add' (kernels.cu:%d)", op);
    CHECK(strstr(msg, want) != NULL);
    CHECK(strstr(msg, "in kernels/") == NULL); /* generated code after the last file */
    if (failures) fprintf(stderr, "message was:\n%s\n", msg);
  }
  free(msg);
  free(src);
  free(base);
}

/* An error inside a hand-written file maps back to kernels/FILE:LINE. */
static void test_error_in_file(const char *cache) {
  char err[256];
  char *base = kernel_text_assemble((const char *const[]){"rope.cuh"}, 1, err, sizeof err);
  CHECK(base != NULL);
  if (!base) return;
  const char *needle = "rope_apply(out, inp, B, T, H, D, base, factor, 1.0f);";
  char *src = replace(base, needle, "rope_apply(out, inp, B, T, H, D, base, factor, 1.0f) +;");
  CHECK(src != NULL);
  const struct kernel_file *rope = kernel_file_find("rope.cuh");
  CHECK(rope != NULL);
  if (src && rope) {
    int file_line = line_of(rope->text, needle);
    CubinOptions opt = {.cache_dir = cache};
    Cubin c;
    char *msg = NULL;
    CHECK(cubin_compile(src, &opt, &c, &msg) == CUBIN_ERR_COMPILE);
    char want[128];
    snprintf(want, sizeof want, "in kernels/rope.cuh:%d", file_line);
    CHECK(msg && strstr(msg, want) != NULL);
    CHECK(msg && strstr(msg, "in op '") == NULL); /* no op marker in hand-written code */
    if (failures) fprintf(stderr, "message was:\n%s\n", msg ? msg : "(null)");
    free(msg);
  }
  free(src);
  free(base);
}

static void test_assemble(void) {
  char err[256];
  /* Dependencies come first, once: flash.cuh pulls in mma.cuh, which pulls in common.cuh. */
  char *s = kernel_text_assemble((const char *const[]){"flash.cuh", "norm.cuh"}, 2, err, sizeof err);
  CHECK(s != NULL);
  if (s) {
    const char *common = strstr(s, KERNEL_FILE_MARKER "common.cuh\n");
    const char *mma = strstr(s, KERNEL_FILE_MARKER "mma.cuh\n");
    const char *flash = strstr(s, KERNEL_FILE_MARKER "flash.cuh\n");
    CHECK(common && mma && flash && common < mma && mma < flash);
    CHECK(common && strstr(common + 1, KERNEL_FILE_MARKER "common.cuh\n") == NULL);
    CHECK(strstr(s, KERNEL_FILE_END_MARKER "flash.cuh\n") > flash);
    CHECK(strstr(s, "\n#include \"") == NULL);
    CHECK(strstr(s, "\n#pragma once") == NULL);
    free(s);
  }
  CHECK(kernel_text_assemble((const char *const[]){"nope.cuh"}, 1, err, sizeof err) == NULL);
  CHECK(strstr(err, "nope.cuh") != NULL);
}

static void test_fnv(void) {
  /* FNV-1a 64 reference values: "" and "a". */
  CHECK(cubin_fnv1a(CUBIN_FNV_OFFSET, "", 0) == 0xcbf29ce484222325ull);
  CHECK(cubin_fnv1a(CUBIN_FNV_OFFSET, "a", 1) == 0xaf63dc4c8601ec8cull);
}

static void test_elf_guard(void) {
  unsigned char junk[64] = {0x7f, 'E', 'L', 'F', 2};
  CHECK(!cubin_has_function(junk, sizeof junk, "x")); /* header claims nothing valid */
  CHECK(!cubin_has_function(junk, 3, "x"));
}

static int write_file(const char *path, const void *d, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t w = fwrite(d, 1, n, f);
  return fclose(f) == 0 && w == n ? 0 : -1;
}

static unsigned char *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char *d = malloc(1 << 20);
  *n = d ? fread(d, 1, 1 << 20, f) : 0;
  fclose(f);
  return d;
}

/* Compiles `src` and says whether it came from the cache; the cubin must equal `want`. */
static int compile_from_cache(const char *src, const CubinOptions *opt, const Cubin *want) {
  Cubin c;
  char *msg = NULL;
  CubinStatus st = cubin_compile(src, opt, &c, &msg);
  if (msg) fprintf(stderr, "%s\n", msg);
  free(msg);
  CHECK(st == CUBIN_OK);
  if (st != CUBIN_OK) return -1;
  CHECK(c.size == want->size && memcmp(c.data, want->data, c.size) == 0);
  int hit = c.from_cache;
  cubin_free(&c);
  return hit;
}

/* A damaged cache entry is a miss, whatever it starts with, and the compile replaces it. */
static void test_cache_damage(const char *cache) {
  const char *src = "extern \"C\" __global__ void damage_probe(float* x) { x[threadIdx.x] = 2.0f; }\n";
  CubinOptions opt = {.arch = "sm_90", .cache_dir = cache};
  Cubin good;
  char *msg = NULL;
  CHECK(cubin_compile(src, &opt, &good, &msg) == CUBIN_OK && !good.from_cache);
  free(msg);
  if (!good.data) return;
  CHECK(cubin_has_function(good.data, good.size, "damage_probe"));
  char path[4200];
  snprintf(path, sizeof path, "%s/%016llx.sm_90.cubin", cache, (unsigned long long)good.key);
  size_t n = 0;
  unsigned char *entry = read_file(path, &n);
  CHECK(entry && n > good.size && memcmp(entry, good.data, good.size) == 0); /* cubin + trailer */
  CHECK(compile_from_cache(src, &opt, &good) == 1);

  /* a flipped bit inside the code, a truncation, bytes appended: each a miss, then a hit again */
  unsigned char *bad = malloc(n + 1);
  memcpy(bad, entry, n);
  bad[good.size / 2] ^= 0x10;
  CHECK(write_file(path, bad, n) == 0 && compile_from_cache(src, &opt, &good) == 0);
  CHECK(compile_from_cache(src, &opt, &good) == 1);
  CHECK(write_file(path, entry, good.size / 2) == 0 && compile_from_cache(src, &opt, &good) == 0);
  CHECK(write_file(path, entry, n - 1) == 0 && compile_from_cache(src, &opt, &good) == 0);
  bad[good.size / 2] ^= 0x10;
  bad[n] = 0;
  CHECK(write_file(path, bad, n + 1) == 0 && compile_from_cache(src, &opt, &good) == 0);
  CHECK(compile_from_cache(src, &opt, &good) == 1);

  /* a plain cubin (an artifact's <key> link) is used when whole, refused when cut or extended */
  CHECK(write_file(path, good.data, good.size) == 0 && compile_from_cache(src, &opt, &good) == 1);
  CHECK(write_file(path, good.data, good.size - 1) == 0 && compile_from_cache(src, &opt, &good) == 0);
  memcpy(bad, good.data, good.size);
  bad[good.size] = 0;
  CHECK(write_file(path, bad, good.size + 1) == 0 && compile_from_cache(src, &opt, &good) == 0);
  /* ELF magic and then anything: the damage issue 14 reported */
  memset(bad, 0xab, n);
  memcpy(bad, good.data, 64);
  CHECK(write_file(path, bad, good.size) == 0 && compile_from_cache(src, &opt, &good) == 0);

  /* an entry copied under another source's key is that source's miss */
  const char *src2 = "extern \"C\" __global__ void damage_other(float* x) { x[threadIdx.x] = 3.0f; }\n";
  char path2[4200];
  snprintf(path2, sizeof path2, "%s/%016llx.sm_90.cubin", cache, (unsigned long long)cubin_cache_key(src2, &opt));
  CHECK(write_file(path2, entry, n) == 0);
  Cubin other;
  CHECK(cubin_compile(src2, &opt, &other, &msg) == CUBIN_OK && !other.from_cache);
  free(msg);
  CHECK(other.data && cubin_has_function(other.data, other.size, "damage_other"));
  cubin_free(&other);
  free(bad);
  free(entry);
  cubin_free(&good);
}

/* The tuning variants (tests/gpu/flash_variants.cuh) compile against flash.cuh's templates, for
 * sm_90a (the wgmma ones) and everywhere (the mma.sync ones). */
static void test_flash_variants(const char *cache) {
  char err[256];
  char *src = kernel_text_assemble(NULL, 0, err, sizeof err);
  if (src) src = flash_variants_append(src, err, sizeof err);
  CHECK(src != NULL);
  if (!src) {
    fprintf(stderr, "%s\n", err);
    return;
  }
  CubinOptions opt = {.arch = "sm_90", .cache_dir = cache};
  Cubin c;
  char *msg = NULL;
  CubinStatus st = cubin_compile(src, &opt, &c, &msg);
  if (msg) fprintf(stderr, "%s\n", msg);
  free(msg), free(src);
  CHECK(st == CUBIN_OK);
  if (st != CUBIN_OK) return;
  const char *names[] = {"flash_wg_fwd_v64_128", "flash_wg_dkdv_v128_32", "flash_wg_dq_v64_32", "flash_fwd_v64_4_2_64_r",
                         "flash_dkdv_v128_4_1_32", "flash_dq_v128_4_1_64", "flash_attention_forward_d64"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    int found = cubin_has_function(c.data, c.size, names[i]);
    if (!found) fprintf(stderr, "variant %s missing from the cubin\n", names[i]);
    CHECK(found);
  }
  cubin_free(&c);
}

int main(void) {
  char cache[] = "/tmp/stepc-test-nvrtc-XXXXXX";
  if (!mkdtemp(cache)) {
    perror("mkdtemp");
    return 1;
  }
  test_fnv();
  test_elf_guard();
  test_assemble();
  test_all_kernels(cache);
  test_flash_variants(cache);
  test_cache_damage(cache);
  test_error_in_op(cache);
  test_error_in_file(cache);
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", cache);
  if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
