-- table.sort of 2^31 nils with a C comparator that is always true: Lua's sort scans the whole
-- range in C, calling the comparator, before it can tell the order function is invalid.
local t = setmetatable({}, {__len = function() return (1 << 31) - 2 end})
table.sort(t, rawequal)
return stepc.recipe("tiny")
