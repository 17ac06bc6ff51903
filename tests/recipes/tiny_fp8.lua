-- tiny_fp8: tiny with fp8 training, Transformer Engine's current scaling (Megatron's fp8_recipe =
-- "tensorwise"; ir/ops/fp8.c): every layer linear FP8_QUANT + LINEAR_FP8 in a build, E4M3 forward
-- and E5M2 gradients ("hybrid"), the first and last layers kept in bf16 as Megatron's
-- first_last_layers_bf16 does. For the CLI's fp8 cases.
local cfg = stepc.recipe("tiny")
cfg.model.fp8 = "hybrid"
cfg.model.fp8_recipe = "tensorwise"
cfg.model.first_last_layers_bf16 = true
return cfg
