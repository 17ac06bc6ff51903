/* test_comm.c — runtime/comm.h's host collectives and rendezvous, ranks as threads (api.comm):
 * every collective against the sum in rank order computed here (values chosen so that the order
 * of the additions changes the result: the check is bitwise), three ranks (not a power of two),
 * a rank out of step reported by sequence and size, the id rank 0 makes reaching every rank, and
 * NCCL's unique id through the rendezvous when libnccl.so.2 loads (no GPU needed for that).
 * Security (issue 23): strangers at rank 0's port while the job gathers — an idle connection, an
 * HTTP health probe, a forged hello, a rank-1 impostor with another secret — are dropped without
 * failing the job or taking a rank's place; rank 0 listens on MASTER_ADDR only; a rendezvous
 * without the secret, and an infinite, NaN or negative timeout, are refused. */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../free_port.h"
#include "runtime/comm.h"
#include "runtime/rdv_wire.h"
#include "probe.h"
#include "runtime/comm_nccl.h"

#define N 3
#define LEN 1000

static int fails;
#define CHECK(c, ...)                                                                                      \
  do {                                                                                                     \
    if (!(c)) {                                                                                            \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                 \
      fprintf(stderr, __VA_ARGS__);                                                                        \
      fprintf(stderr, "\n");                                                                               \
      __atomic_add_fetch(&fails, 1, __ATOMIC_SEQ_CST);                                                     \
    }                                                                                                      \
  } while (0)

#define SECRET "test_comm's job secret, 0123456789"

static int port;
static int mode; /* 0 collectives, 1 a rank out of step, 2 NCCL's id */
static const char *addr = "127.0.0.1"; /* MASTER_ADDR */
static RtNccl *nccl;
static unsigned char ids[N][RT_COMM_ID_BYTES];

/* rank r's contribution: magnitudes far apart, so (a + b) + c != a + (b + c) */
static float val(int r, int i) { return (float)((r == 0 ? 1e8 : r == 1 ? -1e8 : 3.14159) * (1 + i % 7) + 0.1 * i); }

static int make_id_fixed(void *ctx, unsigned char id[RT_COMM_ID_BYTES], char *err, size_t nerr) {
  (void)ctx, (void)err, (void)nerr;
  for (int i = 0; i < RT_COMM_ID_BYTES; i++) id[i] = (unsigned char)(i * 7 + 1);
  return 0;
}

