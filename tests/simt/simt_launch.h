/* simt_launch.h — launching a kernel compiled for the CPU (simt.h) by name, from C: the harness
 * (harness_simt.c) calls simt_launch; simt_kernels.cc holds the table of kernels it knows. */
#ifndef STEPC_TESTS_SIMT_LAUNCH_H
#define STEPC_TESTS_SIMT_LAUNCH_H

#include <stddef.h>

#ifdef __cplusplus
#include <utility>

/* One launch of fn over the grid (simt.cc); call(fn, args) runs one thread's body; reverse: each
 * block's warps, and each warp's lanes, run last first. 0, or -1 with err. */
int simt_run(const char *name, void (*call)(void (*)(), void **), void (*fn)(), void **args, unsigned gx,
             unsigned gy, unsigned gz, unsigned block, unsigned smem, int reverse, char *err, size_t nerr);

/* A kernel of the table: its function, and how to call it from an argv of pointers to each
 * argument (as cuLaunchKernel takes them). */
struct SimtKernel {
  const char *name;
  void (*fn)();
  void (*call)(void (*)(), void **);
};

template <typename... A, size_t... I>
void simt_call_with(void (*f)(A...), void **args, std::index_sequence<I...>) {
  f(*static_cast<A *>(args[I])...);
}
template <typename... A> void simt_call(void (*fn)(), void **args) {
  simt_call_with(reinterpret_cast<void (*)(A...)>(fn), args, std::index_sequence_for<A...>{});
}

extern "C" {
#endif

/* Whether kernel `name` is compiled for the CPU. */
int simt_has(const char *name);
/* Runs kernel `name` (cuLaunchKernel's arguments, blocks of `block` x 1 x 1 threads), in the order
 * simt_run's reverse says. 0; 1 no such kernel compiled for the CPU; -1 another failure (err says). */
int simt_launch(const char *name, unsigned gx, unsigned gy, unsigned gz, unsigned block, unsigned smem,
                void **args, int reverse, char *err, size_t nerr);

/* What a tensor map holds on the CPU. The device's CUtensorMap is 128 opaque bytes the driver encodes
 * (cuTensorMapEncodeTiled); the CPU harness writes this in their place and simt_tma_load reads it: a
 * row-major tensor of `rank` dimensions, dim[0] the contiguous one, stride[i] the bytes from one
 * index of dimension i to the next (stride[0] the element size), the box a load copies, and the
 * swizzle (0 none, 128 the 128-byte one). */
typedef struct {
  unsigned magic; /* SIMT_TMAP_MAGIC */
  int rank, swizzle;
  const unsigned char *base;
  unsigned long long dim[5], stride[5];
  unsigned box[5];
} SimtTmap;
#define SIMT_TMAP_MAGIC 0x544d4150u

#ifdef __cplusplus
}
#endif

#endif
