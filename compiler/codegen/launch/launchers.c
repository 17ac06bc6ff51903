/* launchers.c — the typed launchers of launchers.h, one per row of kernels/kernel_list.h. */
#include "codegen/launch/launchers.h"

/* Each argument is passed by address, as cuLaunchKernel takes it; the launcher's own parameters
 * are the storage, alive until rt_launch returns (the driver and the recorder copy them). */
#define STEPC_KARG(letter, ctype, pname) (letter, ctype, pname)
#define STEPC_KERNEL(name, params)                                                                           \
  int rt_launch_##name(RtDevice *d, RtDim grid, unsigned block, unsigned smem RT_KPARAMS(params)) {          \
    void *args[] = {RT_KADDRS(params)};                                                                      \
    return rt_launch(d, RT_K_##name, grid.x, grid.y, grid.z, block, smem, args);                             \
  }
#include "kernels/kernel_list.h"
#undef STEPC_KERNEL
#undef STEPC_KARG