static void *rank_main(void *p) {
  int r = (int)(intptr_t)p;
  RtRendezvous rv = {.rank = r, .size = N, .port = port, .timeout_s = 10, .fingerprint = 42, .secret = SECRET,
                     .make_id = mode == 2 ? rt_nccl_make_id : make_id_fixed, .make_id_ctx = nccl};
  snprintf(rv.addr, sizeof rv.addr, "%s", addr);
  snprintf(rv.what, sizeof rv.what, "test");
  RtComm *c;
  char err[600];
  if (rt_comm_open(&rv, &c, err, sizeof err) != 0) {
    CHECK(0, "rank %d: %s", r, err);
    return NULL;
  }
  memcpy(ids[r], rt_comm_id(c), RT_COMM_ID_BYTES);
  if (mode == 1) { /* rank 1 sends 999 floats where the others send 1000 */
    float *b = calloc(LEN, sizeof *b);
    int rc = rt_comm_allreduce_sum(c, b, r == 1 ? LEN - 1 : LEN, RT_COMM_F32);
    CHECK(rc != 0, "rank %d: a rank out of step must fail the collective", r);
    CHECK(r != 0 || strstr(rt_comm_error(c), "out of step"), "rank 0's message: %s", rt_comm_error(c));
    if (r == 0) printf("out of step: %s\n", rt_comm_error(c));
    free(b);
    rt_comm_free(c);
    return NULL;
  }
  if (mode == 2) {
    rt_comm_free(c);
    return NULL;
  }
  float *b = malloc(LEN * sizeof *b), *all = malloc(N * LEN * sizeof *all), *shard = malloc(LEN * sizeof *shard);
  for (int i = 0; i < LEN; i++) b[i] = val(r, i);
  CHECK(rt_comm_allreduce_sum(c, b, LEN, RT_COMM_F32) == 0, "allreduce: %s", rt_comm_error(c));
  for (int i = 0; i < LEN; i++) {
    float want = val(0, i);
    for (int k = 1; k < N; k++) want += val(k, i);
    if (b[i] != want) {
      CHECK(0, "rank %d allreduce[%d] = %a, the sum in rank order %a", r, i, b[i], want);
      break;
    }
  }
  /* reduce-scatter: send N segments of LEN/N... use N * (LEN/N) elements */
  int seg = LEN / N;
  for (int i = 0; i < N * seg; i++) all[i] = val(r, i);
  CHECK(rt_comm_reduce_scatter_sum(c, all, shard, (size_t)seg, RT_COMM_F32) == 0, "reduce-scatter: %s", rt_comm_error(c));
  for (int i = 0; i < seg; i++) {
    float want = val(0, r * seg + i);
    for (int k = 1; k < N; k++) want += val(k, r * seg + i);
    if (shard[i] != want) {
      CHECK(0, "rank %d reduce-scatter[%d] = %a, want %a", r, i, shard[i], want);
      break;
    }
  }
  for (int i = 0; i < seg; i++) shard[i] = (float)(r * 10000 + i);
  CHECK(rt_comm_all_gather(c, shard, all, (size_t)seg * sizeof *shard) == 0, "all-gather: %s", rt_comm_error(c));
  for (int k = 0; k < N; k++)
    for (int i = 0; i < seg; i++)
      if (all[k * seg + i] != (float)(k * 10000 + i)) {
        CHECK(0, "rank %d all-gather: rank %d's element %d is %g", r, k, i, all[k * seg + i]);
        k = N;
        break;
      }
  for (int i = 0; i < LEN; i++) b[i] = r == 2 ? (float)i * 0.5f : -1;
  CHECK(rt_comm_broadcast(c, b, LEN * sizeof *b, 2) == 0, "broadcast: %s", rt_comm_error(c));
  for (int i = 0; i < LEN; i++)
    if (b[i] != (float)i * 0.5f) {
      CHECK(0, "rank %d broadcast[%d] = %g", r, i, b[i]);
      break;
    }
  double d = r + 0.25;
  CHECK(rt_comm_allreduce_sum(c, &d, 1, RT_COMM_F64) == 0 && d == (0.25 + 1.25) + 2.25, "f64 allreduce: %g", d);
  CHECK(rt_comm_barrier(c) == 0, "barrier: %s", rt_comm_error(c));
  free(b), free(all), free(shard);
  rt_comm_free(c);
  return NULL;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs the N ranks; `before` (when given) runs once rank 0 is up, before the others start. */
static double run_with(int m, void (*before)(void)) {
  pthread_t th[N];
  mode = m;
  port = free_port();
  memset(ids, 0, sizeof ids);
  double t0 = now_s();
  pthread_create(&th[0], NULL, rank_main, (void *)(intptr_t)0);
  if (before) before();
  for (int r = 1; r < N; r++) pthread_create(&th[r], NULL, rank_main, (void *)(intptr_t)r);
  for (int r = 0; r < N; r++) pthread_join(th[r], NULL);
  return now_s() - t0;
}

static void run(int m) { run_with(m, NULL); }

/* Waits until rank 0 listens at addr. */
static void await_rank0(void) { CHECK(probe_await(addr, port) == 0, "rank 0 never listened at %s:%d", addr, port); }

static int stranger_fd[3];
static char impostor_err[600];

/* Rank 1 with another secret: refused at once, saying why. */
static void *impostor(void *p) {
  (void)p;
  RtRendezvous rv = {.rank = 1, .size = N, .port = port, .timeout_s = 10, .fingerprint = 42,
                     .secret = "not the job's secret, 0123456789"};
  snprintf(rv.addr, sizeof rv.addr, "%s", addr);
  RtComm *c = NULL;
  CHECK(rt_comm_open(&rv, &c, impostor_err, sizeof impostor_err) != 0, "an impostor without the secret joined");
  rt_comm_free(c);
  return NULL;
}

/* Before ranks 1 and 2 come: an idle connection, an HTTP probe, a forged hello (the magic, then
 * noise, no valid MAC), and an impostor of rank 1 — all left open while the job gathers. */
static void strangers(void) {
  await_rank0();
  stranger_fd[0] = probe_dial(addr, port); /* idle: says nothing */
  stranger_fd[1] = probe_dial(addr, port);
  const char http[] = "GET /health HTTP/1.1\r\nHost: rank0\r\n\r\n";
  CHECK(stranger_fd[1] >= 0 && send(stranger_fd[1], http, sizeof http - 1, 0) > 0, "the HTTP probe");
  stranger_fd[2] = probe_dial(addr, port);
  unsigned char ch[RDV_CHALLENGE_BYTES], hello[RDV_HELLO_BYTES];
  for (size_t i = 0; i < sizeof hello; i++) hello[i] = (unsigned char)(i * 37 + 11);
  memcpy(hello, "STEPCRDH\2\0\0\0\1\0\0\0\3\0\0\0", 20); /* protocol 2, rank 1 of 3 */
  CHECK(stranger_fd[2] >= 0 && recv(stranger_fd[2], ch, sizeof ch, MSG_WAITALL) == (ssize_t)sizeof ch &&
            send(stranger_fd[2], hello, sizeof hello, 0) == (ssize_t)sizeof hello,
        "the forged hello");
  pthread_t t;
  pthread_create(&t, NULL, impostor, NULL);
  pthread_join(t, NULL);
}

/* Rank 0 listens on MASTER_ADDR (127.0.0.2 here): 127.0.0.1, another address of this host, is closed. */
static void listen_address(void) {
  await_rank0();
  int fd = probe_dial("127.0.0.1", port);
  CHECK(fd < 0 && errno == ECONNREFUSED, "rank 0 listens at 127.0.0.2 but 127.0.0.1:%d answers too (every interface)", port);
  if (fd >= 0) close(fd);
}

/* What rt_comm_open refuses before any socket: no secret, a timeout that is no bound. */
static void refusals(void) {
  static const double bad[] = {INFINITY, NAN, -1, 1e9};
  char err[600];
  RtComm *c = NULL;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    RtRendezvous rv = {.rank = 0, .size = 2, .port = free_port(), .timeout_s = bad[i], .secret = SECRET};
    snprintf(rv.addr, sizeof rv.addr, "127.0.0.1");
    double t0 = now_s();
    CHECK(rt_comm_open(&rv, &c, err, sizeof err) != 0 && strstr(err, "timeout") && now_s() - t0 < 1,
          "a timeout of %g s must be refused at once: %s", bad[i], err);
    if (i == 0) printf("timeout inf: %s\n", err);
  }
  RtRendezvous rv = {.rank = 1, .size = 2, .port = free_port(), .timeout_s = 1, .secret = "short"};
  snprintf(rv.addr, sizeof rv.addr, "127.0.0.1");
  CHECK(rt_comm_open(&rv, &c, err, sizeof err) != 0 && strstr(err, RDV_SECRET_ENV), "a short secret: %s", err);
  rv.secret = NULL;
  CHECK(rt_comm_open(&rv, &c, err, sizeof err) != 0 && strstr(err, RDV_SECRET_ENV), "no secret: %s", err);
  printf("no secret: %s\n", err);
}

