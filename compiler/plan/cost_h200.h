/* cost_h200.h — the H200 cost model's calibration, included inside cost_device_h200(Device *d):
 * measured time / roofline time per op class (ir.h's CostClass), the median over profiles of
 * shapes S, M, L8 and the MoE shape MoE7 (models/moonlight_mha_7l.lua) (`stepc run RECIPE
 * --profile`, one eager step with CUDA events around every op), kept with the per-shape ratios in
 * bench/calibration/h200.json ("session_3": cuDNN attention through attention_backend=auto, the
 * multi-tensor optimizer, the wgmma grouped GEMMs, QKV split + RoPE in one kernel; raw profiles in
 * bench/logs/2026-12-01-s3-profile/, where mla.json, models/moonlight_mla_7l.lua, is the
 * out-of-sample check). stepc's own flash kernels (attention_backend=flash, on wgmma since
 * session 5) from that file's "session_5" (the flash profiles in bench/logs/2026-12-01-s5-F1/:
 * forward 1.46x and backward 1.97x the 450 TFLOP/s roofline, median of S, M, L8). The GEMMs run
 * at the 700 TFLOP/s roofline (0.97); cuDNN's attention at 1.06x (forward) and 1.3x (backward)
 * the 450 TFLOP/s roofline;
 * the grouped expert GEMMs at 2.5x the GEMM roofline (~290 TFLOP/s); the memory-bound classes at
 * 20-100% of DRAM bandwidth. Re-profile after a kernel changes. */
d->class_scale[COST_GEMM] = 0.971;
d->class_scale[COST_ATTN_FWD] = 1.464;
d->class_scale[COST_ATTN_BWD] = 1.966;
d->class_scale[COST_ATTN_FWD_CUDNN] = 1.063;
d->class_scale[COST_ATTN_BWD_CUDNN] = 1.319;
/* MoE: the grouped expert GEMMs (one wgmma group in flight, expert gradients stored in a one-micro-
 * batch step) at 2.15x the GEMM roofline, the routing ops (top-k a warp a token, dispatch, permute,
 * MLA head split/concat) at 3.1x their DRAM roofline: the medians of MoE7's and Nemotron-9's profiles
 * of 2026-12-04 (h200.json "session_9", bench/logs/2026-12-04-s9-gpu/call4/). */
d->class_scale[COST_GROUPED_GEMM] = 2.15;
d->class_scale[COST_MOE_ROUTING] = 3.08;
d->class_scale[COST_NORM] = 2.107;
d->class_scale[COST_ACTIVATION] = 1.275;
d->class_scale[COST_ROPE_QKV] = 1.341;
d->class_scale[COST_EMBEDDING] = 0.329;
d->class_scale[COST_LOSS] = 4.455;
d->class_scale[COST_ELEMENTWISE] = 2.096;
d->class_scale[COST_GRAD_NORM] = 0.988;
/* AdamW against the bytes its kernel moves (30 B a bf16 parameter, ir/ops/optim.c adamw_bytes): the
 * 1.728 measured against the 18 B its tensors counted before, times 18 / 30, so that its predicted
 * times stay as calibrated (an fp32 parameter's, 16 -> 28 B, rise by 5%: the router's few). */
d->class_scale[COST_OPTIMIZER] = 1.0368;
/* The Mamba-2 mixer (kernels/mamba.cuh: sequential scans over chunks of 32 rows, the chunks' C.B
 * once per group, the products on the tensor cores as 1xTF32) against its roofline (the
 * recurrence's FLOPs at the tensor-core ceiling, or its tensors' bytes at DRAM speed): forward 45x,
 * backward 87x (h200.json "session_22", bench/logs/2026-12-06-s22-gpu/call4/nemo_prof.txt;
 * models/nemotron3_nano.lua, the first 9 layers of its pattern at one rank); the gate and group
 * norm 2.2x DRAM (its weight gradient by segments since session 8's call 9; "session_9",
 * bench/logs/2026-12-04-s9-gpu/call4/nemo9_profile.txt). */
d->class_scale[COST_MAMBA_FWD] = 44.53;
d->class_scale[COST_MAMBA_BWD] = 87.45;
d->class_scale[COST_MAMBA_GATE_NORM] = 2.23;
/* fp8 (ir/ops/fp8.c): the products at 1.14x the 1400 TFLOP/s fp8 roofline (LINEAR_FP8 with its
 * input's cast), the casts at 1.33x their DRAM roofline (amax, then the cast: two reads): M's fp8
 * profile of 2026-12-04 (h200.json "session_9", bench/logs/2026-12-04-s9-gpu/call6/). */
d->class_scale[COST_GEMM_FP8] = 1.14;
d->class_scale[COST_FP8_CAST] = 1.33;
d->calibration =
    "H200, calibrated 2026-12-01 (bench/calibration/h200.json, session_3; flash attention session_5; MoE and "
    "Mamba session_9, its mixer session_22)";
