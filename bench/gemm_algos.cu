// gemm_algos.cu — how far cuBLASLt's first-ranked algorithm is from the fastest of its first N, shape
// by shape: the GEMMs of one Llama 3 8B layer at 8192 tokens (fp8 forward E4M3 x E4M3 with fast
// accumulation, dgrad and wgrad E5M2 x E4M3 into fp32 with beta 1, as stepc runs them; bf16 beside
// them) and the 8192^3 ceilings, each algorithm run 3 times and then timed over 20 calls on random
// data, alone on the GPU. The evidence behind stepc_options.gemm_tuning (docs/gpu-runtime.md).
//   nvcc -O2 -arch=sm_90 -o gemm_algos bench/gemm_algos.cu -lcublasLt && ./gemm_algos 8
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#define CK(x) do { auto s_ = (x); if ((int)s_) { printf("%s:%d %s -> %d\n", __FILE__, __LINE__, #x, (int)s_); exit(1);} } while (0)

__global__ void fill(unsigned char *p, size_t n, int kind, unsigned seed) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  for (; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed; h ^= h >> 13; h *= 0x5bd1e995; h ^= h >> 15;
    float v = ((h & 0xffff) / 65535.0f) * 2.f - 1.f;
    if (kind == 0) ((__nv_bfloat16 *)p)[i] = __float2bfloat16(v);
    else if (kind == 1) ((__nv_fp8_e4m3 *)p)[i] = __nv_fp8_e4m3(v);
    else if (kind == 2) ((__nv_fp8_e5m2 *)p)[i] = __nv_fp8_e5m2(v);
    else ((float *)p)[i] = v;
  }
}

static size_t esz(int k) { return k == 0 ? 2 : k == 3 ? 4 : 1; }
static cudaDataType_t dt(int k) { return k == 0 ? CUDA_R_16BF : k == 1 ? CUDA_R_8F_E4M3 : k == 2 ? CUDA_R_8F_E5M2 : CUDA_R_32F; }

