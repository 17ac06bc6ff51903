local cfg = stepc.recipe("tiny")
cfg.model.num_layers = 4
cfg.model.attention_heads = 8
return cfg
