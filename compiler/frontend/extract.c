/* extract.c — the recipe's table → Spec: every field typed, range-checked, defaulted, located.
 * Only raw table access here, so no metamethod of the recipe's runs outside its own pcall. */
#include <lauxlib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* The MCORE rule that owns a field's set of allowed values, so a bad value names it. */
static const char *choice_rule(int id) {
  switch (id) {
  case SPEC_F_model_recompute_granularity: return "MCORE-13";
  case SPEC_F_model_recompute_method: return "MCORE-14";
  case SPEC_F_model_cuda_graph_impl: return "MCORE-10";
  case SPEC_F_model_recompute_modules: return "MCORE-23";
  case SPEC_F_model_cuda_graph_modules: return "MCORE-9";
  default: return "LOAD";
  }
}

/* Smallest integer a field takes at load time; semantic limits (recompute_num_layers >= 1) are
 * the validator's rules. */
static int64_t int_min(int id) {
  switch (id) {
  case SPEC_F_model_recompute_num_layers:
  case SPEC_F_model_fp8_margin:
  case SPEC_F_model_fp8_amax_history_len: return INT64_MIN;
  case SPEC_F_model_cpu_offloading_num_layers:
  case SPEC_F_model_cuda_graph_warmup_steps:
  case SPEC_F_model_qk_pos_emb_head_dim:
  case SPEC_F_model_num_layers_at_start_in_bf16:
  case SPEC_F_model_num_layers_at_end_in_bf16:
  case SPEC_F_train_seed:
  case SPEC_F_optimizer_lr_warmup_iters: return 0;
  default: return 1;
  }
}

typedef struct {
  double lo, hi;
  bool lo_open, hi_open;
} Range;

static Range num_range(int id) {
  switch (id) {
  case SPEC_F_model_attention_dropout:
  case SPEC_F_model_hidden_dropout:
  case SPEC_F_optimizer_adam_beta1:
  case SPEC_F_optimizer_adam_beta2: return (Range){0, 1, false, true};
  case SPEC_F_model_layernorm_epsilon:
  case SPEC_F_model_rotary_base:
  case SPEC_F_model_rope_scaling_factor:
  case SPEC_F_model_moe_expert_capacity_factor:
  case SPEC_F_optimizer_adam_eps: return (Range){0, INFINITY, true, false};
  default: return (Range){0, INFINITY, false, false};
  }
}

