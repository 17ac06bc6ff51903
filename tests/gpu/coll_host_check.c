/* coll_host_check.c — the launch program's collectives (rt.h: RtColl, rt_coll) on the GPU.
 *
 *   coll_host_check [N]       host-staged (runtime/coll_host.h): N processes (default 2) that all
 *                             open GPU 0, join a host communicator on 127.0.0.1 and run every op
 *                             (all-reduce sum, max, all-gather, reduce-scatter, all-to-all) x (f32, bf16) x a
 *                             few sizes (one not a multiple of 8) plus in-place all-reduces over a
 *                             TP group of all N ranks: eagerly, then captured into one CUDA graph
 *                             replayed twice with new inputs; each result bitwise against the
 *                             group-order result computed here. Also: a group of one (a device
 *                             copy), a collective that was not prepared (refused with a message), and
 *                             a failure: rank N-1 exits, the others' next collective fails at once
 *                             (rt_coll_host_check names it), later ones and a graph replay finish
 *                             without hanging.
 *   coll_host_check nccl [N]  the same cases through NCCL (runtime/comm_nccl.h: RtCollNccl over a
 *                             TP communicator made by rt_nccl_split of the job's): N processes on N
 *                             GPUs (N = 1 runs on one GPU). Bitwise for N <= 2 (one addition per
 *                             element, commutative); N > 2 within NCCL's own order's rounding.
 *
 * Exit 0 all passed, 1 a failure, 77 no GPU (or fewer GPUs than NCCL ranks). Rank 0 prints a PASS
 * line per case and phase; every rank prints its FAILs and a summary. A rank that hangs is killed
 * after 60 s (a FAIL). */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "host_bits.h"
#include "runtime/coll_host.h"
#include "../free_port.h"
#include "runtime/comm.h"
#include "runtime/comm_nccl.h"
#include "runtime/rt.h"

#define MAX_RANKS 16
#define TIMEOUT_S 10.0 /* the communicator's: every wait on another rank */
#define SECRET "coll_host_check's job secret, 0123456789"

static int me, nranks, nccl_mode, fails, passes;

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL rank %d: ", me);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fails++;
  return 1;
}

