// embedding.cuh — token (+ learned position) embedding, forward and backward.
// Rows are 16-byte vectors of 8 bf16: C must be a multiple of 8, pointers 16-byte aligned.
#pragma once
#include "common.cuh"

// out[n] = wte[tokens[n]] + wpe[n % T] (wpe may be null: Llama has no learned positions).
// A token outside [0, V) yields a zero row rather than reading out of bounds.
// Launch: any 1-D grid; one thread per 8 channels, grid-stride.
extern "C" __global__ void embedding_forward(bf16* out,          // (N, C)
                                             const int* tokens,  // (N)
                                             const bf16* wte,    // (V, C)
                                             const bf16* wpe,    // (T, C) or null
                                             int N, int T, int C, int V) {
  long total = (long)N * (C / 8);
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
    long n = i / (C / 8);
    int c = (int)(i % (C / 8)) * 8;
    int tok = tokens[n];
    uint4 w = make_uint4(0, 0, 0, 0);
    if (tok >= 0 && tok < V) w = *(const uint4*)(wte + (long)tok * C + c);
    if (wpe) {
      uint4 p = *(const uint4*)(wpe + (n % T) * (long)C + c);
      unsigned* wv = (unsigned*)&w;
      const unsigned* pv = (const unsigned*)&p;
#pragma unroll
      for (int k = 0; k < 4; k++)
        wv[k] = pack_bf16x2(bf16x2_lo(wv[k]) + bf16x2_lo(pv[k]), bf16x2_hi(wv[k]) + bf16x2_hi(pv[k]));
    }
    *(uint4*)(out + n * C + c) = w;
  }
}

// dwte[tokens[n]] += dout[n], in fp32, deterministically without float atomics: block b owns the
// vocabulary rows v with v % gridDim.x == b. Every block scans all token ids in order, compacts
// the ones it owns (ascending n) into shared memory, and adds their rows one after another; each
// (row, channel) is touched by one thread in ascending n, so the sum order is fixed.
// Launch: gridDim.x = any number of owner groups (4 x SMs is a good default), blockDim.x = 256.
extern "C" __global__ void embedding_backward_token(float* dwte,        // (V, C) accumulated
                                                    const bf16* dout,   // (N, C)
                                                    const int* tokens,  // (N)
                                                    int N, int C, int V) {
  __shared__ int owned[1024];
  __shared__ int warp_count[32];
  int lane = threadIdx.x % STEPC_WARP, warp = threadIdx.x / STEPC_WARP;
  int nwarps = blockDim.x / STEPC_WARP;
  for (int base = 0; base < N; base += blockDim.x) {
    int n = base + threadIdx.x;
    int tok = n < N ? tokens[n] : -1;
    bool mine = tok >= 0 && tok < V && tok % gridDim.x == blockIdx.x;
    unsigned ballot = __ballot_sync(STEPC_FULL_MASK, mine);
    if (lane == 0) warp_count[warp] = __popc(ballot);
    __syncthreads();
    int offset = 0, count = 0;
    for (int w = 0; w < nwarps; w++) {
      if (w < warp) offset += warp_count[w];
      count += warp_count[w];
    }
    if (mine) owned[offset + __popc(ballot & ((1u << lane) - 1u))] = n;
    __syncthreads();
    for (int k = 0; k < count; k++) {
      int m = owned[k];
      const bf16* src = dout + (long)m * C;
      float* dst = dwte + (long)tokens[m] * C;
      for (int c = threadIdx.x * 8; c < C; c += blockDim.x * 8) {
        uint4 g = *(const uint4*)(src + c);
        const unsigned* gv = (const unsigned*)&g;
        float4 a = *(float4*)(dst + c), b = *(float4*)(dst + c + 4);
        a.x += bf16x2_lo(gv[0]); a.y += bf16x2_hi(gv[0]);
        a.z += bf16x2_lo(gv[1]); a.w += bf16x2_hi(gv[1]);
        b.x += bf16x2_lo(gv[2]); b.y += bf16x2_hi(gv[2]);
        b.z += bf16x2_lo(gv[3]); b.w += bf16x2_hi(gv[3]);
        *(float4*)(dst + c) = a;
        *(float4*)(dst + c + 4) = b;
      }
    }
    __syncthreads();  // `owned` and `warp_count` are rewritten by the next chunk
  }
}

// dwpe[t] += sum over b (ascending) of dout[b*T + t]. One thread per (t, 8 channels).
// Launch: any 1-D grid, grid-stride.
// rank non-null (sequence parallelism, POS_ADD_BWD i[1]): dout holds the rank's rows [rank T,
// (rank + 1) T) of each sequence, whose gradients go to those rows of dwpe (the optimizer sums the
// table's gradient over the group).
extern "C" __global__ void embedding_backward_position(float* dwpe,       // (T, C) accumulated
                                                       const bf16* dout,  // (B*T, C)
                                                       int B, int T, int C, const int* rank) {
  if (rank) dwpe += (long)*rank * T * C;
  long total = (long)T * (C / 8);
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
    long t = i / (C / 8);
    int c = (int)(i % (C / 8)) * 8;
    float acc[8];
#pragma unroll
    for (int k = 0; k < 8; k++) acc[k] = dwpe[t * C + c + k];
    for (int b = 0; b < B; b++) {
      uint4 g = *(const uint4*)(dout + ((long)b * T + t) * C + c);
      const unsigned* gv = (const unsigned*)&g;
#pragma unroll
      for (int k = 0; k < 4; k++) {
        acc[2 * k] += bf16x2_lo(gv[k]);
        acc[2 * k + 1] += bf16x2_hi(gv[k]);
      }
    }
#pragma unroll
    for (int k = 0; k < 8; k++) dwpe[t * C + c + k] = acc[k];
  }
}