static bool is_ident(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* Last line of `f` that assigns `name` (name = ..., not name == ...); 0 when none. */
static int scan_line(const FeFile *f, const char *name) {
  size_t n = strlen(name);
  int line = 1, found = 0;
  for (size_t i = 0; i < f->len; i++) {
    if (f->text[i] == '\n') {
      line++;
      continue;
    }
    if (i + n > f->len || memcmp(f->text + i, name, n) != 0) continue;
    if (i > 0 && is_ident(f->text[i - 1])) continue;
    size_t j = i + n;
    if (j < f->len && is_ident(f->text[j])) continue;
    while (j < f->len && (f->text[j] == ' ' || f->text[j] == '\t'))
      j++;
    if (j < f->len && f->text[j] == '=' && (j + 1 >= f->len || f->text[j + 1] != '=')) found = line;
  }
  return found;
}

static void locate(lua_State *L, FeCtx *cx, int id, char *where, size_t n) {
  const char *w = fe_recorded_where(L, spec_fields[id].path);
  if (w) {
    snprintf(where, n, "%s", w);
    return;
  }
  for (int i = 0; i < cx->nfiles; i++) {
    fe_charge(L, cx, (long long)(cx->files[i].len >> 6)); /* a scan is work in C: charged, clocked */
    int line = scan_line(&cx->files[i], spec_fields[id].name);
    if (line) {
      snprintf(where, n, "%s:%d", cx->files[i].name, line);
      return;
    }
  }
  snprintf(where, n, "%s", cx->nfiles ? cx->files[0].name : "");
}

static bool lua_integer_value(lua_State *L, int idx, int64_t *out) {
  if (lua_isinteger(L, idx)) {
    *out = (int64_t)lua_tointeger(L, idx);
    return true;
  }
  double d = lua_tonumber(L, idx);
  if (lua_type(L, idx) == LUA_TNUMBER && d == floor(d) && fabs(d) < 9.0e15) {
    *out = (int64_t)d;
    return true;
  }
  return false;
}

static void describe(lua_State *L, int idx, char *buf, size_t n) {
  switch (lua_type(L, idx)) {
  case LUA_TNUMBER: snprintf(buf, n, "the number %.14g", lua_tonumber(L, idx)); break;
  case LUA_TSTRING: snprintf(buf, n, "the string \"%.60s\"", lua_tostring(L, idx)); break;
  case LUA_TBOOLEAN: snprintf(buf, n, "%s", lua_toboolean(L, idx) ? "true" : "false"); break;
  default: snprintf(buf, n, "a %s", luaL_typename(L, idx));
  }
}

typedef struct {
  lua_State *L;
  FeCtx *cx;
  Spec *out;
  int id;
  const char *where;
} Conv;

static int conv_error(Conv *c, const char *rule, const char *fmt, const char *a, const char *b) {
  char msg[400];
  snprintf(msg, sizeof msg, fmt, a, b);
  Diag *g = diag_add(c->cx->diags, DIAG_ERROR, rule, spec_fields[c->id].path, c->where, "%s", msg);
  if (g && spec_fields[c->id].choices[0]) {
    char choices[300];
    snprintf(choices, sizeof choices, "%s", spec_fields[c->id].choices);
    for (char *p = choices; *p; p++)
      if (*p == '|') *p = ',';
    diag_hint(g, "one of %s", choices);
  }
  return -1;
}

static int conv_string_choice(Conv *c, const char *s, char *dst, size_t n) {
  const SpecField *f = &spec_fields[c->id];
  if (strlen(s) >= n) return conv_error(c, "LOAD", "%s: value too long", f->path, NULL);
  char shown[SPEC_MAX_STR * 4 + 4];
  if (diag_escape(shown, sizeof shown, s) != strlen(s)) /* a path or name never holds ESC or a newline */
    return conv_error(c, "LOAD", "%s: \"%s\" holds control characters", f->path, shown);
  if (!spec_choice_ok(f, s)) {
    /* the nearest allowed value, in the message itself (a sweep row shows only the message) */
    char near[64] = "", opts[400], quoted[200];
    snprintf(opts, sizeof opts, "%s", f->choices);
    size_t best = 3;
    for (char *t = strtok(opts, "|"); t; t = strtok(NULL, "|")) {
      size_t d = spec_edit_distance(s, t);
      if (d < best) best = d, snprintf(near, sizeof near, "%s", t);
    }
    snprintf(quoted, sizeof quoted, "\"%s\" is not an allowed value%s%s%s", s,
             near[0] ? " (did you mean " : "", near, near[0] ? "?)" : "");
    return conv_error(c, choice_rule(c->id), "%s: %s", f->path, quoted);
  }
  snprintf(dst, n, "%s", s);
  return 0;
}

static int conv_list(Conv *c, int idx) {
  const SpecField *f = &spec_fields[c->id];
  SpecList *l = spec_field_ptr(c->out, c->id);
  lua_State *L = c->L;
  if (lua_type(L, idx) == LUA_TSTRING) { /* a single label, as on a command line */
    l->n = 1;
    return conv_string_choice(c, lua_tostring(L, idx), l->items[0], sizeof l->items[0]);
  }
  if (!lua_istable(L, idx)) {
    char got[100];
    describe(L, idx, got, sizeof got);
    return conv_error(c, "LOAD", "%s expects a list of strings, got %s", f->path, got);
  }
  lua_Integer len = (lua_Integer)lua_rawlen(L, idx);
  int count = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    count++;
    lua_pop(L, 1);
  }
  if (count != len) return conv_error(c, "LOAD", "%s expects a list (1, 2, 3, ... keys only)", f->path, NULL);
  if (len > SPEC_MAX_LIST) return conv_error(c, "LOAD", "%s: more than 16 entries", f->path, NULL);
  l->n = (int)len;
  for (int i = 1; i <= len; i++) {
    lua_rawgeti(L, idx, i);
    int rc;
    if (lua_type(L, -1) != LUA_TSTRING) {
      char got[100];
      describe(L, -1, got, sizeof got);
      rc = conv_error(c, "LOAD", "%s expects strings, got %s", f->path, got);
    } else {
      rc = conv_string_choice(c, lua_tostring(L, -1), l->items[i - 1], sizeof l->items[0]);
    }
    lua_pop(L, 1);
    if (rc) return rc;
  }
  return 0;
}

