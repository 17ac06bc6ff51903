/* tablib.c — the table library's loops, rewritten so that the sandbox's limits reach inside them.
 *
 * Lua's table.move, concat, unpack, insert and remove loop in C, and each step may index through
 * metamethods: a chain of __index tables (up to 2000 lookups a step, no call, no instruction) or a
 * C function such as table.concat itself (a C call, no instruction). The count hook never fires
 * inside such a loop, so a recipe could keep one running for ever. These versions behave as Lua
 * 5.4's (same arguments, results, order of reads and writes, and errors) but charge every element
 * to the instruction budget and check the limits, wall clock included, every 256 elements.
 * table.sort keeps Lua's own code and refuses a table whose reads or writes go through
 * __index/__newindex (a plain table's elements are bounded by the memory limit). */
#include <lauxlib.h>
#include <limits.h>

#include "internal.h"

#define TAB_R 1
#define TAB_W 2
#define TAB_L 4

static FeCtx *ctx_of(lua_State *L) {
  void *ud;
  lua_getallocf(L, &ud);
  return ud;
}

/* One element visited: every 256th checks the limits (and may not return). */
static void step(lua_State *L, lua_Integer i) {
  if ((i & 255) == 0) fe_charge(L, ctx_of(L), 256);
}

/* As ltablib's checktab: a table, or a value whose metatable has the fields the operation uses. */
static void checktab(lua_State *L, int arg, int what) {
  if (lua_type(L, arg) == LUA_TTABLE) return;
  int n = 1, ok = lua_getmetatable(L, arg);
  const char *f[] = {"__index", "__newindex", "__len"};
  for (int k = 0; ok && k < 3; k++)
    if (what & (1 << k)) {
      lua_pushstring(L, f[k]);
      ok = lua_rawget(L, -++n) != LUA_TNIL;
    }
  if (ok)
    lua_pop(L, n);
  else
    luaL_checktype(L, arg, LUA_TTABLE);
}

static lua_Integer getn(lua_State *L, int arg, int what) {
  checktab(L, arg, what | TAB_L);
  return luaL_len(L, arg);
}

static int t_move(lua_State *L) {
  lua_Integer f = luaL_checkinteger(L, 2), e = luaL_checkinteger(L, 3), t = luaL_checkinteger(L, 4);
  int tt = !lua_isnoneornil(L, 5) ? 5 : 1;
  checktab(L, 1, TAB_R);
  checktab(L, tt, TAB_W);
  if (e >= f) {
    luaL_argcheck(L, f > 0 || e < LUA_MAXINTEGER + f, 3, "too many elements to move");
    lua_Integer n = e - f + 1;
    luaL_argcheck(L, t <= LUA_MAXINTEGER - n + 1, 4, "destination wrap around");
    bool up = t > e || t <= f || (tt != 1 && !lua_compare(L, 1, tt, LUA_OPEQ));
    for (lua_Integer k = 0; k < n; k++) {
      lua_Integer i = up ? k : n - 1 - k;
      step(L, k + 1);
      lua_geti(L, 1, f + i);
      lua_seti(L, tt, t + i);
    }
  }
  lua_pushvalue(L, tt);
  return 1;
}

static void addfield(lua_State *L, luaL_Buffer *b, lua_Integer i) {
  lua_geti(L, 1, i);
  if (!lua_isstring(L, -1))
    luaL_error(L, "invalid value (at index %I) in table for 'concat'", (LUAI_UACINT)i);
  luaL_addvalue(b);
}

static int t_concat(lua_State *L) {
  luaL_Buffer b;
  lua_Integer last = getn(L, 1, TAB_R);
  size_t lsep;
  const char *sep = luaL_optlstring(L, 2, "", &lsep);
  lua_Integer i = luaL_optinteger(L, 3, 1);
  last = luaL_optinteger(L, 4, last);
  luaL_buffinit(L, &b);
  for (lua_Integer k = 1; i < last; i++, k++) {
    step(L, k);
    addfield(L, &b, i);
    luaL_addlstring(&b, sep, lsep);
  }
  if (i == last) addfield(L, &b, i);
  luaL_pushresult(&b);
  return 1;
}

static int t_unpack(lua_State *L) {
  lua_Integer i = luaL_optinteger(L, 2, 1);
  lua_Integer e = luaL_opt(L, luaL_checkinteger, 3, luaL_len(L, 1));
  if (i > e) return 0;
  lua_Unsigned n = (lua_Unsigned)e - (lua_Unsigned)i;
  if (n >= (unsigned int)INT_MAX || !lua_checkstack(L, (int)(++n)))
    return luaL_error(L, "too many results to unpack");
  for (lua_Unsigned k = 0; k < n; k++) {
    step(L, (lua_Integer)k + 1);
    lua_geti(L, 1, i + (lua_Integer)k);
  }
  return (int)n;
}

static int t_insert(lua_State *L) {
  lua_Integer pos, e = getn(L, 1, TAB_R | TAB_W);
  e = luaL_intop(+, e, 1); /* first empty element */
  switch (lua_gettop(L)) {
  case 2: pos = e; break;
  case 3:
    pos = luaL_checkinteger(L, 2);
    luaL_argcheck(L, (lua_Unsigned)pos - 1u < (lua_Unsigned)e, 2, "position out of bounds");
    for (lua_Integer i = e, k = 1; i > pos; i--, k++) {
      step(L, k);
      lua_geti(L, 1, i - 1);
      lua_seti(L, 1, i);
    }
    break;
  default: return luaL_error(L, "wrong number of arguments to 'insert'");
  }
  lua_seti(L, 1, pos);
  return 0;
}

static int t_remove(lua_State *L) {
  lua_Integer size = getn(L, 1, TAB_R | TAB_W), pos = luaL_optinteger(L, 2, size);
  if (pos != size)
    luaL_argcheck(L, (lua_Unsigned)pos - 1u <= (lua_Unsigned)size, 2, "position out of bounds");
  lua_geti(L, 1, pos);
  lua_Integer k = 1;
  for (; pos < size; pos++, k++) {
    step(L, k);
    lua_geti(L, 1, pos + 1);
    lua_seti(L, 1, pos);
  }
  lua_pushnil(L);
  lua_seti(L, 1, pos);
  return 1;
}

/* upvalue 1: Lua's table.sort */
static int t_sort(lua_State *L) {
  if (lua_getmetatable(L, 1)) {
    lua_pushliteral(L, "__index");
    bool meta = lua_rawget(L, -2) != LUA_TNIL;
    lua_pushliteral(L, "__newindex");
    meta |= lua_rawget(L, -3) != LUA_TNIL;
    lua_pop(L, 3);
    if (meta)
      return luaL_error(
          L, "table.sort: a table read or written through __index/__newindex cannot be sorted in a "
             "recipe (sort a plain copy)");
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 0);
  return 0;
}

void fe_tablib_install(lua_State *L) {
  static const luaL_Reg fns[] = {{"move", t_move},
                                 {"concat", t_concat},
                                 {"unpack", t_unpack},
                                 {"insert", t_insert},
                                 {"remove", t_remove}};
  lua_getglobal(L, "table");
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
    lua_pushcfunction(L, fns[i].func);
    lua_setfield(L, -2, fns[i].name);
  }
  lua_getfield(L, -1, "sort");
  lua_pushcclosure(L, t_sort, 1);
  lua_setfield(L, -2, "sort");
  lua_pop(L, 1);
}
