/* fuzz_files.c — libFuzzer target for the files a runtime reads: safetensors checkpoints
 * (runtime/safetensors.c), a checkpoint's state.json (runtime/ckpt_state.c) and the step image
 * (runtime/image.c).
 *
 * Input: one selector byte, then the file. Selector 0 mod 4: the rest is a safetensors file, opened
 * and every entry read. 2 mod 4: the rest is state.json, parsed as stepc_load_checkpoint reads it
 * (at most its 64 KiB) and both files' size and checksum looked up. Odd: the rest is a step image's payload; the target writes it behind a
 * correct header (magic, version, this build's struct sizes, the payload's length and hash), so
 * that the fuzzer reaches the image's own checks instead of stopping at the checksum. Built with
 * -fsanitize=fuzzer it is a fuzzer; built without, replay.c drives it over the saved inputs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/ckpt_state.h"
#include "runtime/image.h"
#include "runtime/safetensors.h"

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

/* The image header as image.c writes it (image.c keeps the struct private: the layout is restated
 * here, and a change to it shows as every input being refused). */
typedef struct {
  char magic[8];
  uint32_t version;
  uint32_t sizes[5];
  uint64_t payload_bytes;
  uint64_t payload_hash;
} Header;

static void fuzz_image(const char *path, const uint8_t *payload, size_t n) {
  Header h = {.version = STEPC_IMAGE_VERSION, .payload_bytes = n, .payload_hash = ir_fnv1a(IR_FNV_OFFSET, payload, n)};
  memcpy(h.magic, "STEPCIMG", 8);
  h.sizes[0] = sizeof(ImgFacts), h.sizes[1] = sizeof(Tensor), h.sizes[2] = sizeof(Op), h.sizes[3] = sizeof(IrChain);
  h.sizes[4] = sizeof(ImgScope);
  FILE *f = fopen(path, "wb");
  if (!f) return;
  fwrite(&h, sizeof h, 1, f);
  fwrite(payload, 1, n, f);
  fclose(f);
  StepImage im;
  char err[700];
  if (image_read(path, &im, err, sizeof err) != 0) return;
  Graph *g = image_cpu_graph(&im);
  graph_free(g);
  image_free(&im);
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
  if (data[0] & 1) fuzz_image(path, data + 1, size - 1);
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