static int conv_freq(Conv *c, int idx) {
  const SpecField *f = &spec_fields[c->id];
  SpecFreq *fr = spec_field_ptr(c->out, c->id);
  lua_State *L = c->L;
  int64_t v;
  if (lua_integer_value(L, idx, &v)) {
    if (v < 1) return conv_error(c, "LOAD", "%s must be at least 1", f->path, NULL);
    fr->every = v;
    return 0;
  }
  if (!lua_istable(L, idx))
    return conv_error(c, "LOAD",
                      "%s expects an integer N (every N-th layer is MoE) or a 0/1 list per "
                      "layer (Megatron's string expressions are not supported)",
                      f->path, NULL);
  lua_Integer len = (lua_Integer)lua_rawlen(L, idx);
  if (len < 1 || len > SPEC_MAX_LAYERS)
    return conv_error(c, "LOAD", "%s: list length out of range", f->path, NULL);
  fr->every = 0;
  fr->n = (int)len;
  for (int i = 1; i <= len; i++) {
    lua_rawgeti(L, idx, i);
    bool ok = lua_integer_value(L, -1, &v) && (v == 0 || v == 1);
    lua_pop(L, 1);
    if (!ok) return conv_error(c, "LOAD", "%s: list entries must be 0 or 1", f->path, NULL);
    fr->pattern[i - 1] = (uint8_t)v;
  }
  return 0;
}

static int conv_value(Conv *c, int idx) {
  const SpecField *f = &spec_fields[c->id];
  lua_State *L = c->L;
  void *dst = spec_field_ptr(c->out, c->id);
  char got[100];
  describe(L, idx, got, sizeof got);
  switch (f->type) {
  case SPEC_T_INT: {
    int64_t v;
    if (!lua_integer_value(L, idx, &v))
      return conv_error(c, "LOAD", "%s expects an integer, got %s", f->path, got);
    int64_t lo = int_min(c->id);
    if (v < lo || v > ((int64_t)1 << 40)) {
      /* the range printed is the one checked, so that it never seems to hold the value */
      char range[96];
      if (lo == INT64_MIN)
        snprintf(range, sizeof range, "%lld is out of range (at most 2^40 = 1099511627776)", (long long)v);
      else
        snprintf(range, sizeof range, "%lld is out of range [%lld, 2^40 = 1099511627776]", (long long)v,
                 (long long)lo);
      return conv_error(c, "LOAD", "%s = %s", f->path, range);
    }
    *(int64_t *)dst = v;
    return 0;
  }
  case SPEC_T_NUM: {
    if (lua_type(L, idx) != LUA_TNUMBER)
      return conv_error(c, "LOAD", "%s expects a number, got %s", f->path, got);
    double v = lua_tonumber(L, idx);
    Range r = num_range(c->id);
    bool bad = !isfinite(v) || v < r.lo || v > r.hi || (r.lo_open && v == r.lo) || (r.hi_open && v == r.hi);
    if (bad) {
      /* the value in full (%g would print 1 - 1e-9 as 1) and the range as checked: an infinite end
       * is open (infinities are refused) */
      char range[160];
      snprintf(range, sizeof range, "%.17g is out of range %s%g, %g%s", v, r.lo_open ? "(" : "[", r.lo, r.hi,
               r.hi_open || isinf(r.hi) ? ")" : "]");
      return conv_error(c, "LOAD", "%s = %s", f->path, range);
    }
    *(double *)dst = v;
    return 0;
  }
  case SPEC_T_BOOL:
    if (lua_type(L, idx) != LUA_TBOOLEAN)
      return conv_error(c, "LOAD", "%s expects true or false, got %s", f->path, got);
    *(bool *)dst = lua_toboolean(L, idx);
    return 0;
  case SPEC_T_STR:
    if (lua_type(L, idx) != LUA_TSTRING)
      return conv_error(c, "LOAD", "%s expects a string, got %s", f->path, got);
    return conv_string_choice(c, lua_tostring(L, idx), dst, SPEC_MAX_STR);
  case SPEC_T_LIST: return conv_list(c, idx);
  case SPEC_T_FREQ: return conv_freq(c, idx);
  }
  return -1;
}

