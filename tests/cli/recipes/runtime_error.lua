local cfg = stepc.recipe("tiny")
error("boom")
return cfg
