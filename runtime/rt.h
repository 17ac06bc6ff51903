/* rt.h — libstepc_rt, the device runtime: the CUDA driver and cuBLASLt reached through dlopen,
 * one device, one stream, the kernels module, tracked allocations, GEMMs, graph capture and
 * measurement.
 *
 * Why dlopen: neither the compiler nor the stepc executable links libcuda or libcublasLt, so
 * `stepc check/plan/run --device cpu` (and the sanitizer CI build) run where no driver exists,
 * and `run --device cuda` there fails with a message (rt_open returns RT_NO_DEVICE) instead of a
 * loader error. The runtime is a static library linked into stepc; it links only libdl.
 *
 * Errors: every function returns 0 (RT_OK) or a negative RtStatus and leaves a message in
 * d->err (the first error sticks until rt_clear_error). Nothing here prints or exits. */
#ifndef STEPC_RT_H
#define STEPC_RT_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { RT_OK = 0, RT_ERROR = -1, RT_NO_DEVICE = -2, RT_UNSUPPORTED = -3 } RtStatus;

/* The driver entry points we use; the versioned symbol (cuMemAlloc -> cuMemAlloc_v2) is the one
 * cuda.h's macros name. */
// clang-format off (an X-macro list, one entry a line)
#define RT_DRIVER_FUNCS(X)                                                                                   \
  X(cuInit)                                                                                                  \
  X(cuDeviceGetCount)                                                                                        \
  X(cuDeviceGet)                                                                                             \
  X(cuDeviceGetName)                                                                                         \
  X(cuDeviceGetAttribute)                                                                                    \
  X(cuDevicePrimaryCtxRetain)                                                                                \
  X(cuDevicePrimaryCtxRelease)                                                                               \
  X(cuCtxSetCurrent)                                                                                         \
  X(cuCtxSynchronize)                                                                                        \
  X(cuModuleLoadData)                                                                                        \
  X(cuModuleUnload)                                                                                          \
  X(cuModuleGetFunction)                                                                                     \
  X(cuFuncSetAttribute)                                                                                      \
  X(cuLaunchKernel)                                                                                          \
  X(cuMemAlloc)                                                                                              \
  X(cuMemFree)                                                                                               \
  X(cuMemcpyHtoDAsync)                                                                                       \
  X(cuMemcpyDtoHAsync)                                                                                       \
  X(cuMemcpyDtoDAsync)                                                                                       \
  X(cuMemsetD8Async)                                                                                         \
  X(cuMemGetInfo)                                                                                            \
  X(cuStreamCreate)                                                                                          \
  X(cuStreamDestroy)                                                                                         \
  X(cuStreamSynchronize)                                                                                     \
  X(cuStreamBeginCapture)                                                                                    \
  X(cuStreamEndCapture)                                                                                      \
  X(cuGraphInstantiate)                                                                                      \
  X(cuGraphLaunch)                                                                                           \
  X(cuGraphDestroy)                                                                                          \
  X(cuGraphExecDestroy)                                                                                      \
  X(cuGraphGetNodes)                                                                                         \
  X(cuEventCreate)                                                                                           \
  X(cuEventRecord)                                                                                           \
  X(cuEventSynchronize)                                                                                      \
  X(cuEventElapsedTime)                                                                                      \
  X(cuEventDestroy)                                                                                          \
  X(cuGetErrorString)                                                                                        \
  X(cuEventQuery)                                                                                            \
  X(cuStreamWaitEvent)                                                                                       \
  X(cuMemHostAlloc)                                                                                          \
  X(cuMemFreeHost)                                                                                           \
  X(cuLaunchHostFunc)                                                                                        \
  X(cuTensorMapEncodeTiled)
// clang-format on

/* Kernel handles, one per row of kernels/kernel_list.h. */
typedef enum {
#define STEPC_KERNEL(name, sig) RT_K_##name,
#include "kernels/kernel_list.h"
#undef STEPC_KERNEL
  RT_K_COUNT
} RtKernel;

/* The kernel's name and its parameter signature (kernel_list.h's letters), by handle. */
extern const char *const rt_kernel_name[RT_K_COUNT];
extern const char *const rt_kernel_sig[RT_K_COUNT];
/* Generated kernels (the compiler's fused elementwise chains, compiler/passes/ew_fuse.h) follow the
 * static ones: handle RT_K_COUNT + i is the step's generated kernel i (RtDevice.gen), the one
 * EwChain.kernel = i names (compiler/passes/fusions.h). rt_kname / rt_ksig cover both ranges. */