static const char *nearest_section(const char *name) {
  const char *best = NULL;
  size_t bd = 3;
  for (int s = 0; s < SPEC_NSECTIONS; s++) {
    size_t d = spec_edit_distance(name, spec_section_names[s]);
    if (d < bd) bd = d, best = spec_section_names[s];
  }
  return best;
}

/* One unknown field, located: where the recipe assigned it (a proxy recorded the line), else the
 * last line of a recipe file that assigns its name. Scanning files is charged to the limits. */
static void unknown_field(lua_State *L, FeCtx *cx, SpecSection s, const char *k) {
  char path[160], where[200] = "";
  snprintf(path, sizeof path, "%s.%s", spec_section_names[s], k);
  const char *rec = fe_recorded_where(L, path);
  if (rec) snprintf(where, sizeof where, "%s", rec);
  for (int i = 0; i < cx->nfiles && !where[0]; i++) {
    fe_charge(L, cx, (long long)(cx->files[i].len >> 6));
    int line = scan_line(&cx->files[i], k);
    if (line) snprintf(where, sizeof where, "%s:%d", cx->files[i].name, line);
  }
  if (!where[0]) snprintf(where, sizeof where, "%s", cx->nfiles ? cx->files[0].name : "");
  Diag *g = diag_add(cx->diags, DIAG_ERROR, "LOAD", path, where, "unknown field %s", path);
  const char *near = spec_suggest(s, k);
  if (near)
    diag_hint(g, "did you mean %s.%s?", spec_section_names[s], near);
  else
    diag_hint(g, "docs/recipe-reference.md lists every field");
}

/* Unknown or non-string keys, at the top and in each section: the first FE_MAX_UNKNOWN reported
 * (located), the rest counted, so 200000 unknown keys cost one pass and twenty scans. */
/* Counts one bad key; true while it is among the first FE_MAX_UNKNOWN, to be reported. Each key
 * visited is charged to the limits (the instruction budget and the clock). */
static bool report(lua_State *L, FeCtx *cx, int *bad) {
  if ((*bad & 255) == 0) fe_charge(L, cx, 256);
  return ++*bad <= FE_MAX_UNKNOWN;
}

