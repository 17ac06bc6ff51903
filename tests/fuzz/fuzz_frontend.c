/* fuzz_frontend.c — libFuzzer target for the recipe frontend and the validator.
 *
 * Input: recipe text (loaded, validated, and — when valid — lowered and scope-checked as `stepc
 * check` does); an optional line "--overrides--" separates it from KEY=VALUE overrides, one
 * per line. Built with -fsanitize=fuzzer it is a fuzzer; built without, replay.c drives it over the
 * seed corpus and the saved regressions as an ordinary test. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "validate/diag.h"
#include "frontend/frontend.h"
#include "plan/plan.h"
#include "validate/validate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  size_t recipe_len = size;
  const char *ov[32];
  int nov = 0;
  char *sep = strstr(text, "\n--overrides--\n");
  if (sep) {
    recipe_len = (size_t)(sep - text);
    char *line = sep + strlen("\n--overrides--\n");
    while (*line && nov < 32) {
      char *nl = strchr(line, '\n');
      if (nl) *nl = 0;
      ov[nov++] = line;
      if (!nl) break;
      line = nl + 1;
    }
  }
  FrontendOptions opt = {.mem_limit = 16u << 20, .instr_limit = 2000000, .time_limit_s = 5, .models_dir = "models"}; /* under -timeout=10 */
  static Spec raw, norm;
  DiagList d;
  diag_init(&d);
  if (frontend_load_buffer("fuzz.lua", text, recipe_len, ov, nov, &opt, &raw, &d) == 0 &&
      validate_spec(&raw, &norm, &d) == 0)
    plan_check(&norm, &d); /* what `stepc check` runs next: lowering, recompute, schedule, scopes */
  diag_free(&d);
  free(text);
  return 0;
}
