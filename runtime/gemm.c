/* gemm.c — GEMMs through cuBLASLt (dlopen'd, see rt.h): bf16 in, fp32 accumulation, bf16 or fp32
 * out, optional bias epilogue, fp8 operands with their scales (rt.h RT_GEMM_E4M3), D apart from C
 * (RtGemm.d) for the fused residual add, one algorithm per shape chosen once by the heuristic and
 * cached.
 *
 * cuBLASLt is column-major; a row-major C (M,N) is the column-major C^T (N,M), so every product
 * is computed as C^T = op(B)^T op(A)^T: cuBLASLt's "A" is our B and its "B" is our A. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#include "runtime/record.h"
#include "runtime/rt.h"

// clang-format off (an X-macro list, one entry a line)
#define RT_BLAS_FUNCS(X)                                                                                     \
  X(cublasLtCreate)                                                                                          \
  X(cublasLtDestroy)                                                                                         \
  X(cublasLtMatmulDescCreate)                                                                                \
  X(cublasLtMatmulDescDestroy)                                                                               \
  X(cublasLtMatmulDescSetAttribute)                                                                          \
  X(cublasLtMatrixLayoutCreate)                                                                              \
  X(cublasLtMatrixLayoutDestroy)                                                                             \
  X(cublasLtMatmulPreferenceCreate)                                                                          \
  X(cublasLtMatmulPreferenceDestroy)                                                                         \
  X(cublasLtMatmulPreferenceSetAttribute)                                                                    \
  X(cublasLtMatmulAlgoGetHeuristic)                                                                          \
  X(cublasLtMatmul)                                                                                          \
  X(cublasLtMatrixLayoutSetAttribute)
// clang-format on

#define RT_GEMM_CACHE 128
#define RT_GEMM_TUNE_REPS 5            /* timed calls of each candidate algorithm */
#define RT_GEMM_NOISE_BYTES (8u << 20) /* the random block rt_gemm_tune's operands repeat */

/* Everything a plan depends on; all int64_t, so there is no padding and memcmp compares keys. */
typedef struct {
  int64_t kind, c_f32, accumulate, bias, m, n, k;
  int64_t a_type, b_type, fast_accum;       /* RT_GEMM_BF16 / E4M3 / E5M2 per operand (rt.h) */
  int64_t lda, ldb, ldc, sa, sb, sc, batch; /* row-major leading dims and batch strides (elements) */
  int64_t align;                            /* min pointer alignment in bytes; 0 = cuBLASLt's default */
} GemmKey;

typedef struct {
  GemmKey key;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
} GemmPlan;

struct RtBlas {
#define RT_BDECL(f) __typeof__(&f) f;
  RT_BLAS_FUNCS(RT_BDECL)
#undef RT_BDECL
  void *lib;
  cublasLtHandle_t h;
  CUdeviceptr ws;
  size_t ws_bytes;
  GemmPlan plan[RT_GEMM_CACHE];
  int nplan;
  int timed, changed; /* shapes rt_gemm_tune chose for, and those of them not on the first-ranked algorithm */
  uint64_t *noise;    /* rt_gemm_tune's random operand bytes (RT_GEMM_NOISE_BYTES), made on its first fill */
};

static int blas_check(RtDevice *d, cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS) return RT_OK;
  return rt_fail(d, "%s: cuBLASLt status %d", what, (int)s);
}

#define RT_STR(x) #x
#define RT_XSTR(x) RT_STR(x)