int main(void) {
  run(0);
  for (int r = 0; r < N; r++) CHECK(ids[r][0] == 1 && ids[r][1] == 8, "rank %d did not receive rank 0's id", r);
  if (!fails) printf("ok: all-reduce, reduce-scatter (bitwise the sums in rank order), all-gather, broadcast, barrier, the id, on %d ranks\n", N);
  run(1);
  if (!fails) printf("ok: a rank out of step is reported, not mixed in\n");
  double wall = run_with(0, strangers);
  for (int i = 0; i < 3; i++)
    if (stranger_fd[i] >= 0) close(stranger_fd[i]);
  printf("impostor: %s\n", impostor_err);
  CHECK(strstr(impostor_err, "does not prove the job secret"), "the impostor's message: %s", impostor_err);
  /* the idle connection would hold the rendezvous for RT_COMM_HELLO_TIMEOUT_S at least */
  CHECK(wall < RT_COMM_HELLO_TIMEOUT_S - 2, "the job took %.1f s beside strangers", wall);
  if (!fails) printf("ok: an idle connection, an HTTP probe, a forged hello, an impostor with another secret: dropped; the job ran (%.2f s)\n", wall);
  addr = "127.0.0.2";
  run_with(0, listen_address);
  addr = "127.0.0.1";
  if (!fails) printf("ok: rank 0 listens on MASTER_ADDR only (127.0.0.2; 127.0.0.1 refused)\n");
  refusals();
  if (!fails) printf("ok: no secret, a short one, timeouts inf, NaN, -1, 1e9 refused\n");
  char err[512];
  if (rt_nccl_load(&nccl, err, sizeof err) != 0) {
    printf("skip the NCCL id: %s\n", err);
  } else {
    run(2);
    int zero = 1;
    for (int i = 0; i < RT_COMM_ID_BYTES; i++) zero &= ids[0][i] == 0;
    for (int r = 1; r < N; r++) CHECK(memcmp(ids[r], ids[0], RT_COMM_ID_BYTES) == 0, "rank %d has another NCCL id", r);
    CHECK(!zero, "rank 0 made no NCCL id");
    if (!fails) printf("ok: NCCL %d loaded with dlopen; its unique id made on rank 0 reaches every rank\n", rt_nccl_version(nccl));
    rt_nccl_free(nccl, 0);
  }
  return fails != 0;
}
