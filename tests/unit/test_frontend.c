/* test_frontend.c — the Spec the frontend extracts: values, defaults, nulls, and where each field
 * was set (constructor line, proxy assignment, base recipe, override, default). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "frontend/frontend.h"

static int failures;
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                     \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static void test_constructor(void) {
  static Spec s;
  DiagList d;
  diag_init(&d);
  const char *ov[] = {"model.fp8=null", "train.seed=99"};
  int rc = frontend_load("tests/cli/recipes/constructor.lua", ov, 2, NULL, &s, &d);
  diag_print(&d, stderr);
  CHECK(rc == 0);
  CHECK(s.model.hidden_size == 64);
  CHECK(strcmp(s.where[SPEC_F_model_hidden_size], "tests/cli/recipes/constructor.lua:5") == 0);
  CHECK(strcmp(s.where[SPEC_F_model_recompute_modules], "tests/cli/recipes/constructor.lua:10") == 0);
  CHECK(s.model.recompute_modules.n == 2 && strcmp(s.model.recompute_modules.items[1], "mlp") == 0);
  CHECK(s.model.moe_layer_freq.every == 0 && s.model.moe_layer_freq.n == 4);
  CHECK(s.model.moe_layer_freq.pattern[0] == 1 && s.model.moe_layer_freq.pattern[1] == 0);
  CHECK(strcmp(s.model.normalization, "LayerNorm") == 0); /* default */
  CHECK(s.where[SPEC_F_model_normalization][0] == 0);
  CHECK(!s.present[SPEC_F_model_num_query_groups]);   /* null */
  CHECK(spec_num_query_groups(&s) == 4);
  CHECK(!s.present[SPEC_F_model_fp8]);
  CHECK(strcmp(s.where[SPEC_F_model_fp8], "override model.fp8=null") == 0);
  CHECK(s.train.seed == 99);
  CHECK(s.train.micro_batch_size == 2);
  CHECK(s.data.mock && s.present[SPEC_F_data_mock]);
  CHECK(s.optimizer.adam_beta2 == 0.999);
  diag_free(&d);
}

static void test_proxy_and_base(void) {
  static Spec s;
  DiagList d;
  diag_init(&d);
  int rc = frontend_load("tests/cli/recipes/where_proxy.lua", NULL, 0, NULL, &s, &d);
  CHECK(rc == 0);
  CHECK(s.model.recompute_num_layers == 0);
  CHECK(strcmp(s.where[SPEC_F_model_recompute_num_layers], "tests/cli/recipes/where_proxy.lua:4") == 0);
  /* hidden_size comes from the shipped tiny recipe, found next to... the models folder */
  CHECK(strstr(s.where[SPEC_F_model_hidden_size], "models/tiny.lua:") != NULL);
  CHECK(s.model.hidden_size == 128);
  diag_free(&d);
}

