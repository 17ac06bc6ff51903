local cfg = stepc.recipe("tiny")
cfg.model.recompute_granularity = "full"
cfg.model.recompute_method = "uniform"
cfg.model.recompute_num_layers = 0
return cfg
