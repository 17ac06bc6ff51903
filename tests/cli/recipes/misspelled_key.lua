local cfg = stepc.recipe("tiny")
cfg.model.recompute_granularty = "full"
return cfg