static int check_keys(lua_State *L, FeCtx *cx, int root) {
  int bad = 0;
  const char *file = cx->nfiles ? cx->files[0].name : "";
  lua_pushnil(L);
  while (lua_next(L, root)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) {
      if (report(L, cx, &bad))
        diag_add(cx->diags, DIAG_ERROR, "LOAD", "", file, "the recipe table has a non-string key");
      continue;
    }
    const char *k = lua_tostring(L, -1);
    bool known = false;
    for (int s = 0; s < SPEC_NSECTIONS; s++)
      known |= strcmp(k, spec_section_names[s]) == 0;
    if (!known && report(L, cx, &bad)) {
      Diag *g = diag_add(cx->diags, DIAG_ERROR, "LOAD", k, file,
                         "unknown section '%s' (sections: model, train, optimizer, ddp, data)", k);
      const char *near = nearest_section(k);
      if (near) diag_hint(g, "did you mean %s?", near);
    }
  }
  for (int s = 0; s < SPEC_NSECTIONS; s++) {
    lua_pushstring(L, spec_section_names[s]);
    int t = lua_rawget(L, root);
    if (t == LUA_TNIL) {
      lua_pop(L, 1);
      continue;
    }
    if (t != LUA_TTABLE) {
      diag_add(cx->diags, DIAG_ERROR, "LOAD", spec_section_names[s], file, "%s must be a table, got a %s",
               spec_section_names[s], luaL_typename(L, -1));
      lua_pop(L, 1);
      bad++;
      continue;
    }
    fe_unwrap(L, -1);
    int sec = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, sec)) {
      lua_pop(L, 1);
      if (lua_type(L, -1) != LUA_TSTRING) {
        if (report(L, cx, &bad))
          diag_add(cx->diags, DIAG_ERROR, "LOAD", spec_section_names[s], file, "%s has a non-string key",
                   spec_section_names[s]);
        continue;
      }
      const char *k = lua_tostring(L, -1);
      if (spec_field_find_in((SpecSection)s, k) < 0 && report(L, cx, &bad))
        unknown_field(L, cx, (SpecSection)s, k);
    }
    lua_pop(L, 1);
  }
  if (bad > FE_MAX_UNKNOWN)
    diag_add(cx->diags, DIAG_ERROR, "LOAD", "", file, "and %d more unknown or malformed keys",
             bad - FE_MAX_UNKNOWN);
  return bad;
}

int fe_extract(lua_State *L, FeCtx *cx, Spec *out) {
  int root = lua_gettop(L);
  int bad = check_keys(L, cx, root);
  for (int id = 0; id < SPEC_NFIELDS; id++) {
    const SpecField *f = &spec_fields[id];
    lua_pushstring(L, spec_section_names[f->section]);
    if (lua_rawget(L, root) == LUA_TTABLE) {
      fe_unwrap(L, -1);
      lua_pushstring(L, f->name);
      lua_rawget(L, -2);
      lua_remove(L, -2);
    } else {
      lua_pop(L, 1);
      lua_pushnil(L);
    }
    char where[160] = "";
    bool from_recipe = !lua_isnil(L, -1);
    if (from_recipe) {
      locate(L, cx, id, where, sizeof where);
    } else {
      const char *rec = fe_recorded_where(L, f->path); /* set to null on purpose */
      if (rec) snprintf(where, sizeof where, "%s", rec);
      lua_pop(L, 1);
      if (strcmp(f->def, "required") == 0) {
        Diag *g = diag_add(cx->diags, DIAG_ERROR, "LOAD", f->path, cx->nfiles ? cx->files[0].name : "",
                           "%s is required", f->path);
        diag_hint(g, "set it in the recipe, or start from a shipped one: local cfg = stepc.recipe(\"tiny\")");
        bad++;
        continue;
      }
      char err[120];
      if (fe_push_value(L, f->def, err, sizeof err) != 0) luaL_error(L, "bad default for %s", f->path);
    }
    snprintf(out->where[id], sizeof out->where[id], "%s", where);
    if (lua_isnil(L, -1)) {
      out->present[id] = false;
    } else {
      Conv c = {L, cx, out, id, where};
      if (conv_value(&c, lua_gettop(L)) != 0)
        bad++;
      else
        out->present[id] = true;
    }
    lua_pop(L, 1);
  }
  if (!out->present[SPEC_F_data_mock]) { /* mock unless a text file is named */
    out->data.mock = !out->present[SPEC_F_data_path];
    out->present[SPEC_F_data_mock] = true;
  }
  return bad ? -1 : 0;
}
