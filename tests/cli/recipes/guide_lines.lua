local cfg = stepc.recipe("tiny")
cfg.model.recompute_granularity = "selective"
cfg.model.recompute_modules = { "core_attn" }
return cfg