#define RT_GEN_MAX 32
typedef struct {
  char name[64];
  char sig[32]; /* kernel_list.h letters */
} RtGenKernel;
typedef struct {
  RtGenKernel k[RT_GEN_MAX];
  int n;
} RtGenKernels;
typedef struct RtDevice RtDevice;
const char *rt_kname(const RtDevice *d, int k);
const char *rt_ksig(const RtDevice *d, int k);
/* Bytes of argument i of kernel k (4 or 8, by its signature letter); 0 past the end. */
int rt_karg_bytes(const RtDevice *d, int k, int i);
/* FNV-1a over RT_GEMM_FIELDS, RT_SDPA_FIELDS and every kernel row's name and signature (the
 * generated ones too; gen may be NULL): the launch program names kernels by handle, so step.img
 * records this hash and a runtime with another kernel list refuses the artifact at open. */
uint64_t rt_kernel_list_hash(const RtGenKernels *gen);

typedef struct RtBlas RtBlas;
typedef struct RtDnn RtDnn;
typedef struct RtRecorder RtRecorder;

/* ---- a collective over a group of the job's ranks (coll.c), as the launch program holds it ----
 * Tensor parallelism's ops (ir/ops/tp.c) lowered for CUDA: an all-reduce (sum or max), an all-gather
 * or a reduce-scatter of a contiguous device buffer over the rank's TP group (or EP group),
 * enqueued on the step's stream in program order. count is in elements of dtype: all-reduce, of src
 * and dst (src == dst allowed); all-gather, of src (dst holds count x the group's size, member after
 * member); reduce-scatter, of dst (src holds count x the group's size; member r receives the sum of
 * every member's r-th block); all-to-all, of each block (src and dst hold count x the group's size:
 * src's block r goes to member r, dst's block s came from member s — MPI_Alltoall). Sums combine the members
 * in group order (member 0 + member 1 + ...) where the backend can fix the order (the host-staged one:
 * runtime/coll_host.h); NCCL's order is its own. div > 1 (an fp32 all-reduce or reduce-scatter sum only: the
 * data-parallel buckets, runtime/api_cuda_dp.c): the sum then divided by div in fp32 — the CPU device's
 * data-parallel mean (sum in rank order, then / DP size); 0 otherwise. side 1: a launch program's collective
 * enqueued on the program's communication stream between an RT_REC_FORK and an RT_REC_JOIN (program.h), 0: on
 * the step's stream. The fields as an X-macro (I int64_t, P device pointer, F float), as RT_GEMM_FIELDS. */
typedef enum {
  RT_COLL_ALLREDUCE_SUM = 0,
  RT_COLL_ALLREDUCE_MAX = 1,
  RT_COLL_ALL_GATHER = 2,
  RT_COLL_REDUCE_SCATTER = 3,
  RT_COLL_ALL_TO_ALL = 4,
  RT_COLL_OPS
} RtCollOp;
enum { RT_COLL_F32 = 0, RT_COLL_BF16 = 1, RT_COLL_TYPES };
/* the rank's groups: tensor-parallel, expert-parallel, data-parallel (under TP: the ranks of its TP
 * rank; the API layer's gradient buckets), expert-data-parallel (the ranks holding the same experts),
 * and the job's ranks as fp8 delayed scaling's amax reduction group (Megatron's TP x DP x CP: every
 * rank, with no pipeline stages) — over NCCL its own communicator, so that its all-reduces on the
 * step's stream never share one with the data-parallel buckets on theirs */
enum {
  RT_COLL_GROUP_TP = 0,
  RT_COLL_GROUP_EP = 1,
  RT_COLL_GROUP_DP = 2,
  RT_COLL_GROUP_EDP = 3,
  RT_COLL_GROUP_AMAX = 4,
  RT_COLL_GROUPS
};
// clang-format off (an X-macro list, one entry a line)
#define RT_COLL_FIELDS(I, P, F)                                                                              \
  I(op)                                                                                                      \
  I(dtype)                                                                                                   \
  I(group)                                                                                                   \
  I(count)                                                                                                   \
  I(div)                                                                                                     \
  I(side)                                                                                                    \
  P(src)                                                                                                     \
  P(dst)