int rt_blas_open(RtDevice *d, size_t workspace_bytes) {
  RtBlas *b = calloc(1, sizeof *b);
  if (!b) return rt_fail(d, "out of memory");
  d->blas = b;
  char soname[64];
  snprintf(soname, sizeof soname, "libcublasLt.so.%d", CUBLAS_VER_MAJOR);
  const char *home = getenv("CUDA_HOME");
  char path[512];
  b->lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!b->lib && home) {
    snprintf(path, sizeof path, "%s/lib64/%s", home, soname);
    b->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
  if (!b->lib) {
    snprintf(path, sizeof path, "/usr/local/cuda/lib64/%s", soname);
    b->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
  if (!b->lib)
    return rt_fail(d, "cannot load cuBLASLt (%s, also tried $CUDA_HOME/lib64 and /usr/local/cuda/lib64): %s",
                   soname, dlerror());
#define RT_BLOAD(f)                                                                                          \
  if (!(b->f = (__typeof__(&f))dlsym(b->lib, RT_XSTR(f))))                                                   \
    return rt_fail(d, "%s lacks %s", soname, RT_XSTR(f));
  RT_BLAS_FUNCS(RT_BLOAD)
#undef RT_BLOAD
  if (blas_check(d, b->cublasLtCreate(&b->h), "cublasLtCreate")) return RT_ERROR;
  b->ws_bytes = workspace_bytes;
  return rt_alloc(d, &b->ws, workspace_bytes, "the cuBLASLt workspace");
}

void rt_blas_close(RtDevice *d) {
  RtBlas *b = d->blas;
  if (!b) return;
  for (int i = 0; i < b->nplan; i++) {
    GemmPlan *p = &b->plan[i];
    if (p->desc) b->cublasLtMatmulDescDestroy(p->desc);
    if (p->la) b->cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) b->cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) b->cublasLtMatrixLayoutDestroy(p->lc);
  }
  if (b->ws) rt_free(d, b->ws, b->ws_bytes);
  free(b->noise);
  if (b->h) b->cublasLtDestroy(b->h);
  if (b->lib) dlclose(b->lib);
  free(b);
  d->blas = NULL;
}

static int layout(RtDevice *d, RtBlas *b, cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows,
                  int64_t cols, int64_t ld, int64_t batch, int64_t stride, const char *what) {
  if (blas_check(d, b->cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld), what))
    return RT_ERROR;
  if (batch <= 1) return RT_OK;
  int32_t n = (int32_t)batch;
  return blas_check(d,
                    b->cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof n),
                    what) ||
                 blas_check(d,
                            b->cublasLtMatrixLayoutSetAttribute(
                                *l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
                            what)
             ? RT_ERROR
             : RT_OK;
}

static int choose_algo(RtDevice *d, GemmPlan *p, const cublasLtMatmulHeuristicResult_t *res, int found,
                       const RtGemm *g);

/* key's plan where one was made, else NULL. */
static GemmPlan *plan_find(RtBlas *b, const GemmKey *key) {
  for (int i = 0; i < b->nplan; i++)
    if (memcmp(&b->plan[i].key, key, sizeof *key) == 0) return &b->plan[i];
  return NULL;
}

/* The plan of key, made on its first use: cuBLASLt's first-ranked algorithm, or, with tune set
 * (rt_gemm_tune), the fastest of its first d->gemm_tune timed on tune's operands. */
