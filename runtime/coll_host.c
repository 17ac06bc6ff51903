/* coll_host.c — the host-staged collectives (coll_host.h): D2H copy, a host function doing the
 * host communicator's group collective, H2D copy, all on the device's stream.
 *
 * Jobs: the host function's userData must stay valid for every replay of a graph that holds it,
 * so each distinct collective (every RtColl field) staged through one staging pair has one job,
 * made once and kept until rt_coll_host_free; run looks it up. The staging pair is shared by every
 * job (the stream runs them one after another) and is allocated in prepare only (run may be
 * inside a capture, where cuMemHostAlloc is not allowed). A job names the pair it copies through:
 * a graph's copy nodes hold those addresses, so a pair that prepare replaced after collectives had
 * been enqueued through it is retired, not freed, and its jobs stay as they are.
 *
 * The failure flag and message are written on CUDA's callback thread and read on the caller's
 * after the stream synchronised: the message first, then the flag with release order; the reader
 * loads the flag with acquire order. */
#include "runtime/coll_host.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm_internal.h"

typedef struct {
  RtCollHost *h;
  RtColl c;
  unsigned char *in, *out; /* the staging its copies use; an all-reduce works in place in `in` (out NULL) */
} Job;

struct RtCollHost {
  RtComm *comm;
  RtCommGroup group[RT_COLL_GROUPS];
  int member[RT_COLL_GROUPS], has[RT_COLL_GROUPS];
  RtCollOps ops;
  RtDevice *d; /* the device prepare ran on: the staging's pinned memory is its context's */
  /* registered collectives (prepare), and the jobs (one per collective and staging pair) */
  RtColl *keys;
  int nkeys, capkeys, last_key;
  Job **jobs;
  int njobs, capjobs, last_job;
  /* the staging pair, pinned; used_*: collectives were enqueued through that buffer */
  unsigned char *in, *out;
  size_t nin, nout;
  int used_in, used_out;
  void **retired; /* earlier pairs' buffers, freed at rt_coll_host_free */
  int nretired, capretired;
  /* the callback thread's side */
  int failed;        /* __atomic: set after err is written */
  unsigned long ran; /* __atomic: host functions run so far */
  char err[768];
};

static const char *op_name(int64_t op) {
  switch (op) {
  case RT_COLL_ALLREDUCE_SUM: return "all-reduce (sum)";
  case RT_COLL_ALLREDUCE_MAX: return "all-reduce (max)";
  case RT_COLL_ALL_GATHER: return "all-gather";
  case RT_COLL_REDUCE_SCATTER: return "reduce-scatter";
  case RT_COLL_ALL_TO_ALL: return "all-to-all";
  }
  return "an unknown collective";
}

static const char *type_name(int64_t t) {
  return t == RT_COLL_BF16 ? "bf16" : t == RT_COLL_F32 ? "f32" : "?";
}
static const char *group_name(int64_t g) {
  return g == RT_COLL_GROUP_EP     ? "EP"
         : g == RT_COLL_GROUP_TP   ? "TP"
         : g == RT_COLL_GROUP_DP   ? "DP"
         : g == RT_COLL_GROUP_EDP  ? "expert-DP"
         : g == RT_COLL_GROUP_AMAX ? "amax (every rank)"
                                   : "?";
}

/* "all-reduce (sum) of 4099 bf16 over the TP group (2 ranks from rank 0, stride 1; member 1)" */
static void describe(const RtCollHost *h, const RtColl *c, char *s, size_t n) {
  int known = c->group >= 0 && c->group < RT_COLL_GROUPS && h->has[c->group];
  const RtCommGroup *g = known ? &h->group[c->group] : NULL;
  if (g)
    snprintf(s, n, "%s of %lld %s over the %s group (%d ranks from rank %d, stride %d; member %d)",
             op_name(c->op), (long long)c->count, type_name(c->dtype), group_name(c->group), g->count,
             g->first, g->stride, h->member[c->group]);
  else
    snprintf(s, n, "%s of %lld %s over the %s group (op %lld, type %lld, group %lld)", op_name(c->op),
             (long long)c->count, type_name(c->dtype), group_name(c->group), (long long)c->op,
             (long long)c->dtype, (long long)c->group);
}

