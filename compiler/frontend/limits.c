/* limits.c — the sandbox's limits, made so that a recipe can neither catch them nor outrun them.
 *
 * The instruction and memory limits raise Lua errors, and Lua lets a recipe catch errors: with
 * pcall, xpcall, coroutine.resume and coroutine.close, or in a __gc finaliser (whose errors Lua
 * turns into warnings). And the count hook only runs between VM instructions, so time spent inside
 * one library call (a backtracking string.find, string.rep of the empty string 2^50 times,
 * table.move over 2^50 slots) is never seen. So:
 *
 *  - Once a limit trips, the stop is sticky: every later hook raises it again, and the protected
 *    calls above are wrapped so that they re-raise it instead of returning false.
 *  - A wall-clock deadline (FrontendOptions.time_limit_s, 20 s by default:
 *    well above 20 million instructions even under the sanitizers) is checked from the hook,
 *    at every 256th new line, every 1000 instructions and every 256th call, and on entry to
 *    every guarded library call.
 *  - The hook sees calls too (LUA_MASKCALL), C functions included: a C function that C code
 *    calls in a loop (a C metamethod such as __index = table.concat, a sort comparator, gsub's
 *    replacement) counts as FE_CALL_COST instructions and reads the clock, though no
 *    instruction runs.
 *  - The table library's loops (move, concat, unpack, insert, remove) are stepc's own
 *    (tablib.c): each element is charged and the clock read every 256, so neither a huge range
 *    nor a 2000-table __index chain per element can outrun the limits; table.sort refuses a
 *    table read through __index/__newindex. gsub's table replacement becomes a function (a call
 *    per lookup). The strings' shared metatable is locked.
 *  - Library functions that can run long in C without allocating are guarded by a cost bound
 *    checked before the call: the string pattern functions (find, match, gmatch, gsub) refuse a
 *    pattern whose worst-case backtracking on the subject could exceed FE_PATTERN_BUDGET steps;
 *    string.rep refuses counts above what a 64 MiB recipe can hold. Every other library function
 *    is linear in memory the allocator bounds.
 *  - setmetatable refuses a metatable with __gc: finalisers run with hooks off (lua_close too),
 *    where no limit could stop them.
 *  - print writes nothing: each call becomes a note diagnostic (rule PRINT) with its recipe line,
 *    so that it shows on stderr with the other diagnostics and inside --json output, never as stray
 *    text on stdout; the frontend is a library and prints nothing itself. */
#include <lauxlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "internal.h"

/* Backtracking steps one pattern call may take in the worst case: about a second at most. */
#define FE_PATTERN_BUDGET 268435456.0 /* 2^28 */
/* Elements a count-driven library loop may visit: more than a 64 MiB recipe can hold. */
#define FE_LOOP_MAX ((lua_Integer)1 << 26)
#define FE_MAX_PRINTS 32
#define FE_CALL_COST 8

double fe_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static FeCtx *ctx_of(lua_State *L) {
  void *ud;
  lua_getallocf(L, &ud);
  return ud;
}

/* Raises the stop (once tripped, the same one every time); returns normally when no limit has
 * tripped. `clock` false skips reading the clock (the line hook reads it every 256th line). */
static void check_limits_at(lua_State *L, FeCtx *cx, bool clock) {
  if (!cx->stopped) {
    if (cx->instr > cx->instr_limit) {
      cx->instr_exceeded = true;
      snprintf(cx->stop, sizeof cx->stop,
               "recipe ran more than %lld Lua instructions and calls (an endless loop?)", cx->instr_limit);
    } else if (clock && fe_now() > cx->deadline) {
      cx->time_exceeded = true;
      snprintf(cx->stop, sizeof cx->stop, "recipe ran longer than %g s and was stopped", cx->time_limit);
    } else if (cx->mem_stopped) {
      snprintf(cx->stop, sizeof cx->stop, "recipe needed more than %zu MiB of memory and was stopped",
               cx->mem_limit >> 20);
    } else {
      return;
    }
    cx->stopped = true;
  }
  /* where the recipe was, not where the hook fired (that may be stepc's own coroutine.wrap) */
  if (cx->last_line > 0)
    lua_pushfstring(L, "%s:%d: %s", cx->last_src, cx->last_line, cx->stop);
  else
    lua_pushstring(L, cx->stop);
  lua_error(L);
}

