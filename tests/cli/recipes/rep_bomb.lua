local cfg = stepc.recipe("tiny")
local t = {}
for i = 1, 1e9 do t[i] = string.rep("ab", 1000) .. i end
return cfg
