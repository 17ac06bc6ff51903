local cfg = stepc.recipe("tiny")
cfg.model.hidden_size = "wide"
return cfg