static void check_limits(lua_State *L, FeCtx *cx) { check_limits_at(L, cx, true); }

void fe_charge(lua_State *L, FeCtx *cx, long long n) {
  cx->instr += n;
  check_limits(L, cx);
}

static void fe_hook(lua_State *L, lua_Debug *ar) {
  FeCtx *cx = ctx_of(L);
  bool clock = true;
  if (ar->event == LUA_HOOKLINE) {
    if (lua_getinfo(L, "S", ar) && ar->source[0] == '@') { /* a recipe file, not stepc's own chunk */
      snprintf(cx->last_src, sizeof cx->last_src, "%s", ar->short_src);
      cx->last_line = ar->currentline;
    }
    clock = (++cx->lines & 255) == 0;
  } else if (ar->event == LUA_HOOKCOUNT) {
    cx->instr += 1000;
  } else { /* a call, to Lua or C: FE_CALL_COST instructions' worth (a C call does that much work) */
    cx->instr += FE_CALL_COST;
    clock = (cx->instr & (256 * FE_CALL_COST - 1)) < FE_CALL_COST; /* about every 256th call */
  }
  check_limits_at(L, cx, clock);
}

/* ---- protected calls that cannot swallow a stop ---- */

static int protected_done(lua_State *L, int status, lua_KContext k) {
  (void)status, (void)k;
  FeCtx *cx = ctx_of(L);
  /* A refused allocation is not yet a stop: Lua collects garbage and retries, and may succeed.
   * It is one when the memory error reached this call (false, "not enough memory"). */
  if (cx->mem_exceeded && !cx->stopped && lua_gettop(L) >= 2 && lua_type(L, 1) == LUA_TBOOLEAN &&
      !lua_toboolean(L, 1) && lua_type(L, 2) == LUA_TSTRING &&
      strcmp(lua_tostring(L, 2), "not enough memory") == 0)
    cx->mem_stopped = true;
  if (cx->stopped || cx->mem_stopped) check_limits(L, cx);
  return lua_gettop(L);
}

/* pcall, xpcall, coroutine.resume, coroutine.close: upvalue 1 is Lua's own. The continuation keeps
 * a yield across pcall inside a coroutine working. */
static int protected_call(lua_State *L) {
  check_limits(L, ctx_of(L));
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_callk(L, lua_gettop(L) - 1, LUA_MULTRET, 0, protected_done);
  return protected_done(L, LUA_OK, 0);
}

/* xpcall's message handler runs where the error was raised; when that is the hook (a stop), Lua
 * has not yet turned hooks back on, so a looping handler could never be stopped. The user's
 * handler (upvalue 1) runs only when no limit has tripped. */
static int message_handler(lua_State *L) {
  if (ctx_of(L)->stopped) return 1;
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

static int guarded_xpcall(lua_State *L) {
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_pushvalue(L, 2);
  lua_pushcclosure(L, message_handler, 1);
  lua_replace(L, 2);
  return protected_call(L);
}

/* coroutine.wrap, as Lua's but through the guarded resume, and without closing a coroutine that
 * died of an error: a stop raised by the hook inside it leaves its hooks off, and closing would
 * run its pending __close handlers there. */
static const char WRAP_LUA[] = "local create, resume, error, pack, unpack = ...\n"
                               "return function(f)\n"
                               "  local co = create(f)\n"
                               "  return function(...)\n"
                               "    local r = pack(resume(co, ...))\n"
                               "    if not r[1] then error(r[2], 0) end\n"
                               "    return unpack(r, 2, r.n)\n"
                               "  end\n"
                               "end\n";

/* ---- cost guards ---- */

/* Calls upvalue 1 (the library's function) with every argument. */
static int call_original(lua_State *L) {
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* The index just past the set "[...]" that starts at p[i], as lstrlib's classEnd reads it (a ']'
 * right after "[" or "[^" is a member). p[m] is the string's NUL, so reading it is safe. */
static size_t set_end(const char *p, size_t m, size_t i) {
  i++;
  if (i < m && p[i] == '^') i++;
  do {
    if (p[i] == '%' && i + 1 < m) i++;
    i++;
  } while (i < m && p[i] != ']');
  return i + 1;
}

