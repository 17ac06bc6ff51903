-- the strings' shared metatable cannot be changed (it would reroute every s:method())
local m = getmetatable("")
m.__index = string.sub
return stepc.recipe("tiny")