static void test_buffer_limits(void) {
  static Spec s;
  DiagList d;
  diag_init(&d);
  FrontendOptions opt = {.mem_limit = 4u << 20, .instr_limit = 100000, .models_dir = "models"};
  const char *loop = "while true do end";
  CHECK(frontend_load_buffer("loop.lua", loop, strlen(loop), NULL, 0, &opt, &s, &d) != 0);
  CHECK(d.n == 1 && strstr(d.items[0].message, "100000 Lua instructions"));
  CHECK(strcmp(d.items[0].where, "loop.lua:1") == 0);
  diag_free(&d);
  diag_init(&d);
  opt.instr_limit = 50000000;
  const char *mem = "local t = {}\nfor i = 1, 1e7 do t[i] = string.rep('x', 4096) .. i end";
  CHECK(frontend_load_buffer("mem.lua", mem, strlen(mem), NULL, 0, &opt, &s, &d) != 0);
  CHECK(d.n == 1 && strstr(d.items[0].message, "more than 4 MiB"));
  diag_free(&d);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The limits cannot be caught, and wall time is bounded even where few instructions run. */
static void test_uncatchable_limits(void) {
  static Spec s;
  DiagList d;
  FrontendOptions opt = {.mem_limit = 4u << 20, .instr_limit = 100000, .time_limit_s = 0.3, .models_dir = "models"};
  /* each find is allowed and takes milliseconds, in a handful of instructions */
  const char *slow = "local s = ('a'):rep(300)\nwhile true do pcall(string.find, s, '.-.-b') end";
  diag_init(&d);
  double t0 = now_s();
  CHECK(frontend_load_buffer("slow.lua", slow, strlen(slow), NULL, 0, &opt, &s, &d) != 0);
  CHECK(now_s() - t0 < 3.0);
  CHECK(d.n == 1 && strstr(d.items[0].message, "longer than 0.3 s"));
  diag_free(&d);
  /* a memory error caught by pcall stops the recipe all the same */
  const char *mem = "while true do pcall(string.rep, 'x', 8 << 20) end";
  diag_init(&d);
  CHECK(frontend_load_buffer("mem.lua", mem, strlen(mem), NULL, 0, &opt, &s, &d) != 0);
  CHECK(d.n == 1 && strstr(d.items[0].message, "more than 4 MiB"));
  diag_free(&d);
  /* garbage that outgrows the limit before the collector runs is not a stop: Lua collects and
   * retries the allocation, and the recipe goes on */
  const char *churn = "collectgarbage('stop')\n" /* tables only: no finaliser holds their memory */
                      "local function churn() for i = 1, 400 do local t = {} for j = 1, 2000 do t[j] = j end end end\n"
                      "churn()\nassert(pcall(churn))\nreturn stepc.recipe('tiny')";
  diag_init(&d);
  opt.instr_limit = 50000000;
  opt.time_limit_s = 60; /* a loaded machine must not turn this into a time stop */
  CHECK(frontend_load_buffer("churn.lua", churn, strlen(churn), NULL, 0, &opt, &s, &d) == 0);
  diag_print(&d, stderr);
  diag_free(&d);
  opt.instr_limit = 100000;
  /* the error of an instruction limit caught inside a coroutine, then by pcall, then by xpcall */
  const char *nest = "local function f() while true do end end\n"
                     "while true do xpcall(function() pcall(coroutine.wrap(f)) end, print) end";
  diag_init(&d);
  CHECK(frontend_load_buffer("nest.lua", nest, strlen(nest), NULL, 0, &opt, &s, &d) != 0);
  CHECK(d.n == 1 && strstr(d.items[0].message, "100000 Lua instructions"));
  diag_free(&d);
}

/* Loops in C whose every step walks a 1900-table __index chain (no call, no instruction) still
 * stop at the wall-clock limit: table.move, unpack, insert, and gsub's table lookups
 * (concat: tests/cli/recipes/concat_spin.lua). */
static void test_chains_in_c(void) {
  static Spec s;
  FrontendOptions opt = {.time_limit_s = 0.3, .models_dir = "models"};
  const char *chain = "local t = {}\nfor i = 1, 1900 do t = setmetatable({}, {__index = t}) end\n";
  const char *calls[] = {"table.move(t, 1, (1 << 26) - 1, 1, {})", "table.unpack(t, 1, 999000)",
                         "string.rep('a', 1 << 24):gsub('.', t)",
                         "table.insert(setmetatable({}, {__index = t, __len = function() return 1 << 40 end}), 1, 0)"};
  for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
    char text[600];
    snprintf(text, sizeof text, "%s%s\nreturn stepc.recipe('tiny')", chain, calls[i]);
    DiagList d;
    diag_init(&d);
    double t0 = now_s();
    CHECK(frontend_load_buffer("chain.lua", text, strlen(text), NULL, 0, &opt, &s, &d) != 0);
    CHECK(now_s() - t0 < 5.0);
    CHECK(d.n == 1 && (strstr(d.items[0].message, "longer than 0.3 s") || strstr(d.items[0].message, "Lua instructions")));
    if (d.n != 1 || now_s() - t0 >= 5.0) fprintf(stderr, "  (%s, %.1f s)\n", calls[i], now_s() - t0), diag_print(&d, stderr);
    diag_free(&d);
  }
}

/* 1 when no diagnostic holds a byte a terminal could obey (controls but tab, DEL, C1, non-UTF-8). */
static int all_clean(const DiagList *d) {
  for (int i = 0; i < d->n; i++) {
    const char *f[] = {d->items[i].message, d->items[i].where, d->items[i].field, d->items[i].hint};
    for (int k = 0; k < 4; k++)
      for (const unsigned char *c = (const unsigned char *)f[k]; *c; c++)
        if ((*c < 0x20 && *c != '\t') || *c == 0x7f || (*c == 0xc2 && c[1] >= 0x80 && c[1] < 0xa0) || *c == 0x9b)
          return 0;
  }
  return 1;
}

/* Recipe text and values reach diagnostics as visible \xHH, never as escape sequences. */
static void test_escapes(void) {
  static Spec s;
  DiagList d;
  FrontendOptions opt = {.models_dir = "models"};
  const char *r = "print('\\27]0;owned\\7\\27[2J', '\\194\\155', '\\155')\n"
                  "local cfg = stepc.recipe('tiny')\n"
                  "cfg.data.path = 'a\\27[31mb'\n"
                  "cfg.model['x\\27[1m'] = 1\n"
                  "return cfg";
  diag_init(&d);
  CHECK(frontend_load_buffer("esc\033[5m.lua", r, strlen(r), NULL, 0, &opt, &s, &d) != 0);
  diag_print(&d, stderr);
  CHECK(d.n >= 3 && all_clean(&d));
  CHECK(d.n >= 1 && strstr(d.items[0].message, "\\x1b]0;owned\\x07\\x1b[2J\t\\xc2\\x9b\t\\x9b"));
  CHECK(d.n >= 1 && strstr(d.items[0].where, "esc\\x1b[5m.lua:1"));
  int path = 0, key = 0;
  for (int i = 0; i < d.n; i++) {
    path += strstr(d.items[i].message, "data.path: \"a\\x1b[31mb\" holds control characters") != NULL;
    key += strstr(d.items[i].message, "unknown field model.x\\x1b[1m") != NULL;
  }
  CHECK(path == 1 && key == 1);
  diag_free(&d);
  const char *err = "error('boom\\n\\27[Aok')";
  diag_init(&d);
  CHECK(frontend_load_buffer("err.lua", err, strlen(err), NULL, 0, &opt, &s, &d) != 0);
  CHECK(d.n == 1 && all_clean(&d) && strstr(d.items[0].message, "boom\\x0a\\x1b[Aok"));
  diag_free(&d);
}

int main(void) {
  test_constructor();
  test_proxy_and_base();
  test_buffer_limits();
  test_uncatchable_limits();
  test_escapes();
  test_chains_in_c();
  if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
  else printf("test_frontend: ok\n");
  return failures != 0;
}
