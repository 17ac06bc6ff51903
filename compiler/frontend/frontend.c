/* frontend.c — recipe file → sandboxed Lua → overrides → Spec. */
#include "frontend.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#ifndef STEPC_MODELS_DIR
#define STEPC_MODELS_DIR "models"
#endif

typedef struct {
  FeCtx *cx;
  const char *const *ov;
  int nov;
  Spec *out;
  int rc;
} Finish;

/* Runs inside lua_pcall, so that a memory error or a recipe's metamethod cannot escape. */
static int finish(lua_State *L) {
  Finish *fin = lua_touserdata(L, 1);
  lua_settop(L, 2);
  fe_unwrap(L, 2);
  int rc = fe_apply_overrides(L, fin->cx, fin->ov, fin->nov);
  if (rc == 0) rc = fe_extract(L, fin->cx, fin->out);
  if (rc == 0) spec_imply(fin->out);
  fin->rc = rc;
  return 0;
}

static void init_ctx(FeCtx *cx, const FrontendOptions *opt, DiagList *diags) {
  memset(cx, 0, sizeof *cx);
  cx->mem_limit = opt && opt->mem_limit ? opt->mem_limit : (size_t)64 << 20;
  cx->instr_limit = opt && opt->instr_limit ? opt->instr_limit : 20000000LL;
  cx->time_limit = opt && opt->time_limit_s > 0 ? opt->time_limit_s : FE_TIME_LIMIT_S;
  cx->models_dir = opt && opt->models_dir ? opt->models_dir : STEPC_MODELS_DIR;
  cx->diags = diags;
}

static int load_text(FeCtx *cx, const char *name, char *text, size_t len, const char *const *ov, int nov,
                     Spec *out) {
  memset(out, 0, sizeof *out);
  snprintf(out->recipe_path, sizeof out->recipe_path, "%s", name);
  FeFile *f = &cx->files[cx->nfiles++];
  snprintf(f->name, sizeof f->name, "%s", name);
  f->text = text, f->len = len;

  lua_State *L = fe_state_new(cx);
  if (!L) {
    diag_add(cx->diags, DIAG_ERROR, "LOAD", "", name, "cannot create the Lua state (out of memory)");
    fe_state_close(NULL, cx);
    return -1;
  }
  int rc = fe_run_chunk(L, cx, name, text, len);
  if (rc == 0 && !lua_istable(L, -1)) {
    Diag *g = diag_add(cx->diags, DIAG_ERROR, "LOAD", "", name, "the recipe returned %s, not a table",
                       luaL_typename(L, -1));
    diag_hint(g, "end the recipe with: return cfg   (a table { model = ..., train = ..., optimizer = ..., "
                 "data = ... })");
    rc = -1;
  }
  if (rc == 0) {
    Finish fin = {cx, ov, nov, out, -1};
    lua_pushcfunction(L, finish);
    lua_pushlightuserdata(L, &fin);
    lua_pushvalue(L, -3);
    if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
      diag_add(cx->diags, DIAG_ERROR, "LOAD", "", name, "%s",
               cx->mem_exceeded ? "out of memory while reading the recipe" : lua_tostring(L, -1));
      fin.rc = -1;
    }
    rc = fin.rc;
  }
  fe_state_close(L, cx);
  return rc;
}

int frontend_load_buffer(const char *chunkname, const char *text, size_t len, const char *const *ov, int nov,
                         const FrontendOptions *opt, Spec *out, DiagList *diags) {
  FeCtx cx;
  init_ctx(&cx, opt, diags);
  char *copy = malloc(len + 1);
  if (!copy) {
    diag_add(diags, DIAG_ERROR, "LOAD", "", chunkname, "out of memory");
    return -1;
  }
  memcpy(copy, text, len);
  copy[len] = 0;
  return load_text(&cx, chunkname, copy, len, ov, nov, out);
}

int frontend_load(const char *path, const char *const *ov, int nov, const FrontendOptions *opt, Spec *out,
                  DiagList *diags) {
  FeCtx cx;
  init_ctx(&cx, opt, diags);
  /* the user named this file: a symbolic link to it is followed (unlike stepc.recipe's) */
  char why[200];
  int err;
  size_t len = 0;
  char *text = fe_read_file(path, true, 16u << 20, &len, &err, why, sizeof why);
  if (!text) {
    diag_add(diags, DIAG_ERROR, "LOAD", "", path, "cannot open the recipe file: %s", why);
    return -1;
  }
  const char *slash = strrchr(path, '/');
  if (slash)
    snprintf(cx.recipe_dir, sizeof cx.recipe_dir, "%.*s", (int)(slash - path), path);
  else
    snprintf(cx.recipe_dir, sizeof cx.recipe_dir, ".");
  return load_text(&cx, path, text, len, ov, nov, out);
}