static void pass(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void pass(const char *fmt, ...) {
  passes++;
  if (me != 0) return;
  va_list ap;
  va_start(ap, fmt);
  printf("PASS ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- data: rank r's element i in round `seed`, the same on every process ---- */

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* magnitudes 2^-20 .. 2^20 of either sign: the order of a sum changes its bits */
static float gen(uint64_t seed, int r, int64_t i) {
  uint64_t h = mix(seed * 0x100000001b3ull ^ mix((uint64_t)r * 0x1000193ull + (uint64_t)i));
  float m = 1.0f + (float)(h & 0xffffff) / 16777216.0f;
  return ldexpf(m, (int)((h >> 24) % 41) - 20) * ((h >> 40) & 1 ? -1.0f : 1.0f);
}

typedef struct {
  const char *name;
  RtColl c;
  size_t sb, db; /* bytes of src and dst */
} Case;

static const char *op_name(int64_t op) {
  static const char *n[] = {"allreduce_sum", "allreduce_max", "all_gather", "reduce_scatter", "all_to_all"};
  return n[op];
}

static size_t esize(const RtColl *c) { return c->dtype == RT_COLL_BF16 ? 2 : 4; }

/* element i of rank r's src, as stored (f32 bits, or bf16 bits in the low 16) */
static uint32_t src_bits(const RtColl *c, uint64_t seed, int r, int64_t i) {
  float f = gen(seed, r, i);
  if (c->dtype == RT_COLL_BF16) return host_f32_to_bf16(f);
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float as_float(const RtColl *c, uint32_t b) {
  if (c->dtype == RT_COLL_BF16) return host_bf16_to_f32((uint16_t)b);
  float f;
  memcpy(&f, &b, 4);
  return f;
}

static void fill_src(const RtColl *c, uint64_t seed, void *h, size_t sb) {
  size_t n = sb / esize(c);
  for (size_t i = 0; i < n; i++) {
    uint32_t b = src_bits(c, seed, me, (int64_t)i);
    if (c->dtype == RT_COLL_BF16)
      ((uint16_t *)h)[i] = (uint16_t)b;
    else
      ((uint32_t *)h)[i] = b;
  }
}

/* The group-order result's element i of this rank's dst (sum: fp32 member after member; bf16
 * rounded once at the end); *mag: the sum of magnitudes (NCCL's tolerance for N > 2). */
static uint32_t want_bits(const RtColl *c, uint64_t seed, int64_t i, double *mag) {
  int64_t n = c->count;
  *mag = 0;
  if (c->op == RT_COLL_ALL_GATHER) return src_bits(c, seed, (int)(i / n), i % n);
  if (c->op == RT_COLL_ALL_TO_ALL) return src_bits(c, seed, (int)(i / n), (int64_t)me * n + i % n);
  int64_t at = c->op == RT_COLL_REDUCE_SCATTER ? (int64_t)me * n + i : i;
  uint32_t best = src_bits(c, seed, 0, at);
  float acc = as_float(c, best);
  *mag = fabs(acc);
  for (int k = 1; k < nranks; k++) {
    uint32_t b = src_bits(c, seed, k, at);
    float v = as_float(c, b);
    acc += v, *mag += fabs(v);
    if (v > as_float(c, best)) best = b;
  }
  if (c->op == RT_COLL_ALLREDUCE_MAX) return best;
  if (c->dtype == RT_COLL_BF16) return host_f32_to_bf16(acc);
  uint32_t u;
  memcpy(&u, &acc, 4);
  return u;
}

/* 0 when dst matches (bitwise; NCCL with N > 2: sums within its rounding) */
static int compare(const Case *k, uint64_t seed, const void *dst, const char *phase) {
  const RtColl *c = &k->c;
  size_t n = k->db / esize(c);
  int exact = !nccl_mode || nranks <= 2 || c->op == RT_COLL_ALL_GATHER || c->op == RT_COLL_ALLREDUCE_MAX ||
              c->op == RT_COLL_ALL_TO_ALL;
  for (size_t i = 0; i < n; i++) {
    double mag;
    uint32_t w = want_bits(c, seed, (int64_t)i, &mag);
    uint32_t g = c->dtype == RT_COLL_BF16 ? ((const uint16_t *)dst)[i] : ((const uint32_t *)dst)[i];
    if (g == w) continue;
    double tol = (c->dtype == RT_COLL_BF16 ? 0x1p-7 : 0x1p-22) * mag * nranks;
    if (!exact && fabs((double)as_float(c, g) - (double)as_float(c, w)) <= tol) continue;
    fail("%s %s: element %zu of %zu is %#x (%g), the group-order result %#x (%g)", k->name, phase, i, n, g,
         (double)as_float(c, g), w, (double)as_float(c, w));
    return -1;
  }
  return 0;
}

/* ---- the cases ---- */

#define MAX_CASES 48
static Case cases[MAX_CASES];
static int ncases;
static char names[MAX_CASES][64];

static int make_cases(RtDevice *d) {
  static const int64_t counts[] = {1, 1000, 4099, 100003};
  for (int op = 0; op < RT_COLL_OPS; op++)
    for (int t = 0; t < RT_COLL_TYPES; t++)
      for (size_t s = 0; s < sizeof counts / sizeof counts[0]; s++) {
        Case *k = &cases[ncases];
        k->c = (RtColl){.op = op, .dtype = t, .group = RT_COLL_GROUP_TP, .count = counts[s]};
        snprintf(names[ncases], sizeof names[0], "%s %s count=%lld", op_name(op), t ? "bf16" : "f32",
                 (long long)counts[s]);
        k->name = names[ncases++];
      }
  for (int t = 0; t < RT_COLL_TYPES; t++) { /* in place: src == dst */
    Case *k = &cases[ncases];
    k->c = (RtColl){.op = RT_COLL_ALLREDUCE_SUM, .dtype = t, .group = RT_COLL_GROUP_TP, .count = 4099};
    snprintf(names[ncases], sizeof names[0], "allreduce_sum %s count=4099 in place", t ? "bf16" : "f32");
    k->name = names[ncases++];
  }
  for (int i = 0; i < ncases; i++) {
    Case *k = &cases[i];
    int64_t sb, db;
    rt_coll_bytes(&k->c, nranks, &sb, &db);
    k->sb = (size_t)sb, k->db = (size_t)db;
    if (rt_alloc(d, &k->c.src, k->sb, "src")) return -1;
    if (strstr(k->name, "in place"))
      k->c.dst = k->c.src;
    else if (rt_alloc(d, &k->c.dst, k->db, "dst"))
      return -1;
  }
  return 0;
}

static void *host_a, *host_b;
static size_t host_bytes;

/* new inputs of round `seed` for every case; the outputs poisoned (0xff: a NaN in both types) */
static int upload(RtDevice *d, uint64_t seed) {
  for (int i = 0; i < ncases; i++) {
    Case *k = &cases[i];
    if (k->c.dst != k->c.src) {
      memset(host_a, 0xff, k->db);
      if (rt_copy_h2d(d, k->c.dst, host_a, k->db)) return -1;
    }
    fill_src(&k->c, seed + (uint64_t)i * 1000, host_a, k->sb);
    if (rt_copy_h2d(d, k->c.src, host_a, k->sb) || rt_sync(d)) return -1;
  }
  return 0;
}

typedef int (*CheckFn)(void *ctx, char *err, size_t nerr);

/* rt_sync, the backend's own check, then every case's dst against the reference */
static void verify(RtDevice *d, uint64_t seed, const char *phase, CheckFn check, void *ctx) {
  char err[1024];
  if (rt_sync(d)) {
    fail("%s: %s", phase, d->err);
    return;
  }
  if (check && check(ctx, err, sizeof err)) {
    fail("%s: the backend reports %s", phase, err);
    return;
  }
  for (int i = 0; i < ncases; i++) {
    Case *k = &cases[i];
    if (rt_copy_d2h(d, host_b, k->c.dst, k->db)) {
      fail("%s: %s", phase, d->err);
      return;
    }
    if (compare(k, seed + (uint64_t)i * 1000, host_b, phase) == 0)
      pass("%s %s (%d ranks)", k->name, phase, nranks);
  }
}

static int host_check(void *ctx, char *err, size_t nerr) { return rt_coll_host_check(ctx, err, nerr); }

/* Prepare, eager, captured and replayed twice. */
static void run_cases(RtDevice *d, const RtCollOps *ops, CheckFn check, void *ctx) {
  for (int i = 0; i < ncases; i++)
    if (ops->prepare(ops->ctx, d, &cases[i].c)) {
      fail("prepare %s: %s", cases[i].name, d->err);
      return;
    }
  if (upload(d, 1)) {
    fail("upload: %s", d->err);
    return;
  }
  for (int i = 0; i < ncases; i++)
    if (rt_coll(d, &cases[i].c)) {
      fail("eager %s: %s", cases[i].name, d->err);
      return;
    }
  verify(d, 1, "eager", check, ctx);
  RtGraph g = {0};
  if (rt_capture_begin(d)) {
    fail("capture: %s", d->err);
    return;
  }
  int rc = 0;
  for (int i = 0; i < ncases && !rc; i++)
    rc = rt_coll(d, &cases[i].c);
  if (rc) {
    fail("captured rt_coll: %s", d->err);
    rt_clear_error(d);
    RtGraph dead = {0};
    rt_capture_end(d, &dead); /* ends the capture, whatever it says */
    rt_graph_destroy(d, &dead);
    return;
  }
  if (rt_capture_end(d, &g)) {
    fail("capture end: %s", d->err);
    return;
  }
  if (me == 0) printf("graph: %d collectives captured as %zu nodes\n", ncases, g.nodes);
  for (uint64_t round = 2; round <= 3; round++) {
    if (upload(d, round)) {
      fail("upload: %s", d->err);
      return;
    }
    if (rt_graph_launch(d, &g)) {
      fail("graph launch: %s", d->err);
      return;
    }
    char phase[32];
    snprintf(phase, sizeof phase, "graph replay %d", (int)round - 1);
    verify(d, round, phase, check, ctx);
  }
  rt_graph_destroy(d, &g);
}

/* ---- host-staged ---- */

static int open_comm(int port, RtComm **c, RtNccl *nccl) {
  RtRendezvous rv = {.rank = me,
                     .size = nranks,
                     .port = port,
                     .timeout_s = TIMEOUT_S,
                     .fingerprint = 1,
                     .secret = SECRET,
                     .make_id = nccl ? rt_nccl_make_id : NULL,
                     .make_id_ctx = nccl};
  snprintf(rv.addr, sizeof rv.addr, "127.0.0.1");
  snprintf(rv.what, sizeof rv.what, "coll_host_check");
  char err[600];
  if (rt_comm_open(&rv, c, err, sizeof err)) {
    fail("rt_comm_open: %s", err);
    return -1;
  }
  return 0;
}

/* A TP group of one (this rank alone): a device copy, or nothing in place. */
static void group_of_one(RtDevice *d, RtComm *comm) {
  RtCollHost *h;
  char err[600];
  RtCommGroup one = {me, 1, 1};
  if (rt_coll_host_new(comm, &one, 0, NULL, 0, &h, err, sizeof err)) {
    fail("group of one: %s", err);
    return;
  }
  const RtCollOps *ops = rt_coll_host_ops(h);
  const RtCollOps *saved = d->coll;
  d->coll = ops;
  CUdeviceptr src = cases[ncases - 1].c.src, dst = cases[2].c.dst;
  RtColl c = {.op = RT_COLL_ALL_GATHER,
              .dtype = RT_COLL_F32,
              .group = RT_COLL_GROUP_TP,
              .count = 1000,
              .src = src,
              .dst = dst};
  RtColl inplace = c;
  inplace.op = RT_COLL_ALLREDUCE_SUM, inplace.dst = src;
  fill_src(&c, 77, host_a, 4000);
  if (ops->prepare(ops->ctx, d, &c) || ops->prepare(ops->ctx, d, &inplace) ||
      rt_copy_h2d(d, src, host_a, 4000) || rt_coll(d, &c) || rt_coll(d, &inplace) ||
      rt_copy_d2h(d, host_b, dst, 4000) || rt_coll_host_check(h, err, sizeof err))
    fail("group of one: %s %s", d->err, err);
  else if (memcmp(host_a, host_b, 4000))
    fail("group of one: dst is not src");
  else if (rt_copy_d2h(d, host_b, src, 4000) || memcmp(host_a, host_b, 4000))
    fail("group of one, in place: src changed");
  else
    pass("a group of one: a device copy, nothing in place");
  d->coll = saved;
  rt_coll_host_free(h);
}

static void not_prepared(RtDevice *d) {
  RtColl c = cases[1].c;
  c.dst = cases[2].c.dst; /* another destination: another collective */
  if (rt_coll(d, &c) == 0 || !strstr(d->err, "not prepared"))
    fail("an unprepared collective ran (or said '%s')", d->err);
  else
    pass("an unprepared collective refused: %s", d->err);
  rt_clear_error(d);
}

static void failure(RtDevice *d, RtComm *comm, RtCollHost *h) {
  if (rt_comm_barrier(comm)) {
    fail("barrier before the failure case: %s", rt_comm_error(comm));
    return;
  }
  if (me == nranks - 1) {
    printf("rank %d: exits now (the failure case) after %d checks passed, %d failed\n", me, passes, fails);
    fflush(stdout);
    _exit(fails ? 1 : 0); /* no cleanup: the sockets close as a crash's would */
  }
  char err[1024];
  double t0 = now_s();
  if (rt_coll(d, &cases[5].c) || rt_sync(d)) {
    fail("failure case: the stream failed: %s", d->err);
    return;
  }
  double t1 = now_s();
  if (rt_coll_host_check(h, err, sizeof err) == 0) {
    fail("failure case: rank %d's exit went unnoticed", nranks - 1);
    return;
  }
  if (t1 - t0 > TIMEOUT_S + 2) fail("failure case: noticed after %.1f s", t1 - t0);
  if (!strstr(err, "all-reduce (sum)") || !strstr(err, "1000 bf16") || !strstr(err, "TP group"))
    fail("failure case: the message does not name the op, count, type and group: %s", err);
  printf("rank %d: failure reported after %.2f s: %s\n", me, t1 - t0, err);
  /* later collectives, eager and a graph, do nothing and finish */
  RtGraph g = {0};
  double t2 = now_s();
  int rc = rt_coll(d, &cases[6].c) || rt_sync(d) || rt_capture_begin(d) || rt_coll(d, &cases[7].c) ||
           rt_coll(d, &cases[20].c) || rt_capture_end(d, &g) || rt_graph_launch(d, &g) || rt_sync(d);
  double t3 = now_s();
  char err2[1024];
  if (rc)
    fail("after the failure: %s", d->err);
  else if (rt_coll_host_check(h, err2, sizeof err2) == 0 || strcmp(err, err2))
    fail("after the failure the check says '%s'", err2);
  else if (t3 - t2 > 2)
    fail("after the failure, later collectives took %.1f s", t3 - t2);
  else
    pass("failure: rank %d exited, the collective failed in %.2f s, later ones (eager, a graph) finished in "
         "%.3f s",
         nranks - 1, t1 - t0, t3 - t2);
  rt_graph_destroy(d, &g);
}

static int rank_host(int port) {
  RtDevice d;
  int rc = rt_open(&d);
  if (rc == RT_NO_DEVICE) return 77;
  if (rc) return fail("rt_open: %s", d.err), 1;
  RtComm *comm = NULL;
  RtCollHost *h = NULL;
  char err[600];
  if (open_comm(port, &comm, NULL)) goto out;
  RtCommGroup tp = {0, 1, nranks};
  if (rt_coll_host_new(comm, &tp, me, NULL, 0, &h, err, sizeof err)) {
    fail("rt_coll_host_new: %s", err);
    goto out;
  }
  /* a rank that is not the member it says is refused */
  RtCollHost *bad = NULL;
  if (nranks > 1 && rt_coll_host_new(comm, &tp, (me + 1) % nranks, NULL, 0, &bad, err, sizeof err) == 0)
    fail("rt_coll_host_new took a wrong member"), rt_coll_host_free(bad);
  if (make_cases(&d)) {
    fail("allocations: %s", d.err);
    goto out;
  }
  d.coll = rt_coll_host_ops(h);
  run_cases(&d, d.coll, host_check, h);
  not_prepared(&d);
  group_of_one(&d, comm);
  if (nranks > 1 && !fails) failure(&d, comm, h);
out:
  rt_sync(&d);
  rt_coll_host_free(h);
  rt_comm_free(comm);
  rt_close(&d);
  printf("rank %d: %d checks passed, %d failed\n", me, passes, fails);
  return fails ? 1 : 0;
}

/* ---- NCCL ---- */

static int nccl_check_fn(void *ctx, char *err, size_t nerr) { return rt_nccl_check(ctx, err, nerr); }

static int rank_nccl(int port) {
  RtDevice d;
  int rc = rt_open_device(&d, me);
  if (rc == RT_NO_DEVICE) return 77;
  if (rc) return fail("rt_open_device %d: %s", me, d.err), 1;
  RtNccl *job = NULL, *tp = NULL;
  RtComm *comm = NULL;
  char err[600];
  if (rt_nccl_load(&job, err, sizeof err)) {
    fail("%s", err);
    goto out;
  }
  if (open_comm(port, &comm, job)) goto out;
  if (rt_nccl_init(job, rt_comm_id(comm), nranks, me, err, sizeof err) ||
      rt_nccl_split(job, 0, me, &tp, err, sizeof err)) {
    fail("%s", err);
    goto out;
  }
  if (rt_nccl_rank(tp) != me || rt_nccl_size(tp) != nranks)
    fail("the split communicator: rank %d of %d", rt_nccl_rank(tp), rt_nccl_size(tp));
  RtNccl *none = NULL;
  if (rt_nccl_split(job, -1, me, &none, err, sizeof err) == 0)
    fail("a split of color -1 made a communicator");
  if (me == 0)
    printf("NCCL %d; split: rank %d of %d\n", rt_nccl_version(job), rt_nccl_rank(tp), rt_nccl_size(tp));
  RtCollNccl cn;
  rt_coll_nccl_init(&cn);
  cn.group[RT_COLL_GROUP_TP] = tp;
  if (make_cases(&d)) {
    fail("allocations: %s", d.err);
    goto out;
  }
  d.coll = &cn.ops;
  RtColl ep = cases[0].c;
  ep.group = RT_COLL_GROUP_EP;
  if (cn.ops.prepare(cn.ops.ctx, &d, &ep) == 0 || !strstr(d.err, "no communicator"))
    fail("an EP collective without an EP communicator prepared (%s)", d.err);
  rt_clear_error(&d);
  run_cases(&d, d.coll, nccl_check_fn, tp);
out:
  rt_sync(&d);
  /* the parent first: the child keeps its own reference to the library */
  rt_nccl_free(job, fails != 0);
  rt_nccl_free(tp, fails != 0);
  rt_comm_free(comm);
  rt_close(&d);
  printf("rank %d: %d checks passed, %d failed\n", me, passes, fails);
  return fails ? 1 : 0;
}

/* ---- the parent: no CUDA here (a forked child cannot use a parent's context) ---- */

/* The number of GPUs, in a child: 0 none (or no driver). */
static int gpu_count(void) {
  pid_t p = fork();
  if (p == 0) {
    RtDevice d;
    int rc = rt_open(&d), n = 0;
    if (rc == RT_OK) d.cuDeviceGetCount(&n), rt_close(&d);
    _exit(n > 100 ? 100 : n);
  }
  int st = 0;
  if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st)) return 0;
  return WEXITSTATUS(st);
}

int main(int argc, char **argv) {
  int a = 1;
  if (a < argc && !strcmp(argv[a], "nccl")) nccl_mode = 1, a++;
  nranks = a < argc ? atoi(argv[a]) : 2;
  if (nranks < 1 || nranks > MAX_RANKS) {
    fprintf(stderr, "usage: coll_host_check [nccl] [N in 1..%d]\n", MAX_RANKS);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  int gpus = gpu_count();
  if (gpus < 1 || (nccl_mode && gpus < nranks)) {
    printf("SKIP: %d GPU(s) here; %s %d rank(s) needs %d\n", gpus,
           nccl_mode ? "NCCL with" : "host-staged with", nranks, nccl_mode ? nranks : 1);
    return 77;
  }
  printf("%s collectives, %d ranks%s\n", nccl_mode ? "NCCL" : "host-staged", nranks,
         nccl_mode ? " on as many GPUs" : " on GPU 0");
  int port = free_port();
  pid_t pid[MAX_RANKS];
  for (int r = 0; r < nranks; r++) {
    pid[r] = fork();
    if (pid[r] == 0) {
      me = r;
      host_bytes = 0x800000; /* the largest case: 100003 x 4 x 16 ranks, rounded up */
      host_a = malloc(host_bytes), host_b = malloc(host_bytes);
      alarm(60); /* a rank that hangs dies (SIGALRM), failing the test */
      _exit(nccl_mode ? rank_nccl(port) : rank_host(port));
    }
  }
  int bad = 0, skipped = 0;
  for (int r = 0; r < nranks; r++) {
    int st = 0;
    waitpid(pid[r], &st, 0);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (code == 77) skipped++;
    if (code != 0 && code != 77)
      printf("FAIL: rank %d ended with %d%s\n", r, code, code == 128 + SIGALRM ? " (hung)" : "");
    bad |= code != 0 && code != 77;
  }
  if (skipped == nranks) return 77;
  bad |= skipped != 0;
  printf("%s\n", bad ? "FAIL" : "PASS: all ranks");
  return bad ? 1 : 0;
}
