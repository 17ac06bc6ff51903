// flash_variants.cuh — tile-size variants of kernels/flash.cuh's kernels, for tuning only: never in a
// shipped cubin. gpu_kernels appends this file to the assembled kernel text when
// STEPC_FLASH_VARIANTS is set in its environment (tests/gpu/harness.c) and times each variant
// against the production kernel at the bench shapes (tests/gpu/attention.c, its table of variants
// must match this file); test_nvrtc compiles kernels + variants for sm_90a in CI. The
// instantiation macros are flash.cuh's.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// the wgmma kernels (production on Hopper): forward rows x keys, dK/dV keys x rows, dQ rows x keys
STEPC_FLASH_FWD(flash_wg_fwd_v64_128, 128, (flash_forward_wg<64, 128>(FLASH_FWD_ARGS)))
STEPC_FLASH_FWD(flash_wg_fwd_v64_32, 128, (flash_forward_wg<64, 32>(FLASH_FWD_ARGS)))
STEPC_FLASH_FWD(flash_wg_fwd_v128_128, 128, (flash_forward_wg<128, 128>(FLASH_FWD_ARGS)))
STEPC_FLASH_FWD(flash_wg_fwd_v128_32, 128, (flash_forward_wg<128, 32>(FLASH_FWD_ARGS)))
STEPC_FLASH_DKDV(flash_wg_dkdv_v64_64, 128, (flash_backward_dkdv_wg<64, 64>(FLASH_DKDV_ARGS)))
STEPC_FLASH_DKDV(flash_wg_dkdv_v64_32, 128, (flash_backward_dkdv_wg<64, 32>(FLASH_DKDV_ARGS)))
STEPC_FLASH_DKDV(flash_wg_dkdv_v128_32, 128, (flash_backward_dkdv_wg<128, 32>(FLASH_DKDV_ARGS)))
STEPC_FLASH_DQ(flash_wg_dq_v64_128, 128, (flash_backward_dq_wg<64, 128>(FLASH_DQ_ARGS)))
STEPC_FLASH_DQ(flash_wg_dq_v64_32, 128, (flash_backward_dq_wg<64, 32>(FLASH_DQ_ARGS)))
STEPC_FLASH_DQ(flash_wg_dq_v128_32, 128, (flash_backward_dq_wg<128, 32>(FLASH_DQ_ARGS)))
#endif
// the mma.sync kernels (production elsewhere): <D, warps, rows per warp, tile, ...>
STEPC_FLASH_FWD(flash_fwd_v64_4_2_64_r, 128, (flash_forward<64, 4, 2, 64, true>(FLASH_FWD_ARGS)))
STEPC_FLASH_FWD(flash_fwd_v64_4_2_64_s, 128, (flash_forward<64, 4, 2, 64, false>(FLASH_FWD_ARGS)))
STEPC_FLASH_FWD(flash_fwd_v64_4_2_128_r, 128, (flash_forward<64, 4, 2, 128, true>(FLASH_FWD_ARGS)))
STEPC_FLASH_FWD(flash_fwd_v64_8_1_64_r, 256, (flash_forward<64, 8, 1, 64, true>(FLASH_FWD_ARGS)))
STEPC_FLASH_FWD(flash_fwd_v128_4_2_64_s, 128, (flash_forward<128, 4, 2, 64, false>(FLASH_FWD_ARGS)))
STEPC_FLASH_FWD(flash_fwd_v128_4_2_32_s, 128, (flash_forward<128, 4, 2, 32, false>(FLASH_FWD_ARGS)))
STEPC_FLASH_FWD(flash_fwd_v128_8_1_64_r, 256, (flash_forward<128, 8, 1, 64, true>(FLASH_FWD_ARGS)))
STEPC_FLASH_FWD(flash_fwd_v128_4_1_64_r, 128, (flash_forward<128, 4, 1, 64, true>(FLASH_FWD_ARGS)))
STEPC_FLASH_DKDV(flash_dkdv_v64_4_1_64, 128, (flash_backward_dkdv<64, 4, 1, 64>(FLASH_DKDV_ARGS)))
STEPC_FLASH_DKDV(flash_dkdv_v64_4_2_32, 128, (flash_backward_dkdv<64, 4, 2, 32>(FLASH_DKDV_ARGS)))
STEPC_FLASH_DKDV(flash_dkdv_v64_4_2_16, 128, (flash_backward_dkdv<64, 4, 2, 16>(FLASH_DKDV_ARGS)))
STEPC_FLASH_DKDV(flash_dkdv_v64_8_1_64, 256, (flash_backward_dkdv<64, 8, 1, 64>(FLASH_DKDV_ARGS)))
STEPC_FLASH_DKDV(flash_dkdv_v128_4_1_64, 128, (flash_backward_dkdv<128, 4, 1, 64>(FLASH_DKDV_ARGS)))
STEPC_FLASH_DKDV(flash_dkdv_v128_4_1_32, 128, (flash_backward_dkdv<128, 4, 1, 32>(FLASH_DKDV_ARGS)))
STEPC_FLASH_DKDV(flash_dkdv_v128_8_1_32, 256, (flash_backward_dkdv<128, 8, 1, 32>(FLASH_DKDV_ARGS)))
STEPC_FLASH_DQ(flash_dq_v64_4_2_32, 128, (flash_backward_dq<64, 4, 2, 32>(FLASH_DQ_ARGS)))
STEPC_FLASH_DQ(flash_dq_v64_4_1_64, 128, (flash_backward_dq<64, 4, 1, 64>(FLASH_DQ_ARGS)))
STEPC_FLASH_DQ(flash_dq_v64_4_2_64, 128, (flash_backward_dq<64, 4, 2, 64>(FLASH_DQ_ARGS)))
STEPC_FLASH_DQ(flash_dq_v128_4_2_32, 128, (flash_backward_dq<128, 4, 2, 32>(FLASH_DQ_ARGS)))
STEPC_FLASH_DQ(flash_dq_v128_4_1_32, 128, (flash_backward_dq<128, 4, 1, 32>(FLASH_DQ_ARGS)))
STEPC_FLASH_DQ(flash_dq_v128_4_1_64, 128, (flash_backward_dq<128, 4, 1, 64>(FLASH_DQ_ARGS)))
