/* bandwidth.c — the bandwidth-bound kernels at shape M (models/bench_m.lua: 2 x 4096 = 8192
 * tokens, vocabulary 128256, 1.50 B parameters with the untied output layer): each checked at that
 * shape, then timed, with the bytes it must move per second (the H200's HBM3e: 4.8 TB/s peak). Run
 * with the timings (gpu_kernels without --no-bench or --only). Buffers are filled on the device
 * (init_normal); about 48 GB at most are held at once.
 *   cross_entropy_cluster: 2 bytes read + 2 written per logit; its losses and sampled rows' gradients
 *     against fp64, bitwise the same over 1024-row launches (an output layer in 8 chunks) as over one;
 *     timed as one launch, as 8 launches of 1024 rows, and the two-pass
 *     cross_entropy_forward_backward (the fallback for vocabularies over 524288) for comparison.
 *   adamw_multi: 16 bytes read + 14 written per parameter; bitwise adamw_update per tensor over two
 *     steps on every element; timed against the per-tensor launches.
 *   norm_squared_multi: 4 bytes read per fp32 gradient element. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "kernels/launch.h"
#include "op_ref.h"

#define BW_TOKENS 8192
#define BW_VOCAB 128256
#define BW_CHUNK_ROWS 1024 /* rows a launch: M's output layer in 8 chunks, 256 MiB of bf16 logits each */
#define BW_SAMPLES 24      /* rows whose gradient is checked against fp64 */
#define BW_PIECE (256l << 20)

static void fill_normal(Gpu *g, CUdeviceptr f32, CUdeviceptr b16, long n, unsigned long long key, double std) {
  CUdeviceptr seed = gpu_dup(g, &key, sizeof key); /* the kernel reads its seed on the device */
  unsigned long long name_hash = 0;
  void *a[] = {&f32, &b16, &n, &seed, &name_hash, &std};
  gpu_launch(g, "init_normal", gpu_grid1d(g, n), 1, 1, 256, 0, a);
  gpu_free(g, seed);
}

/* Whether two device buffers hold the same bytes, compared BW_PIECE at a time on the host. */
static int same_bytes(Gpu *g, CUdeviceptr a, CUdeviceptr b, size_t bytes) {
  char *ha = malloc(BW_PIECE), *hb = malloc(BW_PIECE);
  int same = 1;
  for (size_t at = 0; at < bytes && same; at += BW_PIECE) {
    size_t n = bytes - at < BW_PIECE ? bytes - at : BW_PIECE;
    gpu_get(g, ha, a + at, n), gpu_get(g, hb, b + at, n);
    same = !memcmp(ha, hb, n);
  }
  free(ha), free(hb);
  return same;
}

static void report(const char *what, double ms, double bytes) {
  printf("INFO %s: %.3f ms, %.0f GB/s (%.2f GB moved)\n", what, ms, bytes / ms / 1e6, bytes / 1e9);
}

/* ---- cross entropy ---- */

typedef struct {
  CUdeviceptr losses, logits, targets, den; /* den: the loss denominator, 1 */
  int N, V, rows, plain;                    /* rows a launch; plain: the two-pass kernel */
  float dloss;
} CeRun;

static void ce_launch(Gpu *g, void *ctx) {
  CeRun *c = ctx;
  for (int r0 = 0; r0 < c->N; r0 += c->rows) {
    int n = c->N - r0 < c->rows ? c->N - r0 : c->rows;
    CUdeviceptr l = c->losses + 4 * (size_t)r0, x = c->logits + 2 * (size_t)r0 * c->V, t = c->targets + 4 * (size_t)r0;
    void *a[] = {&l, &x, &t, &n, &c->V, &c->V, &c->dloss, &c->den};
    if (c->plain) gpu_launch(g, "cross_entropy_forward_backward", (unsigned)n, 1, 1, 512, 0, a);
    else gpu_launch(g, "cross_entropy_cluster", (unsigned)n * STEPC_CE_CLUSTER, 1, 1, stepc_ce_threads(c->V), 0, a);
  }
}

