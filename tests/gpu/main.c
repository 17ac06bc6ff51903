/* main.c — gpu_kernels: compiles every kernel with NVRTC for the device present, loads it with
 * cuModuleLoadData and runs the kernel tests (basic.c, attention.c), the fp8 kernels (fp8.c), the
 * bandwidth-bound kernels at shape M (bandwidth.c) and the flash-attention timings, and the Mamba-2
 * kernels (mamba.c) with their timings (also alone under --only mamba with STEPC_MAMBA_BENCH=1). Exit 0 all passed, 1 a check failed, 77 no GPU here (ctest
 * reports "skipped"). gpu_kernels [--no-bench] [--bench-only] [--only basic|attention|mamba|fp8] [--cache
 * DIR] A kernel fault ends the program (a CUDA context does not survive it): --only narrows the run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

int main(int argc, char **argv) {
  int bench = 1, basic = 1, attention = 1, mamba = 1, fp8 = 1;
  const char *cache = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--no-bench"))
      bench = 0;
    else if (!strcmp(argv[i], "--bench-only"))
      basic = attention = mamba = fp8 = 0;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
      const char *w = argv[++i];
      basic = !strcmp(w, "basic"), attention = !strcmp(w, "attention"), mamba = !strcmp(w, "mamba"),
      fp8 = !strcmp(w, "fp8"), bench = 0;
    } else if (!strcmp(argv[i], "--cache") && i + 1 < argc)
      cache = argv[++i];
    else {
      fprintf(stderr,
              "usage: %s [--no-bench] [--bench-only] [--only basic|attention|mamba|fp8] [--cache DIR]\n",
              argv[0]);
      return 2;
    }
  }
  Gpu g;
  char why[512];
  int rc = gpu_open(&g, why, sizeof why);
  if (rc == GPU_SKIP) {
    printf("SKIP: %s\n", why);
    return GPU_SKIP;
  }
  if (rc != 0) {
    fprintf(stderr, "FATAL: %s\n", why);
    return 1;
  }
  printf("device: %s, %d SMs\n", g.name, g.sm_count);
  if (gpu_load_kernels(&g, cache) != 0) return 1;
  if (basic) test_basic(&g);
  if (attention) test_attention(&g);
  if (mamba) test_mamba(&g);
  if (fp8) test_fp8(&g);
  if (bench) test_bandwidth(&g); /* at shape M, about 48 GB held: with the timings */
  if (bench) bench_attention(&g);
  if (bench || getenv("STEPC_MAMBA_BENCH")) bench_mamba(&g);
  if (getenv("STEPC_FLASH_VARIANTS")) bench_attention_variants(&g);
  printf("%d checks, %d failed\n", g.checks, g.failed);
  gpu_close(&g);
  return g.failed ? 1 : 0;
}
