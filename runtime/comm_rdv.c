/* comm_rdv.c — the rendezvous (comm.h): rank 0 listens at MASTER_ADDR:MASTER_PORT and admits the
 * job's ranks; each proves the job secret (rdv_wire.h) before anything it says counts.
 *
 * Rank 0 serves every connection at once (poll), each with its own short hello deadline, so that a
 * stranger — a port scanner, an HTTP health probe, an idle connection, someone without the secret —
 * is dropped without holding the rendezvous, failing the job or taking a rank's place. Only a hello
 * that proves the secret can fail the job (another artifact, a rank given twice): that is the job's
 * own misconfiguration. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "runtime/comm_internal.h"
#include "runtime/rdv_wire.h"

#define MAX_PENDING 64 /* connections awaiting their hello; beyond it the oldest is dropped */

typedef struct {
  int fd;
  double deadline; /* its hello's */
  size_t got;
  unsigned char nonce[RDV_NONCE_BYTES]; /* the challenge rank 0 sent it */
  unsigned char buf[RDV_HELLO_BYTES];
  char peer[64];
} Pending;

/* Rank 0's state during admission. */
typedef struct {
  RtComm *c;
  const RtRendezvous *rv;
  double deadline;
  int came;
  char why[384];                               /* the first reason the job does not start */
  unsigned char (*nonces)[2][RDV_NONCE_BYTES]; /* per rank: its own nonce, rank 0's challenge */
  Pending p[MAX_PENDING];
  int np;
  int dropped, no_secret; /* strangers dropped; of them, hellos without the secret */
  char no_secret_last[128];
} Admit;

static void set_opts(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static struct addrinfo *resolve(const char *addr, int port, int *gai) {
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  struct addrinfo hint = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  *gai = getaddrinfo(addr, ps, &hint, &res);
  return *gai == 0 ? res : NULL;
}

static void peer_name(int fd, char *out, size_t n) {
  struct sockaddr_storage a;
  socklen_t len = sizeof a;
  char host[48] = "?";
  int port = 0;
  if (getpeername(fd, (struct sockaddr *)&a, &len) == 0 && a.ss_family == AF_INET) {
    inet_ntop(AF_INET, &((struct sockaddr_in *)&a)->sin_addr, host, sizeof host);
    port = ntohs(((struct sockaddr_in *)&a)->sin_port);
  } else if (len && a.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&a)->sin6_addr, host, sizeof host);
    port = ntohs(((struct sockaddr_in6 *)&a)->sin6_port);
  }
  snprintf(out, n, "%s:%d", host, port);
}

/* Rank 0 listens on MASTER_ADDR only (never every interface): who can reach the rendezvous is
 * who can reach that address. */
static int listen_on(RtComm *c, const RtRendezvous *rv) {
  int gai = 0, fd = -1, e = 0;
  struct addrinfo *res = resolve(rv->addr, rv->port, &gai), *a;
  if (!res) return rt_comm_fail(c, "rank 0 cannot resolve MASTER_ADDR %s: %s", rv->addr, gai_strerror(gai));
  for (a = res; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) e = errno, close(fd), fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0)
    rt_comm_fail(
        c,
        "rank 0 cannot listen on %s:%d (MASTER_ADDR:MASTER_PORT; MASTER_ADDR must be an address of rank 0's "
        "host): %s",
        rv->addr, rv->port, strerror(e));
  return fd;
}

static void drop(Admit *A, int i) {
  close(A->p[i].fd);
  A->p[i] = A->p[--A->np];
  A->dropped++;
}

/* A new connection: it gets its challenge at once and RT_COMM_HELLO_TIMEOUT_S to answer it. */
static void take(Admit *A, int lfd) {
  int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return;
  if (A->np == MAX_PENDING) { /* a flood: the oldest (the nearest hello deadline) goes first */
    int old = 0;
    for (int i = 1; i < A->np; i++)
      if (A->p[i].deadline < A->p[old].deadline) old = i;
    drop(A, old);
  }
  Pending *p = &A->p[A->np];
  *p = (Pending){.fd = fd};
  unsigned char ch[RDV_CHALLENGE_BYTES];
  double hello_s = A->c->timeout_s < RT_COMM_HELLO_TIMEOUT_S ? A->c->timeout_s : RT_COMM_HELLO_TIMEOUT_S;
  p->deadline = rt_comm_now_s() + hello_s;
  peer_name(fd, p->peer, sizeof p->peer);
  set_opts(fd);
  A->np++;
  /* a fresh socket's buffer takes the whole challenge at once; if not, the peer is no rank */
  int ok = rdv_random(p->nonce, sizeof p->nonce) == 0;
  if (ok) rdv_challenge_encode(p->nonce, ch);
  if (!ok || send(fd, ch, sizeof ch, MSG_NOSIGNAL) != (ssize_t)sizeof ch) drop(A, A->np - 1);
}