static int same(const RtColl *a, const RtColl *b) {
#define CH_EQ(f)                                                                                             \
  if (a->f != b->f) return 0;
  RT_COLL_FIELDS(CH_EQ, CH_EQ, CH_EQ)
#undef CH_EQ
  return 1;
}

static int group_ok(const RtComm *comm, const RtCommGroup *g, int member, const char *what, char *err,
                    size_t nerr) {
  if (g->count < 1 || g->stride < 1 || g->first < 0 ||
      (int64_t)g->first + (int64_t)(g->count - 1) * g->stride >= comm->size)
    return snprintf(err, nerr,
                    "the %s group (%d ranks from rank %d, stride %d) is outside the job's %d ranks", what,
                    g->count, g->first, g->stride, comm->size),
           -1;
  if (member < 0 || member >= g->count || g->first + member * g->stride != comm->rank)
    return snprintf(err, nerr, "rank %d is not member %d of its %s group (%d ranks from rank %d, stride %d)",
                    comm->rank, member, what, g->count, g->first, g->stride),
           -1;
  return 0;
}

static int prepare(void *ctx, RtDevice *d, const RtColl *c);
static int run(void *ctx, RtDevice *d, const RtColl *c);

int rt_coll_host_new(RtComm *comm, const RtCommGroup *tp, int tp_member, const RtCommGroup *ep, int ep_member,
                     RtCollHost **out, char *err, size_t nerr) {
  *out = NULL;
  if (!comm || !tp) return snprintf(err, nerr, "host collectives: no communicator or no TP group"), -1;
  if (group_ok(comm, tp, tp_member, "TP", err, nerr)) return -1;
  if (ep && group_ok(comm, ep, ep_member, "EP", err, nerr)) return -1;
  RtCollHost *h = calloc(1, sizeof *h);
  if (!h) return snprintf(err, nerr, "out of memory"), -1;
  h->comm = comm;
  h->group[RT_COLL_GROUP_TP] = *tp, h->member[RT_COLL_GROUP_TP] = tp_member, h->has[RT_COLL_GROUP_TP] = 1;
  if (ep)
    h->group[RT_COLL_GROUP_EP] = *ep, h->member[RT_COLL_GROUP_EP] = ep_member, h->has[RT_COLL_GROUP_EP] = 1;
  h->ops = (RtCollOps){.prepare = prepare, .run = run, .ctx = h};
  *out = h;
  return 0;
}

const RtCollOps *rt_coll_host_ops(RtCollHost *h) { return &h->ops; }

int rt_coll_host_check(RtCollHost *h, char *err, size_t nerr) {
  if (!__atomic_load_n(&h->failed, __ATOMIC_ACQUIRE)) return 0;
  snprintf(err, nerr, "%s", h->err);
  return -1;
}

void rt_coll_host_free(RtCollHost *h) {
  if (!h) return;
  if (h->d) {
    if (h->in) h->d->cuMemFreeHost(h->in);
    if (h->out) h->d->cuMemFreeHost(h->out);
    for (int i = 0; i < h->nretired; i++)
      h->d->cuMemFreeHost(h->retired[i]);
  }
  for (int i = 0; i < h->njobs; i++)
    free(h->jobs[i]);
  free(h->jobs), free(h->keys), free(h->retired), free(h);
}

/* ---- the host function (CUDA's callback thread: no CUDA calls here) ---- */

/* out's block s (bytes each) := member s's block `member` of in: every member's whole in gathered,
 * then this member's blocks picked (simple, like every host collective; the bytes cross TCP once
 * more than an exchange would). */
