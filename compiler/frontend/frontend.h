/* frontend.h — load a Lua recipe in a sandbox, apply KEY=VALUE overrides, extract the Spec. */
#ifndef STEPC_FRONTEND_H
#define STEPC_FRONTEND_H

#include <stddef.h>

#include "frontend/spec.h"
#include "validate/diag.h"

typedef struct {
  size_t mem_limit;       /* bytes the recipe's Lua state may hold; 0 = 64 MiB */
  long long instr_limit;  /* Lua VM instructions a recipe may run; 0 = 20 million */
  double time_limit_s;    /* wall-clock seconds a recipe may run; 0 = 20 */
  const char *models_dir; /* where stepc.recipe(name) looks after the recipe's own folder; NULL = built-in */
} FrontendOptions;

/* Loads the recipe at `path`, applies `overrides` ("model.fp8=null", ...) and fills `out`.
 * Returns 0 on success; -1 when the recipe cannot be loaded (syntax or runtime error, sandbox
 * violation, limit exceeded, unknown field, wrong type, value out of range): the reasons are
 * appended to `diags` as errors with the recipe file:line where known. */
int frontend_load(const char *path, const char *const *overrides, int noverrides, const FrontendOptions *opt,
                  Spec *out, DiagList *diags);

/* Same, from text in memory; `chunkname` is what diagnostics show as the file. */
int frontend_load_buffer(const char *chunkname, const char *text, size_t len, const char *const *overrides,
                         int noverrides, const FrontendOptions *opt, Spec *out, DiagList *diags);

#endif
