/* launchers.h — one typed host launcher per kernel of kernels/kernel_list.h:
 *
 *   int rt_launch_rmsnorm_forward(RtDevice *d, RtDim grid, unsigned block, unsigned smem,
 *                                 CUdeviceptr out, CUdeviceptr rstd, CUdeviceptr inp,
 *                                 CUdeviceptr weight, int N, int C, float eps);
 *
 * The parameters are the kernel's, with its names and in its order, generated from the kernel's
 * row; the launcher packs the argument array and calls rt_launch (recording devices included).
 * Why: an argv of `void *` built by hand is checked by nothing but the argument count, while
 * these are checked by the compiler at every call (each argument converted to the kernel's type)
 * and by unit.kernel_sigs against the declaration in kernels/ (type and name, in order).
 *
 * Pointers are CUdeviceptr whatever they point to (the table spells the device type, which the
 * test compares with the declaration). The block is 1-D because rt_launch's is. The generated
 * elementwise kernels (compiler/passes/ew_fuse.h) have no launcher here: their signatures are made per
 * step, so exec.c's run_chain still builds their argument arrays. */
#ifndef STEPC_RT_CUDA_LAUNCHERS_H
#define STEPC_RT_CUDA_LAUNCHERS_H

#include "runtime/rt.h"

typedef struct {
  unsigned x, y, z;
} RtDim;
static inline RtDim rt_dim(unsigned x, unsigned y, unsigned z) { return (RtDim){x, y, z}; }
static inline RtDim rt_dim1(unsigned x) { return (RtDim){x, 1, 1}; }
/* The grid of a grid-stride kernel over `work` items (rt_grid1d's block count; blocks of 256). */
static inline RtDim rt_grid_stride(const RtDevice *d, int64_t work) { return rt_dim1(rt_grid1d(d, work)); }

/* The host type of each signature letter (kernel_list.h): the same size as the device type. */
#define RT_KARG_p CUdeviceptr
#define RT_KARG_i int
#define RT_KARG_u unsigned
#define RT_KARG_l long
#define RT_KARG_q unsigned long long
#define RT_KARG_f float
#define RT_KARG_d double

/* A row's parameters, with STEPC_KARG(letter, ctype, pname) defined as (letter, ctype, pname),
 * arrive as a sequence of triples (p, bf16*, out)(i, int, N)... . A launcher needs that list
 * twice, as declarations and as addresses, so it is walked by two macros that call each other
 * (the usual preprocessor sequence idiom); the walk ends on RT_K..._A or _B, pasted with _END
 * into an empty macro. */
#define RT_KPARAMS(seq) RT_KCAT_(_END, RT_KPARAMS_A seq)
#define RT_KPARAMS_A(letter, ctype, pname) , RT_KARG_##letter pname RT_KPARAMS_B
#define RT_KPARAMS_B(letter, ctype, pname) , RT_KARG_##letter pname RT_KPARAMS_A
#define RT_KPARAMS_A_END
#define RT_KPARAMS_B_END
#define RT_KADDRS(seq) RT_KCAT_(_END, RT_KADDRS_A seq)
#define RT_KADDRS_A(letter, ctype, pname) &pname, RT_KADDRS_B
#define RT_KADDRS_B(letter, ctype, pname) &pname, RT_KADDRS_A
#define RT_KADDRS_A_END
#define RT_KADDRS_B_END
/* pastes suffix onto the last token of the (comma-separated) expansion */
#define RT_KCAT_(suffix, ...) RT_KCAT2_(suffix, __VA_ARGS__)
#define RT_KCAT2_(suffix, ...) __VA_ARGS__##suffix

#define STEPC_KARG(letter, ctype, pname) (letter, ctype, pname)
#define STEPC_KERNEL(name, params)                                                                           \
  int rt_launch_##name(RtDevice *d, RtDim grid, unsigned block, unsigned smem RT_KPARAMS(params));
#include "kernels/kernel_list.h"
#undef STEPC_KERNEL
#undef STEPC_KARG

#endif
