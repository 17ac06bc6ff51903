local cfg = stepc.recipe("tiny")
for k, v in pairs(cfg.model) do end
cfg.model.num_layers = cfg.model.num_layers * 2
return cfg
