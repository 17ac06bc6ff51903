-- 200000 unknown fields: the first ones are reported with their lines, the rest counted
local cfg = stepc.recipe("tiny")
local m = cfg.model
for i = 1, 200000 do m["zz_unknown_" .. i] = i end
return cfg
