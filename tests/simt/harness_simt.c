/* harness_simt.c — harness.h on the CPU: "device" buffers are host memory, and a launch runs the
 * kernel's CPU build (simt_kernels.cc) under the coroutine scheduler (simt.cc). So the kernel tests
 * of tests/gpu (mamba.c) check the device kernels' own text against the CPU reference without a GPU.
 * Timings are the CPU's and mean nothing about the device. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "simt_launch.h"

int gpu_open(Gpu *g, char *why, size_t whysz) {
  (void)why, (void)whysz;
  memset(g, 0, sizeof *g);
  snprintf(g->name, sizeof g->name, "the CPU (tests/simt: the device kernels as coroutines)");
  g->sm_count = 132, g->cc_major = 9; /* an H200's, for the grids the tests derive from them */
  g->emulated = 1;
  return 0;
}

int gpu_load_kernels(Gpu *g, const char *cache_dir) {
  (void)g, (void)cache_dir;
  return 0;
}

void gpu_close(Gpu *g) { (void)g; }

void gpu_ok(Gpu *g, CUresult r, const char *what) {
  (void)g;
  if (r == CUDA_SUCCESS) return;
  fprintf(stderr, "FATAL %s: error %d\n", what, (int)r);
  exit(1);
}

/* The live allocations, which a launch may write (snapshot and compare). */
typedef struct {
  unsigned char *p;
  size_t bytes;
} Alloc;
static Alloc *allocs;
static int nalloc, cap_alloc;

static void *must(void *p, size_t bytes) {
  if (!p) {
    fprintf(stderr, "FATAL out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return p;
}

CUdeviceptr gpu_alloc(Gpu *g, size_t bytes) {
  (void)g;
  if (bytes == 0) bytes = 16;
  if (nalloc == cap_alloc) {
    cap_alloc = cap_alloc ? 2 * cap_alloc : 64;
    allocs = must(realloc(allocs, (size_t)cap_alloc * sizeof *allocs), (size_t)cap_alloc * sizeof *allocs);
  }
  unsigned char *p = must(calloc(1, bytes), bytes);
  allocs[nalloc++] = (Alloc){p, bytes};
  return (CUdeviceptr)(uintptr_t)p;
}

void gpu_free(Gpu *g, CUdeviceptr p) {
  (void)g;
  for (int i = 0; i < nalloc; i++)
    if (allocs[i].p == (unsigned char *)(uintptr_t)p) {
      free(allocs[i].p);
      allocs[i] = allocs[--nalloc];
      return;
    }
  fprintf(stderr, "FATAL gpu_free of an address gpu_alloc did not return\n");
  exit(1);
}
void gpu_put(Gpu *g, CUdeviceptr dst, const void *src, size_t n) {
  (void)g;
  memcpy((void *)(uintptr_t)dst, src, n);
}
void gpu_get(Gpu *g, void *dst, CUdeviceptr src, size_t n) {
  (void)g;
  memcpy(dst, (const void *)(uintptr_t)src, n);
}
unsigned gpu_grid1d(Gpu *g, long n) {
  long b = (n + 255) / 256, cap = (long)g->sm_count * 8;
  return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}
void gpu_memset(Gpu *g, CUdeviceptr dst, unsigned char value, size_t n) {
  (void)g;
  memset((void *)(uintptr_t)dst, value, n);
}
void gpu_copy(Gpu *g, CUdeviceptr dst, CUdeviceptr src, size_t n) {
  (void)g;
  memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
}
void gpu_sync(Gpu *g) { (void)g; }

CUdeviceptr gpu_dup(Gpu *g, const void *src, size_t bytes) {
  CUdeviceptr p = gpu_alloc(g, bytes);
  gpu_put(g, p, src, bytes);
  return p;
}

CUdeviceptr gpu_tmap(Gpu *g, CUdeviceptr p, int elem, int rank, const uint64_t *dims, const uint32_t *box) {
  SimtTmap m = {.magic = SIMT_TMAP_MAGIC, .rank = rank, .swizzle = 128, .base = (const unsigned char *)(uintptr_t)p};
  for (int i = 0; i < rank; i++)
    m.dim[i] = dims[i], m.box[i] = box[i], m.stride[i] = i == 0 ? (unsigned long long)elem : m.stride[i - 1] * dims[i - 1];
  unsigned char map[128] = {0};
  memcpy(map, &m, sizeof m);
  return gpu_dup(g, map, sizeof map);
}

int gpu_has_kernel(Gpu *g, const char *name) {
  (void)g;
  return simt_has(name);
}

/* a and b exchange their n bytes */
static void swap_bytes(unsigned char *a, unsigned char *b, size_t n) {
  for (size_t j = 0; j < n; j++) {
    unsigned char t = a[j];
    a[j] = b[j], b[j] = t;
  }
}

void gpu_launch(Gpu *g, const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned block,
                unsigned smem, void **args) {
  (void)g;
  char err[512];
  unsigned char **before =
      must(malloc((size_t)(nalloc + 1) * sizeof *before), (size_t)(nalloc + 1) * sizeof *before);
  for (int i = 0; i < nalloc; i++)
    before[i] = memcpy(must(malloc(allocs[i].bytes), allocs[i].bytes), allocs[i].p, allocs[i].bytes);
  int rc = simt_launch(name, gx, gy, gz, block, smem, args, 0, err, sizeof err);
  /* the first order's bytes into before, the memory as it was back in place */
  for (int i = 0; i < nalloc && rc == 0; i++)
    swap_bytes(allocs[i].p, before[i], allocs[i].bytes);
  if (rc == 0) rc = simt_launch(name, gx, gy, gz, block, smem, args, 1, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "FATAL launch %s: %s\n", name, err);
    exit(1);
  }
  for (int i = 0; i < nalloc; i++) {
    if (memcmp(allocs[i].p, before[i], allocs[i].bytes) != 0) {
      size_t j = 0;
      while (allocs[i].p[j] == before[i][j])
        j++;
      fprintf(stderr,
              "FATAL launch %s: race: byte %zu of the %zu-byte buffer %d differs between the warps run first "
              "to last and last to first (a read of what another thread writes, without a barrier between)\n",
              name, j, allocs[i].bytes, i + 1);
      exit(1);
    }
    free(before[i]);
  }
  free(before);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

double gpu_time_ms(Gpu *g, void (*fn)(Gpu *, void *), void *ctx, int warmup, int reps) {
  for (int i = 0; i < warmup; i++)
    fn(g, ctx);
  double t[64];
  if (reps > 64) reps = 64;
  for (int i = 0; i < reps; i++) {
    double a = now_ms();
    fn(g, ctx);
    t[i] = now_ms() - a;
  }
  return gpu_median(t, reps);
}
