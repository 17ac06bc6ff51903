/* cudnn.c — fused attention (scaled dot-product attention, SDPA) through cuDNN's backend API,
 * loaded with dlopen as libcuda and cuBLASLt are (rt.h): cudnn_graph.h is read for its types and
 * constants only, nothing links libcudnn.
 *
 * cuDNN has no single "causal attention" call on Hopper: its fused flash-attention engines are
 * found by describing attention as an operation graph (matmuls, pointwise ops, reductions) of the
 * exact shape its pattern matcher knows, then asking its heuristics for an engine. The graphs
 * below are that shape:
 *
 *   forward   S = Q K^T * scale; causal mask (row index >= column index, else -inf);
 *             M = rowmax S; E = exp(S - M); Z = rowsum E; LSE = M + log Z; P = E / Z; O = P V
 *   backward  Dsum = rowsum(dO * O) (written to the workspace); P = exp(Q K^T * scale - LSE), masked;
 *             dV = P^T dO; dS = (dO V^T - Dsum) * P * scale; dK = dS^T Q; dQ = dS K
 *
 * Layouts are stepc's: q, o, dq, dO (B,T,H,D) and k, v, dk, dv (B,T,G,D) row-major, the
 * log-sum-exp (B,H,T) fp32 in natural log (the same as stepc's flash kernels keep). cuDNN sees
 * them as (b, h, s, d) tensors with strides, K and V transposed by strides alone. GQA: query head
 * h reads key/value head h / (H/G), as stepc's kernels; dK and dV of a shared head sum its query
 * heads (a reduction node in the graph).
 *
 * Determinism: with RtSdpa.deterministic the backward writes dQ straight from its matmul and only
 * an engine without cuDNN's NONDETERMINISTIC numerical note is accepted; otherwise dQ accumulates
 * in an fp32 workspace buffer (atomics, faster) and is converted at the end.
 *
 * Plans: one per distinct RtSdpa shape (pointers aside), built the first time (rt_sdpa_prepare,
 * which the player calls at open so that capture never builds one) and cached. The workspace is
 * one allocation owned here, grown at prepare time to the largest plan's need. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cudnn_graph.h>

#include "runtime/record.h"
#include "runtime/rt.h"

// clang-format off (an X-macro list, one entry a line)
#define RT_DNN_FUNCS(X)                                                                                      \
  X(cudnnGetVersion)                                                                                         \
  X(cudnnCreate)                                                                                             \
  X(cudnnDestroy)                                                                                            \
  X(cudnnSetStream)                                                                                          \
  X(cudnnGetErrorString)                                                                                     \
  X(cudnnBackendCreateDescriptor)                                                                            \
  X(cudnnBackendDestroyDescriptor)                                                                           \
  X(cudnnBackendSetAttribute)                                                                                \
  X(cudnnBackendGetAttribute)                                                                                \
  X(cudnnBackendFinalize)                                                                                    \
  X(cudnnBackendExecute)
// clang-format on

#define RT_SDPA_CACHE 32
#define MAX_DESC 96 /* descriptors one graph holds (tensors, op descriptors, ops) */

typedef struct {
  RtSdpa key; /* pointers zeroed */
  cudnnBackendDescriptor_t plan;
  int64_t ws_bytes;  /* cuDNN's own workspace */
  int64_t aux_bytes; /* ours in front of it: the backward's Dsum (and dQ accumulator) */
} SdpaPlan;

struct RtDnn {
#define RT_DNDECL(f) __typeof__(&f) f;
  RT_DNN_FUNCS(RT_DNDECL)
#undef RT_DNDECL
  void (*last_error)(char *, size_t); /* cudnnGetLastErrorString, 9.0 and later */
  void *lib;
  cudnnHandle_t h;
  size_t version;
  CUdeviceptr ws;
  size_t ws_bytes;
  SdpaPlan plan[RT_SDPA_CACHE];
  int nplan;
};

#define RT_STR(x) #x
#define RT_XSTR(x) RT_STR(x)

