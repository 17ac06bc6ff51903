/* module.c — the kernels module: the NVRTC cubin loaded with cuModuleLoadData, every kernel of
 * kernels/kernel_list.h looked up once, and the flash kernels allowed their shared memory. */
#include <stdio.h>

#include "kernels/launch.h"
#include "runtime/rt.h"

static const char *const KERNEL_NAMES[RT_K_COUNT] = {
#define STEPC_KERNEL(name) #name,
#include "kernels/kernel_list.h"
#undef STEPC_KERNEL
};

int rt_module_load(RtDevice *d, const void *cubin) {
  if (rt_check(d, d->cuModuleLoadData(&d->mod, cubin), "cuModuleLoadData")) return RT_ERROR;
  for (int k = 0; k < RT_K_COUNT; k++) {
    char what[160];
    snprintf(what, sizeof what, "cuModuleGetFunction(%s)", KERNEL_NAMES[k]);
    if (rt_check(d, d->cuModuleGetFunction(&d->fn[k], d->mod, KERNEL_NAMES[k]), what)) return RT_ERROR;
  }
  /* Dynamic shared memory above 48 KiB must be allowed per function, once. */
  struct {
    RtKernel k;
    unsigned smem;
  } big[] = {{RT_K_flash_attention_forward_d64, stepc_flash_fwd_smem(64)},
             {RT_K_flash_attention_forward_d128, stepc_flash_fwd_smem(128)},
             {RT_K_flash_attention_backward_dkdv_d64, stepc_flash_dkdv_smem(64)},
             {RT_K_flash_attention_backward_dkdv_d128, stepc_flash_dkdv_smem(128)},
             {RT_K_flash_attention_backward_dq_d64, stepc_flash_dq_smem(64)},
             {RT_K_flash_attention_backward_dq_d128, stepc_flash_dq_smem(128)}};
  for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
    if (big[i].smem > 48 * 1024 &&
        rt_check(d, d->cuFuncSetAttribute(d->fn[big[i].k], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)big[i].smem),
                 "cuFuncSetAttribute(max dynamic shared memory)"))
      return RT_ERROR;
  return RT_OK;
}
