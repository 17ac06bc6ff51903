/* test_api.c — stepc.h's error paths and the safetensors reader/writer, on the CPU; device-memory
 * batches on a GPU where there is one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/artifact.h"
#include "frontend/frontend.h"
#include "runtime/image.h"
#include "runtime/rt.h"
#include "runtime/safetensors.h"
#include "runtime/stepc.h"
#include "validate/validate.h"

#include "open_recipe.h"


static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(p, 1, n, f);
  fclose(f);
}

static void test_safetensors(const char *dir) {
  char path[512], err[512];
  snprintf(path, sizeof path, "%s/t.safetensors", dir);
  StEntry e[2] = {{.name = "a.weight", .dtype = "F32", .ndim = 2, .shape = {2, 3}},
                  {.name = "b", .dtype = "BF16", .ndim = 1, .shape = {5}}};
  const char *meta[] = {"k", "v\"q"};
  StWriter w;
  float a[6] = {1, 2, 3, 4, 5, 6};
  unsigned short b[5] = {1, 2, 3, 4, 5};
  CHECK(st_write_begin(&w, path, e, 2, meta, 1, err, sizeof err) == 0);
  CHECK(st_write_next(&w, a, err, sizeof err) == 0 && st_write_next(&w, b, err, sizeof err) == 0);
  CHECK(st_write_end(&w, err, sizeof err) == 0);
  StReader r;
  CHECK(st_open(&r, path, err, sizeof err) == 0);
  const StEntry *x = st_find(&r, "a.weight"), *y = st_find(&r, "b");
  CHECK(x && y && !st_find(&r, "k"));
  float a2[6];
  unsigned short b2[5];
  CHECK(x && st_read(&r, x, a2, err, sizeof err) == 0 && !memcmp(a, a2, sizeof a));
  CHECK(y && st_read(&r, y, b2, err, sizeof err) == 0 && !memcmp(b, b2, sizeof b));
  st_close(&r);
  /* malformed: each must be refused with a message, never crash */
  const char *bad[] = {"{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", /* offsets vs shape */
                       "{\"x\": {\"dtype\": \"Q8\", \"shape\": [1], \"data_offsets\": [0, 1]}}",  /* unknown dtype */
                       "{\"x\": {\"shape\": [1]}}", "{\"x\": ", "[1, 2]", ("{\"x\": {\"dtype\": \"F32\", \"shape\": [-1], "
                        "\"data_offsets\": [0, 4]}}")};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    size_t n = strlen(bad[i]);
    unsigned char buf[256] = {0};
    for (int k = 0; k < 8; k++) buf[k] = (unsigned char)(n >> (8 * k));
    memcpy(buf + 8, bad[i], n);
    write_bytes(path, buf, 8 + n);
    err[0] = 0;
    int rc = st_open(&r, path, err, sizeof err);
    CHECK(rc != 0 && err[0]);
    if (rc == 0) st_close(&r);
  }
  unsigned char huge[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0};
  write_bytes(path, huge, 8);
  CHECK(st_open(&r, path, err, sizeof err) != 0);
  /* well-formed headers whose data does not tile the data section, with 8 data bytes in the file */
  const struct {
    const char *h, *why;
  } layout[] = {
      {"{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, \"y\": {\"dtype\": \"F32\", \"shape\": [1], "
       "\"data_offsets\": [2, 6]}}", "overlap"},
      {"{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", "gap"},
      {"{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", "follow"},
      {"{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, \"x\": {\"dtype\": \"F32\", \"shape\": [1], "
       "\"data_offsets\": [4, 8]}}", "twice"},
      {"{\"x\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", "past"},
      {"{\"x\": {\"dtype\": \"F64\", \"shape\": [4611686018427387904, 4], \"data_offsets\": [0, 8]}}", "overflow"},
  };
  for (size_t i = 0; i < sizeof layout / sizeof layout[0]; i++) {
    size_t n = strlen(layout[i].h);
    unsigned char buf[512] = {0};
    for (int k = 0; k < 8; k++) buf[k] = (unsigned char)(n >> (8 * k));
    memcpy(buf + 8, layout[i].h, n);
    write_bytes(path, buf, 8 + n + 8);
    err[0] = 0;
    int rc = st_open(&r, path, err, sizeof err);
    CHECK(rc != 0 && strstr(err, layout[i].why));
    if (rc == 0) st_close(&r);
  }
}

