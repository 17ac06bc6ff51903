local cfg = stepc.recipe("tiny")
cfg.model.recompute_granularity = "selective"
cfg.model.recompute_modules = { "core_attn", "mlp" }
cfg.model.cuda_graph_impl = "transformer_engine"
cfg.model.cuda_graph_modules = { "attn" }
return cfg
--overrides--
model.recompute_num_layers=2
model.fp8=null
model.moe_layer_freq=[1,0,1,0]