static int dnn_check(RtDevice *d, cudnnStatus_t s, const char *what) {
  if (s == CUDNN_STATUS_SUCCESS) return RT_OK;
  char last[256] = "";
  if (d->dnn && d->dnn->last_error) d->dnn->last_error(last, sizeof last);
  return rt_fail(d, "cuDNN %s: %s (%d)%s%s", what, d->dnn ? d->dnn->cudnnGetErrorString(s) : "", (int)s,
                 last[0] ? ": " : "", last);
}

static int dnn_open(RtDevice *d) {
  if (d->dnn) return RT_OK;
  RtDnn *n = calloc(1, sizeof *n);
  if (!n) return rt_fail(d, "out of memory");
  char soname[32];
  snprintf(soname, sizeof soname, "libcudnn.so.%d", CUDNN_MAJOR);
  n->lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!n->lib) {
    const char *e = dlerror();
    free(n);
    rt_fail(d,
            "cuDNN %d cannot be loaded (dlopen %s: %s): attention_backend=fused needs it (install cuDNN %d, "
            "or use attention_backend=auto or flash)",
            CUDNN_MAJOR, soname, e ? e : "not found", CUDNN_MAJOR);
    return RT_UNSUPPORTED;
  }
#define RT_DNLOAD(f)                                                                                         \
  if (!(n->f = (__typeof__(&f))dlsym(n->lib, RT_XSTR(f)))) {                                                 \
    dlclose(n->lib);                                                                                         \
    free(n);                                                                                                 \
    rt_fail(d, "%s lacks %s", soname, RT_XSTR(f));                                                           \
    return RT_UNSUPPORTED;                                                                                   \
  }
  RT_DNN_FUNCS(RT_DNLOAD)
#undef RT_DNLOAD
  *(void **)&n->last_error = dlsym(n->lib, "cudnnGetLastErrorString");
  n->version = n->cudnnGetVersion();
  d->dnn = n;
  if (n->version < 90000)
    return rt_fail(d, "cuDNN %zu is too old: fused attention needs cuDNN 9", n->version), RT_UNSUPPORTED;
  if (dnn_check(d, n->cudnnCreate(&n->h), "create")) return RT_ERROR;
  return dnn_check(d, n->cudnnSetStream(n->h, (cudaStream_t)d->stream), "set stream");
}

void rt_dnn_close(RtDevice *d) {
  RtDnn *n = d->dnn;
  if (!n) return;
  for (int i = 0; i < n->nplan; i++)
    n->cudnnBackendDestroyDescriptor(n->plan[i].plan);
  if (n->ws) rt_free(d, n->ws, n->ws_bytes);
  if (n->h) n->cudnnDestroy(n->h);
  dlclose(n->lib);
  free(n);
  d->dnn = NULL;
}

size_t rt_sdpa_workspace_bytes(const RtDevice *d) { return d->dnn ? d->dnn->ws_bytes : 0; }

/* ---- building a graph: every descriptor lands in Build.all and is destroyed with it ---- */

typedef struct {
  RtDevice *d;
  RtDnn *n;
  cudnnBackendDescriptor_t all[MAX_DESC];
  int nall;
  cudnnBackendDescriptor_t ops[48];
  int nops;
  int64_t next_uid; /* virtual tensors' ids */
  int failed;
} Build;

static cudnnBackendDescriptor_t make(Build *b, cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t x = NULL;
  if (b->failed) return NULL;
  if (b->nall == MAX_DESC) {
    b->failed = 1, rt_fail(b->d, "cuDNN attention graph: more than %d descriptors", MAX_DESC);
    return NULL;
  }
  if (dnn_check(b->d, b->n->cudnnBackendCreateDescriptor(type, &x), "create descriptor")) {
    b->failed = 1;
    return NULL;
  }
  return b->all[b->nall++] = x;
}