static void bench_cross_entropy(Gpu *g) {
  int N = BW_TOKENS, V = BW_VOCAB, sample[BW_SAMPLES];
  size_t n = (size_t)N * V;
  CeRun c = {.N = N, .V = V, .rows = N, .dloss = 1.0f / BW_TOKENS};
  CUdeviceptr orig = gpu_alloc(g, 2 * n), losses2 = gpu_alloc(g, 4 * (size_t)N);
  c.logits = gpu_alloc(g, 2 * n), c.losses = gpu_alloc(g, 4 * (size_t)N);
  fill_normal(g, 0, orig, (long)n, 0xce11, 2.5); /* logits spread like a trained model's: max ~ 12 above the mean */
  int *t = malloc(sizeof *t * N);
  Rng r = {0xce};
  for (int i = 0; i < N; i++) t[i] = (int)((rng_uniform(&r) + 1) * 0.5 * V) % V;
  for (int i = 0; i < BW_SAMPLES; i++) sample[i] = i * (N / BW_SAMPLES) + (i * 37) % (N / BW_SAMPLES);
  t[sample[1]] = -100, t[sample[2]] = V - 1, t[sample[3]] = 0; /* ignored, the last column, the first */
  c.targets = gpu_dup(g, t, sizeof *t * N);
  float one = 1.0f;
  c.den = gpu_dup(g, &one, sizeof one);
  gpu_copy(g, c.logits, orig, 2 * n);

  /* the sampled rows before and after one launch over all rows, against fp64 */
  uint16_t *row = malloc(2 * (size_t)V);
  double *x = malloc(sizeof *x * (size_t)V * BW_SAMPLES), *gd = malloc(sizeof *gd * (size_t)V * BW_SAMPLES);
  double *wl = malloc(sizeof *wl * BW_SAMPLES), *wd = malloc(sizeof *wd * (size_t)V * BW_SAMPLES);
  double *gl = malloc(sizeof *gl * BW_SAMPLES);
  int ts[BW_SAMPLES];
  for (int i = 0; i < BW_SAMPLES; i++) {
    gpu_get(g, row, orig + 2 * (size_t)sample[i] * V, 2 * (size_t)V);
    bf16_to_double(row, x + (size_t)i * V, V);
    ts[i] = t[sample[i]];
  }
  ce_launch(g, &c);
  float *hl = malloc(4 * (size_t)N);
  gpu_get(g, hl, c.losses, 4 * (size_t)N);
  for (int i = 0; i < BW_SAMPLES; i++) {
    gpu_get(g, row, c.logits + 2 * (size_t)sample[i] * V, 2 * (size_t)V);
    bf16_to_double(row, gd + (size_t)i * V, V);
    gl[i] = hl[sample[i]];
  }
  ref_cross_entropy_rows(wl, wd, x, ts, BW_SAMPLES, V, V, c.dloss);
  gpu_check(g, "cross_entropy_cluster at M: sampled rows' losses", gl, wl, BW_SAMPLES, 1e-5, 1e-5);
  gpu_check(g, "cross_entropy_cluster at M: sampled rows' dlogits", gd, wd, (long)V * BW_SAMPLES, 1e-6 * c.dloss, 1.0 / 128);
  double rss = 0, ess = 0; /* the gradient's relative L2 error over the samples (bf16 rounding alone: ~1.6e-3) */
  for (size_t i = 0; i < (size_t)V * BW_SAMPLES; i++) rss += wd[i] * wd[i], ess += (gd[i] - wd[i]) * (gd[i] - wd[i]);
  printf("INFO cross_entropy_cluster at M: sampled dlogits relative L2 error %.3g\n", sqrt(ess / rss));

  /* the same bits over 1024-row launches (rows are independent) */
  CUdeviceptr once = gpu_alloc(g, 2 * n), first = c.losses;
  gpu_copy(g, once, c.logits, 2 * n);
  gpu_copy(g, c.logits, orig, 2 * n);
  c.rows = BW_CHUNK_ROWS, c.losses = losses2;
  ce_launch(g, &c);
  gpu_check_true(g, "cross_entropy_cluster at M: 1024-row launches = one launch, bitwise (losses)",
                 same_bytes(g, first, losses2, 4 * (size_t)N), "");
  gpu_check_true(g, "cross_entropy_cluster at M: 1024-row launches = one launch, bitwise (dlogits)",
                 same_bytes(g, once, c.logits, 2 * n), "");
  gpu_free(g, once);

  /* in place, each timed call runs over the previous one's gradient: the same work and bytes */
  double bytes = 4.0 * (double)n;
  c.rows = N;
  report("cross_entropy_cluster at M (8192 x 128256 bf16, one launch)", gpu_time_ms(g, ce_launch, &c, 2, 10), bytes);
  c.rows = BW_CHUNK_ROWS;
  report("cross_entropy_cluster at M (8 launches of 1024 rows, an output layer in 8 chunks)", gpu_time_ms(g, ce_launch, &c, 2, 10),
         bytes);
  c.rows = N, c.plain = 1;
  report("cross_entropy_forward_backward at M (two passes, the fallback over 524288 columns)",
         gpu_time_ms(g, ce_launch, &c, 2, 10), bytes);
  free(t), free(row), free(x), free(gd), free(wl), free(wd), free(gl), free(hl);
  gpu_free(g, orig), gpu_free(g, losses2), gpu_free(g, first), gpu_free(g, c.logits), gpu_free(g, c.targets), gpu_free(g, c.den);
}

