-- moe: tiny (models/tiny.lua) with every layer MoE: 8 experts of 128, top-2, grouped GEMM, the
-- allgather dispatcher, no drop-and-pad. A base for the validator corpus (cases.txt), not a model.
local cfg = stepc.recipe("tiny")
cfg.model.num_moe_experts = 8
cfg.model.moe_router_topk = 2
cfg.model.moe_ffn_hidden_size = 128
cfg.model.moe_grouped_gemm = true
return cfg