/* Answers one connection (rank 0's welcome or refusal, signed for its nonces) and, unless it is a
 * rank kept, closes it. The answer is small: it fits the socket's buffer, the wait is short. */
static int answer(Admit *A, int fd, const unsigned char *cli, const unsigned char *srv, const RdvWelcome *w) {
  unsigned char out[RDV_WELCOME_BYTES];
  rdv_welcome_encode(w, cli, srv, A->rv->secret, out);
  return rt_comm_io_all(fd, out, sizeof out, 1, rt_comm_now_s() + RT_COMM_HELLO_TIMEOUT_S);
}

/* A hello that proves the secret: the job's own rank, admitted, or refused with the reason (a
 * rank outside the world or given twice fails the job: two holders of the secret disagree). */
static void admit_rank(Admit *A, Pending *p, const RdvHello *h) {
  RtComm *c = A->c;
  const RtRendezvous *rv = A->rv;
  int r = h->rank;
  if (r < 1 || r >= c->size || h->size != c->size || c->fd[r] >= 0) {
    RdvWelcome no = {0};
    snprintf(no.msg, sizeof no.msg, "rank 0 refuses a rank %d of a world of %d: the job has %d ranks%s", r,
             h->size, c->size,
             r >= 1 && r < c->size && c->fd[r] >= 0 ? " and that rank has joined already" : "");
    answer(A, p->fd, h->nonce, p->nonce, &no);
    close(p->fd);
    if (!A->why[0]) snprintf(A->why, sizeof A->why, "%s", no.msg);
    return; /* the job fails once every rank is in (or at the timeout) */
  }
  c->fd[r] = p->fd;
  memcpy(A->nonces[r][0], h->nonce, RDV_NONCE_BYTES);
  memcpy(A->nonces[r][1], p->nonce, RDV_NONCE_BYTES);
  A->came++;
  if (!A->why[0] && h->fingerprint != rv->fingerprint)
    snprintf(A->why, sizeof A->why,
             "rank %d runs another artifact (%s, step fingerprint %016llx) than rank 0 (%s, %016llx): "
             "every rank must run the same artifact",
             r, h->what, (unsigned long long)h->fingerprint, rv->what, (unsigned long long)rv->fingerprint);
  else if (!A->why[0] && h->plan_hash != rv->plan_hash)
    snprintf(A->why, sizeof A->why,
             "rank %d's artifact (%s) was planned for another data-parallel layout than rank 0's: "
             "rebuild them from one recipe",
             r, h->what);
}

/* A whole hello has arrived on pending connection i: admit it, or drop it as a stranger. */
static void hello_in(Admit *A, int i) {
  Pending p = A->p[i];
  A->p[i] = A->p[--A->np];
  RdvHello h;
  int d = rdv_hello_decode(p.buf, p.got, p.nonce, A->rv->secret, &h);
  if (d == RDV_OK) {
    admit_rank(A, &p, &h);
    return;
  }
  A->dropped++;
  if (d == RDV_BAD_MAC) { /* tell it why: a rank given another secret then fails at once, saying so */
    RdvWelcome no = {0};
    snprintf(no.msg, sizeof no.msg,
             "rank 0 refuses this connection: its hello does not prove the job secret (%s differs "
             "from rank 0's)",
             RDV_SECRET_ENV);
    answer(A, p.fd, h.nonce, p.nonce, &no);
    A->no_secret++;
    snprintf(A->no_secret_last, sizeof A->no_secret_last, "claiming rank %d, from %s", h.rank, p.peer);
  }
  close(p.fd);
}

