/* comm.c — the host collectives (comm.h): a star of TCP connections to rank 0, which the rendezvous
 * (comm_rdv.c) set up; the bounded socket I/O both use; the launchers' environments. */
#define _GNU_SOURCE
#include "runtime/comm_internal.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  uint64_t seq, bytes;
} MsgHead;

double rt_comm_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Records the first failure and closes every socket: the ranks waiting on this one see it gone at
 * once, rather than after their own timeouts. */
int rt_comm_fail(RtComm *c, const char *fmt, ...) {
  if (!c->broken) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    c->broken = 1;
  }
  for (int i = 0; i < c->nfd; i++)
    if (c->fd[i] >= 0) close(c->fd[i]), c->fd[i] = -1;
  return -1;
}

int rt_comm_wait_fd(int fd, short ev, double deadline) {
  for (;;) {
    double left = deadline - rt_comm_now_s();
    if (left <= 0) return 1;
    struct pollfd p = {.fd = fd, .events = ev};
    int ms = left > 1e6 ? 1000000000 : (int)(left * 1e3) + 1;
    int r = poll(&p, 1, ms);
    if (r > 0) return 0;
    if (r < 0 && errno != EINTR) return -1;
  }
}

int rt_comm_io_all(int fd, void *buf, size_t n, int sending, double deadline) {
  unsigned char *p = buf;
  while (n > 0) {
    int w = rt_comm_wait_fd(fd, sending ? POLLOUT : POLLIN, deadline);
    if (w) return w;
    /* MSG_NOSIGNAL: a peer that died must be an error here, not a SIGPIPE that kills the trainer */
    ssize_t k = sending ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k == 0 && !sending) return 2;
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return errno == EPIPE || errno == ECONNRESET ? 2 : -1;
    }
    p += k, n -= (size_t)k;
  }
  return 0;
}

/* The peer a socket leads to, for messages: rank r at rank 0, rank 0 elsewhere. */
static int xfer(RtComm *c, int fd, int peer, void *buf, size_t n, int sending) {
  int r = rt_comm_io_all(fd, buf, n, sending, rt_comm_now_s() + c->timeout_s);
  if (r == 0) return 0;
  if (r == 1 && peer == 0) /* rank 0 answers once every rank has sent: the one that hangs may be any */
    return rt_comm_fail(
        c,
        "rank %d: rank 0 did not answer within %.0f s (the communicator's timeout): a rank hangs or is far "
        "behind (rank 0's error names it)",
        c->rank, c->timeout_s);
  if (r == 1)
    return rt_comm_fail(
        c, "rank 0: rank %d did not %s within %.0f s (the communicator's timeout): it hangs or is far behind",
        peer, sending ? "take our data" : "send its data", c->timeout_s);
  if (r == 2 && peer == 0)
    return rt_comm_fail(
        c, "rank %d: rank 0 closed the connection: a rank failed or exited (its own error says why)",
        c->rank);
  if (r == 2) return rt_comm_fail(c, "rank 0: rank %d closed its connection: it exited or failed", peer);
  return rt_comm_fail(c, "rank %d: the connection to rank %d failed: %s", c->rank, peer, strerror(errno));
}

/* One message: a head (sequence number, length) then the bytes, so that two ranks calling
 * different collectives, or the same with other sizes, are told apart. */
static int send_msg(RtComm *c, int fd, int peer, const void *buf, size_t n) {
  MsgHead h = {c->seq, n};
  return xfer(c, fd, peer, &h, sizeof h, 1) || xfer(c, fd, peer, (void *)buf, n, 1) ? -1 : 0;
}

static int recv_msg(RtComm *c, int fd, int peer, void *buf, size_t n) {
  MsgHead h;
  if (xfer(c, fd, peer, &h, sizeof h, 0)) return -1;
  if (h.seq != c->seq || h.bytes != n)
    return rt_comm_fail(
        c,
        "rank %d: rank %d is out of step: its collective #%llu carries %llu bytes, this rank's #%llu %zu "
        "(the ranks run different steps)",
        c->rank, peer, (unsigned long long)h.seq, (unsigned long long)h.bytes, (unsigned long long)c->seq, n);
  return xfer(c, fd, peer, buf, n, 0);
}

static int tmp_room(RtComm *c, size_t n) {
  if (c->ntmp >= n) return 0;
  unsigned char *p = realloc(c->tmp, n);
  if (!p) return rt_comm_fail(c, "out of memory");
  c->tmp = p, c->ntmp = n;
  return 0;
}

static size_t type_size(RtCommType t) { return t == RT_COMM_F64 ? 8 : 4; }

/* acc += x elementwise, in the type's own precision (the executor's): the fixed order's one add */
static void add_into(void *acc, const void *x, size_t n, RtCommType t) {
  if (t == RT_COMM_F64)
    for (size_t i = 0; i < n; i++)
      ((double *)acc)[i] += ((const double *)x)[i];
  else
    for (size_t i = 0; i < n; i++)
      ((float *)acc)[i] += ((const float *)x)[i];
}