static void test_errors(const char *dir) {
  stepc_options o = stepc_options_default();
  o.device = STEPC_DEVICE_CPU;
  stepc_t *s = NULL;
  CHECK(stepc_open(dir, &o, &s) == STEPC_ERR_IO && strstr(stepc_last_error(s), "not a stepc artifact"));
  stepc_close(s);
  const char *ov[] = {"model.num_layers=1", "model.seq_length=16", "train.micro_batch_size=1", "train.global_batch_size=1"};
  /* gemm_tuning: outside 0 and 2..16 refused at open; any but 0 refused on the cpu device, which has
   * no cuBLASLt to time (never silently ignored) */
  stepc_options go = o;
  const int bad[] = {-1, 1, 17, 4};
  for (int i = 0; i < 4; i++) {
    go.gemm_tuning = bad[i];
    CHECK(open_recipe("models/tiny.lua", ov, 4, &go, &s) == STEPC_ERR_ARGUMENT &&
          strstr(stepc_last_error(s), i < 3 ? "2 to 16" : "cpu device"));
    stepc_close(s);
  }
  CHECK(stepc_api_version() == STEPC_API_VERSION && STEPC_API_VERSION >= 8);
  CHECK(open_recipe("models/tiny.lua", ov, 4, &o, &s) == STEPC_OK);
  stepc_info in;
  CHECK(stepc_get_info(s, &in) == STEPC_OK && in.seq_length == 16 && in.num_microbatches == 1);
  int32_t tok[16] = {0}, tg[16] = {0};
  CHECK(stepc_bind_batch(s, tok, tg, 15) == STEPC_ERR_ARGUMENT && strstr(stepc_last_error(s), "16"));
  CHECK(stepc_bind_batch_device(s, tok, tg, 16) == STEPC_ERR_UNSUPPORTED && strstr(stepc_last_error(s), "host buffers"));
  tok[3] = 9999;
  CHECK(stepc_bind_batch(s, tok, tg, 16) == STEPC_ERR_ARGUMENT);
  tok[3] = 7;
  stepc_step_stats a, b;
  CHECK(stepc_bind_batch(s, tok, tg, 16) == STEPC_OK && stepc_step(s, &a) == STEPC_OK && a.step == 1);
  char ck[512];
  snprintf(ck, sizeof ck, "%s/ck", dir);
  CHECK(stepc_save_checkpoint(s, ck) == STEPC_OK);
  CHECK(stepc_bind_batch(s, tok, tg, 16) == STEPC_OK && stepc_step(s, &a) == STEPC_OK && a.step == 2);
  /* back to step 1, the same batch again: bitwise the same step 2 */
  CHECK(stepc_load_checkpoint(s, ck) == STEPC_OK && stepc_get_info(s, &in) == STEPC_OK && in.step == 1);
  CHECK(stepc_bind_batch(s, tok, tg, 16) == STEPC_OK && stepc_step(s, &b) == STEPC_OK && b.step == 2);
  CHECK(a.loss == b.loss && a.grad_norm == b.grad_norm);
  /* checkpoints are all or nothing and checked: a stale half-written save beside it is replaced; a
   * flipped bit, a step that disagrees with the optimizer's counter, an absurd step and a cut
   * state.json are each refused, and the checkpoint itself is left as it was */
  {
    char stale[600], cmd[1400];
    snprintf(stale, sizeof stale, "%s/.ck.saving", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && echo junk > '%s/model.safetensors'", stale, stale);
    CHECK(system(cmd) == 0 && stepc_save_checkpoint(s, ck) == STEPC_OK && stepc_load_checkpoint(s, ck) == STEPC_OK);
    struct stat sb;
    CHECK(stat(stale, &sb) != 0);
    char cp[1200];
    snprintf(cp, sizeof cp, "%s/bad", dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", cp, ck, cp);
    const char *edits[][2] = {
        {"printf '\\x01' | dd of=%s/model.safetensors bs=1 seek=200 conv=notrunc 2>/dev/null", "damaged"},
        {"sed -i 's/\"step\": [0-9]*,/\"step\": 99,/' %s/state.json", "optimizer's counter"},
        {"sed -i 's/\"step\": [0-9]*,/\"step\": 2147483647,/' %s/state.json", "outside"},
        {"head -c 100 %s/state.json > %s/s && mv %s/s %s/state.json", "not a stepc checkpoint state"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
      char ed[1400], full[2900];
      snprintf(ed, sizeof ed, edits[i][0], cp, cp, cp, cp);
      snprintf(full, sizeof full, "%s && %s", cmd, ed);
      CHECK(system(full) == 0);
      stepc_status st = stepc_load_checkpoint(s, cp);
      CHECK(st != STEPC_OK && strstr(stepc_last_error(s), edits[i][1]));
      if (st == STEPC_OK || !strstr(stepc_last_error(s), edits[i][1])) fprintf(stderr, "edit %zu: %s\n", i, stepc_last_error(s));
    }
    CHECK(stepc_load_checkpoint(s, ck) == STEPC_OK); /* the original is untouched */
  }
  /* params alone round-trip; another recipe's checkpoint is refused */
  char pp[600];
  snprintf(pp, sizeof pp, "%s/p.safetensors", dir);
  CHECK(stepc_save_params(s, pp) == STEPC_OK && stepc_load_params(s, pp) == STEPC_OK);
  stepc_t *t = NULL;
  const char *ov2[] = {"model.num_layers=2", "model.seq_length=16", "train.micro_batch_size=1", "train.global_batch_size=1"};
  CHECK(open_recipe("models/tiny.lua", ov2, 4, &o, &t) == STEPC_OK);
  CHECK(stepc_load_checkpoint(t, ck) == STEPC_ERR_MISMATCH &&
        strstr(stepc_last_error(t), "saved by another step"));
  stepc_close(t);
  const char *ov3[] = {"model.num_layers=1", "model.seq_length=16", "train.micro_batch_size=1", "train.global_batch_size=1",
                       "train.seed=7"};
  CHECK(open_recipe("models/tiny.lua", ov3, 5, &o, &t) == STEPC_OK);
  CHECK(stepc_load_checkpoint(t, ck) == STEPC_ERR_MISMATCH && strstr(stepc_last_error(t), "seed"));
  stepc_close(t);
  stepc_measure m;
  CHECK(stepc_get_measure(s, &m) == STEPC_OK && m.predicted_peak_bytes > 0 && m.max_allocated_bytes >= m.predicted_peak_bytes);
  CHECK(stepc_step(NULL, NULL) == STEPC_ERR_ARGUMENT && stepc_open(NULL, &o, NULL) == STEPC_ERR_ARGUMENT);
  stepc_close(s);
}

/* On a GPU: one step from a host binding and one from the same batch in device memory (uploaded
 * through the runtime's own driver handle, the same primary context) give bitwise the same loss
 * and gradient norm; the device binding checks its count and pointers. Skipped without a GPU. */
static void test_device_batch(void) {
  stepc_options o = stepc_options_default();
  o.device = STEPC_DEVICE_CUDA;
  stepc_t *a = NULL, *b = NULL;
  stepc_status st = open_recipe("models/tiny.lua", NULL, 0, &o, &a);
  if (st == STEPC_ERR_NO_DEVICE) {
    printf("device batch: no GPU here, skipped\n");
    stepc_close(a);
    return;
  }
  CHECK(st == STEPC_OK && open_recipe("models/tiny.lua", NULL, 0, &o, &b) == STEPC_OK);
  stepc_info in;
  CHECK(stepc_get_info(a, &in) == STEPC_OK);
  size_t n = (size_t)in.num_microbatches * (size_t)in.micro_batch_size * (size_t)in.seq_length;
  int32_t *tok = malloc(n * 4), *tg = malloc(n * 4);
  for (size_t i = 0; i < n; i++) tok[i] = (int32_t)((i * 7919u) % 251u), tg[i] = (int32_t)((i * 104729u + 3u) % 251u);
  RtDevice d;
  CUdeviceptr dt = 0, dg = 0;
  int ok = rt_open(&d) == RT_OK && rt_alloc(&d, &dt, n * 4, "tokens") == RT_OK && rt_alloc(&d, &dg, n * 4, "targets") == RT_OK &&
           rt_copy_h2d(&d, dt, tok, n * 4) == RT_OK && rt_copy_h2d(&d, dg, tg, n * 4) == RT_OK && rt_sync(&d) == RT_OK;
  CHECK(ok);
  stepc_step_stats sa, sb;
  CHECK(stepc_bind_batch_device(b, (void *)(uintptr_t)dt, (void *)(uintptr_t)dg, n - 1) == STEPC_ERR_ARGUMENT);
  CHECK(stepc_bind_batch_device(b, NULL, (void *)(uintptr_t)dg, n) == STEPC_ERR_ARGUMENT);
  CHECK(stepc_bind_batch(a, tok, tg, n) == STEPC_OK && stepc_step(a, &sa) == STEPC_OK);
  CHECK(stepc_bind_batch_device(b, (void *)(uintptr_t)dt, (void *)(uintptr_t)dg, n) == STEPC_OK && stepc_step(b, &sb) == STEPC_OK);
  CHECK(sa.loss == sb.loss && sa.grad_norm == sb.grad_norm);
  double la = sa.loss, lb = sb.loss;
  /* (a device binding that were ignored would have stepped b on the recipe's batch: another loss)
   * the next step, unbound on both, stays equal: the two handles hold the same state */
  stepc_step_stats sc;
  CHECK(stepc_step(a, &sc) == STEPC_OK && stepc_step(b, &sb) == STEPC_OK && sc.loss == sb.loss);
  printf("device batch: step 1 host-bound loss %.9g, device-bound %.9g (%s)\n", la, lb, la == lb ? "equal" : "differ");
  rt_free(&d, dt, n * 4), rt_free(&d, dg, n * 4);
  rt_close(&d);
  free(tok), free(tg);
  stepc_close(a), stepc_close(b);
}

static int file_is(const char *path, const char *text) {
  char buf[64] = "";
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  return !strcmp(buf, text);
}

/* docs/promises.md, "Files", through stepc.h: what a save may replace, what a load must match,
 * what a read opens. A read that blocks is caught by the alarm (the test dies). */
static void test_file_promises(const char *dir) {
  stepc_options o = stepc_options_default();
  o.device = STEPC_DEVICE_CPU;
  const char *one[] = {"model.num_layers=1", "model.seq_length=16", "train.micro_batch_size=1",
                       "train.global_batch_size=1"};
  const char *two[] = {"model.num_layers=2", "model.seq_length=16", "train.micro_batch_size=1",
                       "train.global_batch_size=1"};
  const char *full[] = {"model.num_layers=1",
                        "model.seq_length=16",
                        "train.micro_batch_size=1",
                        "train.global_batch_size=1",
                        "model.recompute_granularity=full",
                        "model.recompute_method=uniform",
                        "model.recompute_num_layers=1"};
  stepc_t *s1 = NULL, *s2 = NULL, *sf = NULL;
  CHECK(open_recipe("models/tiny.lua", one, 4, &o, &s1) == STEPC_OK &&
        open_recipe("models/tiny.lua", two, 4, &o, &s2) == STEPC_OK &&
        open_recipe("models/tiny.lua", full, 7, &o, &sf) == STEPC_OK);
  alarm(300);
  char p2[600], ck1[600], ck2[600], cmd[2000], user[600], note[700];
  snprintf(p2, sizeof p2, "%s/two.safetensors", dir), snprintf(ck1, sizeof ck1, "%s/ck_one", dir);
  snprintf(ck2, sizeof ck2, "%s/ck_two", dir);
  /* a file with a tensor the step does not have is another step's, fingerprint or not */
  CHECK(stepc_save_params(s2, p2) == STEPC_OK);
  CHECK(stepc_load_params(s1, p2) == STEPC_ERR_MISMATCH &&
        strstr(stepc_last_error(s1), "holds tensor layers.1"));
  snprintf(cmd, sizeof cmd, "sed -i '/step_fingerprint/d' '%s/state.json'", ck2);
  CHECK(stepc_save_checkpoint(s2, ck2) == STEPC_OK && system(cmd) == 0);
  CHECK(stepc_load_checkpoint(s1, ck2) == STEPC_ERR_MISMATCH &&
        strstr(stepc_last_error(s1), "holds tensor layers.1"));
  /* the same tensors, another step (full recompute): the checkpoint is refused, its weights load */
  snprintf(cmd, sizeof cmd, "%s/model.safetensors", ck1);
  CHECK(stepc_save_checkpoint(s1, ck1) == STEPC_OK);
  CHECK(stepc_load_checkpoint(sf, ck1) == STEPC_ERR_MISMATCH &&
        strstr(stepc_last_error(sf), "saved by another step"));
  CHECK(stepc_load_params(sf, cmd) == STEPC_OK && stepc_load_checkpoint(s1, ck1) == STEPC_OK);
  /* a save replaces only a checkpoint: a folder with the user's file is refused and kept */
  snprintf(user, sizeof user, "%s/mine", dir), snprintf(note, sizeof note, "%s/thesis.tex", user);
  mkdir(user, 0777), write_bytes(note, "x", 1);
  CHECK(stepc_save_checkpoint(s1, user) == STEPC_ERR_IO && strstr(stepc_last_error(s1), "thesis.tex") &&
        file_is(note, "x"));
  /* the safetensors writer replaces only a regular file: a symbolic link, a FIFO, a directory stay */
  char lnk[600], fifo[600];
  snprintf(lnk, sizeof lnk, "%s/link.safetensors", dir), snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  CHECK(symlink(note, lnk) == 0 && mkfifo(fifo, 0644) == 0);
  const char *targets[] = {lnk, fifo, user};
  struct stat sb;
  for (int i = 0; i < 3; i++) {
    CHECK(stepc_save_params(s1, targets[i]) == STEPC_ERR_IO &&
          strstr(stepc_last_error(s1), "refusing to replace it"));
    snprintf(cmd, sizeof cmd, "%s.tmp", targets[i]);
    CHECK(lstat(cmd, &sb) != 0);
  }
  CHECK(lstat(lnk, &sb) == 0 && S_ISLNK(sb.st_mode) && file_is(note, "x") && stat(fifo, &sb) == 0 &&
        S_ISFIFO(sb.st_mode));
  /* readers open only a regular file: a FIFO and /dev/zero are refused, not read forever */
  CHECK(stepc_load_params(s1, fifo) == STEPC_ERR_IO &&
        strstr(stepc_last_error(s1), "is a FIFO, not a regular file"));
  CHECK(stepc_load_params(s1, "/dev/zero") == STEPC_ERR_IO &&
        strstr(stepc_last_error(s1), "character device"));
  alarm(0);
  stepc_close(s1), stepc_close(s2), stepc_close(sf);
}

/* An image whose launch program was built against another kernel list (a row moved, say) is
 * refused when read, on every device: the program names kernels by their place in the list. */
static void test_kernel_list(void) {
  stepc_t *s = NULL;
  CHECK(open_recipe("models/tiny.lua", NULL, 0, NULL, &s) == STEPC_OK);
  char dir[300], path[400], err[512] = "";
  snprintf(dir, sizeof dir, "%s", built_dir);
  stepc_close(s);
  snprintf(path, sizeof path, "%s/%s", dir, STEPC_IMAGE_FILE);
  StepImage im;
  CHECK(image_read(path, &im, err, sizeof err) == 0 && im.has_program);
  im.f.kernel_list ^= 1;
  CHECK(image_write(path, &im, err, sizeof err) == 0);
  image_free(&im);
  CHECK(image_read(path, &im, err, sizeof err) == -1 && strstr(err, "another kernel list"));
  stepc_options o = stepc_options_default();
  o.device = STEPC_DEVICE_CPU;
  CHECK(stepc_open(dir, &o, &s) != STEPC_OK && strstr(stepc_last_error(s), "another kernel list"));
  stepc_close(s);
}

int main(void) {
  char dir[] = "/tmp/stepc_test_api_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  snprintf(tmpdir, sizeof tmpdir, "%s", dir);
  test_safetensors(dir);
  test_errors(dir);
  test_file_promises(dir);
  test_device_batch();
  test_kernel_list();
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
  else printf("ok\n");
  return failures ? 1 : 0;
}
