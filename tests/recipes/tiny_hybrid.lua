-- tiny_hybrid: the smallest hybrid Mamba / attention / MLP / MoE stack that exercises every
-- Mamba-2 op on the CPU (stepc run --device cpu --gradcheck): pattern M*M-ME over d64, Mamba with
-- 4 heads of 32 (d_inner 128 = 2 * 64), 2 groups, state 8; seq 32; 4 experts of 64, top-2.
local cfg = stepc.recipe("tiny")
cfg.model.hybrid_override_pattern = "M*M-ME"
cfg.model.num_layers = 6
cfg.model.hidden_size = 64
cfg.model.ffn_hidden_size = 128
cfg.model.seq_length = 32
cfg.model.position_embedding_type = "none"
cfg.model.num_moe_experts = 4
cfg.model.moe_router_topk = 2
cfg.model.moe_ffn_hidden_size = 64
cfg.model.moe_grouped_gemm = true
cfg.model.mamba_state_dim = 8
cfg.model.mamba_head_dim = 32
cfg.model.mamba_num_groups = 2
cfg.train.micro_batch_size = 2
cfg.train.global_batch_size = 4
return cfg
