// fp8_cuda_ref.cpp — CUDA's own host conversions (cuda_fp8.h, callable from host C++), the reference
// tests/unit/fp8_rounding.c checks stepc's fp8 rounding against: float -> fp8 with __NV_SATFINITE
// (what cvt.rn.satfinite computes on the device), and fp8 -> half -> float.
#include <cuda_fp8.h>

static __nv_fp8_interpretation_t fmt_of(int fmt) { return fmt ? __NV_E5M2 : __NV_E4M3; }

extern "C" unsigned char nv_fp8_encode(float x, int fmt) {
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, fmt_of(fmt));
}

extern "C" float nv_fp8_decode(unsigned char b, int fmt) {
  __half h(__nv_cvt_fp8_to_halfraw(b, fmt_of(fmt)));
  return __half2float(h);
}
