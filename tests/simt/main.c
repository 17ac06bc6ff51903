/* main.c — simt_kernels: the GPU kernel tests whose kernels run on the CPU (tests/simt: each CUDA
 * thread a coroutine), so that CI checks the device kernels' text without a GPU: today the Mamba-2
 * kernels (tests/gpu/mamba.c against ir/ops/mamba.c in fp64). simt_kernels [--only mamba]. Exit 0
 * all passed, 1 a check failed. */
#include <stdio.h>
#include <string.h>

#include "harness.h"

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!(strcmp(argv[i], "--only") == 0 && i + 1 < argc && strcmp(argv[++i], "mamba") == 0)) {
      fprintf(stderr, "usage: %s [--only mamba]\n", argv[0]);
      return 2;
    }
  Gpu g;
  char why[256];
  gpu_open(&g, why, sizeof why);
  printf("device: %s\n", g.name);
  test_mamba(&g);
  printf("%d checks, %d failed\n", g.checks, g.failed);
  gpu_close(&g);
  return g.failed ? 1 : 0;
}
