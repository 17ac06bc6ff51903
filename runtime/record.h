/* record.h — a recording device: the runtime's launch lowering (runtime/cuda/op_*.c) run without a
 * GPU, every kernel launch, cuBLASLt GEMM, memset and copy captured with its arguments instead of
 * executed. `stepc build` records the planned step this way and writes the records into step.c as
 * literals (compiler/codegen/step_emit.c), so the generated step launches exactly what the
 * executor's dispatch would, and a test can check that it does (tests/api/step_literal.c).
 *
 * Addresses: allocations on a recording device get distinct fake addresses (from 2^40 up, each
 * allocation 1 MiB apart), so a recorded pointer argument lies in exactly one allocation (the
 * emitter relocates it against the executor's arena and scratch). Nothing is recorded while `on`
 * is 0 (set-up memsets, for instance). */
#ifndef STEPC_RT_RECORD_H
#define STEPC_RT_RECORD_H

#include "runtime/rt.h"

#define RT_REC_MAX_ARGS 24

typedef enum { RT_REC_LAUNCH, RT_REC_GEMM, RT_REC_MEMSET, RT_REC_COPY, RT_REC_SDPA } RtRecKind;

typedef struct {
  RtRecKind kind;
  int op; /* the recorder's `op` when it was recorded (the caller's label, -1 none) */
  /* RT_REC_LAUNCH */
  RtKernel k;
  unsigned grid[3], block, smem;
  int nargs;
  uint64_t arg[RT_REC_MAX_ARGS]; /* each argument's bits (4-byte ones in the low half), by rt_ksig */
  /* RT_REC_GEMM */
  RtGemm gemm;
  /* RT_REC_SDPA */
  RtSdpa sdpa;
  /* RT_REC_MEMSET (dst, bytes), RT_REC_COPY (dst <- src, bytes) */
  CUdeviceptr dst, src;
  uint64_t bytes;
} RtRec;

struct RtRecorder {
  RtRec *r;
  int n, cap;
  int on; /* record while set */
  int op; /* stamped on each record */
};

/* d becomes a recording device writing into r: no driver, sm_count SMs (grid sizes and the
 * executor's partial-sum groups follow it), compute capability 9.0. rt_close(d) is a no-op. */
void rt_record_open(RtDevice *d, RtRecorder *r, int sm_count);
void rt_recorder_free(RtRecorder *r);

/* The hooks launch.c, gemm.c and arena.c call on a recording device. */
int rt_record_launch(RtDevice *d, RtKernel k, unsigned gx, unsigned gy, unsigned gz, unsigned block, unsigned smem,
                     void **args);
int rt_record_gemm(RtDevice *d, const RtGemm *g);
int rt_record_sdpa(RtDevice *d, const RtSdpa *s);
int rt_record_memset(RtDevice *d, CUdeviceptr p, size_t bytes);
int rt_record_copy(RtDevice *d, CUdeviceptr dst, CUdeviceptr src, size_t bytes);
void rt_record_alloc(RtDevice *d, CUdeviceptr *p, size_t bytes);


/* Whether two records are the same call (every field; pointer arguments compared as given). */
int rt_record_equal(const RtRec *a, const RtRec *b);

#endif
