-- hybrid: a tiny Mamba / attention / MLP / MoE stack (8 layers) shaped like nemotron3_nano. Mamba
-- inner width 2*128 = 256, 4 heads of 64, 2 groups (the heads must split into the groups). A base
-- for the validator corpus (cases.txt).
local cfg = stepc.recipe("tiny")
cfg.model.hybrid_override_pattern = "M*M-M*ME"
cfg.model.num_layers = 8
cfg.model.position_embedding_type = "none"
cfg.model.num_moe_experts = 4
cfg.model.moe_router_topk = 2
cfg.model.moe_ffn_hidden_size = 128
cfg.model.moe_grouped_gemm = true
cfg.model.mamba_state_dim = 16
cfg.model.mamba_head_dim = 64
cfg.model.mamba_num_groups = 2
return cfg
