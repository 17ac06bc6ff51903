local cfg = stepc.recipe("moonlight_16b")
return cfg
--overrides--
model.cuda_graph_impl=transformer_engine
model.cuda_graph_modules=[moe_router,moe_preprocess]
model.recompute_modules=[moe,layernorm]
model.overlap_moe_expert_parallel_comm=true