/* Worst-case steps of matching pattern p (m bytes) against n bytes, as lstrlib's backtracking
 * matcher does: each repetition item (x* x+ x-), %b and back-reference may try every length, so
 * they multiply by n+1; x? by 2; every start position multiplies by n+1 unless anchored; each
 * single-character step costs up to m (a set). Plain text is a memcmp at every position. */
static double pattern_cost(const char *p, size_t m, size_t n, bool plain, bool anchor_ok) {
  double N = (double)n + 1, M = (double)m + 1;
  bool specials = strlen(p) < m || strpbrk(p, "^$*+?.([%-") != NULL; /* as lstrlib's nospecials */
  if (plain || !specials) return N * M;
  double f = 1;
  size_t i = 0;
  bool anchored = anchor_ok && p[0] == '^';
  if (p[0] == '^') i++;
  while (i < m) {
    char c = p[i];
    if (c == '(' || c == ')') {
      i++;
      continue;
    }
    if (c == '%' && i + 1 < m) {
      char e = p[i + 1];
      if (e == 'b') {
        f *= N;
        i += 4;
        continue;
      }
      if (e >= '0' && e <= '9') {
        f *= N;
        i += 2;
        continue;
      }
      if (e == 'f') { /* a frontier: a set, no repetition */
        i += 2;
        if (i < m && p[i] == '[') i = set_end(p, m, i);
        continue;
      }
      i += 2;
    } else if (c == '[') {
      i = set_end(p, m, i);
    } else {
      i++;
    }
    if (i < m && (p[i] == '*' || p[i] == '+' || p[i] == '-'))
      f *= N, i++;
    else if (i < m && p[i] == '?')
      f *= 2, i++;
  }
  return (anchored ? 1 : N) * f * M;
}

/* gsub's table replacement, as a function: t[first capture]. Lua looks the key up in C, through
 * any chain of __index tables; as a call, each lookup reaches the hook. */
static int gsub_lookup(lua_State *L) {
  lua_settop(L, 1);
  lua_gettable(L, lua_upvalueindex(1));
  return 1;
}

/* string.find, match, gmatch, gsub; upvalue 2 is the function's name. */
static int guard_pattern(lua_State *L) {
  check_limits(L, ctx_of(L));
  const char *name = lua_tostring(L, lua_upvalueindex(2));
  if (lua_type(L, 1) == LUA_TSTRING && lua_type(L, 2) == LUA_TSTRING) {
    size_t n, m;
    lua_tolstring(L, 1, &n);
    const char *p = lua_tolstring(L, 2, &m);
    bool plain = strcmp(name, "find") == 0 && lua_toboolean(L, 4);
    /* gmatch does not anchor at ^ */
    double cost = pattern_cost(p, m, n, plain, strcmp(name, "gmatch") != 0);
    if (cost > FE_PATTERN_BUDGET) {
      char msg[300]; /* lua_pushfstring has no %zu or %.3g */
      snprintf(
          msg, sizeof msg,
          "string.%s: matching this %zu-byte pattern against %zu bytes could take %.3g steps; a recipe's "
          "pattern calls are limited to 2^28 (shorten the string, or use fewer repetitions such as .- "
          "or *)",
          name, m, n, cost);
      return luaL_error(L, "%s", msg);
    }
  }
  if (strcmp(name, "gsub") == 0 && lua_type(L, 3) == LUA_TTABLE) {
    lua_pushvalue(L, 3);
    lua_pushcclosure(L, gsub_lookup, 1);
    lua_replace(L, 3);
  }
  return call_original(L);
}

/* string.rep: repeating the empty string allocates nothing, so the memory limit never trips. */
static int guard_rep(lua_State *L) {
  check_limits(L, ctx_of(L));
  if (luaL_checkinteger(L, 2) > FE_LOOP_MAX)
    return luaL_error(L, "string.rep: %I copies; a recipe may make at most 2^26",
                      (LUAI_UACINT)lua_tointeger(L, 2));
  return call_original(L);
}

static int guard_setmetatable(lua_State *L) {
  if (lua_type(L, 2) == LUA_TTABLE) {
    lua_pushliteral(L, "__gc");
    bool gc = lua_rawget(L, 2) != LUA_TNIL;
    lua_pop(L, 1);
    if (gc)
      return luaL_error(L, "__gc finalisers are not available in a recipe (Lua runs them with hooks "
                           "off, where no limit can stop them)");
  }
  return call_original(L);
}

