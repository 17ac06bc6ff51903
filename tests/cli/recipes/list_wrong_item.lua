local cfg = stepc.recipe("tiny")
cfg.model.recompute_modules = { "core_attn", 7 }
return cfg
