-- tiny_mla_moe_fp8: tiny_mla_moe with fp8 training under Transformer Engine's current scaling
-- (fp8_recipe = "tensorwise"; ir/ops/fp8.c): the dense and shared-expert linears as FP8_QUANT +
-- LINEAR_FP8, the routed experts' grouped FC1 and FC2 as grouped fp8 linears with per-expert scales
-- (FP8_QUANT_GROUPED + GROUPED_LINEAR_FP8), E4M3 forward and E5M2 gradients ("hybrid"). Runs on the
-- CPU device; on CUDA with model.bf16=true and model.qk_pos_emb_head_dim=16 (the fp8 kernels take
-- widths that are multiples of 16: tests/gpu/run_step_tests.sh fp8_moe_*). For the recompute proof
-- (tests/plan/proof.c): every recompute setting, moe_act included, equal to none bit for bit.
local cfg = stepc.recipe("tiny_mla_moe")
cfg.model.fp8 = "hybrid"
cfg.model.fp8_recipe = "tensorwise"
return cfg
