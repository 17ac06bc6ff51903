local cfg = stepc.recipe("tiny")
local m = require("evil")
return cfg
