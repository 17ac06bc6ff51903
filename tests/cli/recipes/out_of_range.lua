local cfg = stepc.recipe("tiny")
cfg.model.attention_dropout = 1.5
return cfg
