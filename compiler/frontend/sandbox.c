/* sandbox.c — the recipe's Lua state: no files, no commands, bounded memory and instructions.
 *
 * A recipe copied from someone else's repository runs here, so the state opens only the pure
 * libraries (base, string, table, math, utf8, coroutine), replaces every way to reach the file
 * system or the process (io, os, debug, package, require, dofile, loadfile, load, string.dump)
 * with a function that raises a clear error, loads text chunks only, and stops a recipe that
 * allocates, loops or runs without end (limits.c: limits that pcall cannot catch, a wall-clock
 * deadline, guarded string and table functions, no __gc; print goes to diagnostics). The `stepc` prelude
 * offers recipe(name), which loads a shipped recipe by name from a fixed folder and hands back tables that
 * remember where fields are set. */
#include <errno.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#ifndef STEPC_MODELS_DIR
#define STEPC_MODELS_DIR "models"
#endif

static void *fe_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  FeCtx *cx = ud;
  if (!ptr) osize = 0;
  if (nsize == 0) {
    free(ptr);
    cx->mem_used -= osize;
    return NULL;
  }
  if (nsize > osize && cx->mem_used - osize + nsize > cx->mem_limit) {
    cx->mem_exceeded = true;
    return NULL;
  }
  void *p = realloc(ptr, nsize);
  if (p) cx->mem_used = cx->mem_used - osize + nsize;
  return p;
}

static FeCtx *ctx_of(lua_State *L) {
  void *ud;
  lua_getallocf(L, &ud);
  return ud;
}

static int fe_blocked(lua_State *L) {
  return luaL_error(L,
                    "%s is not available in a recipe: recipes cannot read files, load code or run "
                    "commands (use stepc.recipe(\"name\") to start from a shipped recipe)",
                    lua_tostring(L, lua_upvalueindex(1)));
}

static int fe_blocked_index(lua_State *L) {
  const char *lib = lua_tostring(L, lua_upvalueindex(1));
  const char *key = lua_tostring(L, 2);
  return luaL_error(L,
                    "%s.%s is not available in a recipe: recipes cannot read files, load code or "
                    "run commands",
                    lib, key ? key : "?");
}

static void block_function(lua_State *L, int table_idx, const char *key, const char *shown) {
  lua_pushstring(L, shown);
  lua_pushcclosure(L, fe_blocked, 1);
  lua_setfield(L, table_idx, key);
}

static void block_library(lua_State *L, const char *name) {
  lua_newtable(L);
  lua_newtable(L);
  lua_pushstring(L, name);
  lua_pushcclosure(L, fe_blocked_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pushstring(L, name);
  lua_pushcclosure(L, fe_blocked_index, 1);
  lua_setfield(L, -2, "__newindex");
  lua_pushliteral(L, "locked");
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, -2);
  lua_setglobal(L, name);
}

/* ---- proxies: tables that record the recipe line of every assignment ---- */

static const char *const WHERE_KEY = "stepc.where";

static void record_where(lua_State *L, const char *path) {
  lua_Debug ar;
  for (int level = 1; lua_getstack(L, level, &ar); level++) {
    if (!lua_getinfo(L, "Sl", &ar) || ar.currentline <= 0) continue;
    lua_getfield(L, LUA_REGISTRYINDEX, WHERE_KEY);
    lua_pushfstring(L, "%s:%d", ar.short_src, ar.currentline);
    lua_setfield(L, -2, path);
    lua_pop(L, 1);
    return;
  }
}