static GemmPlan *plan_get(RtDevice *d, const GemmKey *key, const RtGemm *tune) {
  RtBlas *b = d->blas;
  GemmPlan *have = plan_find(b, key);
  if (have) return have;
  if (b->nplan == RT_GEMM_CACHE) {
    rt_fail(d, "more than %d GEMM shapes", RT_GEMM_CACHE);
    return NULL;
  }
  GemmPlan *p = &b->plan[b->nplan++];
  memset(p, 0, sizeof *p);
  p->key = *key;
  RtGemmKind kind = (RtGemmKind)key->kind;
  int64_t M = key->m, N = key->n, K = key->k;
  /* cuBLASLt operands (see the file comment): cA = our B, cB = our A, C^T is (N rows, M cols). */
  cublasOperation_t ta = kind == RT_GEMM_NT ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = kind == RT_GEMM_TN ? CUBLAS_OP_T : CUBLAS_OP_N;
  int64_t ar = kind == RT_GEMM_NT ? K : N, ac = kind == RT_GEMM_NT ? N : K;
  int64_t br = kind == RT_GEMM_TN ? M : K, bc = kind == RT_GEMM_TN ? K : M;
  cudaDataType_t ct = key->c_f32 ? CUDA_R_32F : CUDA_R_16BF;
  static const cudaDataType_t ELT[3] = {CUDA_R_16BF, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2};
  if (blas_check(d, b->cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                 "cublasLtMatmulDescCreate") ||
      blas_check(d, b->cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
                 "TRANSA") ||
      blas_check(d, b->cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
                 "TRANSB") ||
      layout(d, b, &p->la, ELT[key->b_type], ar, ac, key->ldb, key->batch, key->sb, "layout A") ||
      layout(d, b, &p->lb, ELT[key->a_type], br, bc, key->lda, key->batch, key->sa, "layout B") ||
      layout(d, b, &p->lc, ct, N, M, key->ldc, key->batch, key->sc, "layout C"))
    return NULL;
  if (key->fast_accum) {
    int8_t on = 1;
    if (blas_check(
            d, b->cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &on, sizeof on),
            "FAST_ACCUM"))
      return NULL;
  }
  if (key->bias) {
    cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
    if (blas_check(d,
                   b->cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep),
                   "EPILOGUE"))
      return NULL;
  }
  cublasLtMatmulPreference_t pref;
  if (blas_check(d, b->cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate")) return NULL;
  size_t ws = b->ws_bytes;
  cublasLtMatmulHeuristicResult_t res[RT_GEMM_TUNE_MAX];
  int found = 0, want = tune && d->gemm_tune > 1 ? d->gemm_tune : 1;
  cublasStatus_t s =
      b->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  /* operands at head offsets inside a row are less aligned than cuBLASLt's assumed 256 bytes:
   * say so, or the heuristic may pick an algorithm that refuses them */
  uint32_t al = (uint32_t)key->align;
  static const cublasLtMatmulPreferenceAttributes_t ALIGN[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && al && s == CUBLAS_STATUS_SUCCESS; i++)
    s = b->cublasLtMatmulPreferenceSetAttribute(pref, ALIGN[i], &al, sizeof al);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = b->cublasLtMatmulAlgoGetHeuristic(b->h, p->desc, p->la, p->lb, p->lc, p->lc, pref, want, res, &found);
  b->cublasLtMatmulPreferenceDestroy(pref);
  if (blas_check(d, s, "cublasLtMatmulAlgoGetHeuristic")) return NULL;
  if (found < 1) {
    rt_fail(d, "cuBLASLt has no algorithm for a %s GEMM M=%lld N=%lld K=%lld (batch %lld)",
            kind == RT_GEMM_NT   ? "NT"
            : kind == RT_GEMM_NN ? "NN"
                                 : "TN",
            (long long)M, (long long)N, (long long)K, (long long)key->batch);
    return NULL;
  }
  p->algo = res[0].algo;
  if (found > 1 && choose_algo(d, p, res, found, tune)) return NULL;
  return p;
}

/* D = alpha A B + beta C with D of C's layout; D = C (in place) when D is 0; by algorithm algo. */
static cublasStatus_t matmul_by(RtDevice *d, GemmPlan *p, const cublasLtMatmulAlgo_t *algo, const RtGemm *g) {
  RtBlas *b = d->blas;
  void *pa = (void *)(uintptr_t)g->b, *pb = (void *)(uintptr_t)g->a, *pc = (void *)(uintptr_t)g->c;
  void *pd = g->d ? (void *)(uintptr_t)g->d : pc;
  return b->cublasLtMatmul(b->h, p->desc, &g->alpha, pa, p->la, pb, p->lb, &g->beta, pc, p->lc, pd, p->lc,
                           algo, (void *)(uintptr_t)b->ws, b->ws_bytes, (cudaStream_t)d->stream);
}

/* The largest power of two (<= 256) dividing v, 256 for 0. */
static int64_t pow2_div(int64_t v) {
  int64_t a = 256;
  while (a > 1 && v % a)
    a /= 2;
  return a;
}

/* What an fp8 product needs (rt.h, RT_GEMM_E4M3): RT_OK or the refusal. */
static int fp8_check(RtDevice *d, const RtGemm *g) {
  int fp8 = g->a_type != RT_GEMM_BF16 || g->b_type != RT_GEMM_BF16;
  if (g->a_type < RT_GEMM_BF16 || g->a_type > RT_GEMM_E5M2 || g->b_type < RT_GEMM_BF16 ||
      g->b_type > RT_GEMM_E5M2)
    return rt_fail(d, "GEMM operand types %lld, %lld are not bf16, E4M3 or E5M2", (long long)g->a_type,
                   (long long)g->b_type);
  if (!fp8) return g->a_scale || g->b_scale ? rt_fail(d, "a bf16 GEMM has fp8 scales") : RT_OK;
  if (g->a_type == RT_GEMM_BF16 || g->b_type == RT_GEMM_BF16 ||
      (g->a_type == RT_GEMM_E5M2 && g->b_type == RT_GEMM_E5M2))
    return rt_fail(d, "an fp8 GEMM takes two fp8 operands, at most one of them E5M2");
  if (g->kind != RT_GEMM_NT || g->batch != 1 || g->m % 16 || g->n % 16 || g->k % 16)
    return rt_fail(
        d,
        "an fp8 GEMM is an unbatched NT product with M, N, K multiples of 16 (got kind %lld, batch "
        "%lld, M=%lld N=%lld K=%lld)",
        (long long)g->kind, (long long)g->batch, (long long)g->m, (long long)g->n, (long long)g->k);
  if (!g->a_scale || !g->b_scale) return rt_fail(d, "an fp8 GEMM needs both operands' scale_inv");
  return RT_OK;
}

/* The key of g's plan. Unbatched products keep cuBLASLt's default alignment whatever the addresses,
 * and in-place or out-of-place (D = C or not) share one plan: the algorithm, and so the bits, must not
 * depend on where the memory plan put the operands — a recompute setting moves them, and every
 * setting must stay bitwise equal to none. (The arena's 16-byte slots satisfy the algorithms the
 * default picks: cuBLASLt checks at the call and would fail, not misread.) The batched per-head
 * products at head offsets tell cuBLASLt their alignment, at most 16 bytes (what every arena slot
 * has), so that it too comes from the shapes, not from the plan. */
static GemmKey gemm_key(const RtGemm *g) {
  int64_t al = 0;
  if (g->batch > 1) {
    int64_t cs = g->c_f32 ? 4 : 2;
    int64_t v[9] = {(int64_t)g->a,    (int64_t)g->b, (int64_t)g->c, 2 * g->stride_a, 2 * g->stride_b,
                    cs * g->stride_c, 2 * g->lda,    2 * g->ldb,    cs * g->ldc};
    al = 16;
    for (int i = 0; i < 9; i++)
      if (pow2_div(v[i]) < al) al = pow2_div(v[i]);
  }
  return (GemmKey){.kind = g->kind,
                   .c_f32 = g->c_f32 != 0,
                   .accumulate = g->beta != 0.0f,
                   .bias = g->bias != 0,
                   .m = g->m,
                   .n = g->n,
                   .k = g->k,
                   .lda = g->lda,
                   .ldb = g->ldb,
                   .ldc = g->ldc,
                   .sa = g->batch > 1 ? g->stride_a : 0,
                   .sb = g->batch > 1 ? g->stride_b : 0,
                   .sc = g->batch > 1 ? g->stride_c : 0,
                   .batch = g->batch,
                   .align = al,
                   .a_type = g->a_type,
                   .b_type = g->b_type,
                   .fast_accum = g->fast_accum != 0};
}

/* g's bias and fp8 scale pointers into p's descriptor (they are per call, not per shape). */
static int set_pointers(RtDevice *d, GemmPlan *p, const RtGemm *g) {
  RtBlas *b = d->blas;
  if (g->bias) {
    void *bp = (void *)(uintptr_t)g->bias;
    if (blas_check(
            d, b->cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp),
            "BIAS_POINTER"))
      return RT_ERROR;
  }
  if (g->a_type == RT_GEMM_BF16) return RT_OK;
  /* cuBLASLt's A is our B (the file comment), so its A scale is our b_scale */
  void *sa = (void *)(uintptr_t)g->b_scale, *sb = (void *)(uintptr_t)g->a_scale;
  return blas_check(
             d,
             b->cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa),
             "A_SCALE_POINTER") ||
                 blas_check(d,
                            b->cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                              &sb, sizeof sb),
                            "B_SCALE_POINTER")
             ? RT_ERROR
             : RT_OK;
}