static int all_to_all(RtCollHost *h, const RtCommGroup *g, int member, const unsigned char *in,
                      unsigned char *out, size_t bytes) {
  size_t size = (size_t)g->count;
  unsigned char *all = malloc(size * size * bytes + 1);
  if (!all) return rt_comm_fail(h->comm, "host all-to-all: out of memory");
  int rc = rt_comm_group_all_gather(h->comm, g, in, all, size * bytes);
  for (size_t s = 0; s < size && rc == 0; s++)
    memcpy(out + s * bytes, all + (s * size + (size_t)member) * bytes, bytes);
  free(all);
  return rc;
}

static void CUDA_CB host_fn(void *user) {
  Job *j = user;
  RtCollHost *h = j->h;
  if (__atomic_load_n(&h->failed, __ATOMIC_ACQUIRE)) return; /* an earlier one failed: the step is lost */
  unsigned long k = __atomic_add_fetch(&h->ran, 1, __ATOMIC_RELAXED);
  const RtColl *c = &j->c;
  const RtCommGroup *g = &h->group[c->group];
  RtCommType t = c->dtype == RT_COLL_BF16 ? RT_COMM_BF16 : RT_COMM_F32;
  size_t n = (size_t)c->count, es = c->dtype == RT_COLL_BF16 ? 2 : 4;
  int rc = -1;
  switch (c->op) {
  case RT_COLL_ALLREDUCE_SUM:
  case RT_COLL_ALLREDUCE_MAX:
    rc = rt_comm_group_allreduce(h->comm, g, j->in, n, t, c->op == RT_COLL_ALLREDUCE_MAX);
    if (rc == 0 && c->div > 1 && c->dtype == RT_COLL_F32) /* the data-parallel mean, as the CPU's */
      for (size_t i = 0; i < n; i++)
        ((float *)j->in)[i] /= (float)c->div;
    break;
  case RT_COLL_ALL_GATHER: rc = rt_comm_group_all_gather(h->comm, g, j->in, j->out, n * es); break;
  case RT_COLL_REDUCE_SCATTER:
    rc = rt_comm_group_reduce_scatter(h->comm, g, h->member[c->group], j->in, j->out, n, t);
    if (rc == 0 && c->div > 1 && c->dtype == RT_COLL_F32) /* ZeRO-1's mean of a gradient block */
      for (size_t i = 0; i < n; i++)
        ((float *)j->out)[i] /= (float)c->div;
    break;
  case RT_COLL_ALL_TO_ALL: rc = all_to_all(h, g, h->member[c->group], j->in, j->out, n * es); break;
  }
  if (rc == 0) return;
  char what[256];
  describe(h, c, what, sizeof what);
  snprintf(h->err, sizeof h->err, "host collective #%lu, %s, failed: %s", k, what, rt_comm_error(h->comm));
  __atomic_store_n(&h->failed, 1, __ATOMIC_RELEASE);
}

/* ---- prepare and run (the caller's thread) ---- */

static int uses_out(const RtColl *c) {
  return c->op == RT_COLL_ALL_GATHER || c->op == RT_COLL_REDUCE_SCATTER || c->op == RT_COLL_ALL_TO_ALL;
}

/* Bytes staged in and out (0, 0 for a group of one: a device copy, no staging). */
static void staged(const RtCollHost *h, const RtColl *c, size_t *in, size_t *out) {
  int size = h->group[c->group].count;
  int64_t sb = 0, db = 0;
  rt_coll_bytes(c, size, &sb, &db);
  int alone = size == 1 && c->div <= 1; /* a group of one: a device copy, unless it divides */
  *in = !alone ? (size_t)sb : 0;
  *out = !alone && uses_out(c) ? (size_t)db : 0;
}

