/* The checkpoint state.json reader (runtime/ckpt_state.c): what stepc writes is read back; a key
 * quoted inside the recipe string is not taken for the real one; damaged or out-of-range states
 * are refused with what is wrong. Which directories a save may replace (runtime/ckpt_files.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/ckpt_state.h"

static int failures;

#define CHECK(cond, ...)                 \
  do {                                   \
    if (!(cond)) {                       \
      fprintf(stderr, "FAIL: " __VA_ARGS__); \
      fputc('\n', stderr);               \
      failures++;                        \
    }                                    \
  } while (0)

static const char *STATE =
    "{\n  \"format\": \"stepc-checkpoint\",\n  \"version\": 2,\n  \"step\": 3,\n  \"seed\": 1234,\n"
    "  \"step_fingerprint\": \"00000000000000ab\",\n  \"recipe\": \"r\\\"world_size\\\": 9 "
    "\\\"distributed_optimizer\\\": true.lua\",\n"
    "  \"world_size\": %s,\n  \"distributed_optimizer\": %s,\n  \"files\": {\n"
    "    \"model.safetensors\": {\"bytes\": 100, \"fnv1a\": \"0123456789abcdef\"}\n  }\n}\n";

static int parse(const char *text, CkptState *st, char *err, size_t nerr) {
  return ckpt_state_parse(text, strlen(text), false, st, err, nerr);
}

static void put(const char *dir, const char *name, const char *text) {
  char p[600];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  if (f) fputs(text, f), fclose(f);
}

/* The directories a save may replace: absent, empty, a checkpoint; nothing else (state: a valid
 * state.json's text). */