// clang-format on
typedef struct {
#define RT_CF_I(f) int64_t f;
#define RT_CF_P(f) CUdeviceptr f;
  RT_COLL_FIELDS(RT_CF_I, RT_CF_P, RT_CF_P)
#undef RT_CF_I
#undef RT_CF_P
} RtColl;
/* Bytes of src and of dst of a collective on a group of `size` ranks. */
void rt_coll_bytes(const RtColl *c, int size, int64_t *src_bytes, int64_t *dst_bytes);
/* A communicator's entry points (RtDevice.coll): prepare is called once per collective of a
 * program before anything plays (outside any capture: buffers sized there), run enqueues one on
 * the device's stream (capturable). Each 0, or nonzero with the message in d->err. */
typedef struct {
  int (*prepare)(void *ctx, RtDevice *d, const RtColl *c);
  int (*run)(void *ctx, RtDevice *d, const RtColl *c);
  void *ctx;
} RtCollOps;

/* ---- a TMA tensor map (kernels/tma.cuh), as the launch program holds it ----
 * A row-major, contiguous tensor at ptr of `rank` (2 or 3) dimensions, dim[0] the contiguous one, of
 * elements of `elem` bytes (2: bf16, 1: fp8 bytes), loaded in boxes of box[0] x box[1] [x box[2]]
 * elements with the 128-byte swizzle (box[0] elem = 128: rows of 128 bytes), zeros outside the tensor. The
 * driver encodes it into the 128 bytes (RT_TMAP_BYTES) a kernel reads from global memory (rt_tmap_encode);
 * ptr relocates as a record's pointers do (program.h). */
typedef struct {
  CUdeviceptr ptr;
  uint64_t dim[3];
  uint32_t box[3];
  int32_t rank;
  int32_t elem;
  int32_t pad; /* 0 */
} RtTmap;
#define RT_TMAP_BYTES 128
/* Why t cannot be encoded (into why, 0 when it can): its rank, its element size, a box edge outside
 * 1..256, box rows not 128 bytes, a dimension of 0 or above 2^32, a row of bytes not a multiple of 16, ptr
 * not 16-byte aligned. */
int rt_tmap_invalid(const RtTmap *t, char *why, size_t n);
/* The 128 bytes of t's CUtensorMap into map (64-byte aligned), by the driver. */
int rt_tmap_encode(RtDevice *d, const RtTmap *t, void *map);
/* The n maps t encoded and copied to dst (n x RT_TMAP_BYTES of device memory), synchronously; nothing on
 * a recording device, which moves no data. */
int rt_tmap_write(RtDevice *d, CUdeviceptr dst, const RtTmap *t, int64_t n);

struct RtDevice {
#define RT_DECL(f) __typeof__(&f) f;
  RT_DRIVER_FUNCS(RT_DECL)
#undef RT_DECL
  void *lib;
  CUdevice dev;
  CUcontext ctx;
  CUstream stream;
  CUmodule mod;
  CUfunction fn[RT_K_COUNT + RT_GEN_MAX];
  const RtGenKernels *gen; /* the step's generated kernels (the artifact's), or NULL */
  int sm_count, cc_major, cc_minor;
  int device_count; /* the devices this process sees (cuDeviceGetCount at open) */
  char name[256];
  RtBlas *blas;
  int gemm_tune; /* cuBLASLt algorithms timed per GEMM shape (rt_gemm_tune); 0: the first-ranked */
  RtDnn *dnn;    /* cuDNN, loaded on the first fused attention (cudnn.c) */
  /* the job's collectives (tensor parallelism): set by the API layer before a program with
   * collectives plays; NULL: a collective fails naming it */
  const RtCollOps *coll;
  /* set: a recording device (record.h) — no driver; allocations get distinct fake addresses and
   * launches, GEMMs, memsets and copies are appended to the recorder instead of running */
  RtRecorder *rec;
  CUdeviceptr fake_next;
  /* optional (NULL on drivers before 12.4): checks kernel parameter sizes at module load */
  CUresult (*cuFuncGetParamInfo)(CUfunction, size_t, size_t *, size_t *);
  /* memory: every cuMemAlloc goes through rt_alloc */
  int64_t allocated, max_allocated; /* bytes held by stepc's own allocations, and their peak */
  int64_t used_at_open;             /* total - free (cuMemGetInfo) right after context creation */
  int64_t total_mem;
  char err[512];
};

