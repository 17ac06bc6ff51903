/* coll_host.h — the launch program's collectives (rt.h: RtColl, RtCollOps) staged through host
 * memory and done by the host communicator (comm.h's group collectives over TCP).
 *
 * Why: NCCL refuses two ranks on one GPU ("duplicate GPU"), so a job whose tensor-parallel ranks
 * SHARE ONE GPU — several processes on one device, to run and test TP on a machine with a single
 * GPU — needs another way to combine the ranks' buffers. Here each collective is enqueued on the
 * device's stream as three capturable operations:
 *   cuMemcpyDtoHAsync (device src -> pinned host staging)
 *   cuLaunchHostFunc  (a host function: the host communicator's group collective on the staging)
 *   cuMemcpyHtoDAsync (the staged result -> device dst)
 * so that eager play enqueues them in program order and a full-iteration CUDA graph holds them —
 * every replay of the graph performs the collective again.
 *
 * Exact: sums combine the members in group order (member 0 + member 1 + ..., bf16 accumulated in
 * fp32 and rounded once: comm_group.c), so results are bitwise reproducible, the same on every
 * member, and equal to a sequential sum over the members — what the CPU device computes.
 *
 * Limits:
 *  - slow: every collective crosses PCIe twice and TCP through rank 0, and the stream waits on the
 *    host function meanwhile (nothing overlaps it); a means to run and test TP, not a production path;
 *  - every rank of the communicator's job takes part in every collective (the group collectives
 *    ride on an all-gather over the whole job), and all ranks must run the same collectives in the
 *    same order with the same counts — true of the ranks of one step; a rank out of step fails the
 *    collective;
 *  - the communicator belongs to this backend while a step runs: its collectives run on CUDA's
 *    callback thread, and the communicator is not thread-safe;
 *  - one staging pair (in, out), sized in prepare to the largest collective prepared: collectives
 *    of one stream run one after another, so they share it. A graph's copy nodes hold the staging
 *    addresses it was captured with; a prepare that grows the staging after collectives were
 *    enqueued keeps the old pair alive (until rt_coll_host_free) and its jobs, so a graph captured
 *    before still replays correctly, while later runs use the new pair. Prepare every collective
 *    before capturing (the player does, at open);
 *  - a failed collective (a rank that exited, a timeout: the communicator's timeout_s bounds every
 *    wait) cannot stop the stream: its host function records the failure and returns, every later
 *    collective does nothing, the step runs to its end on stale data, and rt_coll_host_check tells
 *    the caller after the stream synchronised. The communicator is unusable after a failure.
 *
 * Host functions do not call CUDA. Errors are messages; nothing here prints or exits. */
#ifndef STEPC_COLL_HOST_H
#define STEPC_COLL_HOST_H

#include <stddef.h>

#include "runtime/comm.h"
#include "runtime/rt.h"

typedef struct RtCollHost RtCollHost;

/* comm: the job's host communicator (the caller keeps it alive and does not use it while a step
 * runs); tp: this rank's TP group and its index (member) in it; ep may be NULL (no EP group).
 * The groups are checked against the communicator (this rank must be member `member` of each).
 * 0, or -1 with err (*out NULL). */
int rt_coll_host_new(RtComm *comm, const RtCommGroup *tp, int tp_member, const RtCommGroup *ep, int ep_member,
                     RtCollHost **out, char *err, size_t nerr);
/* For RtDevice.coll: prepare (outside any capture) sizes the pinned staging and registers the
 * collective; run enqueues a registered one on d->stream (capturable); an unregistered one fails
 * with the message in d->err. A group of one rank copies src to dst on the device (nothing when
 * src == dst). */
const RtCollOps *rt_coll_host_ops(RtCollHost *h);
/* Another of this rank's groups (rt.h RT_COLL_GROUP_*: the data-parallel and expert-data-parallel
 * groups of the gradient buckets), checked as at new: 0, or -1 with err. */
int rt_coll_host_add_group(RtCollHost *h, int which, const RtCommGroup *g, int member, char *err,
                           size_t nerr);
/* After the stream synchronised: 0, or -1 with the first failed collective's message (which names
 * the op, dtype, group, count and the communicator's error). Once failed, later collectives do
 * nothing (their host functions return at once) so the step finishes and the caller reports the
 * failure. */
int rt_coll_host_check(RtCollHost *h, char *err, size_t nerr);
/* Frees the pinned staging with the device it was prepared on (before rt_close of that device, with
 * nothing of it still running) and the jobs. Does not free the communicator. NULL is a no-op. */
void rt_coll_host_free(RtCollHost *h);

#endif
