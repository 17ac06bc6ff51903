/* override.c — Hydra-style KEY=VALUE overrides (model.recompute_modules=[moe_act,layernorm]). */
#include <lauxlib.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static void trim(const char **b, const char **e) {
  while (*b < *e && (**b == ' ' || **b == '\t'))
    (*b)++;
  while (*e > *b && ((*e)[-1] == ' ' || (*e)[-1] == '\t'))
    (*e)--;
}

/* Pushes one scalar: null, true, false, a number, a quoted or a bare string. */
static int push_scalar(lua_State *L, const char *b, const char *e, char *err, size_t errn) {
  trim(&b, &e);
  size_t n = (size_t)(e - b);
  if (n >= 2 && (b[0] == '"' || b[0] == '\'') && e[-1] == b[0]) {
    lua_pushlstring(L, b + 1, n - 2);
    return 0;
  }
  if (n == 0) {
    snprintf(err, errn, "empty value");
    return -1;
  }
  char buf[256];
  if (n >= sizeof buf) {
    snprintf(err, errn, "value longer than %zu characters", sizeof buf - 1);
    return -1;
  }
  memcpy(buf, b, n);
  buf[n] = 0;
  if (strcmp(buf, "null") == 0 || strcmp(buf, "None") == 0 || strcmp(buf, "nil") == 0)
    lua_pushnil(L);
  else if (strcmp(buf, "true") == 0 || strcmp(buf, "True") == 0)
    lua_pushboolean(L, 1);
  else if (strcmp(buf, "false") == 0 || strcmp(buf, "False") == 0)
    lua_pushboolean(L, 0);
  else if (lua_stringtonumber(L, buf) == 0)
    lua_pushstring(L, buf);
  return 0;
}

int fe_push_value(lua_State *L, const char *text, char *err, size_t errn) {
  const char *b = text, *e = text + strlen(text);
  trim(&b, &e);
  if (b < e && *b == '[') {
    if (e[-1] != ']') {
      snprintf(err, errn, "a list starts with [ and ends with ]");
      return -1;
    }
    b++, e--;
    lua_newtable(L);
    const char *q = b;
    trim(&q, &e);
    if (q == e) return 0; /* [] */
    int i = 1;
    for (const char *p = b;; p++) {
      if (p == e || *p == ',') {
        if (push_scalar(L, b, p, err, errn) != 0) {
          lua_pop(L, 1);
          return -1;
        }
        lua_rawseti(L, -2, i++);
        if (p == e) break;
        b = p + 1;
      } else if (*p == '[' || *p == ']') {
        snprintf(err, errn, "lists do not nest");
        lua_pop(L, 1);
        return -1;
      }
    }
    return 0;
  }
  return push_scalar(L, b, e, err, errn);
}

int fe_apply_overrides(lua_State *L, FeCtx *cx, const char *const *ov, int n) {
  int root = lua_gettop(L);
  int bad = 0;
  for (int i = 0; i < n; i++) {
    char where[160];
    snprintf(where, sizeof where, "override %.140s", ov[i]);
    const char *eq = strchr(ov[i], '=');
    const char *dot = eq ? memchr(ov[i], '.', (size_t)(eq - ov[i])) : NULL;
    if (!eq || !dot) {
      Diag *g = diag_add(cx->diags, DIAG_ERROR, "LOAD", "", where,
                         "an override is section.field=value, got '%s'", ov[i]);
      diag_hint(g, "for example model.recompute_granularity=selective");
      bad++;
      continue;
    }
    char key[128];
    size_t klen = (size_t)(eq - ov[i]);
    if (klen >= sizeof key) klen = sizeof key - 1;
    memcpy(key, ov[i], klen);
    key[klen] = 0;
    char section[32];
    size_t slen = (size_t)(dot - ov[i]);
    if (slen >= sizeof section) slen = sizeof section - 1;
    memcpy(section, ov[i], slen);
    section[slen] = 0;

    int sec = -1;
    for (int s = 0; s < SPEC_NSECTIONS; s++)
      if (strcmp(section, spec_section_names[s]) == 0) sec = s;
    if (sec < 0) {
      diag_add(cx->diags, DIAG_ERROR, "LOAD", key, where,
               "unknown section '%s' (sections: model, train, optimizer, ddp, data)", section);
      bad++;
      continue;
    }
    const char *field = key + slen + 1;
    if (spec_field_find_in((SpecSection)sec, field) < 0) {
      const char *near = spec_suggest((SpecSection)sec, field);
      Diag *g = diag_add(cx->diags, DIAG_ERROR, "LOAD", key, where, "unknown field %s", key);
      if (near) diag_hint(g, "did you mean %s.%s?", section, near);
      bad++;
      continue;
    }
    char err[160];
    lua_pushstring(L, section);
    if (lua_rawget(L, root) != LUA_TTABLE) {
      lua_pop(L, 1);
      lua_newtable(L);
      lua_pushstring(L, section);
      lua_pushvalue(L, -2);
      lua_rawset(L, root);
    }
    fe_unwrap(L, -1);
    if (fe_push_value(L, eq + 1, err, sizeof err) != 0) {
      diag_add(cx->diags, DIAG_ERROR, "LOAD", key, where, "cannot read the value of %s: %s", key, err);
      lua_pop(L, 1);
      bad++;
      continue;
    }
    lua_pushstring(L, field);
    lua_insert(L, -2);
    lua_rawset(L, -3); /* raw: a recipe's own metatable does not run here */
    lua_pop(L, 1);
    lua_getfield(L, LUA_REGISTRYINDEX, "stepc.where");
    lua_pushstring(L, where);
    lua_setfield(L, -2, key);
    lua_pop(L, 1);
  }
  return bad ? -1 : 0;
}