/* ---- driver.c: open / close ---- */
/* RT_NO_DEVICE when there is no driver or no device (the message says which). */
int rt_open(RtDevice *d);
/* The same on device `ordinal` (a data-parallel rank's LOCAL_RANK): one process per GPU. */
int rt_open_device(RtDevice *d, int ordinal);
/* The same on device ordinal % the device count: ranks sharing the GPUs (tensor parallelism with
 * host-staged collectives, runtime/coll_host.h). */
int rt_open_device_shared(RtDevice *d, int ordinal);
void rt_close(RtDevice *d);
/* Records a driver failure ("what: CUDA_ERROR_..."); returns RT_ERROR, or RT_OK for success. */
int rt_check(RtDevice *d, CUresult r, const char *what);
int rt_fail(RtDevice *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rt_clear_error(RtDevice *d);
int rt_sync(RtDevice *d);

/* ---- module.c ---- */
/* Loads a cubin (cuModuleLoadData) and looks up every kernel of kernel_list.h and of d->gen. */
int rt_module_load(RtDevice *d, const void *cubin);

/* ---- launch.c ---- */
/* Launches kernel k on the runtime's stream; args is an argv of pointers to each argument. */
int rt_launch(RtDevice *d, RtKernel k, unsigned gx, unsigned gy, unsigned gz, unsigned block, unsigned smem,
              void **args);
/* Blocks for a grid-stride kernel over `work` items: min(ceil(work / 256), 8 x SMs), >= 1. */
unsigned rt_grid1d(const RtDevice *d, int64_t work);
int rt_memset0(RtDevice *d, CUdeviceptr p, size_t bytes);
int rt_copy_d2d(RtDevice *d, CUdeviceptr dst, CUdeviceptr src, size_t bytes);
int rt_copy_h2d(RtDevice *d, CUdeviceptr dst, const void *src, size_t bytes);
int rt_copy_d2h(RtDevice *d, void *dst, CUdeviceptr src, size_t bytes); /* synchronous */
/* A collective (above): recorded on a recording device, else run through d->coll. */
int rt_coll(RtDevice *d, const RtColl *c);
/* The launch program's communication stream (program.h RT_REC_FORK / RT_REC_JOIN): recorded on a
 * recording device — the launch lowering marks where a collective leaves the step's stream and where
 * the step's stream waits for it; the player (runtime/cuda/player.c) plays them on its own stream.
 * Refused on a device that is not recording. */
int rt_comm_fork(RtDevice *d);
int rt_comm_join(RtDevice *d);

/* ---- arena.c: tracked allocations ---- */
int rt_alloc(RtDevice *d, CUdeviceptr *p, size_t bytes, const char *what);
void rt_free(RtDevice *d, CUdeviceptr p, size_t bytes);

/* ---- gemm.c: cuBLASLt ---- */
/* Row-major GEMMs as the linear op needs them; A, B bf16, fp32 accumulation.
 *   RT_GEMM_NT: C (M,N) = A (M,K) . B (N,K)^T        (forward: y = x W^T; bias (N) optional)
 *   RT_GEMM_NN: C (M,N) = A (M,K) . B (K,N)          (dgrad: dx = dy W)
 *   RT_GEMM_TN: C (M,N) = A (K,M)^T . B (K,N)        (wgrad: dW = dy^T x)
 * over `batch` products at fixed element strides, D = alpha op(A) op(B) + beta C (+ bias), C and D
 * bf16 (c_f32 = 0) or fp32, of one layout. D is `d`, or C itself when d = 0: the launch lowering's
 * residual fusion (compiler/codegen/launch/exec.c) reads the residual as C (beta = 1) and writes the sum to
 * the add's output D, so the product never lands in memory on its own. Leading dimensions are
 * row-major, in elements. The algorithm is chosen once per shape (and, batched, per operand
 * alignment) with cublasLtMatmulAlgoGetHeuristic and cached, so every call of a shape runs the
 * same kernel (determinism, capture). */
typedef enum { RT_GEMM_NT, RT_GEMM_NN, RT_GEMM_TN } RtGemmKind;
/* An operand's element type (RtGemm.a_type, b_type): bf16, or fp8 (E4M3 / E5M2) with its fp32
 * dequantization factor at a_scale / b_scale (the cast's scale_inv). fp8 products are RT_GEMM_NT
 * only (both operands K-contiguous, what Hopper's fp8 tensor cores take), unbatched, with M, N, K
 * multiples of 16 and at most one E5M2 operand; fast_accum = 1 lets cuBLASLt accumulate in the
 * tensor cores' reduced-precision fp32 (Transformer Engine's forward GEMMs), 0 promotes. */
enum { RT_GEMM_BF16 = 0, RT_GEMM_E4M3 = 1, RT_GEMM_E5M2 = 2 };

/* Every field of one GEMM call, as an X-macro: I an int64_t, P a device pointer, F a float. The
 * recorder copies the struct, and the program's relocation (compiler/codegen/launch/program.c), the
 * player, image_check and program.txt visit every field by this list, so a field added here (an epilogue, its
 * operand) reaches the program without further edits. */
// clang-format off (an X-macro list, one entry a line)
#define RT_GEMM_FIELDS(I, P, F)                                                                              \
  I(kind)                                                                                                    \
  I(m)                                                                                                       \
  I(n)                                                                                                       \
  I(k)                                                                                                       \
  I(lda)                                                                                                     \
  I(ldb)                                                                                                     \
  I(ldc)                                                                                                     \
  I(stride_a)                                                                                                \
  I(stride_b)                                                                                                \
  I(stride_c)                                                                                                \
  I(batch)                                                                                                   \
  I(c_f32)                                                                                                   \
  I(a_type)                                                                                                  \
  I(b_type)                                                                                                  \
  I(fast_accum)                                                                                              \
  P(a)                                                                                                       \
  P(b)                                                                                                       \
  P(c)                                                                                                       \
  P(d)                                                                                                       \
  P(bias)                                                                                                    \
  P(a_scale)                                                                                                 \
  P(b_scale)                                                                                                 \
  F(alpha)                                                                                                   \
  F(beta)
// clang-format on
typedef struct {
#define RT_GF_I(f) int64_t f;
#define RT_GF_P(f) CUdeviceptr f;
#define RT_GF_F(f) float f;
  RT_GEMM_FIELDS(RT_GF_I, RT_GF_P, RT_GF_F)
#undef RT_GF_I
#undef RT_GF_P
#undef RT_GF_F
} RtGemm;

/* The cuBLASLt workspace the runtime opens with (cuBLASLt's recommendation for Hopper); the plan
 * names it in the step's device peak (compiler/plan/plan.c, plan_device_peak). */
#define RT_BLAS_WORKSPACE_BYTES (32u << 20)
int rt_blas_open(RtDevice *d, size_t workspace_bytes);
void rt_blas_close(RtDevice *d);
int rt_gemm_run(RtDevice *d, const RtGemm *g);
/* The timed choice (stepc_options.gemm_tuning): where d->gemm_tune > 1 and g's shape has no plan
 * yet, fills g's operands A and B with random finite values, times cuBLASLt's first d->gemm_tune
 * algorithms for the shape on them (C and D written, accumulated into where beta is 1) and keeps
 * the fastest for every later call of the shape. Unbatched products only (the batched per-head
 * ones keep the first-ranked); a no-op on a recording device or with d->gemm_tune 0. Only outside
 * a capture, on memory whose contents do not matter (the player's, before it is zeroed). */
#define RT_GEMM_TUNE_MAX 16
int rt_gemm_tune(RtDevice *d, const RtGemm *g);
/* The shapes rt_gemm_tune chose an algorithm for so far (timing its candidates where cuBLASLt offers
 * more than one), and how many of them run another than cuBLASLt's first-ranked (0, 0 before any, or
 * without cuBLASLt). */
void rt_gemm_tuned(const RtDevice *d, int *timed, int *changed);
/* One unbatched product with dense leading dimensions; accumulate = 1 adds into C (beta = 1). */
int rt_gemm(RtDevice *d, RtGemmKind kind, int64_t M, int64_t N, int64_t K, CUdeviceptr A, CUdeviceptr B,
            CUdeviceptr C, int c_f32, int accumulate, CUdeviceptr bias);

/* ---- graph.c: stream capture of a region into one CUDA graph ---- */
typedef struct {
  CUgraph graph;
  CUgraphExec exec;
  size_t nodes;
} RtGraph;
int rt_capture_begin(RtDevice *d);
int rt_capture_end(RtDevice *d, RtGraph *g); /* instantiates */
int rt_graph_launch(RtDevice *d, const RtGraph *g);
void rt_graph_destroy(RtDevice *d, RtGraph *g);

/* ---- measure.c ---- */
typedef struct {
  CUevent a, b;
} RtTimer;
int rt_timer_new(RtDevice *d, RtTimer *t);
void rt_timer_free(RtDevice *d, RtTimer *t);
int rt_timer_start(RtDevice *d, RtTimer *t);
/* Records the end, waits for it, returns milliseconds in *ms. */
int rt_timer_stop(RtDevice *d, RtTimer *t, double *ms);
/* A row of events on the stream: mark i records event i; after a sync, the time between marks. */
typedef struct {
  CUevent *e;
  int n;
} RtMarks;
int rt_marks_new(RtDevice *d, RtMarks *m, int n);
void rt_marks_free(RtDevice *d, RtMarks *m);
/* Like rt_timer_stop, waiting by polling: watch(ctx) runs while the work is not done and returns nonzero
 * (with its message already in d->err) to stop waiting — a data-parallel step whose collectives
 * wait on a rank that died or hangs is aborted that way instead of blocking for ever. */
int rt_timer_stop_watched(RtDevice *d, RtTimer *t, double *ms, int (*watch)(void *ctx), void *ctx);
/* Records mark i on stream s (the step's, or a side stream's: RtSide), one row of events. */
int rt_mark_on(RtDevice *d, RtMarks *m, int i, CUstream s);

/* ---- side.c: a second stream beside the runtime's ----
 * Work enqueued on a side stream runs concurrently with d->stream's (the data-parallel
 * communication stream: gradient buckets reduced while backward goes on). fork makes the side
 * stream wait for everything d->stream has enqueued so far; join makes d->stream wait for
 * everything the side stream has enqueued so far. Both are an event record and a stream wait,
 * which a stream capture follows: inside the full-iteration capture a fork brings the side
 * stream into the capture (its work becomes a branch of the graph) and a join merges it back —
 * every fork must be joined before the capture ends. */
typedef struct {
  CUstream s;
  CUevent fork, join; /* timing disabled: ordering only */
} RtSide;
int rt_side_new(RtDevice *d, RtSide *c);
void rt_side_free(RtDevice *d, RtSide *c);
int rt_side_fork(RtDevice *d, RtSide *c);
int rt_side_join(RtDevice *d, RtSide *c);

/* ---- cudnn.c: fused attention through cuDNN (dlopen'd like cuBLASLt) ---- */
/* One causal attention call, forward (bwd 0: q, k, v -> o, lse) or backward (bwd 1: dout, q, k, v,
 * o, lse -> dq, dk, dvv). q, o, dq, dout (b,t,h,dqk|dv), k, v, dk, dvv (b,t,g,dqk|dv) bf16 row-major;
 * lse (b,h,t) fp32, natural log. deterministic: the backward picks an engine without atomics. The
 * fields as an X-macro (I int64_t, P device pointer, F float), as RT_GEMM_FIELDS: the recorder
 * copies the struct into the launch program, and the player, image_check and program.txt visit
 * every field. */
// clang-format off (an X-macro list, one entry a line)
#define RT_SDPA_FIELDS(I, P, F)                                                                              \
  I(bwd)                                                                                                     \
  I(b)                                                                                                       \
  I(t)                                                                                                       \
  I(h)                                                                                                       \
  I(g)                                                                                                       \
  I(dqk)                                                                                                     \
  I(dv)                                                                                                      \
  I(deterministic)                                                                                           \
  P(q)                                                                                                       \
  P(k)                                                                                                       \
  P(v)                                                                                                       \
  P(o)                                                                                                       \
  P(lse)                                                                                                     \
  P(dout)                                                                                                    \
  P(dq)                                                                                                      \
  P(dk)                                                                                                      \
  P(dvv)                                                                                                     \
  F(scale)
// clang-format on
typedef struct {
#define RT_SF_I(f) int64_t f;
#define RT_SF_P(f) CUdeviceptr f;
#define RT_SF_F(f) float f;
  RT_SDPA_FIELDS(RT_SF_I, RT_SF_P, RT_SF_F)
#undef RT_SF_I
#undef RT_SF_P
#undef RT_SF_F
} RtSdpa;
/* Loads cuDNN (first call), builds and caches the plan of s's shape and grows the workspace; the
 * player calls it at open for every SDPA record so that no plan is built during capture.
 * RT_UNSUPPORTED: no cuDNN 9 here, a shape cuDNN does not take, or no engine for it. */
int rt_sdpa_prepare(RtDevice *d, const RtSdpa *s);
int rt_sdpa_run(RtDevice *d, const RtSdpa *s);
size_t rt_sdpa_workspace_bytes(const RtDevice *d); /* the workspace allocation (0 before any) */
void rt_dnn_close(RtDevice *d);

#endif