/* Reads what pending connection i has sent; a stranger is dropped as soon as it shows itself. */
static void read_pending(Admit *A, int i) {
  Pending *p = &A->p[i];
  ssize_t k = recv(p->fd, p->buf + p->got, sizeof p->buf - p->got, 0);
  if (k < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (k > 0) p->got += (size_t)k;
  /* closed before its hello (a probe), or not a hello at all (HTTP, say): dropped at once */
  if (k <= 0 || (p->got >= 8 && !rdv_hello_magic(p->buf)))
    drop(A, i);
  else if (p->got == sizeof p->buf)
    hello_in(A, i);
}

/* One round: wait for the listener or a pending connection (or the nearest deadline), then serve. */
static void serve(Admit *A, int lfd) {
  struct pollfd pf[MAX_PENDING + 1] = {{.fd = lfd, .events = POLLIN}};
  double now = rt_comm_now_s(), until = A->deadline;
  for (int i = 0; i < A->np; i++) {
    pf[i + 1] = (struct pollfd){.fd = A->p[i].fd, .events = POLLIN};
    if (A->p[i].deadline < until) until = A->p[i].deadline;
  }
  int n = A->np, ms = until > now ? (int)((until - now) * 1e3) + 1 : 0;
  if (poll(pf, (nfds_t)n + 1, ms) < 0) return;
  /* back to front: serving i may move the last pending connection into slot i */
  for (int i = n - 1; i >= 0; i--)
    if (pf[i + 1].revents) read_pending(A, i);
  now = rt_comm_now_s();
  for (int i = A->np - 1; i >= 0; i--)
    if (A->p[i].deadline <= now) drop(A, i); /* idle: it never said who it is */
  if (pf[0].revents & POLLIN) take(A, lfd);
}

/* The timeout's message: who never came, and the strangers turned away meanwhile. */
static int admit_timeout(Admit *A) {
  char strangers[320] = "";
  if (A->dropped)
    snprintf(strangers, sizeof strangers,
             "; %d connection%s that did not prove the job secret %s dropped%s%s%s", A->dropped,
             A->dropped == 1 ? "" : "s", A->dropped == 1 ? "was" : "were",
             A->no_secret ? " (a stepc hello with another secret, the last " : "", A->no_secret_last,
             A->no_secret ? ": is that rank's " RDV_SECRET_ENV " rank 0's?)" : "");
  return rt_comm_fail(A->c, "rank 0: %d of %d ranks joined within %.0f s (the communicator's timeout)%s%s%s",
                      A->came, A->c->size, A->c->timeout_s, A->why[0] ? ": " : ": the others never came",
                      A->why, strangers);
}

/* Rank 0, once every rank is in: each gets the verdict (and NCCL's id), signed for its nonces. */
static int welcome_all(Admit *A) {
  RtComm *c = A->c;
  RdvWelcome wel = {.ok = !A->why[0]};
  snprintf(wel.msg, sizeof wel.msg, "%s", A->why);
  if (!A->why[0] && A->rv->make_id &&
      A->rv->make_id(A->rv->make_id_ctx, c->id, wel.msg, sizeof wel.msg) != 0) {
    wel.ok = 0;
    snprintf(A->why, sizeof A->why, "%s", wel.msg);
  }
  memcpy(wel.id, c->id, sizeof wel.id);
  for (int r = 1; r < c->size; r++)
    if (answer(A, c->fd[r], A->nonces[r][0], A->nonces[r][1], &wel) != 0)
      return rt_comm_fail(c, "rank 0: rank %d left during the rendezvous", r);
  if (A->why[0]) return rt_comm_fail(c, "the job does not start: %s", A->why);
  return 0;
}

static int admit(RtComm *c, const RtRendezvous *rv) {
  Admit *A = calloc(1, sizeof *A);
  if (!A || !(A->nonces = calloc((size_t)c->size, sizeof *A->nonces))) {
    free(A);
    return rt_comm_fail(c, "out of memory");
  }
  *A = (Admit){.c = c, .rv = rv, .deadline = rt_comm_now_s() + c->timeout_s, .came = 1, .nonces = A->nonces};
  int lfd = listen_on(c, rv), rc = lfd < 0 ? -1 : 0;
  while (!rc && A->came < c->size) {
    if (rt_comm_now_s() >= A->deadline)
      rc = admit_timeout(A);
    else
      serve(A, lfd);
  }
  if (lfd >= 0) close(lfd);
  while (A->np)
    close(A->p[--A->np].fd);
  if (!rc) rc = welcome_all(A);
  free(A->nonces), free(A);
  return rc;
}

static int connect_to(RtComm *c, const RtRendezvous *rv, double deadline) {
  for (;;) {
    int gai = 0;
    struct addrinfo *res = resolve(rv->addr, rv->port, &gai), *a;
    for (a = res; a; a = a->ai_next) {
      int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        freeaddrinfo(res);
        set_opts(fd);
        return fd;
      }
      close(fd);
    }
    if (res) freeaddrinfo(res);
    if (rt_comm_now_s() > deadline)
      return rt_comm_fail(
          c,
          "rank %d could not reach rank 0 at %s:%d within %.0f s (MASTER_ADDR / MASTER_PORT; is rank 0 "
          "running?)",
          rv->rank, rv->addr, rv->port, c->timeout_s);
    struct timespec ts = {0, 50 * 1000 * 1000}; /* rank 0 may not listen yet: retry */
    nanosleep(&ts, NULL);
  }
}

