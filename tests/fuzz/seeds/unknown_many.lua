-- thousands of unknown fields: twenty are located and reported, the rest counted
local cfg = stepc.recipe("tiny")
for i = 1, 3000 do cfg.model["zz_" .. i] = i; cfg.train[i] = i end
return cfg
