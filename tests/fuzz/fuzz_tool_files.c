/* fuzz_tool_files.c — libFuzzer target for the small files the compiler side reads from other tools
 * and from its own earlier runs: a Hugging Face config.json (compiler/cli/hf_config.c) and any JSON
 * object walked member by member (compiler/cli/json_read.c, which also reads
 * model.safetensors.index.json), an artifact cache entry's stepc.manifest
 * (compiler/codegen/cache_manifest.c) and an artifact's libstep.sum (compiler/cli/artifact_sum.c).
 *
 * Input: one selector byte, then the file. Selector 0 mod 4: config.json, checked against
 * models/tiny.lua; 1: JSON text walked to depth 8 with every typed read; 2: stepc.manifest of a
 * scratch entry holding libstep.so and step.img; 3: libstep.sum beside a small libstep.so. Run from
 * the repository root. Built with -fsanitize=fuzzer it is a fuzzer; built without, replay.c drives
 * it over the saved inputs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/artifact_sum.h"
#include "codegen/cache.h"
#include "validate/diag.h"
#include "frontend/frontend.h"
#include "cli/hf_config.h"
#include "cli/json_read.h"
#include "validate/validate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const Spec *tiny_spec(void) {
  static Spec raw, spec;
  static int state; /* 0 not loaded, 1 loaded, -1 failed */
  if (state == 0) {
    DiagList d;
    diag_init(&d);
    state = frontend_load("models/tiny.lua", NULL, 0, NULL, &raw, &d) == 0 && validate_spec(&raw, &spec, &d) == 0 ? 1 : -1;
    diag_free(&d);
  }
  return state == 1 ? &spec : NULL;
}

static void put(const char *dir, const char *name, const void *p, size_t n) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) return;
  fwrite(p, 1, n, f);
  fclose(f);
}

/* Every member of v, to depth 8, read as each type. */
static void walk(JsonSpan v, int depth) {
  double x;
  bool b;
  char s[64], key[64];
  (void)json_number(v, &x), (void)json_bool(v, &b), (void)json_string(v, s, sizeof s), (void)json_is_null(v);
  if (depth >= 8 || !json_is_object(v)) return;
  size_t at = 0;
  JsonSpan m;
  for (int k = 0; k < 4096 && json_member_next(v, &at, key, sizeof key, &m) == 1; k++) walk(m, depth + 1);
  (void)json_member(v, "weight_map", &m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  char dir[64], err[600];
  snprintf(dir, sizeof dir, "/tmp/stepc_fuzz_tool.%d", (int)getpid());
  mkdir(dir, 0700);
  const uint8_t *p = data + 1;
  size_t n = size - 1;
  switch (data[0] % 4) {
  case 0:
    put(dir, "config.json", p, n);
    if (tiny_spec()) (void)hf_config_check(tiny_spec(), dir, err, sizeof err);
    break;
  case 1: {
    JsonSpan v;
    if (json_value((const char *)p, n, &v) == 0) walk(v, 0);
    break;
  }
  case 2:
    put(dir, "libstep.so", "ELF", 3), put(dir, "step.img", "IMG", 3), put(dir, CACHE_MANIFEST, p, n);
    (void)cache_entry_ok(dir, err, sizeof err);
    break;
  default:
    put(dir, "libstep.so", "ELF", 3), put(dir, "libstep.sum", p, n);
    (void)artifact_sum_check(dir, err, sizeof err);
  }
  return 0;
}
