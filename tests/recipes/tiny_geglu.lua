-- tiny_geglu: tiny with a gated GELU MLP (GeGLU: Megatron's activation_func=gelu with
-- gated_linear_unit=true, fc1 2 x 352 wide), for the whole-step tests of the GEGLU op on the CPU
-- (stepc run --device cpu --gradcheck) and the GPU (gpu.step.grads_geglu: bf16 gradients against
-- the CPU reference executor).
local cfg = stepc.recipe("tiny")
cfg.model.activation_func = "gelu"
cfg.model.gated_linear_unit = true
return cfg
