local cfg = stepc.recipe("tiny")
cfg.model.num_moe_experts = 4
cfg.model.moe_router_topk = 2
cfg.model.moe_grouped_gemm = true
cfg.model.moe_expert_capacity_factor = 1.5
cfg.model.moe_pad_expert_input_to_capacity = true
cfg.model.multi_latent_attention = true
cfg.model.q_lora_rank = 32
cfg.model.tensor_model_parallel_size = 2
cfg.train.world_size = 4
return cfg
