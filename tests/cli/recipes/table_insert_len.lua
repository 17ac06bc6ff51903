-- table.insert shifts #t elements, and __len decides what #t is.
local t = setmetatable({}, { __len = function() return 1 << 50 end })
table.insert(t, 1, 0)
return stepc.recipe("tiny")