int rt_gemm_run(RtDevice *d, const RtGemm *g) {
  if (fp8_check(d, g)) return RT_ERROR;
  if (d->rec) return rt_record_gemm(d, g);
  if (!d->blas) return rt_fail(d, "cuBLASLt is not open");
  if (g->m == 0 || g->n == 0 || g->batch == 0) return RT_OK;
  GemmKey key = gemm_key(g);
  GemmPlan *p = plan_get(d, &key, NULL);
  if (!p || set_pointers(d, p, g)) return RT_ERROR;
  return blas_check(d, matmul_by(d, p, &p->algo, g), "cublasLtMatmul");
}

/* ---- the timed choice (rt_gemm_tune) ---- */

/* Bytes of an operand of `rows` rows of `cols` elements at leading dimension ld. */
static size_t extent(int64_t rows, int64_t cols, int64_t ld, int64_t type) {
  return (size_t)((rows - 1) * ld + cols) * (type == RT_GEMM_BF16 ? 2u : 1u);
}

/* bytes at p filled with pseudo-random bytes with bits 2 and 6 clear: finite, mixed-sign values
 * in bf16, E4M3 and E5M2 alike (no exponent of all ones), so that the timing sees the tensor
 * cores' power draw on data like the step's, not on zeros. */
static int fill_random(RtDevice *d, CUdeviceptr p, size_t bytes) {
  const size_t chunk = RT_GEMM_NOISE_BYTES;
  RtBlas *b = d->blas;
  if (!b->noise) { /* one block for every operand of the session, repeated */
    if (!(b->noise = malloc(chunk))) return rt_fail(d, "out of memory");
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < chunk / 8; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      b->noise[i] = x & 0xbbbbbbbbbbbbbbbbull;
    }
  }
  int rc = RT_OK;
  for (size_t at = 0; at < bytes && !rc; at += chunk)
    rc = rt_copy_h2d(d, p + at, b->noise, bytes - at < chunk ? bytes - at : chunk);
  return rc;
}

