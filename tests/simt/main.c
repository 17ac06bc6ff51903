/* main.c — simt_kernels: the GPU kernel tests whose kernels run on the CPU (tests/simt: each CUDA
 * thread a coroutine), so that CI checks the device kernels' text without a GPU: the basic kernels
 * (tests/gpu/basic.c: norms, RoPE, softmax, activations, dropout, embedding, the optimizer, the MoE
 * grouped GEMMs; its cross entropy prints SKIP: clusters have no CPU equivalent), flash attention
 * (tests/gpu/attention.c), the Mamba-2 kernels (tests/gpu/mamba.c, against ir/ops/mamba.c in fp64)
 * and the fp8 casts, scale update and fused amaxes (tests/gpu/fp8.c, exact). simt_kernels [--only
 * basic|attention|mamba|fp8]. Exit 0 all passed, 1 a check failed, 2 a bad command line. */
#include <stdio.h>
#include <string.h>

#include "harness.h"

int main(int argc, char **argv) {
  int basic = 1, attention = 1, mamba = 1, fp8 = 1;
  if (argc == 3 && !strcmp(argv[1], "--only") &&
      (!strcmp(argv[2], "basic") || !strcmp(argv[2], "attention") || !strcmp(argv[2], "mamba") ||
       !strcmp(argv[2], "fp8")))
    basic = !strcmp(argv[2], "basic"), attention = !strcmp(argv[2], "attention"),
    mamba = !strcmp(argv[2], "mamba"), fp8 = !strcmp(argv[2], "fp8");
  else if (argc != 1) {
    fprintf(stderr, "usage: %s [--only basic|attention|mamba|fp8]\n", argv[0]);
    return 2;
  }
  Gpu g;
  char why[256];
  gpu_open(&g, why, sizeof why);
  printf("device: %s\n", g.name);
  if (basic) test_basic(&g);
  if (attention) test_attention(&g);
  if (mamba) test_mamba(&g);
  if (fp8) test_fp8(&g);
  printf("%d checks, %d failed\n", g.checks, g.failed);
  gpu_close(&g);
  return g.failed ? 1 : 0;
}
