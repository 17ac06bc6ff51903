/* internal.h — state shared by the frontend's files; not part of the public API. */
#ifndef STEPC_FRONTEND_INTERNAL_H
#define STEPC_FRONTEND_INTERNAL_H

#include <lua.h>
#include <stdbool.h>

#include "frontend.h"

#define FE_MAX_FILES 8
#define FE_MAX_DEPTH 6
#define FE_TIME_LIMIT_S 20.0 /* default wall-clock limit of a recipe */
#define FE_MAX_UNKNOWN 20    /* unknown keys reported one by one; the rest are counted */

typedef struct {
  char name[256]; /* as diagnostics show it */
  char *text;
  size_t len;
} FeFile;

typedef struct {
  size_t mem_used, mem_limit;
  bool mem_exceeded;
  long long instr, instr_limit;
  bool instr_exceeded;
  double time_limit, deadline; /* seconds; fe_now() clock */
  bool time_exceeded;
  bool stopped;     /* a limit tripped: every hook and protected call raises `stop` again */
  bool mem_stopped; /* a memory error reached a protected call: a stop too */
  char stop[160];
  int nprint;     /* print calls so far (each one a PRINT note) */
  unsigned lines; /* line events so far (the clock is read every 256th) */
  char last_src[160];
  int last_line;
  const char *models_dir;
  char recipe_dir[512];
  FeFile files[FE_MAX_FILES]; /* files[0] is the recipe itself; then shipped recipes it loads */
  int nfiles;
  int depth;
  DiagList *diags;
} FeCtx;

/* limits.c: the hook, a wall-clock deadline, and library functions wrapped so that no limit can
 * be caught (pcall, xpcall, coroutine.resume/close), outrun inside one C call (string patterns,
 * string.rep, table.move/insert/remove) or escaped into a finaliser (setmetatable with __gc);
 * print becomes PRINT notes. Call once on a fresh state, after the libraries are opened. */
void fe_limits_install(lua_State *L, FeCtx *cx);
/* Charges n instructions' worth of work done in C and checks every limit, the clock included:
 * raises the stop (and does not return) when one has tripped. */
void fe_charge(lua_State *L, FeCtx *cx, long long n);

/* tablib.c: table.move, concat, unpack, insert, remove as Lua's, but charging every element
 * (fe_charge every 256); table.sort refuses a table read through __index/__newindex. */
void fe_tablib_install(lua_State *L);
double fe_now(void);

/* sandbox.c */
lua_State *fe_state_new(FeCtx *cx);
void fe_state_close(lua_State *L, FeCtx *cx);
/* Loads and runs a text chunk, leaving its single result on the stack; on failure pushes nothing,
 * adds a diagnostic and returns -1. */
int fe_run_chunk(lua_State *L, FeCtx *cx, const char *name, const char *text, size_t len);
/* If the table at idx is a recipe proxy, replaces it with the real table. */
void fe_unwrap(lua_State *L, int idx);
/* Where a field was assigned through a proxy ("models/x.lua:12"), or NULL. */
const char *fe_recorded_where(lua_State *L, const char *path);

/* readfile.c: a recipe file's text (NUL-terminated, at most max bytes), or NULL with errno-like
 * *err (ENOENT: not there) and the reason in why. A regular file only, opened without blocking;
 * with follow false a symbolic link is refused (ELOOP). */
char *fe_read_file(const char *path, bool follow, size_t max, size_t *len, int *err, char *why, size_t nwhy);

/* override.c */
/* Pushes the Lua value that override text denotes: null -> nil, true/false, numbers, [a,b], quoted
 * or bare strings. Returns -1 (pushing nothing) on malformed text, with a reason in err. */
int fe_push_value(lua_State *L, const char *text, char *err, size_t errn);
int fe_apply_overrides(lua_State *L, FeCtx *cx, const char *const *ov, int n);

/* extract.c */
int fe_extract(lua_State *L, FeCtx *cx, Spec *out);

#endif
