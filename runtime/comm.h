/* comm.h — collectives over the data-parallel ranks of one step: all-reduce (sum), reduce-scatter,
 * all-gather and broadcast over a contiguous buffer, on a communicator of N ranks.
 *
 * Two backends behind one rendezvous:
 *  - host (the CPU device): the ranks are processes or threads of one or many hosts joined by TCP
 *    to rank 0, which reduces in a fixed order — rank 0 + rank 1 + ... + rank N-1, element by
 *    element, in the buffer's type — and sends the result back. Results are therefore bitwise
 *    reproducible and equal to a sequential sum over the ranks' contributions, whatever the
 *    timing; the transport is simple rather than fast (the CPU device is the oracle, not a
 *    production path).
 *  - NCCL (the CUDA device, comm_nccl.c): libnccl.so.2 loaded at run time with dlopen like
 *    libcuda, collectives enqueued on stepc's stream so that they are captured into the
 *    full-iteration CUDA graph. The unique id travels over the same TCP rendezvous.
 *
 * Rendezvous (comm_rdv.c): rank 0 listens at addr:port (that address only); every other rank
 * connects (retrying until the timeout: rank 0 may start later), proves it holds the job secret
 * by challenge-response (rdv_wire.h) and says who it is — rank, world size, the artifact's
 * fingerprint. Rank 0 admits the job only when every rank has come, each once, with its own
 * fingerprint; otherwise every rank fails with the reason (a rank with another artifact is
 * refused at start, never halfway through a step). A connection that does not prove the secret
 * within RT_COMM_HELLO_TIMEOUT_S (a probe, an idle socket, a stranger) is dropped and changes
 * nothing.
 *
 * Faults: every wait on another rank is bounded by timeout_s. A rank that exits closes its socket,
 * which the others see at once ("rank 2 closed its connection"); a rank that hangs is caught by
 * the timeout. A failed communicator closes all its sockets, so that the ranks still waiting on
 * it fail at once too instead of waiting for their own timeouts. Errors are messages, never
 * exits; the communicator is unusable after one.
 *
 * Nothing here includes the compiler; nothing here is thread-safe (one communicator per rank). */
#ifndef STEPC_COMM_H
#define STEPC_COMM_H

#include <stddef.h>
#include <stdint.h>

/* Element types. RT_COMM_BF16: bf16 bit patterns (uint16); sums are accumulated in fp32 in the
 * fixed order and rounded to bf16 once (round to nearest even, a NaN stays a NaN), max compares the
 * values as floats. */
typedef enum { RT_COMM_F32 = 0, RT_COMM_F64 = 1, RT_COMM_BF16 = 2 } RtCommType;

#define RT_COMM_DEFAULT_TIMEOUT_S 300.0
#define RT_COMM_MAX_TIMEOUT_S 86400.0 /* a day: anything longer (inf, say) is refused as unbounded */
#define RT_COMM_HELLO_TIMEOUT_S 10.0  /* a connection's time to say who it is, once rank 0 accepted it */
#define RT_COMM_ID_BYTES 128          /* NCCL_UNIQUE_ID_BYTES */

typedef struct {
  int rank, size;
  char addr[256];       /* rank 0's host (MASTER_ADDR) */
  int port;             /* MASTER_PORT */
  double timeout_s;     /* every wait on another rank, in [0, RT_COMM_MAX_TIMEOUT_S]; 0: the default;
                           negative, NaN or infinite: refused */
  const char *secret;   /* the job secret every rank holds (rdv_wire.h): required when size > 1 */
  uint64_t fingerprint; /* the artifact's step: every rank must hold the same */
  uint64_t plan_hash;   /* and the same plan facts (DP size, buckets, optimizer sharding) */
  char what[128];       /* the artifact, for messages */
  /* rank 0 only: fills the id every rank receives (NCCL's unique id); NULL: none */
  int (*make_id)(void *ctx, unsigned char id[RT_COMM_ID_BYTES], char *err, size_t nerr);
  void *make_id_ctx;
} RtRendezvous;

typedef struct RtComm RtComm;

/* Joins the job: 0, or -1 with err (*out is NULL then). */
int rt_comm_open(const RtRendezvous *rv, RtComm **out, char *err, size_t nerr);
/* Leaves it: closes the sockets (the other ranks see this rank gone). NULL is a no-op. */
void rt_comm_free(RtComm *c);
/* The id rank 0 made at the rendezvous (all zero without make_id). */
const unsigned char *rt_comm_id(const RtComm *c);
/* The message of the failure that broke the communicator ("" when none). */
const char *rt_comm_error(const RtComm *c);

/* Host collectives over host memory; each 0, or -1 with the message (rt_comm_error). Every rank
 * must call the same collectives in the same order with the same counts: a rank that does not is
 * reported, not silently mixed in. */
/* buf := buf(rank 0) + buf(rank 1) + ... + buf(rank N-1), in that order, on every rank (bf16: the
 * group all-reduce below over the whole job). */
int rt_comm_allreduce_sum(RtComm *c, void *buf, size_t n, RtCommType t);
/* recv (n elements) := the sum, as above, of every rank's send[rank * n .. (rank + 1) * n) (bf16:
 * the group reduce-scatter below over the whole job). */
int rt_comm_reduce_scatter_sum(RtComm *c, const void *send, void *recv, size_t n, RtCommType t);
/* recv (size * bytes) := every rank's send (bytes each), rank after rank. */
int rt_comm_all_gather(RtComm *c, const void *send, void *recv, size_t bytes);
/* buf := root's buf on every rank. */
int rt_comm_broadcast(RtComm *c, void *buf, size_t bytes, int root);
/* Returns when every rank has called it (or fails with the message). */
int rt_comm_barrier(RtComm *c);

/* Group collectives (comm_group.c): over the ranks first, first + stride, ... (count of them) —
 * tensor parallelism's TP group (stride 1) and its data-parallel group (stride TP). Every rank of
 * the job calls each of them, in the same order with the same count (each passes its own group):
 * they ride on an all-gather over the whole job. Results combine the members in group order
 * (member 0 + member 1 + ...), bitwise reproducible. */
typedef struct {
  int first, stride, count;
} RtCommGroup;
/* buf := the members' elementwise sum (max: maximum); f32, f64 or bf16 */
int rt_comm_group_allreduce(RtComm *c, const RtCommGroup *g, void *buf, size_t n, RtCommType t, int max);
/* recv (count * bytes) := every member's send, member after member */
int rt_comm_group_all_gather(RtComm *c, const RtCommGroup *g, const void *send, void *recv, size_t bytes);
/* recv (n) := the members' sum of send[member * n .. (member + 1) * n), for this rank's `member`;
 * f32, f64 or bf16 */
int rt_comm_group_reduce_scatter(RtComm *c, const RtCommGroup *g, int member, const void *send, void *recv,
                                 size_t n, RtCommType t);

/* ---- launcher environments ---- */
typedef struct {
  int rank, size, local_rank;
  char addr[256];
  int port;
  const char *source; /* "torchrun", "mpirun", "slurm", or NULL when none is set */
} RtLaunchEnv;
/* Reads torchrun's (RANK, WORLD_SIZE, LOCAL_RANK), Open MPI's (OMPI_COMM_WORLD_RANK / _SIZE /
 * _LOCAL_RANK) or Slurm's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID) variables, in that order of
 * preference, and MASTER_ADDR / MASTER_PORT (default 127.0.0.1:29500, torchrun's port). 1 when one
 * launcher was found, 0 when none (e->size = 1), -1 with err when its values are malformed. */
int rt_launch_env(RtLaunchEnv *e, char *err, size_t nerr);

#endif