static int checked(RtCollHost *h, RtDevice *d, const RtColl *c, const char *when) {
  char what[256];
  describe(h, c, what, sizeof what);
  if (c->op < 0 || c->op >= RT_COLL_OPS || (c->dtype != RT_COLL_F32 && c->dtype != RT_COLL_BF16) ||
      c->group < 0 || c->group >= RT_COLL_GROUPS)
    return rt_fail(d, "host collectives, %s: %s is not a collective they run", when, what);
  if (c->div < 0 || (c->div > 1 && ((c->op != RT_COLL_ALLREDUCE_SUM && c->op != RT_COLL_REDUCE_SCATTER) ||
                                    c->dtype != RT_COLL_F32)))
    return rt_fail(d,
                   "host collectives, %s: %s divides by %lld (only an fp32 all-reduce or reduce-scatter sum "
                   "divides)",
                   when, what, (long long)c->div);
  if (!h->has[c->group])
    return rt_fail(d, "host collectives, %s: %s, but this job has no %s group", when, what,
                   group_name(c->group));
  if (c->count > ((int64_t)1 << 40) / 4 / (h->group[c->group].count))
    return rt_fail(d, "host collectives, %s: %s is too large to stage", when, what);
  if (d->rec || !d->lib)
    return rt_fail(d, "host collectives, %s: %s on a device without a driver", when, what);
  if (h->d && h->d != d)
    return rt_fail(d, "host collectives, %s: %s on another device than the one they were prepared on", when,
                   what);
  return RT_OK;
}

/* A buffer of the staging pair that prepare replaces: freed (with the jobs made for it) when
 * nothing was enqueued through it, else kept until rt_coll_host_free. */
static int retire(RtCollHost *h, RtDevice *d, void *p, int used) {
  if (!p) return RT_OK;
  if (!used) { /* no graph holds it, and no job of it ran */
    int n = 0;
    for (int i = 0; i < h->njobs; i++)
      if ((void *)h->jobs[i]->in == p || (void *)h->jobs[i]->out == p)
        free(h->jobs[i]);
      else
        h->jobs[n++] = h->jobs[i];
    h->njobs = n, h->last_job = 0;
    d->cuMemFreeHost(p);
    return RT_OK;
  }
  if (h->nretired == h->capretired) {
    int cap = h->capretired ? 2 * h->capretired : 4;
    void **r = realloc(h->retired, (size_t)cap * sizeof *r);
    if (!r) return rt_fail(d, "host collectives: out of memory");
    h->retired = r, h->capretired = cap;
  }
  h->retired[h->nretired++] = p;
  return RT_OK;
}

/* Grows one buffer of the staging pair to `need` bytes (a new pinned allocation). */
static int grow(RtCollHost *h, RtDevice *d, unsigned char **buf, size_t *have, int *used, size_t need,
                const char *what) {
  if (need <= *have) return RT_OK;
  void *p = NULL;
  CUresult r = d->cuMemHostAlloc(&p, need, 0);
  if (r != CUDA_SUCCESS) {
    char m[96];
    snprintf(m, sizeof m, "host collectives: cuMemHostAlloc of %zu bytes of %s staging", need, what);
    return rt_check(d, r, m);
  }
  if (retire(h, d, *buf, *used)) {
    d->cuMemFreeHost(p);
    return RT_ERROR;
  }
  *buf = p, *have = need, *used = 0;
  return RT_OK;
}

static Job *find_job(RtCollHost *h, const RtColl *c) {
  unsigned char *out = uses_out(c) ? h->out : NULL;
  for (int i = 0; i < h->njobs; i++) {
    int at = (h->last_job + 1 + i) % h->njobs; /* a program runs its collectives in order */
    Job *j = h->jobs[at];
    if (j->in == h->in && j->out == out && same(&j->c, c)) {
      h->last_job = at;
      return j;
    }
  }
  return NULL;
}

/* The job of c through the current staging pair, made when there is none (plain host memory:
 * allowed during a capture). */
static Job *job_of(RtCollHost *h, RtDevice *d, const RtColl *c) {
  Job *j = find_job(h, c);
  if (j) return j;
  if (h->njobs == h->capjobs) {
    int cap = h->capjobs ? 2 * h->capjobs : 16;
    Job **js = realloc(h->jobs, (size_t)cap * sizeof *js);
    if (!js) return rt_fail(d, "host collectives: out of memory"), NULL;
    h->jobs = js, h->capjobs = cap;
  }
  if (!(j = malloc(sizeof *j))) return rt_fail(d, "host collectives: out of memory"), NULL;
  *j = (Job){.h = h, .c = *c, .in = h->in, .out = uses_out(c) ? h->out : NULL};
  h->last_job = h->njobs;
  h->jobs[h->njobs++] = j;
  return j;
}