/* Rank r: rank 0's challenge, this rank's hello, rank 0's welcome — which must prove the secret
 * too, so that whatever else listens at MASTER_ADDR:MASTER_PORT cannot pose as rank 0. */
static int join(RtComm *c, const RtRendezvous *rv) {
  double deadline = rt_comm_now_s() + c->timeout_s;
  int fd = c->fd[0] = connect_to(c, rv, deadline);
  if (fd < 0) return -1;
  unsigned char ch[RDV_CHALLENGE_BYTES], hb[RDV_HELLO_BYTES], wb[RDV_WELCOME_BYTES], srv[RDV_NONCE_BYTES];
  int r = rt_comm_io_all(fd, ch, sizeof ch, 0, deadline);
  if (r == 0 && rdv_challenge_decode(ch, sizeof ch, srv) != RDV_OK)
    return rt_comm_fail(
        c,
        "rank %d: what answers at %s:%d is not a stepc rank 0 of this version (another program on "
        "MASTER_PORT?)",
        rv->rank, rv->addr, rv->port);
  RdvHello h = {
      .rank = rv->rank, .size = rv->size, .fingerprint = rv->fingerprint, .plan_hash = rv->plan_hash};
  snprintf(h.what, sizeof h.what, "%s", rv->what);
  if (r == 0 && rdv_random(h.nonce, sizeof h.nonce) != 0)
    return rt_comm_fail(c, "rank %d: no random numbers", rv->rank);
  if (r == 0) rdv_hello_encode(&h, srv, rv->secret, hb), r = rt_comm_io_all(fd, hb, sizeof hb, 1, deadline);
  if (r == 0) r = rt_comm_io_all(fd, wb, sizeof wb, 0, deadline);
  if (r == 1)
    return rt_comm_fail(c, "rank %d: rank 0 did not admit the job within %.0f s: some rank never came",
                        rv->rank, c->timeout_s);
  if (r != 0) return rt_comm_fail(c, "rank %d: rank 0 closed the connection during the rendezvous", rv->rank);
  RdvWelcome w;
  int d = rdv_welcome_decode(wb, sizeof wb, h.nonce, srv, rv->secret, &w);
  if (d != RDV_OK && !w.ok) return rt_comm_fail(c, "rank %d: the job does not start: %s", rv->rank, w.msg);
  if (d != RDV_OK)
    return rt_comm_fail(
        c,
        "rank %d: the answer from %s:%d does not prove the job secret: rank 0 was given another %s, or "
        "something else listens there",
        rv->rank, rv->addr, rv->port, RDV_SECRET_ENV);
  if (!w.ok) return rt_comm_fail(c, "rank %d: the job does not start: %s", rv->rank, w.msg);
  memcpy(c->id, w.id, sizeof c->id);
  return 0;
}

int rt_comm_rendezvous(RtComm *c, const RtRendezvous *rv) {
  if (!rv->secret || strlen(rv->secret) < RDV_SECRET_MIN)
    return rt_comm_fail(
        c, "rank %d: the rendezvous of %d ranks needs the job secret (%s, at least %d characters)", rv->rank,
        rv->size, RDV_SECRET_ENV, RDV_SECRET_MIN);
  return c->rank == 0 ? admit(c, rv) : join(c, rv);
}