int main(int argc, char **argv) {
  // name M N K a_type b_type c_type(0 bf16, 3 f32) beta
  struct S { const char *name; long M, N, K; int at, bt, ct; float beta; } sh[] = {
    {"qkv fwd f8", 8192, 6144, 4096, 1, 1, 0, 0}, {"proj fwd f8", 8192, 4096, 4096, 1, 1, 0, 0},
    {"fc1 fwd f8", 8192, 28672, 4096, 1, 1, 0, 0}, {"fc2 fwd f8", 8192, 4096, 14336, 1, 1, 0, 0},
    {"qkv dgrad f8", 8192, 4096, 6144, 2, 1, 0, 0}, {"proj dgrad f8", 8192, 4096, 4096, 2, 1, 0, 0},
    {"fc1 dgrad f8", 8192, 4096, 28672, 2, 1, 0, 0}, {"fc2 dgrad f8", 8192, 14336, 4096, 2, 1, 0, 0},
    {"qkv wgrad f8", 6144, 4096, 8192, 2, 1, 3, 1}, {"proj wgrad f8", 4096, 4096, 8192, 2, 1, 3, 1},
    {"fc1 wgrad f8", 28672, 4096, 8192, 2, 1, 3, 1}, {"fc2 wgrad f8", 4096, 14336, 8192, 2, 1, 3, 1},
    {"fc2 fwd f8 +C bf16", 8192, 4096, 14336, 1, 1, 0, 1}, {"proj fwd f8 +C bf16", 8192, 4096, 4096, 1, 1, 0, 1},
    {"qkv fwd bf16", 8192, 6144, 4096, 0, 0, 0, 0}, {"proj fwd bf16 +C", 8192, 4096, 4096, 0, 0, 0, 1},
    {"fc1 fwd bf16", 8192, 28672, 4096, 0, 0, 0, 0}, {"fc2 fwd bf16 +C", 8192, 4096, 14336, 0, 0, 0, 1},
    {"fc1 wgrad bf16", 28672, 4096, 8192, 0, 0, 3, 1}, {"ceiling f8 8192^3", 8192, 8192, 8192, 1, 1, 0, 0},
    {"ceiling bf16 8192^3", 8192, 8192, 8192, 0, 0, 0, 0},
  };
  int nalg = argc > 1 ? atoi(argv[1]) : 8;
  cublasLtHandle_t h; CK(cublasLtCreate(&h));
  size_t wsb = 64 << 20; void *ws; CK(cudaMalloc(&ws, wsb));
  float *one; CK(cudaMalloc(&one, 4)); float o = 1.f; CK(cudaMemcpy(one, &o, 4, cudaMemcpyHostToDevice));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (auto &s : sh) {
    void *A, *B, *C;
    CK(cudaMalloc(&A, s.M * s.K * esz(s.at))); CK(cudaMalloc(&B, s.N * s.K * esz(s.bt))); CK(cudaMalloc(&C, s.M * s.N * esz(s.ct)));
    fill<<<1024, 256>>>((unsigned char *)A, s.M * s.K, s.at, 1); fill<<<1024, 256>>>((unsigned char *)B, s.N * s.K, s.bt, 2);
    fill<<<1024, 256>>>((unsigned char *)C, s.M * s.N, s.ct, 3);
    cublasLtMatmulDesc_t d; CK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t T = CUBLAS_OP_T, N = CUBLAS_OP_N;
    CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &T, sizeof T));
    CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &N, sizeof N));
    if (s.at != 0) {
      CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &one, sizeof one));
      CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &one, sizeof one));
      int8_t fa = s.bt == 1 && s.at == 1; CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fa, sizeof fa));
    }
    cublasLtMatrixLayout_t la, lb, lc;
    CK(cublasLtMatrixLayoutCreate(&la, dt(s.bt), s.K, s.N, s.K));  // our B
    CK(cublasLtMatrixLayoutCreate(&lb, dt(s.at), s.K, s.M, s.K));  // our A
    CK(cublasLtMatrixLayoutCreate(&lc, dt(s.ct), s.N, s.M, s.N));
    cublasLtMatmulPreference_t pref; CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    std::vector<cublasLtMatmulHeuristicResult_t> res(nalg); int found = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(h, d, la, lb, lc, lc, pref, nalg, res.data(), &found));
    double flop = 2.0 * s.M * s.N * s.K;
    printf("== %s M=%ld N=%ld K=%ld (%d algos)\n", s.name, s.M, s.N, s.K, found);
    for (int i = 0; i < found; i++) {
      float al = 1.f, be = s.beta;
      bool ok = true;
      for (int w = 0; w < 3 && ok; w++)
        ok = cublasLtMatmul(h, d, &al, B, la, A, lb, &be, C, lc, C, lc, &res[i].algo, ws, wsb, 0) == CUBLAS_STATUS_SUCCESS;
      if (!ok) { printf("  #%d fails\n", i); continue; }
      int reps = 20;
      cudaEventRecord(e0);
      for (int r = 0; r < reps; r++) cublasLtMatmul(h, d, &al, B, la, A, lb, &be, C, lc, C, lc, &res[i].algo, ws, wsb, 0);
      cudaEventRecord(e1); cudaEventSynchronize(e1);
      float ms; cudaEventElapsedTime(&ms, e0, e1); ms /= reps;
      int tile = 0, stages = 0, splitk = 0, swz = 0, red = 0, cid = 0; size_t sz;
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_ID, &cid, sizeof cid, &sz);
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &sz);
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &sz);
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &sz);
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof swz, &sz);
      cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof red, &sz);
      printf("  #%d %8.4f ms %7.1f TFLOP/s  algo %d tile %d stages %d splitk %d swz %d red %d ws %zu\n", i, ms,
             flop / ms / 1e9, cid, tile, stages, splitk, swz, red, res[i].workspaceSize);
    }
    cublasLtMatmulPreferenceDestroy(pref); cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc); cublasLtMatmulDescDestroy(d); cudaFree(A); cudaFree(B); cudaFree(C);
  }
  return 0;
}