static int proxy_newindex(lua_State *L) {
  /* upvalues: real table, path prefix ("" at the top, "model." below) */
  if (lua_type(L, 2) == LUA_TSTRING) {
    lua_pushfstring(L, "%s%s", lua_tostring(L, lua_upvalueindex(2)), lua_tostring(L, 2));
    record_where(L, lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  lua_settop(L, 3);
  lua_rawset(L, lua_upvalueindex(1));
  return 0;
}

static int proxy_pairs(lua_State *L) {
  lua_getglobal(L, "next");
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_pushnil(L);
  return 3;
}

/* Replaces the table on top of the stack with a proxy over it. */
static void make_proxy(lua_State *L, const char *prefix) {
  int real = lua_gettop(L);
  lua_newtable(L); /* proxy */
  lua_newtable(L); /* metatable */
  lua_pushvalue(L, real);
  lua_setfield(L, -2, "__index");
  lua_pushvalue(L, real);
  lua_pushstring(L, prefix);
  lua_pushcclosure(L, proxy_newindex, 2);
  lua_setfield(L, -2, "__newindex");
  lua_pushvalue(L, real);
  lua_pushcclosure(L, proxy_pairs, 1);
  lua_setfield(L, -2, "__pairs");
  lua_pushvalue(L, real);
  lua_setfield(L, -2, "__stepc_real");
  lua_pushliteral(L, "locked");
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, -2);
  lua_replace(L, real);
}

void fe_unwrap(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (!lua_istable(L, idx) || !lua_getmetatable(L, idx)) return;
  lua_pushliteral(L, "__stepc_real");
  if (lua_rawget(L, -2) == LUA_TTABLE)
    lua_replace(L, idx), lua_pop(L, 1);
  else
    lua_pop(L, 2);
}

const char *fe_recorded_where(lua_State *L, const char *path) {
  lua_getfield(L, LUA_REGISTRYINDEX, WHERE_KEY);
  lua_getfield(L, -1, path);
  const char *w = lua_tostring(L, -1); /* interned in the registry table: stays valid */
  lua_pop(L, 2);
  return w;
}

/* ---- the stepc prelude ---- */

static int stepc_recipe(lua_State *L) {
  FeCtx *cx = ctx_of(L);
  const char *name = luaL_checkstring(L, 1);
  for (const char *p = name; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_'))
      return luaL_error(L, "stepc.recipe: '%s' is not a recipe name (letters, digits and _ only)", name);
  if (!*name) return luaL_error(L, "stepc.recipe: empty recipe name");
  if (cx->depth >= FE_MAX_DEPTH)
    return luaL_error(L, "stepc.recipe: recipes nest deeper than %d", FE_MAX_DEPTH);
  if (cx->nfiles >= FE_MAX_FILES)
    return luaL_error(L, "stepc.recipe: more than %d recipe files", FE_MAX_FILES);

  char path[1024], why[200];
  char *text = NULL;
  size_t len = 0;
  int err = ENOENT;
  const char *dirs[2] = {cx->recipe_dir, cx->models_dir};
  for (int i = 0; i < 2 && !text && err == ENOENT; i++) {
    if (!dirs[i] || !dirs[i][0]) continue;
    snprintf(path, sizeof path, "%s/%s.lua", dirs[i], name);
    text = fe_read_file(path, false, 64u << 20, &len, &err, why, sizeof why);
  }
  if (!text && err != ENOENT) /* there, but a link, a FIFO, a device: never read through */
    return luaL_error(L, "stepc.recipe: refusing %s: %s", path, why);
  if (!text)
    return luaL_error(L, "stepc.recipe: no shipped recipe '%s' (looked in %s and %s)", name,
                      cx->recipe_dir[0] ? cx->recipe_dir : ".", cx->models_dir);
  FeFile *f = &cx->files[cx->nfiles++];
  snprintf(f->name, sizeof f->name, "%s", path);
  f->text = text, f->len = len;

  char chunk[300];
  snprintf(chunk, sizeof chunk, "@%s", f->name);
  if (luaL_loadbufferx(L, text, len, chunk, "t") != LUA_OK) return lua_error(L);
  cx->depth++;
  lua_call(L, 0, 1);
  cx->depth--;
  fe_unwrap(L, -1);
  if (!lua_istable(L, -1))
    return luaL_error(L, "stepc.recipe: recipe '%s' returned %s, not a table", name, luaL_typename(L, -1));
  /* Wrap each section and the top so that later assignments record their line. */
  int top = lua_gettop(L);
  for (int s = 0; s < SPEC_NSECTIONS; s++) {
    if (lua_getfield(L, top, spec_section_names[s]) == LUA_TTABLE) {
      fe_unwrap(L, -1);
      char prefix[32];
      snprintf(prefix, sizeof prefix, "%s.", spec_section_names[s]);
      make_proxy(L, prefix);
      lua_setfield(L, top, spec_section_names[s]);
    } else {
      lua_pop(L, 1);
    }
  }
  make_proxy(L, "");
  return 1;
}

lua_State *fe_state_new(FeCtx *cx) {
  lua_State *L = lua_newstate(fe_alloc, cx);
  if (!L) return NULL;
  static const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base},        {LUA_TABLIBNAME, luaopen_table},
                                  {LUA_STRLIBNAME, luaopen_string}, {LUA_MATHLIBNAME, luaopen_math},
                                  {LUA_UTF8LIBNAME, luaopen_utf8},  {LUA_COLIBNAME, luaopen_coroutine}};
  for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
    luaL_requiref(L, libs[i].name, libs[i].func, 1);
    lua_pop(L, 1);
  }
  lua_pushglobaltable(L);
  int g = lua_gettop(L);
  block_function(L, g, "dofile", "dofile");
  block_function(L, g, "loadfile", "loadfile");
  block_function(L, g, "load", "load");
  block_function(L, g, "require", "require");
  lua_getglobal(L, "string");
  block_function(L, lua_gettop(L), "dump", "string.dump");
  lua_pop(L, 2);
  block_library(L, "io");
  block_library(L, "os");
  block_library(L, "debug");
  block_library(L, "package");

  lua_newtable(L);
  lua_setfield(L, LUA_REGISTRYINDEX, WHERE_KEY);

  lua_newtable(L);
  lua_pushcfunction(L, stepc_recipe);
  lua_setfield(L, -2, "recipe");
  lua_pushliteral(L, "0.1");
  lua_setfield(L, -2, "version");
  lua_setglobal(L, "stepc");

  fe_limits_install(L, cx);
  return L;
}

