local cfg = stepc.recipe("tiny")
local s = string.rep("x", 1 << 40)
return cfg