static void replaceable(const char *state) {
  const char *own[] = {"state.json", "model.safetensors", "optimizer.safetensors",
                       "optimizer.rank12.safetensors", "shard.rank3.safetensors"};
  const char *not_own[] = {"notes.txt", "optimizer.rank.safetensors", "optimizer.rank1x.safetensors",
                           "model.safetensors.tmp", "step.img", "shard.rank.safetensors", "shard.rank1.json",
                           "shard.safetensors"};
  for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
    CHECK(ckpt_is_own_file(own[i], false), "%s is a checkpoint's", own[i]);
  for (size_t i = 0; i < sizeof not_own / sizeof not_own[0]; i++)
    CHECK(!ckpt_is_own_file(not_own[i], false), "%s is not a checkpoint's", not_own[i]);
  CHECK(ckpt_is_own_file("model.safetensors.tmp", true), "a staging directory holds NAME.tmp");
  char dir[] = "/tmp/stepc_ckpt_files_XXXXXX", err[1600], p[600];
  if (!mkdtemp(dir)) return;
  snprintf(p, sizeof p, "%s/absent", dir);
  CHECK(ckpt_dir_replaceable(p, false, err, sizeof err) == 0, "an absent directory: %s", err);
  snprintf(p, sizeof p, "%s/d", dir);
  mkdir(p, 0777);
  CHECK(ckpt_dir_replaceable(p, false, err, sizeof err) == 0, "an empty directory: %s", err);
  put(p, "model.safetensors", "x");
  CHECK(ckpt_dir_replaceable(p, false, err, sizeof err) != 0 && strstr(err, "no state.json"),
        "no state.json: %s", err);
  CHECK(ckpt_dir_replaceable(p, true, err, sizeof err) == 0, "a staging directory needs no state.json: %s",
        err);
  put(p, "state.json", "{}");
  CHECK(ckpt_dir_replaceable(p, false, err, sizeof err) != 0 && strstr(err, "not a stepc checkpoint"),
        "a bad state: %s", err);
  put(p, "state.json", state);
  CHECK(ckpt_dir_replaceable(p, false, err, sizeof err) == 0, "a checkpoint: %s", err);
  put(p, "thesis.tex", "x");
  CHECK(ckpt_dir_replaceable(p, false, err, sizeof err) != 0 &&
            strstr(err, "thesis.tex, which no checkpoint holds"),
        "%s", err);
  CHECK(ckpt_dir_replaceable(p, true, err, sizeof err) != 0, "a staging directory with the user's file");
  snprintf(p, sizeof p, "%s/d/thesis.tex", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/d/optimizer.safetensors", dir);
  mkdir(p, 0777);
  snprintf(p, sizeof p, "%s/d", dir);
  CHECK(ckpt_dir_replaceable(p, false, err, sizeof err) != 0 && strstr(err, "not a regular file"),
        "a directory inside: %s", err);
  snprintf(p, sizeof p, "%s/f", dir);
  put(dir, "f", "x");
  CHECK(ckpt_dir_replaceable(p, false, err, sizeof err) != 0 &&
            strstr(err, "a regular file, not a checkpoint directory"),
        "%s", err);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(void) {
  char text[2048], err[200], sum[17];
  CkptState st;
  unsigned long long bytes = 0;

  snprintf(text, sizeof text, STATE, "1", "false");
  CHECK(parse(text, &st, err, sizeof err) == 0, "a state stepc writes: %s", err);
  CHECK(st.version == 2 && st.step == 3 && st.seed == 1234 && st.world == 1 && !st.sharded,
        "read back: version %lld step %lld seed %lld world %lld sharded %d", st.version, st.step, st.seed, st.world, st.sharded);
  CHECK(ckpt_state_file(text, "model.safetensors", &bytes, sum) == 0 && bytes == 100 && !strcmp(sum, "0123456789abcdef"),
        "model.safetensors entry: %llu %s", bytes, sum);
  CHECK(ckpt_state_file(text, "optimizer.safetensors", &bytes, sum) != 0, "an unlisted file is not found");
  CHECK(!strcmp(st.fingerprint, "00000000000000ab") && !strncmp(st.recipe, "r\"world_size\": 9", 15),
        "fingerprint %s, recipe %s", st.fingerprint, st.recipe);

  snprintf(text, sizeof text, STATE, "4", "true");
  CHECK(parse(text, &st, err, sizeof err) == 0 && st.world == 4 && st.sharded, "ZeRO-1 over 4 ranks: world %lld sharded %d",
        st.world, st.sharded);
  CHECK(st.tp == 1 && st.ep == 1, "no tensor_parallel / expert_parallel keys: TP %lld EP %lld, not 1", st.tp, st.ep);
  CHECK(parse("{\"format\": \"stepc-checkpoint\", \"version\": 2, \"step\": 1, \"seed\": 1, \"world_size\": 4, "
              "\"tensor_parallel\": 2, \"expert_parallel\": 4}",
              &st, err, sizeof err) == 0 &&
            st.tp == 2 && st.ep == 4,
        "TP 2 x EP 4 over 4 ranks: TP %lld EP %lld (%s)", st.tp, st.ep, err);

  struct {
    const char *what, *text, *says;
  } bad[] = {
      {"empty", "", "not a stepc checkpoint state"},
      {"not an object", "[\"stepc-checkpoint\"]", "not a stepc checkpoint state"},
      {"no step", "{\"format\": \"stepc-checkpoint\", \"version\": 2, \"seed\": 1}",
       "not a stepc checkpoint state"},
      {"step not a number", "{\"format\": \"stepc-checkpoint\", \"version\": 2, \"step\": x, \"seed\": 1}",
       "not a stepc"},
      {"step past int64",
       "{\"format\": \"stepc-checkpoint\", \"version\": 2, \"step\": 99999999999999999999, \"seed\": 1}",
       "not a stepc"},
      {"step INT32_MAX",
       "{\"format\": \"stepc-checkpoint\", \"version\": 2, \"step\": 2147483647, \"seed\": 1}",
       "step 2147483647 is outside [0, 2^30]"},
      {"negative step", "{\"format\": \"stepc-checkpoint\", \"version\": 2, \"step\": -1, \"seed\": 1}",
       "outside [0, 2^30]"},
      {"version 3", "{\"format\": \"stepc-checkpoint\", \"version\": 3, \"step\": 1, \"seed\": 1}",
       "version 3"},
      {"world 0",
       "{\"format\": \"stepc-checkpoint\", \"version\": 2, \"step\": 1, \"seed\": 1, \"world_size\": 0}",
       "world_size 0"},
      {"TP above the world",
       "{\"format\": \"stepc-checkpoint\", \"version\": 2, \"step\": 1, \"seed\": 1, \"world_size\": 2, "
       "\"tensor_parallel\": 4}",
       "tensor_parallel 4"},
      {"EP 0",
       "{\"format\": \"stepc-checkpoint\", \"version\": 2, \"step\": 1, \"seed\": 1, \"expert_parallel\": 0}",
       "expert_parallel 0"},
      {"fingerprint of 17 digits",
       "{\"format\": \"stepc-checkpoint\", \"version\": 2, \"step\": 1, \"seed\": 1, \"step_fingerprint\": "
       "\"0123456789abcdef0\"}",
       "not 16 hex digits"},
      {"fingerprint not hex",
       "{\"format\": \"stepc-checkpoint\", \"version\": 2, \"step\": 1, \"seed\": 1, \"step_fingerprint\": "
       "\"0123456789abcdeg\"}",
       "not 16 hex digits"},
      {"another format", "{\"format\": \"other\", \"version\": 2, \"step\": 1, \"seed\": 1}", "not a stepc"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = 0;
    int rc = parse(bad[i].text, &st, err, sizeof err);
    CHECK(rc != 0 && strstr(err, bad[i].says), "%s: rc %d, \"%s\" (wanted \"%s\")", bad[i].what, rc, err, bad[i].says);
  }
  snprintf(text, sizeof text, STATE, "1", "false");
  CHECK(ckpt_state_parse(text, strlen(text), true, &st, err, sizeof err) != 0, "a state longer than the reader's buffer");
  CHECK(ckpt_state_parse(text, strlen(text) + 1, false, &st, err, sizeof err) != 0, "a NUL inside the state");
  snprintf(text, sizeof text, "{\"format\": \"stepc-checkpoint\", \"version\": 2, \"step\": 1, \"seed\": 1, "
                              "\"model.safetensors\": {\"bytes\": 5, \"fnv1a\": \"12ab\"}}");
  CHECK(parse(text, &st, err, sizeof err) == 0 && ckpt_state_file(text, "model.safetensors", &bytes, sum) != 0,
        "a checksum of fewer than 16 hex digits is not taken");
  snprintf(text, sizeof text, STATE, "1", "false");
  replaceable(text);
  if (failures) return 1;
  printf("ckpt_state: all checks passed\n");
  return 0;
}
