-- reads through a 1900-table __index chain cost 1900 lookups each, inside table.sort's C loop
local t = {}
for i = 1, 1900 do t = setmetatable({}, {__index = t}) end
table.sort(t)
return stepc.recipe("tiny")
