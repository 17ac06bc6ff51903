/* cost_h200.h — the H200 cost model's calibration, included inside cost_device_h200(Device *d):
 * measured time / roofline time per op class (plan.h's CostClass), the median over profiles of
 * shapes S, M and L8 (`stepc run RECIPE --profile`, one eager step with CUDA events around every
 * op), kept with the per-shape ratios in bench/calibration/h200.json ("session_2": cuDNN attention
 * through attention_backend=auto, the multi-tensor optimizer; raw profiles in
 * bench/logs/2026-12-01-bench-s2/). stepc's own flash kernels (attention_backend=flash) keep the
 * first calibration's ratios (the same file's top level: S, M, L8 and M's recompute settings). The
 * GEMMs run at the 700 TFLOP/s roofline (0.98); cuDNN's attention at 1.2x (forward) and 1.5x
 * (backward) the 450 TFLOP/s roofline; the memory-bound classes at 25-100% of DRAM bandwidth.
 * Re-profile after a kernel changes. */
d->class_scale[COST_GEMM] = 0.976;
d->class_scale[COST_ATTN_FWD] = 2.374;
d->class_scale[COST_ATTN_BWD] = 3.567;
d->class_scale[COST_ATTN_FWD_CUDNN] = 1.168;
d->class_scale[COST_ATTN_BWD_CUDNN] = 1.495;
/* MoE (models/moonlight_mha_7l.lua and moonlight_16b with 7 layers, profiled 2026-12-01,
 * bench/logs/2026-12-01-moe-profile/ and -moe-tc2/): stepc's tensor-core grouped GEMMs at 5.7x the
 * GEMM roofline (~120 TFLOP/s), the routing ops (top-k, dispatch, permute, MLA head split/concat)
 * at 7.1 / 7.4x their DRAM roofline. */
d->class_scale[COST_GROUPED_GEMM] = 5.73;
d->class_scale[COST_MOE_ROUTING] = 7.27;
d->class_scale[COST_NORM] = 2.374;
d->class_scale[COST_ACTIVATION] = 1.274;
d->class_scale[COST_ROPE_QKV] = 3.542;
d->class_scale[COST_EMBEDDING] = 0.408;
d->class_scale[COST_LOSS] = 4.081;
d->class_scale[COST_ELEMENTWISE] = 1.65;
d->class_scale[COST_GRAD_NORM] = 1.005;
d->class_scale[COST_OPTIMIZER] = 1.733;
d->calibration = "H200, calibrated 2026-12-01 (bench/calibration/h200.json, session_2)";
