/* train_text.c — a small trainer that embeds a compiled stepc step through runtime/stepc.h
 * (and nothing else of stepc): byte-level language modelling on a text file, with checkpoints.
 *
 *   train_text ARTIFACT_DIR [--device cpu|cuda|auto] [--steps N] [--text FILE]
 *              [--save-at K --ckpt DIR] [--resume DIR] [--seed S]
 *
 * ARTIFACT_DIR is what `stepc build RECIPE [KEY=VALUE ...] -o DIR` wrote. The trainer reads the text itself and binds each step's batch: windows of
 * seq_length + 1 bytes at offsets drawn from (seed, step, row), so a resumed run sees exactly the
 * batches the uninterrupted run would have. Each step prints `step N loss L lr R grad_norm G`
 * and the loss's exact bits (%a), which tests/api/resume.sh compares.
 *
 * Exit: 0 ok, 1 a stepc call failed, 2 bad usage or unreadable text, 77 --device cuda without
 * a GPU (ctest's skip code). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stepc.h"

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
  x ^= x >> 30, x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27, x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static unsigned char *read_file(const char *path, long *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = *n > 0 ? malloc((size_t)*n) : NULL;
  if (b && fread(b, 1, (size_t)*n, f) != (size_t)*n) free(b), b = NULL;
  fclose(f);
  return b;
}

static int fail(stepc_t *s, const char *what, stepc_status st) {
  fprintf(stderr, "train_text: %s: %s: %s\n", what, stepc_status_name(st), stepc_last_error(s));
  stepc_close(s);
  return st == STEPC_ERR_NO_DEVICE ? 77 : 1;
}

int main(int argc, char **argv) {
  const char *source = NULL, *text_path = "/usr/share/common-licenses/GPL-3", *ckpt = NULL, *resume = NULL;
  int steps = 20, save_at = -1;
  uint64_t data_seed = 1;
  stepc_options o = stepc_options_default();
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--device") && v) {
      o.device = !strcmp(v, "cpu") ? STEPC_DEVICE_CPU : !strcmp(v, "cuda") ? STEPC_DEVICE_CUDA : STEPC_DEVICE_AUTO;
      i++;
    } else if (!strcmp(a, "--steps") && v) steps = atoi(v), i++;
    else if (!strcmp(a, "--text") && v) text_path = v, i++;
    else if (!strcmp(a, "--save-at") && v) save_at = atoi(v), i++;
    else if (!strcmp(a, "--ckpt") && v) ckpt = v, i++;
    else if (!strcmp(a, "--resume") && v) resume = v, i++;
    else if (!strcmp(a, "--seed") && v) data_seed = strtoull(v, NULL, 10), i++;
    else if (!source && a[0] != '-') source = a;
    else {
      fprintf(stderr, "train_text: unexpected argument %s\n", a);
      return 2;
    }
  }
  if (!source || (save_at >= 0 && !ckpt)) {
    fprintf(stderr, "usage: train_text ARTIFACT_DIR [--device cpu|cuda|auto] [--steps N]\n"
                    "       [--text FILE] [--save-at K --ckpt DIR] [--resume DIR] [--seed S]\n");
    return 2;
  }
  long ntext = 0;
  unsigned char *text = read_file(text_path, &ntext);
  if (!text) {
    fprintf(stderr, "train_text: cannot read %s\n", text_path);
    return 2;
  }

  stepc_t *s = NULL;
  stepc_status st = stepc_open(source, &o, &s);
  if (st != STEPC_OK) {
    free(text);
    return fail(s, "open", st);
  }
  stepc_info in;
  stepc_get_info(s, &in);
  if (in.vocab_size < 256 || ntext < in.seq_length + 2) {
    fprintf(stderr, "train_text: needs a byte vocabulary (>= 256) and a text longer than seq_length\n");
    stepc_close(s);
    free(text);
    return 2;
  }
  fprintf(stderr, "train_text: %s on %s%s%s (%s), %lld parameters, %lld x %lld x %lld tokens per step\n", source,
          in.device, in.gpu[0] ? " " : "", in.gpu, in.graph_mode, (long long)in.parameters, (long long)in.num_microbatches,
          (long long)in.micro_batch_size, (long long)in.seq_length);
  if (resume && (st = stepc_load_checkpoint(s, resume)) != STEPC_OK) {
    free(text);
    return fail(s, "resume", st);
  }
  stepc_get_info(s, &in);
  size_t rows = (size_t)(in.num_microbatches * in.micro_batch_size), T = (size_t)in.seq_length, n = rows * T;
  int32_t *tok = malloc(n * sizeof *tok), *tg = malloc(n * sizeof *tg);
  int rc = 0;
  for (int64_t step = in.step + 1; step <= steps && tok && tg; step++) {
    for (size_t r = 0; r < rows; r++) {
      size_t off = (size_t)(mix64(mix64(data_seed ^ (uint64_t)step) ^ r) % (uint64_t)(ntext - (long)T - 1));
      for (size_t t = 0; t < T; t++) tok[r * T + t] = text[off + t], tg[r * T + t] = text[off + t + 1];
    }
    stepc_step_stats ss;
    if ((st = stepc_bind_batch(s, tok, tg, n)) != STEPC_OK || (st = stepc_step(s, &ss)) != STEPC_OK) {
      rc = fail(s, "step", st);
      s = NULL;
      break;
    }
    printf("step %lld loss %.6f lr %.4e grad_norm %.4f bits %a\n", (long long)ss.step, ss.loss, ss.lr, ss.grad_norm, ss.loss);
    fflush(stdout);
    if (step == save_at) {
      if ((st = stepc_save_checkpoint(s, ckpt)) != STEPC_OK) {
        rc = fail(s, "checkpoint", st);
        s = NULL;
        break;
      }
      fprintf(stderr, "train_text: checkpoint of step %lld in %s\n", (long long)step, ckpt);
    }
  }
  if (s) {
    stepc_measure m;
    if (stepc_get_measure(s, &m) == STEPC_OK)
      fprintf(stderr, "train_text: last step %.2f ms, max allocated %.3f MB, predicted peak %.3f MB\n", m.last_step_ms,
              (double)m.max_allocated_bytes / 1e6, (double)m.predicted_peak_bytes / 1e6);
    stepc_close(s);
  }
  free(tok), free(tg), free(text);
  return rc;
}
