/* simt_kernels.cc — the kernel files (kernels/, .cuh) that run on the CPU under simt.h, and their table. A
 * kernel file joins by being included here (after kernels/common.cuh, as kernels.cu concatenates
 * them) with its kernels listed in KERNELS. */
#include "simt.h"
#include "simt_launch.h"

#include <stdio.h>
#include <string.h>

#define STEPC_SIMT 1
#include "kernels/common.cuh"
#include "kernels/mamba.cuh"

static const SimtKernel KERNELS[] = {
    SIMT_KERNEL(mamba_chunk_states),
    SIMT_KERNEL(mamba_state_pass),
    SIMT_KERNEL(mamba_chunk_output),
    SIMT_KERNEL(mamba_chunk_backward),
    SIMT_KERNEL(mamba_conv_backward),
    SIMT_KERNEL(mamba_param_grads),
    SIMT_KERNEL(mamba_gate_forward),
    SIMT_KERNEL(mamba_gate_backward),
    SIMT_KERNEL(mamba_group_norm_forward),
    SIMT_KERNEL(mamba_group_norm_backward_input),
    SIMT_KERNEL(mamba_group_norm_backward_weight),
    SIMT_KERNEL(mamba_group_norm_weight_reduce),
};

extern "C" int simt_launch(const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned block,
                           unsigned smem, void **args, int reverse, char *err, size_t nerr) {
  for (const SimtKernel &k : KERNELS)
    if (!strcmp(k.name, name))
      return simt_run(name, k.call, k.fn, args, gx, gy, gz, block, smem, reverse, err, nerr);
  snprintf(err, nerr, "kernel %s is not compiled for the CPU (tests/simt/simt_kernels.cc)", name);
  return 1;
}