/* p's algorithm: the fastest of res[0..found) over RT_GEMM_TUNE_REPS calls each on g's operands
 * (after one untimed call; a candidate whose call fails is passed over); res[0] stays where no
 * other is faster. */
static int choose_algo(RtDevice *d, GemmPlan *p, const cublasLtMatmulHeuristicResult_t *res, int found,
                       const RtGemm *g) {
  RtTimer t;
  if (set_pointers(d, p, g) || rt_timer_new(d, &t)) return RT_ERROR;
  double best = -1.0;
  int rc = RT_OK, pick = 0;
  for (int i = 0; i < found && !rc; i++) {
    if (matmul_by(d, p, &res[i].algo, g) != CUBLAS_STATUS_SUCCESS) continue;
    double ms = 0.0;
    rc = rt_timer_start(d, &t);
    for (int r = 0; r < RT_GEMM_TUNE_REPS && !rc; r++)
      rc = blas_check(d, matmul_by(d, p, &res[i].algo, g), "cublasLtMatmul");
    if (!rc) rc = rt_timer_stop(d, &t, &ms);
    if (!rc && (best < 0.0 || ms < best)) best = ms, p->algo = res[i].algo, pick = i;
  }
  rt_timer_free(d, &t);
  d->blas->changed += pick != 0;
  return rc;
}

void rt_gemm_tuned(const RtDevice *d, int *timed, int *changed) {
  *timed = d->blas ? d->blas->timed : 0;
  *changed = d->blas ? d->blas->changed : 0;
}

int rt_gemm_tune(RtDevice *d, const RtGemm *g) {
  if (d->rec || !d->gemm_tune || g->batch != 1 || g->m == 0 || g->n == 0) return RT_OK;
  if (fp8_check(d, g)) return RT_ERROR;
  if (!d->blas) return rt_fail(d, "cuBLASLt is not open");
  GemmKey key = gemm_key(g);
  RtBlas *b = d->blas;
  if (plan_find(b, &key)) return RT_OK; /* chosen already */
  int64_t ar = g->kind == RT_GEMM_TN ? g->k : g->m, ac = g->kind == RT_GEMM_TN ? g->m : g->k;
  int64_t br = g->kind == RT_GEMM_NT ? g->n : g->k, bc = g->kind == RT_GEMM_NT ? g->k : g->n;
  if (fill_random(d, g->a, extent(ar, ac, g->lda, g->a_type)) ||
      fill_random(d, g->b, extent(br, bc, g->ldb, g->b_type)))
    return RT_ERROR;
  if (!plan_get(d, &key, g)) return RT_ERROR;
  b->timed++;
  return rt_sync(d);
}

int rt_gemm(RtDevice *d, RtGemmKind kind, int64_t M, int64_t N, int64_t K, CUdeviceptr A, CUdeviceptr B,
            CUdeviceptr C, int c_f32, int accumulate, CUdeviceptr bias) {
  RtGemm g = {.kind = kind,
              .m = M,
              .n = N,
              .k = K,
              .lda = kind == RT_GEMM_TN ? M : K,
              .ldb = kind == RT_GEMM_NT ? K : N,
              .ldc = N,
              .batch = 1,
              .c_f32 = c_f32 != 0,
              .a = A,
              .b = B,
              .c = C,
              .bias = bias,
              .alpha = 1.0f,
              .beta = accumulate ? 1.0f : 0.0f};
  return rt_gemm_run(d, &g);
}
