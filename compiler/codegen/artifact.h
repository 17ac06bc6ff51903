/* artifact.h — `stepc build`: the artifact directory a trainer loads without stepc.
 *
 *   DIR/step.img                the step image (runtime/image.h): everything the runtime runs,
 *                               the launch program (runtime/program.h) included
 *   DIR/kernels.<arch>.cubin    NVRTC's cubin of kernels.cu, loaded as it is
 *   DIR/libstep.so              the runtime alone (libstepc_rt, libstepc_ir) behind stepc.h:
 *                               SONAME libstep.so, only the stepc_* API exported, no Lua, no NVRTC
 *   DIR/libstep.sum             libstep.so's size and hash (artifact_sum.h), checked before it is loaded
 *   DIR/train, DIR/stepc.h      a small trainer using only the API (it loads libstep.so from its own
 *                               directory once checked), and the header
 *   DIR/program.txt             the launch program as text (codegen/program_text.h); never read
 *   DIR/kernels.cu              the device code, self-contained
 *   DIR/recipe.lua, plan.json   the recipe with its overrides applied, and `stepc plan --json` of
 *                               it: a record of what was built (the runtime reads neither)
 *   DIR/train.c, DIR/build.log  the trainer's source and what the C compiler said
 * Nothing here needs a GPU, and nothing in the directory names a path of the build machine (but
 * data.path, the user's data file, by its absolute path). */
#ifndef STEPC_ARTIFACT_H
#define STEPC_ARTIFACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "frontend/spec.h"
#include "validate/diag.h"

typedef struct {
  const char *dir;
  const char *arch;      /* NULL: sm_90 */
  const char *cache_dir; /* NVRTC's cache; NULL: the default */
  bool no_link;          /* write the sources and the cubin only (no cc) */
  int sm_count;          /* the GPU's SMs the launch program is lowered for; 0: LAUNCH_DEFAULT_SMS */
} ArtifactOptions;

enum { ARTIFACT_OK = 0, ARTIFACT_ERROR = -1, ARTIFACT_UNSUPPORTED = -2 };

/* ARTIFACT_OK, or ARTIFACT_UNSUPPORTED with err ("file:line: model.fp8=hybrid asks for ...") when
 * the recipe sets a field stepc checks and plans but does not execute yet (executes.c): fp8,
 * tensor, pipeline, context and expert parallelism, activation offloading, low-precision optimizer
 * state. artifact_build calls it first. */
int artifact_refuse_unexecuted(const Spec *s, char *err, size_t nerr);

/* The recipe as one Lua table literal: every field the raw (pre-validation) Spec holds a value
 * for, with data.path made absolute, so that the frontend loads back the same Spec. */
int artifact_write_recipe(const Spec *raw, FILE *f);

/* Writes the whole directory. Scope diagnostics of the plan go to d (the caller decides whether
 * they fail the build). progress: one line per stage (may be NULL). */
int artifact_build(const Spec *raw, const Spec *spec, const ArtifactOptions *o, DiagList *d, FILE *progress,
                   char *err, size_t nerr);

/* mkdir -p (`-o art/tiny` where art/ does not exist yet). 0, or -1 with errno. */
int artifact_mkdirs(const char *dir);

/* The link step alone (libstep.so and train) of a directory artifact_build wrote with no_link. */
int artifact_link(const ArtifactOptions *o, FILE *progress, char *err, size_t nerr);

/* `stepc run SPEC`: the artifact of the recipe in the artifact cache, built when it is not there.
 * The cache is cache_root's (codegen/cache.h: a 0700 folder of this user's that no one else may
 * write, refused otherwise); an artifact sits in artifacts/<key>, the key a hash of its content
 * (step.img, kernels.cu), of the runtime archives it links and of the stepc executable
 * itself, so a changed recipe, plan or stepc builds anew and nothing stale runs. An entry is used
 * only when its manifest's checksums hold; otherwise it is built again. dir receives its path.
 * Returns as artifact_build. */
int artifact_build_cached(const Spec *raw, const Spec *spec, const ArtifactOptions *o, DiagList *d,
                          FILE *progress, char *dir, size_t ndir, char *err, size_t nerr);

/* `stepc build -o DIR`: built into a fresh directory beside DIR and swapped in atomically, so a
 * failed build leaves DIR as it was and DIR is never half old, half new; builds into one folder
 * take turns (a lock on the folder). Refuses a DIR that is a symbolic link, or one that
 * artifact_dir_replaceable refuses (the user's files are never written over or removed). */
int artifact_build_dir(const Spec *raw, const Spec *spec, const ArtifactOptions *o, DiagList *d,
                       FILE *progress, char *err, size_t nerr);

/* Whether `stepc build -o DIR` may replace dir: 0 when it is absent, an empty directory, or a
 * stepc artifact (it has a step.img) holding only the files stepc build writes (or an older one
 * wrote: step.c), every one a regular file; -1 with err naming what else is there (a checkpoint
 * saved inside the artifact, the user's notes) otherwise. Nothing is changed. */
int artifact_dir_replaceable(const char *dir, char *err, size_t nerr);

/* The text of DIR/train.c (artifact_train.c). */
extern const char artifact_train_c[];

#endif