void fe_state_close(lua_State *L, FeCtx *cx) {
  if (L) lua_close(L);
  for (int i = 0; i < cx->nfiles; i++)
    free(cx->files[i].text);
  cx->nfiles = 0;
}

/* Splits "file:12: message" into where and message. */
static void add_lua_error(FeCtx *cx, const char *msg, const char *fallback_where) {
  char where[160] = "";
  const char *rest = msg;
  const char *c1 = strchr(msg, ':');
  if (c1) {
    const char *c2 = c1 + 1;
    while (*c2 >= '0' && *c2 <= '9')
      c2++;
    if (c2 > c1 + 1 && *c2 == ':' && (size_t)(c2 - msg) < sizeof where) {
      memcpy(where, msg, (size_t)(c2 - msg));
      where[c2 - msg] = 0;
      rest = c2 + 1;
      while (*rest == ' ')
        rest++;
    }
  }
  if (!where[0]) snprintf(where, sizeof where, "%s", fallback_where);
  diag_add(cx->diags, DIAG_ERROR, "LOAD", "", where, "%s", rest);
}

int fe_run_chunk(lua_State *L, FeCtx *cx, const char *name, const char *text, size_t len) {
  char chunk[300];
  snprintf(chunk, sizeof chunk, "@%s", name);
  int rc = luaL_loadbufferx(L, text, len, chunk, "t");
  if (rc == LUA_OK) rc = lua_pcall(L, 0, 1, 0);
  if (rc == LUA_OK) return 0;

  char fallback[200];
  if (cx->last_line > 0)
    snprintf(fallback, sizeof fallback, "%s:%d", cx->last_src, cx->last_line);
  else
    snprintf(fallback, sizeof fallback, "%s", name);
  /* A refused allocation that Lua recovered from (it collects and retries) leaves mem_exceeded
   * set; the memory message is for a memory error that actually ended the recipe. */
  const char *top = lua_tostring(L, -1);
  if (cx->mem_exceeded &&
      (cx->mem_stopped || rc == LUA_ERRMEM || (top && strcmp(top, "not enough memory") == 0))) {
    Diag *g = diag_add(cx->diags, DIAG_ERROR, "LOAD", "", fallback,
                       "recipe needed more than %zu MiB of memory and was stopped", cx->mem_limit >> 20);
    diag_hint(g, "a recipe only builds a configuration table; look for a runaway string.rep or table");
  } else {
    const char *msg = lua_tostring(L, -1);
    add_lua_error(cx, msg ? msg : "error object is not a string", fallback);
    if ((cx->instr_exceeded || cx->time_exceeded) && cx->diags->n)
      diag_hint(&cx->diags->items[cx->diags->n - 1], "a recipe only builds a configuration table; "
                                                     "look for a loop that never ends");
  }
  lua_pop(L, 1);
  return -1;
}
