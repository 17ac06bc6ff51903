local cfg = stepc.recipe("tiny")
local f = string.dump(function() end)
return cfg
