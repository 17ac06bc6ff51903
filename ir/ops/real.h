/* real.h — selects the precision of one kernel pass: define OPS_REAL to 32 or 64 and include.
 * `real` is the storage and arithmetic type; K(name) gives the pass's symbol, name_f32/name_f64;
 * RSQRT/REXP/... pick the matching libm function. */
#undef real
#undef K
#undef K_
#undef REXP
#undef RLOG
#undef RSQRT
#undef RERF
#undef RTANH
#undef RCOS
#undef RSIN
#undef RPOW
#if OPS_REAL == 64
#define real double
#define K_(n, s) n##_f64
#define REXP exp
#define RLOG log
#define RSQRT sqrt
#define RERF erf
#define RTANH tanh
#define RCOS cos
#define RSIN sin
#define RPOW pow
#else
#define real float
#define K_(n, s) n##_f32
#define REXP expf
#define RLOG logf
#define RSQRT sqrtf
#define RERF erff
#define RTANH tanhf
#define RCOS cosf
#define RSIN sinf
#define RPOW powf
#endif
#define K(n) K_(n, 0)
