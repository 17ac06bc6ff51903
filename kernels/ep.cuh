// ep.cuh — expert parallelism's token exchange (ir/ops/ep.c) around its all-to-alls: the rows packed
// into per-owner blocks before, and placed in the CPU executor's order after. *rank is this
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

// The all-to-all's row maps. P is the per-pair block (R / ep rows: the static bound on the rows one
// source sends one owner); cnt / start are all_seg's (source s, expert e) counts and first rows.
__device__ __forceinline__ int ep_cnt(const int* as, int E, int s, int e) {
  const int c = as[((long)s * E + e) * 2 + 1];
  return c > 0 ? c : 0;
}

// One block a row of dst (rows of w 2-byte units), its source row in src found by thread 0, zero where
// there is none. mode:
//  0  EP_DISPATCH's send blocks (ep, P): block o, row j := this rank's j-th row for owner o — its
//     segments of experts o El .. o El + El - 1 of x in order (src: x, nsrc rows)
//  1  EP_DISPATCH's receive layout (R): row i (local expert l major, then source s) := row j of the
//     block received from s, j counting s's rows of the local experts before l (src: received)
//  2  EP_COMBINE's send blocks (ep, P): block s, row j := the row of y (the receive layout) holding
//     source s's j-th row (src: y, R rows)
//  3  EP_COMBINE's result (N): row n in this rank's segment of expert e (owner o = e / El, l = e % El)
//     := row (local experts before l of o) + (n - start) of the block received from o (src: received)
// Rows are copied, never summed: exact, and in the CPU executor's layout (ir/ops/ep.c).
extern "C" __global__ void ep_a2a_rows(unsigned short* dst, const unsigned short* src, const int* as, long rows,
                                       long nsrc, long P, int w, int ep, int E, int mode, const int* rank) {
  __shared__ long from;
  const long i = blockIdx.x;
  if (i >= rows) return;
  if (threadIdx.x == 0) {
    const int el = E / ep, me = *rank;
    long f = -1;
    if (mode == 0 || mode == 2) {  // a send block: o (or s) = i / P, row j of it
      const int b = (int)(i / P);
      long j = i % P;
      for (int l = 0; l < el && f < 0; l++) {
        const int e = mode == 0 ? b * el + l : me * el + l;
        const int c = ep_cnt(as, E, mode == 0 ? me : b, e);
        if (j < c) {
          if (mode == 0) {
            f = as[((long)me * E + e) * 2] + j;
          } else {  // where (l, b) starts in this rank's receive layout
            long at = 0;
            for (int l2 = 0; l2 <= l; l2++)
              for (int s = 0; s < ep; s++) {
                if (l2 == l && s == b) break;
                at += ep_cnt(as, E, s, me * el + l2);
              }
            f = at + j;
          }
        }
        j -= c;
      }
    } else if (mode == 1) {
      long at = 0;
      for (int l = 0; l < el && f < 0; l++)
        for (int s = 0; s < ep && f < 0; s++) {
          const int c = ep_cnt(as, E, s, me * el + l);
          if (i < at + c) {
            long before = 0;
            for (int l2 = 0; l2 < l; l2++) before += ep_cnt(as, E, s, me * el + l2);
            f = (long)s * P + before + (i - at);
          }
          at += c;
        }
    } else {
      for (int e = 0; e < E && f < 0; e++) {
        const int c = ep_cnt(as, E, me, e), st = as[((long)me * E + e) * 2];
        if (c <= 0 || i < st || i >= st + (long)c) continue;
        const int o = e / el, l = e % el;
        long before = 0;
        for (int l2 = 0; l2 < l; l2++) before += ep_cnt(as, E, me, o * el + l2);
        if (before + (i - st) < P) f = (long)o * P + before + (i - st);
      }
    }
    from = f >= 0 && f < nsrc ? f : -1;
  }
  __syncthreads();
  unsigned short* d = dst + i * w;
  const unsigned short* x = from >= 0 ? src + from * w : nullptr;
  for (int k = threadIdx.x; k < w; k += blockDim.x) d[k] = x ? x[k] : 0;
}
