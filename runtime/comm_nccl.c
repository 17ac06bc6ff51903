/* comm_nccl.c — NCCL through dlopen (comm_nccl.h). nccl.h is read for its types only; every call
 * goes through a pointer resolved from libnccl.so.2 at run time. */
#include "runtime/comm_nccl.h"

#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// clang-format off (an X-macro list, one entry a line)
#define NCCL_FUNCS(X)                                                                                        \
  X(ncclGetVersion)                                                                                          \
  X(ncclGetUniqueId)                                                                                         \
  X(ncclCommInitRank)                                                                                        \
  X(ncclCommDestroy)                                                                                         \
  X(ncclCommAbort)                                                                                           \
  X(ncclGetErrorString)                                                                                      \
  X(ncclCommGetAsyncError)                                                                                   \
  X(ncclAllReduce)                                                                                           \
  X(ncclAllGather)                                                                                           \
  X(ncclReduceScatter)                                                                                       \
  X(ncclSend)                                                                                                \
  X(ncclRecv)                                                                                                \
  X(ncclGroupStart)                                                                                          \
  X(ncclGroupEnd)
// clang-format on

struct RtNccl {
  void *lib; /* each RtNccl holds its own dlopen reference (a split's child too): dlclose'd by its free */
  ncclComm_t comm;
  int version;
  int rank, size; /* in comm (rt_nccl_init's, or the split's) */
  /* the sum divided by div_by (rt_nccl_coll's div other than the group's size): ncclRedOpCreatePreMulSum
   * of 1/div_by, made once (its scalar a host immediate) and destroyed with the communicator */
  ncclRedOp_t div_op;
  int div_by;
#define NCCL_PTR(f) __typeof__(&f) f;
  NCCL_FUNCS(NCCL_PTR)
#undef NCCL_PTR
};

static int nccl_check(RtNccl *n, ncclResult_t r, const char *what, char *err, size_t nerr) {
  if (r == ncclSuccess) return 0;
  snprintf(err, nerr, "%s: %s (ncclResult %d)", what, n->ncclGetErrorString ? n->ncclGetErrorString(r) : "?",
           (int)r);
  return -1;
}

int rt_nccl_load(RtNccl **out, char *err, size_t nerr) {
  *out = NULL;
  RtNccl *n = calloc(1, sizeof *n);
  if (!n) return snprintf(err, nerr, "out of memory"), -1;
  /* NCCL writes its log (NCCL_DEBUG: its version line, warnings) to stdout, into a trainer's own
   * output and stepc's --json; unless the user chose a file, it goes to stderr. */
  setenv("NCCL_DEBUG_FILE", "/dev/stderr", 0);
  /* RTLD_NODELETE: NCCL leaves threads behind (ncclGetUniqueId's bootstrap root waits for ranks
   * that may never come), so its code must stay mapped after dlclose; unloading it crashed such a
   * thread (api.comm under ASan, now and then). */
  n->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!n->lib) {
    const char *e = dlerror();
    snprintf(err, nerr, "data parallel on cuda needs NCCL: dlopen libnccl.so.2: %s", e ? e : "not found");
    free(n);
    return -1;
  }