int rt_comm_open(const RtRendezvous *rv, RtComm **out, char *err, size_t nerr) {
  *out = NULL;
  if (rv->size < 1 || rv->rank < 0 || rv->rank >= rv->size)
    return snprintf(err, nerr, "rank %d of a world of %d: the rank must be in [0, world size)", rv->rank,
                    rv->size),
           -1;
  if (rv->size > 1 && (rv->port <= 0 || rv->port > 65535))
    return snprintf(err, nerr, "the rendezvous port %d is not a TCP port (MASTER_PORT)", rv->port), -1;
  /* an infinite or NaN timeout would make every wait unbounded: a hung rank would hang the job */
  if (!(rv->timeout_s >= 0 && rv->timeout_s <= RT_COMM_MAX_TIMEOUT_S))
    return snprintf(err, nerr,
                    "the communicator's timeout %g s is not a number of seconds in [0, %.0f] (0: the default "
                    "%.0f s)",
                    rv->timeout_s, RT_COMM_MAX_TIMEOUT_S, RT_COMM_DEFAULT_TIMEOUT_S),
           -1;
  RtComm *c = calloc(1, sizeof *c);
  int nfd = rv->rank == 0 ? rv->size : 1;
  if (!c || !(c->fd = malloc((size_t)nfd * sizeof *c->fd))) {
    free(c);
    return snprintf(err, nerr, "out of memory"), -1;
  }
  c->rank = rv->rank, c->size = rv->size, c->nfd = nfd;
  c->timeout_s = rv->timeout_s > 0 ? rv->timeout_s : RT_COMM_DEFAULT_TIMEOUT_S;
  for (int i = 0; i < nfd; i++)
    c->fd[i] = -1;
  int rc = 0;
  if (c->size == 1) /* alone: no socket; the id, if any, is made here */
    rc = rv->make_id ? rv->make_id(rv->make_id_ctx, c->id, c->err, sizeof c->err) : 0;
  else
    rc = rt_comm_rendezvous(c, rv);
  if (rc != 0) {
    snprintf(err, nerr, "%s", c->err);
    rt_comm_free(c);
    return -1;
  }
  *out = c;
  return 0;
}

void rt_comm_free(RtComm *c) {
  if (!c) return;
  for (int i = 0; i < c->nfd; i++)
    if (c->fd[i] >= 0) close(c->fd[i]);
  free(c->fd), free(c->tmp), free(c);
}

const unsigned char *rt_comm_id(const RtComm *c) { return c->id; }
const char *rt_comm_error(const RtComm *c) { return c ? c->err : "no communicator"; }

/* ---- host collectives: gather to rank 0 in rank order, combine there, send back ---- */

/* Rank 0 receives every other rank's `bytes` into tmp, rank after rank, calling each(r) after
 * rank r's part has arrived; the others send theirs. */
static int gather_root(RtComm *c, const void *mine, size_t bytes, void (*each)(RtComm *, int, void *),
                       void *ctx) {
  if (c->rank != 0) return send_msg(c, c->fd[0], 0, mine, bytes);
  if (tmp_room(c, bytes ? bytes : 1)) return -1;
  for (int r = 1; r < c->size; r++) {
    if (recv_msg(c, c->fd[r], r, c->tmp, bytes)) return -1;
    each(c, r, ctx);
  }
  return 0;
}

typedef struct {
  void *acc;
  size_t n;
  RtCommType t;
  unsigned char *all;
  size_t bytes;
} Combine;

static void combine_add(RtComm *c, int r, void *ctx) {
  (void)r;
  Combine *k = ctx;
  add_into(k->acc, c->tmp, k->n, k->t);
}

static void combine_place(RtComm *c, int r, void *ctx) {
  Combine *k = ctx;
  memcpy(k->all + (size_t)r * k->bytes, c->tmp, k->bytes);
}

static int begin(RtComm *c) {
  if (c->broken) return -1;
  c->seq++;
  return 0;
}

int rt_comm_allreduce_sum(RtComm *c, void *buf, size_t n, RtCommType t) {
  if (t == RT_COMM_BF16) return rt_comm_group_allreduce(c, &(RtCommGroup){0, 1, c->size}, buf, n, t, 0);
  if (begin(c)) return -1;
  if (c->size == 1) return 0;
  size_t bytes = n * type_size(t);
  Combine k = {.acc = buf, .n = n, .t = t};
  if (gather_root(c, buf, bytes, combine_add, &k)) return -1;
  if (c->rank != 0) return recv_msg(c, c->fd[0], 0, buf, bytes);
  for (int r = 1; r < c->size; r++)
    if (send_msg(c, c->fd[r], r, buf, bytes)) return -1;
  return 0;
}

