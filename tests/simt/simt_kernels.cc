/* simt_kernels.cc — the kernel files (kernels/, .cuh) that run on the CPU under simt.h, and the
 * table of kernels by name: every row of kernels/kernel_list.h, declared weak before the files
 * are included, so a kernel whose file is not compiled here is a null entry ("not compiled for the
 * CPU") rather than a link error. A file joins by being included below, in kernels.cu's order (its
 * includes first); a file with PTX that simt.h has no equivalent for (loss.cuh: thread-block
 * clusters) stays out. */
#include "simt.h"
#include "simt_launch.h"

#include <stdio.h>
#include <string.h>

#define STEPC_SIMT 1
#include "kernels/common.cuh"

/* The type of a kernel from its row's parameters: SimtFn<void, T1, T2, ...>::type = void(T1, T2, ...). */
template <typename D, typename... A> struct SimtFn {
  typedef void type(A...);
  static void call(void (*fn)(), void **args) { simt_call<A...>(fn, args); }
};

#define STEPC_KARG(letter, ctype, pname) , ctype
#define STEPC_KERNEL(name, params) extern "C" __attribute__((weak)) SimtFn<void params>::type name;
#include "kernels/kernel_list.h"
#undef STEPC_KERNEL

#include "kernels/activation.cuh"
#include "kernels/dropout.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/embedding.cuh"
#include "kernels/ep.cuh"
#include "kernels/flash.cuh"
#include "kernels/fp8.cuh"
#include "kernels/mamba.cuh"
#include "kernels/moe.cuh"
#include "kernels/norm.cuh"
#include "kernels/optimizer.cuh"
#include "kernels/rope.cuh"
#include "kernels/rtops.cuh"
#include "kernels/softmax.cuh"
#include "kernels/tp.cuh"

#define STEPC_KERNEL(name, params) {#name, reinterpret_cast<void (*)()>(&name), SimtFn<void params>::call},
static const SimtKernel KERNELS[] = {
#include "kernels/kernel_list.h"
};
#undef STEPC_KERNEL

extern "C" int simt_has(const char *name) {
  for (const SimtKernel &k : KERNELS)
    if (!strcmp(k.name, name)) return k.fn != nullptr;
  return 0;
}

extern "C" int simt_launch(const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned block,
                           unsigned smem, void **args, int reverse, char *err, size_t nerr) {
  for (const SimtKernel &k : KERNELS)
    if (!strcmp(k.name, name) && k.fn)
      return simt_run(name, k.call, k.fn, args, gx, gy, gz, block, smem, reverse, err, nerr);
  snprintf(err, nerr, "kernel %s is not compiled for the CPU (tests/simt/simt_kernels.cc)", name);
  return 1;
}