/* ---- the optimizer ---- */

/* M's parameters as Megatron lays them out: the embedding, per layer the two norms, fused QKV
 * (3072 x 2048), the attention projection, fused fc1 (2 x 8192 x 2048), fc2; the final norm and
 * the untied output layer. 1,498,482,688 in all. */
#define BW_LAYERS 16
#define BW_TENSORS (3 + 6 * BW_LAYERS)
static long llama_1b_tensors(long *n, float *wdm) {
  static const long layer[6] = {2048, 3072l * 2048, 2048l * 2048, 2048, 16384l * 2048, 2048l * 8192};
  int k = 0;
  n[k] = (long)BW_VOCAB * 2048, wdm[k++] = 1.0f;
  for (int l = 0; l < BW_LAYERS; l++)
    for (int j = 0; j < 6; j++) n[k] = layer[j], wdm[k++] = layer[j] == 2048 ? 0.0f : 1.0f;
  n[k] = 2048, wdm[k++] = 0.0f;
  n[k] = (long)BW_VOCAB * 2048, wdm[k++] = 1.0f;
  long all = 0;
  for (int i = 0; i < k; i++) all += n[i];
  return all;
}

typedef struct {
  CUdeviceptr at[2][4], grad, table, hp, gs, partial, stable; /* [per-tensor, multi][master, param, m, v] */
  long n[BW_TENSORS], off[BW_TENSORS], chunks, schunks;
  float wdm[BW_TENSORS];
} AdamRun;

static void adamw_per_tensor(Gpu *g, void *ctx) {
  AdamRun *q = ctx;
  for (int k = 0; k < BW_TENSORS; k++) {
    CUdeviceptr p[4], gr = q->grad + 4 * (size_t)q->off[k];
    for (int j = 0; j < 4; j++) p[j] = q->at[0][j] + (size_t)(j == 1 ? 2 : 4) * q->off[k];
    CUdeviceptr none = 0;
    void *a[] = {&p[0], &p[1], &gr, &p[2], &p[3], &q->n[k], &q->hp, &q->gs, &q->wdm[k], &none, &none};
    gpu_launch(g, "adamw_update", gpu_grid1d(g, q->n[k]), 1, 1, 256, 0, a);
  }
}

static void adamw_multi_launch(Gpu *g, void *ctx) {
  AdamRun *q = ctx;
  int rows = BW_TENSORS;
  long chunk = STEPC_ADAMW_CHUNK;
  void *a[] = {&q->table, &rows, &chunk, &q->hp, &q->gs};
  gpu_launch(g, "adamw_multi", (unsigned)q->chunks, 1, 1, STEPC_MULTI_THREADS, 0, a);
}

static void norm_multi_launch(Gpu *g, void *ctx) {
  AdamRun *q = ctx;
  int rows = BW_TENSORS;
  long chunk = STEPC_SUMSQ_CHUNK;
  void *a[] = {&q->partial, &q->stable, &rows, &chunk};
  gpu_launch(g, "norm_squared_multi", (unsigned)q->schunks, 1, 1, STEPC_MULTI_THREADS, 0, a);
}