int rt_comm_reduce_scatter_sum(RtComm *c, const void *send, void *recv, size_t n, RtCommType t) {
  if (t == RT_COMM_BF16)
    return rt_comm_group_reduce_scatter(c, &(RtCommGroup){0, 1, c->size}, c->rank, send, recv, n, t);
  if (begin(c)) return -1;
  size_t es = type_size(t), bytes = n * es * (size_t)c->size;
  if (c->size == 1) {
    memmove(recv, send, n * es);
    return 0;
  }
  if (c->rank != 0) {
    if (send_msg(c, c->fd[0], 0, send, bytes)) return -1;
    return recv_msg(c, c->fd[0], 0, recv, n * es);
  }
  unsigned char *acc = malloc(bytes ? bytes : 1);
  if (!acc) return rt_comm_fail(c, "out of memory");
  memcpy(acc, send, bytes);
  Combine k = {.acc = acc, .n = n * (size_t)c->size, .t = t};
  int rc = gather_root(c, send, bytes, combine_add, &k);
  for (int r = 1; r < c->size && !rc; r++)
    rc = send_msg(c, c->fd[r], r, acc + (size_t)r * n * es, n * es);
  if (!rc) memcpy(recv, acc, n * es);
  free(acc);
  return rc;
}

int rt_comm_all_gather(RtComm *c, const void *send, void *recv, size_t bytes) {
  if (begin(c)) return -1;
  size_t all = bytes * (size_t)c->size;
  if (c->rank == 0) memmove(recv, send, bytes);
  if (c->size == 1) return 0;
  if (c->rank != 0) {
    if (send_msg(c, c->fd[0], 0, send, bytes)) return -1;
    return recv_msg(c, c->fd[0], 0, recv, all);
  }
  Combine k = {.all = recv, .bytes = bytes};
  if (gather_root(c, send, bytes, combine_place, &k)) return -1;
  for (int r = 1; r < c->size; r++)
    if (send_msg(c, c->fd[r], r, recv, all)) return -1;
  return 0;
}

int rt_comm_broadcast(RtComm *c, void *buf, size_t bytes, int root) {
  if (begin(c)) return -1;
  if (root < 0 || root >= c->size) return rt_comm_fail(c, "broadcast from rank %d of %d", root, c->size);
  if (c->size == 1) return 0;
  if (c->rank != 0) {
    if (c->rank == root && send_msg(c, c->fd[0], 0, buf, bytes)) return -1;
    return recv_msg(c, c->fd[0], 0, buf, bytes);
  }
  if (root != 0 && recv_msg(c, c->fd[root], root, buf, bytes)) return -1;
  for (int r = 1; r < c->size; r++)
    if (send_msg(c, c->fd[r], r, buf, bytes)) return -1;
  return 0;
}

int rt_comm_barrier(RtComm *c) {
  double one = 1;
  return rt_comm_allreduce_sum(c, &one, 1, RT_COMM_F64);
}

/* ---- launcher environments ---- */

static int env_int(const char *name, int *v, int *bad) {
  const char *s = getenv(name);
  if (!s || !*s) return 0;
  char *end;
  long x = strtol(s, &end, 10);
  if (*end || x < 0 || x > 1 << 30)
    *bad = 1;
  else
    *v = (int)x;
  return 1;
}

int rt_launch_env(RtLaunchEnv *e, char *err, size_t nerr) {
  static const struct {
    const char *rank, *size, *local, *source;
  } L[] = {{"RANK", "WORLD_SIZE", "LOCAL_RANK", "torchrun"},
           {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "mpirun"},
           {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "slurm"}};
  memset(e, 0, sizeof *e);
  e->size = 1;
  snprintf(e->addr, sizeof e->addr, "127.0.0.1");
  e->port = 29500;
  int bad = 0, found = 0;
  for (size_t i = 0; i < sizeof L / sizeof L[0] && !found; i++) {
    int r = 0, s = 0;
    if (!env_int(L[i].rank, &r, &bad) || !env_int(L[i].size, &s, &bad)) continue;
    if (bad) return snprintf(err, nerr, "%s or %s is not a number", L[i].rank, L[i].size), -1;
    e->rank = r, e->size = s, e->source = L[i].source, found = 1;
    e->local_rank = 0;
    env_int(L[i].local, &e->local_rank, &bad);
    if (bad) return snprintf(err, nerr, "%s is not a number", L[i].local), -1;
  }
  const char *a = getenv("MASTER_ADDR");
  if (a && *a) snprintf(e->addr, sizeof e->addr, "%s", a);
  env_int("MASTER_PORT", &e->port, &bad);
  if (bad || e->port < 1 || e->port > 65535) return snprintf(err, nerr, "MASTER_PORT is not a TCP port"), -1;
  if (found && (e->size < 1 || e->rank >= e->size))
    return snprintf(err, nerr, "%s says rank %d of %d ranks", e->source, e->rank, e->size), -1;
  return found;
}
