-- tiny_mla: multi-latent attention (Moonlight / DeepSeek-V3's attention) in dense layers at test
-- size, for tensor parallelism's tests (tests/api/tp.sh): tiny_mla_moe.lua's model (MLA with q
-- low-rank 48, kv low-rank 32, qk 16 + rope 8, v 16; the flash backend pads v to the qk head dim;
-- SwiGLU, RMSNorm, untied embeddings, fp32) with every layer a dense MLP.
local cfg = stepc.recipe("tiny_mla_moe")
cfg.model.num_moe_experts = nil
cfg.model.moe_router_topk = nil
cfg.model.moe_ffn_hidden_size = nil
cfg.model.moe_shared_expert_intermediate_size = nil
cfg.model.moe_layer_freq = nil
cfg.model.moe_grouped_gemm = nil
cfg.model.moe_token_dispatcher_type = nil
cfg.model.moe_aux_loss_coeff = nil
return cfg