static void bench_optimizer(Gpu *g) {
  AdamRun q = {0};
  long params = llama_1b_tensors(q.n, q.wdm), span = 0;
  for (int k = 0; k < BW_TENSORS; k++) q.off[k] = span, span += (q.n[k] + 127) / 128 * 128; /* 512-byte slots */
  q.grad = gpu_alloc(g, 4 * (size_t)span);
  for (int s = 0; s < 2; s++)
    for (int j = 0; j < 4; j++) q.at[s][j] = gpu_alloc(g, (size_t)(j == 1 ? 2 : 4) * span); /* zeroed */
  fill_normal(g, q.at[0][0], 0, span, 0xada, 0.02);
  fill_normal(g, q.grad, 0, span, 0x9ad, 1e-3);
  gpu_copy(g, q.at[1][0], q.at[0][0], 4 * (size_t)span);
  unsigned long long *rows = malloc(sizeof *rows * BW_TENSORS * STEPC_ADAMW_ROW), srows[BW_TENSORS * STEPC_SUMSQ_ROW];
  for (int k = 0; k < BW_TENSORS; k++) {
    unsigned long long *w = rows + k * STEPC_ADAMW_ROW, *s = srows + k * STEPC_SUMSQ_ROW;
    uint32_t bits;
    memcpy(&bits, &q.wdm[k], 4);
    for (int j = 0; j < 4; j++) w[j == 0 ? 0 : j == 1 ? 1 : j + 1] = q.at[1][j] + (size_t)(j == 1 ? 2 : 4) * q.off[k];
    w[2] = q.grad + 4 * (size_t)q.off[k], w[5] = (unsigned long long)q.n[k], w[6] = (unsigned long long)q.chunks, w[7] = bits;
    s[0] = w[2], s[1] = w[5], s[2] = (unsigned long long)q.schunks, s[3] = STEPC_MULTI_F32;
    q.chunks += (q.n[k] + STEPC_ADAMW_CHUNK - 1) / STEPC_ADAMW_CHUNK;
    q.schunks += (q.n[k] + STEPC_SUMSQ_CHUNK - 1) / STEPC_SUMSQ_CHUNK;
  }
  q.table = gpu_dup(g, rows, sizeof *rows * BW_TENSORS * STEPC_ADAMW_ROW), q.stable = gpu_dup(g, srows, sizeof srows);
  q.partial = gpu_alloc(g, 4 * (size_t)q.schunks), q.hp = gpu_alloc(g, 4 * 7);
  float gs = 0.5f;
  q.gs = gpu_dup(g, &gs, 4);
  for (int step = 1; step <= 2; step++) {
    float hp[7] = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1 - powf(0.9f, (float)step), 1 - powf(0.95f, (float)step)};
    gpu_put(g, q.hp, hp, sizeof hp);
    adamw_per_tensor(g, &q);
    adamw_multi_launch(g, &q);
  }
  static const char *const what[4] = {"master", "bf16 param", "m", "v"};
  for (int j = 0; j < 4; j++) {
    char name[128];
    snprintf(name, sizeof name, "adamw_multi = adamw_update per tensor at M (%ld parameters, 2 steps): %s", params, what[j]);
    gpu_check_true(g, name, same_bytes(g, q.at[0][j], q.at[1][j], (size_t)(j == 1 ? 2 : 4) * span), "");
  }
  double bytes = 30.0 * (double)params;
  char name[160];
  snprintf(name, sizeof name, "adamw_multi at M (%d tensors, %ld parameters, 30 B each)", BW_TENSORS, params);
  report(name, gpu_time_ms(g, adamw_multi_launch, &q, 2, 10), bytes);
  snprintf(name, sizeof name, "adamw_update per tensor at M (%d launches)", BW_TENSORS);
  report(name, gpu_time_ms(g, adamw_per_tensor, &q, 2, 10), bytes);
  snprintf(name, sizeof name, "norm_squared_multi at M (%ld fp32 gradients, 4 B each)", params);
  report(name, gpu_time_ms(g, norm_multi_launch, &q, 2, 10), 4.0 * (double)params);
  free(rows);
  gpu_free(g, q.grad), gpu_free(g, q.table), gpu_free(g, q.stable), gpu_free(g, q.partial), gpu_free(g, q.hp), gpu_free(g, q.gs);
  for (int s = 0; s < 2; s++)
    for (int j = 0; j < 4; j++) gpu_free(g, q.at[s][j]);
}

void test_bandwidth(Gpu *g) {
  bench_cross_entropy(g);
  bench_optimizer(g);
}