#define NCCL_LOAD(f)                                                                                         \
  if (!(*(void **)&n->f = dlsym(n->lib, #f))) {                                                              \
    snprintf(err, nerr, "libnccl.so.2 lacks %s (NCCL older than 2.10?)", #f);                                \
    dlclose(n->lib);                                                                                         \
    free(n);                                                                                                 \
    return -1;                                                                                               \
  }
  NCCL_FUNCS(NCCL_LOAD)
#undef NCCL_LOAD
  if (n->ncclGetVersion(&n->version) != ncclSuccess) n->version = 0;
  /* ncclAvg (2.10) and capture of collectives into CUDA graphs (2.9.6) are what stepc relies on */
  if (n->version < 21000) {
    snprintf(err, nerr, "libnccl.so.2 is version %d; stepc needs NCCL 2.10 or later (ncclAvg, graph capture)",
             n->version);
    dlclose(n->lib);
    free(n);
    return -1;
  }
  *out = n;
  return 0;
}

int rt_nccl_make_id(void *ctx, unsigned char id[RT_COMM_ID_BYTES], char *err, size_t nerr) {
  RtNccl *n = ctx;
  ncclUniqueId u;
  if (nccl_check(n, n->ncclGetUniqueId(&u), "ncclGetUniqueId", err, nerr)) return -1;
  memcpy(id, &u, RT_COMM_ID_BYTES);
  return 0;
}

int rt_nccl_init(RtNccl *n, const unsigned char id[RT_COMM_ID_BYTES], int size, int rank, char *err,
                 size_t nerr) {
  ncclUniqueId u;
  memcpy(&u, id, sizeof u);
  n->rank = rank, n->size = size;
  return nccl_check(n, n->ncclCommInitRank(&n->comm, size, u, rank), "ncclCommInitRank", err, nerr);
}

int rt_nccl_split(RtNccl *parent, int color, int key, RtNccl **out, char *err, size_t nerr) {
  *out = NULL;
  if (!parent->comm)
    return snprintf(err, nerr, "ncclCommSplit: the parent communicator is not initialised"), -1;
  if (color < 0) return snprintf(err, nerr, "ncclCommSplit: color %d (a group's color is >= 0)", color), -1;
  __typeof__(&ncclCommSplit) split;
  __typeof__(&ncclCommUserRank) user_rank;
  __typeof__(&ncclCommCount) count;
  *(void **)&split = dlsym(parent->lib, "ncclCommSplit");
  *(void **)&user_rank = dlsym(parent->lib, "ncclCommUserRank");
  *(void **)&count = dlsym(parent->lib, "ncclCommCount");
  if (!split || !user_rank || !count)
    return snprintf(
               err, nerr,
               "libnccl.so.2 (version %d) lacks ncclCommSplit: a TP group's communicator inside a larger "
               "job needs NCCL 2.18 or later",
               parent->version),
           -1;
  RtNccl *n = malloc(sizeof *n);
  if (!n) return snprintf(err, nerr, "out of memory"), -1;
  *n = *parent;
  n->comm = NULL, n->div_by = 0;
  /* the child's own reference to the library (the loader counts them): freeing either first is safe */
  n->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!n->lib) {
    const char *e = dlerror();
    snprintf(err, nerr, "ncclCommSplit: dlopen libnccl.so.2 again: %s", e ? e : "failed");
    free(n);
    return -1;
  }
  /* NULL config: the child inherits the parent's (blocking, as rt_nccl_init's) */
  if (nccl_check(n, split(parent->comm, color, key, &n->comm, NULL), "ncclCommSplit", err, nerr) ||
      nccl_check(n, user_rank(n->comm, &n->rank), "ncclCommUserRank", err, nerr) ||
      nccl_check(n, count(n->comm, &n->size), "ncclCommCount", err, nerr)) {
    rt_nccl_free(n, 1);
    return -1;
  }
  *out = n;
  return 0;
}

int rt_nccl_rank(const RtNccl *n) { return n->rank; }
int rt_nccl_size(const RtNccl *n) { return n->size; }

/* The reduction of a sum divided by div (> 1): ncclAvg when div is the group's size, else a
 * pre-multiplied sum by 1/div (NCCL 2.11), made on first use and kept (one div per job). */
static int div_op(RtNccl *n, int64_t div, ncclDataType_t t, ncclRedOp_t *op, char *err, size_t nerr) {
  if (div == n->size) return *op = ncclAvg, 0;
  if (t != ncclFloat32 || div > (1 << 30))
    return snprintf(err, nerr, "NCCL collective: a %s sum divided by %lld over %d ranks",
                    t == ncclFloat32 ? "fp32" : "bf16", (long long)div, n->size),
           -1;
  if (n->div_by == div) return *op = n->div_op, 0;
  if (n->div_by)
    return snprintf(err, nerr, "NCCL collective: sums divided by %d and by %lld in one job", n->div_by,
                    (long long)div),
           -1;
  __typeof__(&ncclRedOpCreatePreMulSum) create;
  *(void **)&create = dlsym(n->lib, "ncclRedOpCreatePreMulSum");
  if (!create)
    return snprintf(err, nerr,
                    "libnccl.so.2 (version %d) lacks ncclRedOpCreatePreMulSum: an expert gradient's mean "
                    "over the data-parallel ranks needs NCCL 2.11 or later",
                    n->version),
           -1;
  float scale = 1.0f / (float)div;
  if (nccl_check(n, create(&n->div_op, &scale, ncclFloat32, ncclScalarHostImmediate, n->comm),
                 "ncclRedOpCreatePreMulSum", err, nerr))
    return -1;
  n->div_by = (int)div;
  return *op = n->div_op, 0;
}

int rt_nccl_coll(RtNccl *n, const RtColl *c, CUstream s, char *err, size_t nerr) {
  if (c->dtype != RT_COLL_F32 && c->dtype != RT_COLL_BF16)
    return snprintf(err, nerr, "NCCL collective: element type %lld", (long long)c->dtype), -1;
  if (c->count < 0) return snprintf(err, nerr, "NCCL collective: %lld elements", (long long)c->count), -1;
  ncclDataType_t t = c->dtype == RT_COLL_BF16 ? ncclBfloat16 : ncclFloat32;
  if (c->div > 1 && c->op != RT_COLL_ALLREDUCE_SUM && c->op != RT_COLL_REDUCE_SCATTER)
    return snprintf(err, nerr, "NCCL collective: op %lld divided by %lld", (long long)c->op,
                    (long long)c->div),
           -1;
  ncclRedOp_t sum = ncclSum;
  if (c->div > 1 && div_op(n, c->div, t, &sum, err, nerr)) return -1;
  const void *src = (const void *)(uintptr_t)c->src;
  void *dst = (void *)(uintptr_t)c->dst;
  size_t count = (size_t)c->count;
  cudaStream_t st = (cudaStream_t)s;
  switch (c->op) {
  case RT_COLL_ALLREDUCE_SUM:
  case RT_COLL_ALLREDUCE_MAX:
    return nccl_check(
        n, n->ncclAllReduce(src, dst, count, t, c->op == RT_COLL_ALLREDUCE_MAX ? ncclMax : sum, n->comm, st),
        "ncclAllReduce", err, nerr);
  case RT_COLL_ALL_GATHER: /* count: each member's part */
    return nccl_check(n, n->ncclAllGather(src, dst, count, t, n->comm, st), "ncclAllGather", err, nerr);
  case RT_COLL_REDUCE_SCATTER: /* count: each member's result */
    return nccl_check(n, n->ncclReduceScatter(src, dst, count, t, sum, n->comm, st), "ncclReduceScatter", err,
                      nerr);
  case RT_COLL_ALL_TO_ALL: { /* count: each block; a send and a receive a peer, one NCCL group */
    size_t block = count * (c->dtype == RT_COLL_BF16 ? 2 : 4);
    if (nccl_check(n, n->ncclGroupStart(), "ncclGroupStart", err, nerr)) return -1;
    int rc = 0;
    for (int p = 0; p < n->size && !rc; p++)
      rc = nccl_check(n, n->ncclSend((const char *)src + p * block, count, t, p, n->comm, st), "ncclSend",
                      err, nerr) ||
           nccl_check(n, n->ncclRecv((char *)dst + p * block, count, t, p, n->comm, st), "ncclRecv", err,
                      nerr);
    char err2[200];
    if (nccl_check(n, n->ncclGroupEnd(), "ncclGroupEnd", err2, sizeof err2) && !rc)
      return snprintf(err, nerr, "%s", err2), -1;
    return rc ? -1 : 0;
  }
  }
  return snprintf(err, nerr, "NCCL collective: op %lld", (long long)c->op), -1;
}

/* ---- RtCollOps over NCCL ---- */

static int nccl_coll_prepare(void *ctx, RtDevice *d, const RtColl *c) {
  RtCollNccl *x = ctx;
  if (c->group < 0 || c->group >= RT_COLL_GROUPS || !x->group[c->group])
    return rt_fail(d,
                   "NCCL collectives: a collective over group %lld, which has no communicator (TP 0, EP 1)",
                   (long long)c->group);
  return RT_OK;
}

static int nccl_coll_run(void *ctx, RtDevice *d, const RtColl *c) {
  RtCollNccl *x = ctx;
  if (nccl_coll_prepare(ctx, d, c)) return RT_ERROR;
  char err[400];
  if (rt_nccl_coll(x->group[c->group], c, d->stream, err, sizeof err) == 0) return RT_OK;
  return rt_fail(d, "NCCL collectives (%s group): %s", c->group == RT_COLL_GROUP_EP ? "EP" : "TP", err);
}

void rt_coll_nccl_init(RtCollNccl *c) {
  memset(c, 0, sizeof *c);
  c->ops = (RtCollOps){.prepare = nccl_coll_prepare, .run = nccl_coll_run, .ctx = c};
}

int rt_nccl_group(RtNccl *n, int start, char *err, size_t nerr) {
  return start ? nccl_check(n, n->ncclGroupStart(), "ncclGroupStart", err, nerr)
               : nccl_check(n, n->ncclGroupEnd(), "ncclGroupEnd", err, nerr);
}

int rt_nccl_check(RtNccl *n, char *err, size_t nerr) {
  ncclResult_t a = ncclSuccess;
  if (nccl_check(n, n->ncclCommGetAsyncError(n->comm, &a), "ncclCommGetAsyncError", err, nerr)) return -1;
  return nccl_check(n, a, "NCCL (asynchronous error: a rank died or the network failed)", err, nerr);
}

int rt_nccl_version(const RtNccl *n) { return n->version; }

void rt_nccl_abort(RtNccl *n) {
  if (n->comm) n->ncclCommAbort(n->comm);
  n->comm = NULL;
}

void rt_nccl_free(RtNccl *n, int failed) {
  if (!n) return;
  if (n->comm && n->div_by && !failed) {
    __typeof__(&ncclRedOpDestroy) destroy;
    *(void **)&destroy = dlsym(n->lib, "ncclRedOpDestroy");
    if (destroy) destroy(n->div_op, n->comm);
  }
  if (n->comm) failed ? n->ncclCommAbort(n->comm) : n->ncclCommDestroy(n->comm);
  dlclose(n->lib);
  free(n);
}
