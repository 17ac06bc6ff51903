-- tiny_fp8_delayed: tiny with fp8 training under Transformer Engine's delayed scaling (Megatron's
-- fp8_recipe = "delayed", its default; ir/ops/fp8.c): every layer linear FP8_QUANT + LINEAR_FP8 in a
-- build, E4M3 forward and E5M2 gradients ("hybrid"), each cast scaled from its tensor's amax history
-- of earlier steps. A history of 4 with the max algorithm and a margin of 1 (Megatron's defaults are
-- 1, most_recent and 0), so that the recompute proof (tests/plan/proof.c) and the resume test run
-- every part of the rule over tiny's two micro-batches a step.
local cfg = stepc.recipe("tiny")
cfg.model.fp8 = "hybrid"
cfg.model.fp8_recipe = "delayed"
cfg.model.fp8_amax_history_len = 4
cfg.model.fp8_amax_compute_algo = "max"
cfg.model.fp8_margin = 1
return cfg