static void set(Build *b, cudnnBackendDescriptor_t x, cudnnBackendAttributeName_t a,
                cudnnBackendAttributeType_t t, int64_t count, const void *v) {
  if (b->failed) return;
  cudnnStatus_t s = b->n->cudnnBackendSetAttribute(x, a, t, count, v);
  if (s != CUDNN_STATUS_SUCCESS) {
    char what[64];
    snprintf(what, sizeof what, "set attribute %d", (int)a);
    b->failed = 1, dnn_check(b->d, s, what);
  }
}

static void finalize(Build *b, cudnnBackendDescriptor_t x, const char *what) {
  if (b->failed) return;
  if (dnn_check(b->d, b->n->cudnnBackendFinalize(x), what)) b->failed = 1;
}

/* A tensor: 4 dims; uid < 0 makes a virtual one (its id drawn here). */
static cudnnBackendDescriptor_t tensor(Build *b, int64_t uid, cudnnDataType_t dt, const int64_t dim[4],
                                       const int64_t stride[4]) {
  cudnnBackendDescriptor_t t = make(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  bool virt = uid < 0;
  int64_t id = virt ? b->next_uid++ : uid, align = 16;
  set(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
  set(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim);
  set(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride);
  set(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id);
  set(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  set(b, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
  finalize(b, t, "tensor");
  return t;
}

/* A virtual tensor of row-major dims. */
static cudnnBackendDescriptor_t vtensor(Build *b, cudnnDataType_t dt, int64_t d0, int64_t d1, int64_t d2,
                                        int64_t d3) {
  const int64_t dim[4] = {d0, d1, d2, d3}, stride[4] = {d1 * d2 * d3, d2 * d3, d3, 1};
  return tensor(b, -1, dt, dim, stride);
}

/* A scalar passed by value in the variant pack (the scale, -inf, 1). */
static cudnnBackendDescriptor_t scalar(Build *b, int64_t uid) {
  cudnnBackendDescriptor_t t = make(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t one[4] = {1, 1, 1, 1};
  int64_t align = 16;
  cudnnDataType_t dt = CUDNN_DATA_FLOAT;
  bool yes = true;
  set(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
  set(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, one);
  set(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, one);
  set(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  set(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  set(b, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
  finalize(b, t, "scalar tensor");
  return t;
}

static void add_op(Build *b, cudnnBackendDescriptor_t op, const char *what) {
  finalize(b, op, what);
  if (b->failed) return;
  if (b->nops == (int)(sizeof b->ops / sizeof b->ops[0])) {
    b->failed = 1, rt_fail(b->d, "cuDNN attention graph: too many operations");
    return;
  }
  b->ops[b->nops++] = op;
}

/* y = mode(x, b[, t]); axis >= 0 for GEN_INDEX. */
static void pointwise(Build *b, cudnnPointwiseMode_t mode, cudnnDataType_t prec, int64_t axis,
                      cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t bb, cudnnBackendDescriptor_t t,
                      cudnnBackendDescriptor_t y) {
  cudnnBackendDescriptor_t pw = make(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  set(b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  set(b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
  if (axis >= 0) set(b, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
  finalize(b, pw, "pointwise");
  cudnnBackendDescriptor_t op = make(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
  set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  if (bb) set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bb);
  if (t) set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
  set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  add_op(b, op, "pointwise operation");
}

static void matmul(Build *b, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t bb,
                   cudnnBackendDescriptor_t c) {
  cudnnBackendDescriptor_t mm = make(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  set(b, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
  finalize(b, mm, "matmul");
  cudnnBackendDescriptor_t op = make(b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  set(b, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
  set(b, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bb);
  set(b, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
  set(b, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
  add_op(b, op, "matmul operation");
}

static void reduction(Build *b, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                      cudnnBackendDescriptor_t y) {
  cudnnBackendDescriptor_t rd = make(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  set(b, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
  set(b, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
  finalize(b, rd, "reduction");
  cudnnBackendDescriptor_t op = make(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd);
  add_op(b, op, "reduction operation");
}

static void reshape(Build *b, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
  cudnnBackendDescriptor_t op = make(b, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  set(b, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  set(b, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  add_op(b, op, "reshape operation");
}

/* ---- the two graphs ---- */

enum {
  U_Q = 1,
  U_K,
  U_V,
  U_O,
  U_LSE,
  U_DO,
  U_DQ,
  U_DK,
  U_DV,
  U_SCALE,
  U_NEGINF,
  U_ONE,
  U_DSUM,
  U_DQACC,
  U_VIRTUAL = 100
};

/* (b, heads, s, d) of a (B,T,heads,D) row-major tensor; transposed: (b, heads, d, s). */
static void bshd(const RtSdpa *s, int64_t heads, int64_t hd, int transposed, int64_t dim[4], int64_t st[4]) {
  int64_t d0[4] = {s->b, heads, s->t, hd}, s0[4] = {s->t * heads * hd, hd, heads * hd, 1};
  memcpy(dim, d0, sizeof d0), memcpy(st, s0, sizeof s0);
  if (transposed) {
    int64_t x = dim[2];
    dim[2] = dim[3], dim[3] = x;
    x = st[2], st[2] = st[3], st[3] = x;
  }
}

static cudnnBackendDescriptor_t io(Build *b, const RtSdpa *s, int64_t uid, int64_t heads, int64_t hd,
                                   int transposed) {
  int64_t dim[4], st[4];
  bshd(s, heads, hd, transposed, dim, st);
  return tensor(b, uid, CUDNN_DATA_BFLOAT16, dim, st);
}

/* S' = mask(S): row >= column keeps, else -inf */
static cudnnBackendDescriptor_t causal(Build *b, const RtSdpa *s, cudnnBackendDescriptor_t S,
                                       cudnnBackendDescriptor_t neginf) {
  int64_t B = s->b, H = s->h, T = s->t;
  cudnnBackendDescriptor_t row = vtensor(b, CUDNN_DATA_INT32, B, H, T, T),
                           col = vtensor(b, CUDNN_DATA_INT32, B, H, T, T);
  pointwise(b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 2, S, NULL, NULL, row);
  pointwise(b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 3, S, NULL, NULL, col);
  cudnnBackendDescriptor_t keep = vtensor(b, CUDNN_DATA_BOOLEAN, B, H, T, T);
  pointwise(b, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, -1, row, col, NULL, keep);
  cudnnBackendDescriptor_t out = vtensor(b, CUDNN_DATA_FLOAT, B, H, T, T);
  pointwise(b, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, -1, S, neginf, keep, out);
  return out;
}

static cudnnBackendDescriptor_t lse_tensor(Build *b, const RtSdpa *s) {
  const int64_t dim[4] = {s->b, s->h, s->t, 1}, st[4] = {s->h * s->t, s->t, 1, 1};
  return tensor(b, U_LSE, CUDNN_DATA_FLOAT, dim, st);
}

static void forward_graph(Build *b, const RtSdpa *s) {
  int64_t B = s->b, H = s->h, T = s->t;
  const cudnnDataType_t F = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t q = io(b, s, U_Q, H, s->dqk, 0), kt = io(b, s, U_K, s->g, s->dqk, 1),
                           v = io(b, s, U_V, s->g, s->dv, 0), o = io(b, s, U_O, H, s->dv, 0),
                           lse = lse_tensor(b, s);
  cudnnBackendDescriptor_t scale = scalar(b, U_SCALE), neginf = scalar(b, U_NEGINF);
  cudnnBackendDescriptor_t s0 = vtensor(b, F, B, H, T, T), s1 = vtensor(b, F, B, H, T, T);
  matmul(b, q, kt, s0);
  pointwise(b, CUDNN_POINTWISE_MUL, F, -1, s0, scale, NULL, s1);
  cudnnBackendDescriptor_t s2 = causal(b, s, s1, neginf);
  cudnnBackendDescriptor_t m = vtensor(b, F, B, H, T, 1), z = vtensor(b, F, B, H, T, 1),
                           logz = vtensor(b, F, B, H, T, 1);
  cudnnBackendDescriptor_t sub = vtensor(b, F, B, H, T, T), e = vtensor(b, F, B, H, T, T),
                           p = vtensor(b, CUDNN_DATA_BFLOAT16, B, H, T, T);
  reduction(b, CUDNN_REDUCE_TENSOR_MAX, s2, m);
  pointwise(b, CUDNN_POINTWISE_SUB, F, -1, s2, m, NULL, sub);
  pointwise(b, CUDNN_POINTWISE_EXP, F, -1, sub, NULL, NULL, e);
  reduction(b, CUDNN_REDUCE_TENSOR_ADD, e, z);
  pointwise(b, CUDNN_POINTWISE_LOG, F, -1, z, NULL, NULL, logz);
  pointwise(b, CUDNN_POINTWISE_ADD, F, -1, m, logz, NULL, lse);
  pointwise(b, CUDNN_POINTWISE_DIV, F, -1, e, z, NULL, p);
  matmul(b, p, v, o);
}

/* the GQA sum: a (b, H, s, d) product reduced to the (b, G, s, d) output */
static void head_sum_matmul(Build *b, const RtSdpa *s, cudnnBackendDescriptor_t a,
                            cudnnBackendDescriptor_t bb, cudnnBackendDescriptor_t out, int64_t hd) {
  if (s->h == s->g) {
    matmul(b, a, bb, out);
    return;
  }
  cudnnBackendDescriptor_t full = vtensor(b, CUDNN_DATA_BFLOAT16, s->b, s->h, s->t, hd);
  matmul(b, a, bb, full);
  reduction(b, CUDNN_REDUCE_TENSOR_ADD, full, out);
}

/* (b, H, s, s) row-major seen transposed, as (b, H, s_kv, s_q) */
static cudnnBackendDescriptor_t transposed_scores(Build *b, const RtSdpa *s, cudnnBackendDescriptor_t x) {
  int64_t T = s->t;
  const int64_t dim[4] = {s->b, s->h, T, T}, st[4] = {s->h * T * T, T * T, 1, T};
  cudnnBackendDescriptor_t y = tensor(b, -1, CUDNN_DATA_BFLOAT16, dim, st);
  reshape(b, x, y);
  return y;
}

static void backward_graph(Build *b, const RtSdpa *s) {
  int64_t B = s->b, H = s->h, T = s->t;
  const cudnnDataType_t F = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t q = io(b, s, U_Q, H, s->dqk, 0), kt = io(b, s, U_K, s->g, s->dqk, 1),
                           vt = io(b, s, U_V, s->g, s->dv, 1), o = io(b, s, U_O, H, s->dv, 0),
                           dout = io(b, s, U_DO, H, s->dv, 0), lse = lse_tensor(b, s),
                           dq = io(b, s, U_DQ, H, s->dqk, 0), dk = io(b, s, U_DK, s->g, s->dqk, 0),
                           dv = io(b, s, U_DV, s->g, s->dv, 0);
  cudnnBackendDescriptor_t scale = scalar(b, U_SCALE), neginf = scalar(b, U_NEGINF), one = scalar(b, U_ONE);
  /* Dsum = rowsum(dO * O), kept in the workspace */
  const int64_t rdim[4] = {B, H, T, 1}, rst[4] = {H * T, T, 1, 1};
  cudnnBackendDescriptor_t doo = vtensor(b, F, B, H, T, s->dv), dsum0 = vtensor(b, F, B, H, T, 1),
                           dsum = tensor(b, U_DSUM, F, rdim, rst);
  pointwise(b, CUDNN_POINTWISE_MUL, F, -1, dout, o, NULL, doo);
  reduction(b, CUDNN_REDUCE_TENSOR_ADD, doo, dsum0);
  pointwise(b, CUDNN_POINTWISE_MUL, F, -1, dsum0, one, NULL, dsum);
  /* P = exp(Q K^T * scale - LSE), masked */
  cudnnBackendDescriptor_t s0 = vtensor(b, F, B, H, T, T), s1 = vtensor(b, F, B, H, T, T),
                           s2 = vtensor(b, F, B, H, T, T);
  matmul(b, q, kt, s0);
  pointwise(b, CUDNN_POINTWISE_MUL, F, -1, s0, scale, NULL, s1);
  pointwise(b, CUDNN_POINTWISE_SUB, F, -1, s1, lse, NULL, s2);
  cudnnBackendDescriptor_t s3 = causal(b, s, s2, neginf), p = vtensor(b, F, B, H, T, T);
  pointwise(b, CUDNN_POINTWISE_EXP, F, -1, s3, NULL, NULL, p);
  /* dV = P^T dO */
  head_sum_matmul(b, s, transposed_scores(b, s, p), dout, dv, s->dv);
  /* dS = (dO V^T - Dsum) * P * scale */
  cudnnBackendDescriptor_t dp = vtensor(b, F, B, H, T, T), d1 = vtensor(b, F, B, H, T, T),
                           d2 = vtensor(b, F, B, H, T, T), ds = vtensor(b, F, B, H, T, T);
  matmul(b, dout, vt, dp);
  pointwise(b, CUDNN_POINTWISE_SUB, F, -1, dp, dsum, NULL, d1);
  pointwise(b, CUDNN_POINTWISE_MUL, F, -1, d1, p, NULL, d2);
  pointwise(b, CUDNN_POINTWISE_MUL, F, -1, d2, scale, NULL, ds);
  /* dK = dS^T Q */
  head_sum_matmul(b, s, transposed_scores(b, s, ds), q, dk, s->dqk);
  /* dQ = dS K: K seen untransposed again */
  int64_t kdim[4], kst[4];
  bshd(s, s->g, s->dqk, 0, kdim, kst);
  cudnnBackendDescriptor_t k = tensor(b, -1, CUDNN_DATA_BFLOAT16, kdim, kst);
  reshape(b, kt, k);
  if (s->deterministic) {
    matmul(b, ds, k, dq);
  } else {
    const int64_t adim[4] = {B, H, T, s->dqk}, ast[4] = {H * T * s->dqk, T * s->dqk, s->dqk, 1};
    cudnnBackendDescriptor_t acc = tensor(b, U_DQACC, F, adim, ast);
    matmul(b, ds, k, acc);
    pointwise(b, CUDNN_POINTWISE_IDENTITY, F, -1, acc, NULL, NULL, dq);
  }
}

/* ---- plans ---- */

static int64_t aux_bytes(const RtSdpa *s) {
  if (!s->bwd) return 0;
  int64_t dsum = (s->b * s->h * s->t * 4 + 255) / 256 * 256;
  return dsum + (s->deterministic ? 0 : (s->b * s->h * s->t * s->dqk * 4 + 255) / 256 * 256);
}

static int nondeterministic(RtDnn *n, cudnnBackendDescriptor_t cfg) {
  cudnnBackendDescriptor_t eng = NULL;
  int bad = 0;
  if (n->cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS)
    return 1;
  int64_t cnt = 0;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  if (n->cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt,
                                  &eng) != CUDNN_STATUS_SUCCESS ||
      n->cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                  CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &cnt, notes) != CUDNN_STATUS_SUCCESS)
    bad = 1;
  for (int64_t i = 0; !bad && i < cnt; i++)
    bad = notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
  n->cudnnBackendDestroyDescriptor(eng);
  return bad;
}

/* The heuristics' engine configurations in order; the first whose plan finalizes (and, asked for
 * determinism, is deterministic) wins. */
static int pick_plan(Build *b, cudnnBackendDescriptor_t graph, const RtSdpa *s, SdpaPlan *out) {
  RtDnn *n = b->n;
  cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
  char tried[160] = "";
  for (int mi = 0; mi < 2; mi++) {
    cudnnBackendDescriptor_t heur = make(b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    set(b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    set(b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[mi]);
    finalize(b, heur, "engine heuristics");
    if (b->failed) return RT_ERROR;
    int64_t cnt = 0;
    if (dnn_check(b->d,
                  n->cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &cnt, NULL),
                  "heuristic results"))
      return RT_ERROR;
    if (cnt > 16) cnt = 16;
    cudnnBackendDescriptor_t cfg[16];
    for (int64_t i = 0; i < cnt; i++)
      cfg[i] = make(b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (b->failed) return RT_ERROR;
    int64_t got = 0;
    if (cnt && dnn_check(b->d,
                         n->cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, cnt, &got, cfg),
                         "heuristic results"))
      return RT_ERROR;
    for (int64_t i = 0; i < got; i++) {
      if (s->deterministic && nondeterministic(n, cfg[i])) {
        snprintf(tried + strlen(tried), sizeof tried - strlen(tried), "%s#%lld nondeterministic",
                 tried[0] ? ", " : "", (long long)i);
        continue;
      }
      cudnnBackendDescriptor_t plan = NULL;
      if (n->cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) !=
          CUDNN_STATUS_SUCCESS)
        continue;
      cudnnStatus_t st =
          n->cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &n->h);
      if (st == CUDNN_STATUS_SUCCESS)
        st = n->cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
      if (st == CUDNN_STATUS_SUCCESS) st = n->cudnnBackendFinalize(plan);
      int64_t ws = 0, c1 = 0;
      if (st == CUDNN_STATUS_SUCCESS)
        st = n->cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                         &c1, &ws);
      if (st != CUDNN_STATUS_SUCCESS) {
        snprintf(tried + strlen(tried), sizeof tried - strlen(tried), "%s#%lld %d", tried[0] ? ", " : "",
                 (long long)i, (int)st);
        n->cudnnBackendDestroyDescriptor(plan);
        continue;
      }
      out->plan = plan, out->ws_bytes = ws;
      return RT_OK;
    }
  }
  rt_fail(b->d,
          "cuDNN %zu has no engine for this %s attention (B %lld, T %lld, H %lld, G %lld, head dims "
          "%lld/%lld%s)%s%s",
          n->version, s->bwd ? "backward" : "forward", (long long)s->b, (long long)s->t, (long long)s->h,
          (long long)s->g, (long long)s->dqk, (long long)s->dv, s->deterministic ? ", deterministic" : "",
          tried[0] ? "; engines tried: " : "", tried);
  return RT_UNSUPPORTED;
}

static RtSdpa shape_key(const RtSdpa *s) {
  RtSdpa k;
  memset(&k, 0, sizeof k);
#define KEY_I(f) k.f = s->f;
#define KEY_P(f)
#define KEY_F(f) k.f = s->f;
  RT_SDPA_FIELDS(KEY_I, KEY_P, KEY_F)
#undef KEY_I
#undef KEY_P
#undef KEY_F
  return k;
}

static SdpaPlan *find_plan(RtDnn *n, const RtSdpa *key) {
  for (int i = 0; i < n->nplan; i++)
    if (memcmp(&n->plan[i].key, key, sizeof *key) == 0) return &n->plan[i];
  return NULL;
}

static int check_shape(RtDevice *d, const RtSdpa *s) {
  if (s->b < 1 || s->t < 1 || s->h < 1 || s->g < 1 || s->h % s->g)
    return rt_fail(d, "fused attention: B %lld, T %lld, H %lld, G %lld (H must be a multiple of G)",
                   (long long)s->b, (long long)s->t, (long long)s->h, (long long)s->g),
           RT_UNSUPPORTED;
  if (s->dqk % 8 || s->dv % 8 || s->dqk > 256 || s->dv > 256)
    return rt_fail(d, "fused attention: head dims %lld/%lld (cuDNN takes multiples of 8 up to 256)",
                   (long long)s->dqk, (long long)s->dv),
           RT_UNSUPPORTED;
  return RT_OK;
}

/* The plan of s's shape, built (and the workspace grown) the first time. */
static int plan_for(RtDevice *d, const RtSdpa *s, const SdpaPlan **out) {
  int rc0 = check_shape(d, s);
  if (rc0 == RT_OK) rc0 = dnn_open(d);
  if (rc0) return rc0;
  RtDnn *n = d->dnn;
  RtSdpa key = shape_key(s);
  SdpaPlan *p = find_plan(n, &key);
  if (!p) {
    if (n->nplan == RT_SDPA_CACHE) return rt_fail(d, "more than %d fused attention shapes", RT_SDPA_CACHE);
    Build *b = calloc(1, sizeof *b);
    if (!b) return rt_fail(d, "out of memory");
    b->d = d, b->n = n, b->next_uid = U_VIRTUAL;
    if (s->bwd)
      backward_graph(b, s);
    else
      forward_graph(b, s);
    int rc = b->failed ? RT_ERROR : RT_OK;
    if (rc == RT_OK) {
      cudnnBackendDescriptor_t graph = make(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
      set(b, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, b->nops, b->ops);
      set(b, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &n->h);
      finalize(b, graph, "operation graph");
      SdpaPlan np = {.key = key, .aux_bytes = aux_bytes(s)};
      rc = b->failed ? RT_ERROR : pick_plan(b, graph, s, &np);
      if (rc == RT_OK) n->plan[n->nplan++] = np, p = &n->plan[n->nplan - 1];
    }
    for (int i = b->nall - 1; i >= 0; i--)
      n->cudnnBackendDestroyDescriptor(b->all[i]);
    free(b);
    if (rc) return rc;
  }
  size_t need = (size_t)(p->aux_bytes + p->ws_bytes);
  if (need > n->ws_bytes) {
    if (n->ws) rt_free(d, n->ws, n->ws_bytes), n->ws = 0, n->ws_bytes = 0;
    if (rt_alloc(d, &n->ws, need, "the cuDNN attention workspace")) return RT_ERROR;
    n->ws_bytes = need;
  }
  *out = p;
  return RT_OK;
}

int rt_sdpa_prepare(RtDevice *d, const RtSdpa *s) {
  const SdpaPlan *p;
  return d->rec ? RT_OK : plan_for(d, s, &p); /* a recording device: nothing to build */
}

int rt_sdpa_run(RtDevice *d, const RtSdpa *s) {
  if (d->rec) return rt_record_sdpa(d, s);
  const SdpaPlan *p;
  if (plan_for(d, s, &p)) return RT_ERROR;
  RtDnn *n = d->dnn;
  float scale = s->scale, neginf = -__builtin_inff(), one = 1.0f;
  int64_t uid[16];
  void *ptr[16];
  int k = 0;
#define PUT(u, v) (uid[k] = (u), ptr[k++] = (void *)(uintptr_t)(v))
  PUT(U_Q, s->q), PUT(U_K, s->k), PUT(U_V, s->v), PUT(U_O, s->o), PUT(U_LSE, s->lse);
  uid[k] = U_SCALE, ptr[k++] = &scale;
  uid[k] = U_NEGINF, ptr[k++] = &neginf;
  if (s->bwd) {
    PUT(U_DO, s->dout), PUT(U_DQ, s->dq), PUT(U_DK, s->dk), PUT(U_DV, s->dvv);
    uid[k] = U_ONE, ptr[k++] = &one;
    PUT(U_DSUM, n->ws);
    if (!s->deterministic) PUT(U_DQACC, n->ws + (CUdeviceptr)((s->b * s->h * s->t * 4 + 255) / 256 * 256));
  }
#undef PUT
  void *ws = (void *)(uintptr_t)(n->ws + (CUdeviceptr)p->aux_bytes);
  cudnnBackendDescriptor_t vp = NULL;
  if (dnn_check(d, n->cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp),
                "variant pack"))
    return RT_ERROR;
  cudnnStatus_t st =
      n->cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, k, uid);
  if (st == CUDNN_STATUS_SUCCESS)
    st = n->cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, k, ptr);
  if (st == CUDNN_STATUS_SUCCESS)
    st = n->cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  if (st == CUDNN_STATUS_SUCCESS) st = n->cudnnBackendFinalize(vp);
  if (st == CUDNN_STATUS_SUCCESS) st = n->cudnnBackendExecute(n->h, p->plan, vp);
  n->cudnnBackendDestroyDescriptor(vp);
  return dnn_check(d, st, s->bwd ? "attention backward" : "attention forward");
}