static int find_key(RtCollHost *h, const RtColl *c) {
  for (int i = 0; i < h->nkeys; i++) {
    int at = (h->last_key + 1 + i) % h->nkeys;
    if (same(&h->keys[at], c)) return h->last_key = at, 1;
  }
  return 0;
}

static int prepare(void *ctx, RtDevice *d, const RtColl *c) {
  RtCollHost *h = ctx;
  if (c->count <= 0) return RT_OK; /* rt_coll runs nothing for it */
  if (checked(h, d, c, "prepare")) return RT_ERROR;
  h->d = d;
  size_t in, out;
  staged(h, c, &in, &out);
  if (grow(h, d, &h->in, &h->nin, &h->used_in, in, "input") ||
      grow(h, d, &h->out, &h->nout, &h->used_out, out, "output"))
    return RT_ERROR;
  if (find_key(h, c)) return RT_OK;
  if (h->nkeys == h->capkeys) {
    int cap = h->capkeys ? 2 * h->capkeys : 16;
    RtColl *k = realloc(h->keys, (size_t)cap * sizeof *k);
    if (!k) return rt_fail(d, "host collectives: out of memory");
    h->keys = k, h->capkeys = cap;
  }
  h->last_key = h->nkeys;
  h->keys[h->nkeys++] = *c;
  if (in && !job_of(h, d, c)) return RT_ERROR; /* made now, so that run rarely allocates */
  return RT_OK;
}

static int run(void *ctx, RtDevice *d, const RtColl *c) {
  RtCollHost *h = ctx;
  if (c->count <= 0) return RT_OK;
  if (checked(h, d, c, "run")) return RT_ERROR;
  if (!h->d || !find_key(h, c)) {
    char what[256];
    describe(h, c, what, sizeof what);
    return rt_fail(
        d,
        "host collectives: %s at src %#llx, dst %#llx was not prepared (every collective of a program "
        "is prepared at open, outside any capture)",
        what, (unsigned long long)c->src, (unsigned long long)c->dst);
  }
  size_t in, out;
  staged(h, c, &in, &out);
  int64_t sb = 0, db = 0;
  rt_coll_bytes(c, h->group[c->group].count, &sb, &db);
  if (!in) /* a group of one: src (count elements) is the result */
    return c->src == c->dst ? RT_OK
                            : rt_check(d, d->cuMemcpyDtoDAsync(c->dst, c->src, (size_t)db, d->stream),
                                       "host collectives: cuMemcpyDtoDAsync (a group of one)");
  Job *j = job_of(h, d, c);
  if (!j) return RT_ERROR;
  h->used_in = 1, h->used_out |= j->out != NULL;
  if (rt_check(d, d->cuMemcpyDtoHAsync(j->in, c->src, (size_t)sb, d->stream),
               "host collectives: cuMemcpyDtoHAsync") ||
      rt_check(d, d->cuLaunchHostFunc(d->stream, host_fn, j), "host collectives: cuLaunchHostFunc") ||
      rt_check(d, d->cuMemcpyHtoDAsync(c->dst, j->out ? j->out : j->in, (size_t)db, d->stream),
               "host collectives: cuMemcpyHtoDAsync"))
    return RT_ERROR;
  return RT_OK;
}

int rt_coll_host_add_group(RtCollHost *h, int which, const RtCommGroup *g, int member, char *err,
                           size_t nerr) {
  if (which < 0 || which >= RT_COLL_GROUPS)
    return snprintf(err, nerr, "host collectives: group %d is not one of the %d kinds", which,
                    RT_COLL_GROUPS),
           -1;
  if (group_ok(h->comm, g, member, group_name(which), err, nerr)) return -1;
  h->group[which] = *g, h->member[which] = member, h->has[which] = 1;
  return 0;
}
