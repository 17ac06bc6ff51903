/* comm_nccl.h — the CUDA device's collectives: NCCL loaded at run time (libnccl.so.2, dlopen, as
 * libcuda is: nothing links it, so a machine without NCCL runs every single-rank step and fails a
 * data-parallel one with a message). Collectives are enqueued on the stream the caller gives (the
 * step's communication stream, forked from and joined to stepc's by events), so that they are
 * ordered with the step's kernels and captured into its full-iteration CUDA graph (NCCL 2.9.6 and
 * later allow that). The unique id travels over comm.h's rendezvous. */
#ifndef STEPC_COMM_NCCL_H
#define STEPC_COMM_NCCL_H

#include <cuda.h>
#include <stddef.h>

#include "runtime/comm.h"
#include "runtime/rt.h"

typedef struct RtNccl RtNccl;

/* Loads libnccl.so.2: 0, or -1 with err (*out NULL). */
int rt_nccl_load(RtNccl **out, char *err, size_t nerr);
/* RtRendezvous.make_id: ncclGetUniqueId on rank 0 (ctx is the RtNccl). */
int rt_nccl_make_id(void *ctx, unsigned char id[RT_COMM_ID_BYTES], char *err, size_t nerr);
/* ncclCommInitRank with the rendezvous' id; the device's context must be current. */
int rt_nccl_init(RtNccl *n, const unsigned char id[RT_COMM_ID_BYTES], int size, int rank, char *err,
                 size_t nerr);
/* A communicator over the ranks of `parent` that pass the same color (>= 0), ordered by key then
 * by their parent rank (ncclCommSplit, NCCL 2.18 and later: otherwise -1 naming the version
 * needed): a TP group's communicator inside a larger job. Every rank of the parent calls it. The
 * child holds its own reference to the library, so the parent and the child may be freed in either
 * order (each with rt_nccl_free). 0, or -1 with err (*out NULL). */
int rt_nccl_split(RtNccl *parent, int color, int key, RtNccl **out, char *err, size_t nerr);
/* This rank's index in the communicator, and its ranks (rt_nccl_init's, or the split's). */
int rt_nccl_rank(const RtNccl *n);
int rt_nccl_size(const RtNccl *n);
/* One launch-program collective (rt.h: RtColl; its src and dst device pointers, count as there)
 * over the communicator's ranks, enqueued on s: ncclAllReduce (ncclSum / ncclMax), ncclAllGather,
 * ncclReduceScatter (ncclSum), an all-to-all (ncclSend / ncclRecv a peer in one group), f32 or bf16. An
 * all-reduce's or a reduce-scatter's div > 1: the sum divided by it — ncclAvg when div is the communicator's
 * size, else (fp32 only) a sum pre-multiplied by 1/div (NCCL 2.11's ncclRedOpCreatePreMulSum, one div per
 * communicator). NCCL's summation order is its own: not bitwise the host-staged backend's (coll_host.h). */
int rt_nccl_coll(RtNccl *n, const RtColl *c, CUstream s, char *err, size_t nerr);

/* ncclGroupStart (start 1) / ncclGroupEnd (0): the collectives between run as one launch. */
int rt_nccl_group(RtNccl *n, int start, char *err, size_t nerr);
/* NCCL's asynchronous error, if any (a peer that died, a network failure): 0, or -1 with err. */
int rt_nccl_check(RtNccl *n, char *err, size_t nerr);
/* ncclCommAbort now (the communicator is unusable after): its pending collectives return. */
void rt_nccl_abort(RtNccl *n);
/* The library's version (e.g. 22805 for 2.28.5). */
int rt_nccl_version(const RtNccl *n);
/* Aborts the communicator when `failed` (ncclCommAbort does not wait on peers that are gone),
 * destroys it otherwise, and unloads the library. NULL is a no-op. */
void rt_nccl_free(RtNccl *n, int failed);

/* The launch program's collectives over NCCL (RtDevice.coll = &c->ops): group[RT_COLL_GROUP_TP]
 * (and _EP) is the communicator of this rank's group (rt_nccl_init over the group, or
 * rt_nccl_split); the caller owns them. prepare checks that the collective's group has one; run
 * enqueues it on d->stream (capturable). ops.ctx points at the struct: do not move it after init. */
typedef struct {
  RtNccl *group[RT_COLL_GROUPS];
  RtCollOps ops;
} RtCollNccl;
void rt_coll_nccl_init(RtCollNccl *c);

#endif
