-- stepc's table.move/concat/unpack/insert/remove behave as Lua's, metamethods included
local cfg = stepc.recipe("tiny")
local t = {1, 2, 3}
table.insert(t, 1, 0)
table.insert(t, 4)
assert(table.concat(t, ",") == "0,1,2,3,4" and table.concat(t, "", 2, 3) == "12")
assert(table.remove(t, 1) == 0 and table.remove(t) == 4 and #t == 3)
local a, b, c = table.unpack(t)
assert(a == 1 and b == 2 and c == 3 and select("#", table.unpack(t, 2, 5)) == 4)
table.move(t, 1, 3, 2)
assert(table.concat(t, ",") == "1,1,2,3")
local proxy = setmetatable({}, {__index = function(_, i) return i * 10 end, __len = function() return 3 end})
assert(table.concat(proxy, "+") == "10+20+30")
local s = {3, 1, 2}
table.sort(s)
assert(s[1] == 1 and s[3] == 3)
assert(not pcall(table.insert, t, 9, 1) and not pcall(table.concat, {{}}))
cfg.train.seed = #t
return cfg
