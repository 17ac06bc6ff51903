// ep.cuh — expert parallelism's token exchange (ir/ops/ep.c) after its all-gathers: the rows each
// rank keeps, picked from every EP rank's gathered buffer in the CPU executor's order. *rank is this
// rank's index in its EP group (the launch scratch's rank slot). Rows are moved as 2-byte units
// (w units a row: bf16 activations or fp32 values alike), never summed: exact in any precision.
#pragma once
#include "common.cuh"

// lseg (El, 2) := this rank's receive layout from all_seg (ep, E, 2), every EP rank's seg: local
// expert l's rows start where l - 1's end, its count the sum over the sources. Launch: <<<1, 1>>>.
extern "C" __global__ void ep_local_segments(int* lseg, const int* all_seg, int ep, int E, const int* rank) {
  const int el = E / ep, me = *rank;
  int at = 0;
  for (int l = 0; l < el; l++) {
    int cnt = 0;
    for (int s = 0; s < ep; s++) cnt += all_seg[((long)s * E + (long)me * el + l) * 2 + 1];
    lseg[2 * l] = at, lseg[2 * l + 1] = cnt;
    at += cnt;
  }
}

// EP_DISPATCH: xr (R, w) row i := the row of the gathered all (ep, N, w) that lands at i in this
// rank's receive layout (local expert major, then source rank, then the source's segment order);
// rows past the received total are zero. One block per output row.
extern "C" __global__ void ep_dispatch_rows(unsigned short* xr, const unsigned short* all, const int* all_seg,
                                            long R, long N, int w, int ep, int E, const int* rank) {
  __shared__ long src;
  const long i = blockIdx.x;
  if (i >= R) return;
  if (threadIdx.x == 0) {
    const int el = E / ep, me = *rank;
    long at = 0;
    src = -1;
    for (int l = 0; l < el && src < 0; l++)
      for (int s = 0; s < ep && src < 0; s++) {
        const int* sg = all_seg + ((long)s * E + (long)me * el + l) * 2;
        if (sg[1] <= 0) continue;
        if (i < at + sg[1] && sg[0] >= 0 && sg[0] + (long)sg[1] <= N) src = (long)s * N + sg[0] + (i - at);
        at += sg[1];
      }
  }
  __syncthreads();
  unsigned short* d = xr + i * w;
  const unsigned short* x = src >= 0 ? all + src * w : nullptr;
  for (int k = threadIdx.x; k < w; k += blockDim.x) d[k] = x ? x[k] : 0;
}

// EP_COMBINE: yp (N, w) row n := the row of the gathered all (ep, R, w) that owner o = e / El sent back
// for this rank's segment of expert e holding n (its place in o's receive layout); rows in no segment
// are zero. One block per output row.
extern "C" __global__ void ep_combine_rows(unsigned short* yp, const unsigned short* all, const int* all_seg,
                                           long N, long R, int w, int ep, int E, const int* rank) {
  __shared__ long src;
  const long n = blockIdx.x;
  if (n >= N) return;
  if (threadIdx.x == 0) {
    const int el = E / ep, me = *rank;
    src = -1;
    for (int e = 0; e < E && src < 0; e++) {
      const int* mine = all_seg + ((long)me * E + e) * 2;
      if (mine[1] <= 0 || n < mine[0] || n >= mine[0] + (long)mine[1]) continue;
      const int o = e / el, l = e % el;
      long at = 0;  // e's block for this rank in o's layout: local experts before l, then sources before me
      for (int l2 = 0; l2 <= l; l2++)
        for (int s = 0; s < ep; s++) {
          if (l2 == l && s == me) break;
          const int c = all_seg[((long)s * E + (long)o * el + l2) * 2 + 1];
          at += c > 0 ? c : 0;
        }
      if (at + mine[1] <= R) src = (long)o * R + at + (n - mine[0]);
    }
  }
  __syncthreads();
  unsigned short* d = yp + n * w;
  const unsigned short* y = src >= 0 ? all + src * w : nullptr;
  for (int k = threadIdx.x; k < w; k += blockDim.x) d[k] = y ? y[k] : 0;
}
