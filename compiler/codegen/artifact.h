/* artifact.h — `stepc build`: the artifact directory a trainer loads without stepc.
 *
 *   DIR/recipe.lua              the recipe with its overrides applied, one self-contained table
 *   DIR/plan.json               `stepc plan --json` of it
 *   DIR/kernels.cu              the device code (kernel_text), self-contained
 *   DIR/kernels.<arch>.cubin    NVRTC's cubin of it; DIR/<key>.<arch>.cubin links to it, so the
 *                               runtime's cache lookup (nvrtc.h) finds it without compiling
 *   DIR/step.c                  the host step, every launch as literals (codegen/step_emit.h)
 *   DIR/libstep.so              step.c + libstepc_rt + the compiler's runtime half, behind stepc.h
 *   DIR/liblua5.4.so.0          the recipe loader's Lua (found through $ORIGIN)
 *   DIR/stepc.h, DIR/train.c, DIR/train   the API header and a small trainer using only it
 *   DIR/build.log               what the C compiler said
 * Nothing here needs a GPU. */
#ifndef STEPC_ARTIFACT_H
#define STEPC_ARTIFACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "diag.h"
#include "spec.h"

typedef struct {
  const char *dir;
  const char *arch;      /* NULL: sm_90 */
  const char *cache_dir; /* NVRTC's cache; NULL: the default */
  bool no_link;          /* write the sources and the cubin only (no cc) */
  int sm_count;          /* the GPU's SMs step.c's grids are sized for; 0: STEP_EMIT_DEFAULT_SMS */
} ArtifactOptions;

enum { ARTIFACT_OK = 0, ARTIFACT_ERROR = -1, ARTIFACT_UNSUPPORTED = -2 };

/* The recipe as one Lua table literal: every field the raw (pre-validation) Spec holds a value
 * for, with data.path made absolute, so that the frontend loads back the same Spec. */
int artifact_write_recipe(const Spec *raw, FILE *f);

/* Writes the whole directory. Scope diagnostics of the plan go to d (the caller decides whether
 * they fail the build). progress: one line per stage (may be NULL). */
int artifact_build(const Spec *raw, const Spec *spec, const ArtifactOptions *o, DiagList *d, FILE *progress, char *err,
                   size_t nerr);

/* The text of DIR/train.c (artifact_train.c). */
extern const char artifact_train_c[];

#endif
