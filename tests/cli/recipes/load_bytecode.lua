local cfg = stepc.recipe("tiny")
local f = load(string.char(27) .. "LuaT")
return cfg
