local cfg = stepc.recipe("tiny")
cfg.model.hidden_size = 128,
return cfg
