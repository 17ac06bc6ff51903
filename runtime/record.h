/* record.h — a recording device: the launch lowering (compiler/codegen/launch/op_*.c) run without a
 * GPU, every kernel launch, cuBLASLt GEMM, cuDNN call, memset, copy and collective captured with its
 * arguments instead of executed (RtRec, runtime/program.h). `stepc build` records the planned step this way
 * and stores the records as the launch program (compiler/codegen/launch/program.c); the player
 * (runtime/cuda/player.c) can also play a program into a recorder, which is how CI checks that a
 * program plays exactly what was lowered without a GPU (tests/api/program_play.c).
 *
 * Addresses: allocations on a recording device get distinct fake addresses (from 2^40 up, each
 * allocation 1 MiB apart), so a recorded pointer argument lies in exactly one allocation (the
 * program builder relocates it against the step's allocation). Nothing is recorded while `on`
 * is 0 (set-up memsets, for instance). */
#ifndef STEPC_RT_RECORD_H
#define STEPC_RT_RECORD_H

#include "runtime/program.h"
#include "runtime/rt.h"

#define RT_REC_MAX_ARGS LP_MAX_ARGS

struct RtRecorder {
  RtRec *r;
  int n, cap;
  int on; /* record while set */
  int op; /* stamped on each record */
};

/* d becomes a recording device writing into r: no driver, sm_count SMs (grid sizes and the
 * launch lowering's partial-sum groups follow it), compute capability 9.0. rt_close(d) is a no-op. */
void rt_record_open(RtDevice *d, RtRecorder *r, int sm_count);
void rt_recorder_free(RtRecorder *r);

/* The hooks launch.c, gemm.c and arena.c call on a recording device. */
int rt_record_launch(RtDevice *d, RtKernel k, unsigned gx, unsigned gy, unsigned gz, unsigned block,
                     unsigned smem, void **args);
int rt_record_gemm(RtDevice *d, const RtGemm *g);
int rt_record_sdpa(RtDevice *d, const RtSdpa *s);
int rt_record_memset(RtDevice *d, CUdeviceptr p, size_t bytes);
int rt_record_copy(RtDevice *d, CUdeviceptr dst, CUdeviceptr src, size_t bytes);
int rt_record_coll(RtDevice *d, const RtColl *c);
/* RT_REC_FORK or RT_REC_JOIN (program.h): a record without fields. */
int rt_record_mark(RtDevice *d, RtRecKind kind);
void rt_record_alloc(RtDevice *d, CUdeviceptr *p, size_t bytes);

/* Whether two records are the same call (every field; pointer arguments compared as given). */
int rt_record_equal(const RtRec *a, const RtRec *b);

#endif
