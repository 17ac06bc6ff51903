/* open_recipe.h — the tests' CHECK (counting failures), and a recipe (with overrides) built into an artifact in a test's temporary directory
 * and opened through stepc.h, for test_api.c and test_eval.c. No libstep.so is linked: the test's
 * own runtime runs the step image. */
#ifndef STEPC_TEST_OPEN_RECIPE_H
#define STEPC_TEST_OPEN_RECIPE_H

#include <stdio.h>

#include "codegen/artifact.h"
#include "frontend/frontend.h"
#include "runtime/stepc.h"
#include "validate/validate.h"

static int failures;
#define CHECK(c)                                                    \
  do {                                                              \
    if (!(c)) {                                                     \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); \
      failures++;                                                   \
    }                                                               \
  } while (0)

static char tmpdir[64];
static char built_dir[256]; /* the artifact open_recipe built last */

static stepc_status open_recipe(const char *recipe, const char *const *ov, int nov, const stepc_options *o, stepc_t **s) {
  static int n;
  static Spec raw, spec;
  char dir[256], err[1024] = "";
  snprintf(dir, sizeof dir, "%s/art%d", tmpdir, n++);
  snprintf(built_dir, sizeof built_dir, "%s", dir);
  DiagList d;
  diag_init(&d);
  ArtifactOptions ao = {.dir = dir, .no_link = true};
  int rc = frontend_load(recipe, ov, nov, NULL, &raw, &d) || validate_spec(&raw, &spec, &d) ||
           artifact_build(&raw, &spec, &ao, &d, NULL, err, sizeof err);
  diag_free(&d);
  if (rc) {
    fprintf(stderr, "building %s: %s\n", recipe, err);
    *s = NULL;
    return STEPC_ERR_RECIPE;
  }
  return stepc_open(dir, o, s);
}

#endif
