/* cost_h200.h — the H200 cost model's calibration, included inside cost_device_h200(Device *d):
 * measured time / roofline time per op class (plan.h's CostClass), the median over the profiles
 * of shapes S, M, L8 and M's four recompute settings (`stepc run DIR --profile`, one eager step with
 * CUDA events around every op; bench/profile_shapes.sh), kept with the per-artifact ratios in
 * bench/calibration/h200.json and the raw profiles in bench/logs/2026-12-01-profile/. The GEMMs
 * run slightly above the 700 TFLOP/s roofline (0.93); the attention kernels are stepc's own flash
 * kernels (mma.sync), 2.4x (forward) and 3.6x (backward) the 450 TFLOP/s roofline; the memory-bound
 * classes reach 30-80% of DRAM bandwidth. Re-profile after a kernel changes. */
d->class_scale[COST_GEMM] = 0.927;
d->class_scale[COST_ATTN_FWD] = 2.374;
d->class_scale[COST_ATTN_BWD] = 3.567;
/* cuDNN's fused attention (runtime/cudnn.c), timed alone at S, M and L8 (bench/run_attention.sh,
 * 2026-12-01, cuDNN 9.14): forward 1.67 / 1.04 / 0.73, backward 2.05 / 1.26 / 0.86 times the
 * roofline; the medians (M's) until a step profile with cuDNN replaces them. */
d->class_scale[COST_ATTN_FWD_CUDNN] = 1.04;
d->class_scale[COST_ATTN_BWD_CUDNN] = 1.26;
d->class_scale[COST_NORM] = 2.329;
d->class_scale[COST_ACTIVATION] = 1.248;
d->class_scale[COST_ROPE_QKV] = 3.526;
d->class_scale[COST_EMBEDDING] = 0.345;
d->class_scale[COST_LOSS] = 3.855;
d->class_scale[COST_ELEMENTWISE] = 1.621;
d->class_scale[COST_GRAD_NORM] = 2.293;
d->class_scale[COST_OPTIMIZER] = 2.214;
d->calibration = "H200, calibrated 2026-12-01 (bench/calibration/h200.json)";