static int guard_print(lua_State *L) {
  FeCtx *cx = ctx_of(L);
  int k = cx->nprint++;
  if (k > FE_MAX_PRINTS) return 0;
  char where[200] = "recipe";
  lua_Debug ar;
  if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "Sl", &ar) && ar.currentline > 0)
    snprintf(where, sizeof where, "%s:%d", ar.short_src, ar.currentline);
  if (k == FE_MAX_PRINTS) {
    diag_add(cx->diags, DIAG_NOTE, "PRINT", "", where, "more print output from the recipe dropped");
    return 0;
  }
  int n = lua_gettop(L);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 1; i <= n; i++) {
    if (i > 1) luaL_addchar(&b, '\t');
    luaL_tolstring(L, i, NULL); /* __tostring and __name, as print does */
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);
  diag_add(cx->diags, DIAG_NOTE, "PRINT", "", where, "%.300s", lua_tostring(L, -1));
  return 0;
}

/* Replaces table[key] (the table at idx) by fn with the old value as upvalue 1 and key as 2. */
static void wrap(lua_State *L, int idx, const char *key, lua_CFunction fn) {
  idx = lua_absindex(L, idx);
  lua_getfield(L, idx, key);
  lua_pushstring(L, key);
  lua_pushcclosure(L, fn, 2);
  lua_setfield(L, idx, key);
}

/* coroutine.wrap from WRAP_LUA, given the guarded resume; leaves the table at idx unchanged when
 * the chunk cannot be made (out of memory: the recipe then fails to load anyway). */
static void install_wrap(lua_State *L, int co) {
  if (luaL_loadbufferx(L, WRAP_LUA, sizeof WRAP_LUA - 1, "=stepc", "t") != LUA_OK) {
    lua_pop(L, 1);
    return;
  }
  lua_getfield(L, co, "create");
  lua_getfield(L, co, "resume");
  lua_getglobal(L, "error");
  lua_getglobal(L, "table");
  lua_getfield(L, -1, "pack");
  lua_getfield(L, -2, "unpack");
  lua_remove(L, -3);
  if (lua_pcall(L, 5, 1, 0) == LUA_OK)
    lua_setfield(L, co, "wrap");
  else
    lua_pop(L, 1);
}

/* Strings share one metatable; a recipe that could change it (__index = string.sub) would change
 * every s:method() and make strings indexable by the table library. getmetatable("") gives
 * "locked". */
static void lock_string_metatable(lua_State *L) {
  lua_pushliteral(L, "");
  if (lua_getmetatable(L, -1)) {
    lua_pushliteral(L, "locked");
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

void fe_limits_install(lua_State *L, FeCtx *cx) {
  cx->time_limit = cx->time_limit > 0 ? cx->time_limit : FE_TIME_LIMIT_S;
  cx->deadline = fe_now() + cx->time_limit;
  lua_pushglobaltable(L);
  wrap(L, -1, "pcall", protected_call);
  wrap(L, -1, "xpcall", guarded_xpcall);
  wrap(L, -1, "setmetatable", guard_setmetatable);
  wrap(L, -1, "print", guard_print);
  lua_getfield(L, -1, "coroutine");
  wrap(L, -1, "resume", protected_call);
  wrap(L, -1, "close", protected_call);
  install_wrap(L, lua_gettop(L));
  lua_pop(L, 1);
  lua_getfield(L, -1, "string");
  static const char *const pat[] = {"find", "match", "gmatch", "gsub"};
  for (size_t i = 0; i < sizeof pat / sizeof pat[0]; i++)
    wrap(L, -1, pat[i], guard_pattern);
  wrap(L, -1, "rep", guard_rep);
  lua_pop(L, 1);
  lua_pop(L, 1);
  fe_tablib_install(L);
  lock_string_metatable(L);
  /* the call hook too: a C function that C code calls in a loop (a metamethod, a sort comparator,
   * gsub's replacement) is seen, counted and timed, though no instruction runs */
  lua_sethook(L, fe_hook, LUA_MASKLINE | LUA_MASKCOUNT | LUA_MASKCALL, 1000);
}
