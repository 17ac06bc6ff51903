/* fuzz_files.c — libFuzzer target for the files a runtime reads: safetensors checkpoints
 * (runtime/safetensors.c), a checkpoint's state.json (runtime/ckpt_state.c) and the step image
 * (runtime/image.c).
 *
 * Input: one selector byte, then the file. Selector 0 mod 4: the rest is a safetensors file, opened
 * and every entry read. 2 mod 4: the rest is state.json, parsed as stepc_load_checkpoint reads it
 * (at most its 64 KiB) and both files' size and checksum looked up. 1 mod 4: the rest is a step
 * image's payload, sealed behind a correct header (image_seal: magic, version, this build's struct
 * sizes, the payload's length and hash, as a re-signed image would be), so that the fuzzer reaches
 * the image's own checks, and read. 3 mod 4: the same payload opened with stepc_open on the CPU
 * device (bit 2 set: and one step run). Built with
 * -fsanitize=fuzzer it is a fuzzer; built without, replay.c drives it over the saved inputs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/ckpt_state.h"
#include "runtime/image.h"
#include "runtime/safetensors.h"
#include "runtime/stepc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_safetensors(const char *path) {
  StReader r;
  char err[600];
  if (st_open(&r, path, err, sizeof err) != 0) return;
  for (int i = 0; i < r.n; i++) {
    const StEntry *e = &r.e[i];
    uint64_t n = e->end - e->begin;
    if (n > (64u << 20)) continue;
    void *buf = malloc(n ? n : 1);
    if (buf) st_read(&r, e, buf, err, sizeof err);
    free(buf);
  }
  st_close(&r);
}

/* The payload behind a correct header (image_seal), so that the fuzzer reaches the image's own
 * checks instead of stopping at the checksum; read, and its CPU graph built. */
static void fuzz_image(const char *path, const uint8_t *payload, size_t n) {
  StepImage im;
  char err[700];
  if (image_seal(path, payload, n, err, sizeof err) != 0 || image_read(path, &im, err, sizeof err) != 0)
    return;
  Graph *g = image_cpu_graph(&im);
  graph_free(g);
  image_free(&im);
}

/* The payload sealed as DIR/step.img and opened as a trainer opens it on the CPU device: every
 * fact the open uses (data source, plan executor, parameter init); `step` also runs one step when
 * the CPU arena is under 4 MiB (a bound of this harness: a step of a larger seed takes
 * seconds under ASan, and libFuzzer counts it a timeout). */
static void fuzz_open(const uint8_t *payload, size_t n, int step) {
  char dir[64], path[96], err[700];
  snprintf(dir, sizeof dir, "/tmp/stepc_fuzz_open.%d", (int)getpid());
  snprintf(path, sizeof path, "%s/%s", dir, STEPC_IMAGE_FILE);
  mkdir(dir, 0700);
  if (image_seal(path, payload, n, err, sizeof err) != 0) return;
  stepc_options o = stepc_options_default();
  o.device = STEPC_DEVICE_CPU;
  o.cpu_threads = 1;
  stepc_t *s = NULL;
  stepc_info in;
  if (stepc_open(dir, &o, &s) == STEPC_OK && stepc_get_info(s, &in) == STEPC_OK) {
    stepc_measure m;
    stepc_get_measure(s, &m);
    if (step && m.arena_bytes < (4 << 20)) stepc_step(s, NULL);
  }
  stepc_close(s);
  remove(path);
  rmdir(dir);
}

static void fuzz_state(const uint8_t *data, size_t n) {
  char *text = malloc(65536);
  if (!text) return;
  bool truncated = n > 65535;
  n = truncated ? 65535 : n;
  memcpy(text, data, n);
  text[n] = 0;
  CkptState st;
  char err[200], sum[17];
  unsigned long long bytes;
  if (ckpt_state_parse(text, n, truncated, &st, err, sizeof err) == 0) {
    ckpt_state_file(text, "model.safetensors", &bytes, sum);
    ckpt_state_file(text, "optimizer.safetensors", &bytes, sum);
  }
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  if ((data[0] & 3) == 2) {
    fuzz_state(data + 1, size - 1);
    return 0;
  }
  char path[64];
  snprintf(path, sizeof path, "/tmp/stepc_fuzz_files.%d", (int)getpid());
  if ((data[0] & 3) == 3)
    fuzz_open(data + 1, size - 1, data[0] & 4);
  else if (data[0] & 1)
    fuzz_image(path, data + 1, size - 1);
  else {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data + 1, 1, size - 1, f);
    fclose(f);
    fuzz_safetensors(path);
  }
  remove(path);
  return 0;
}
