-- STEPC-32: a width whose weights cannot be planned; the diagnostic names this line.
local cfg = stepc.recipe("tiny")
cfg.model.num_attention_heads = 4
cfg.model.hidden_size = 1000000000
return cfg
