-- What a recipe may still do with the guarded functions: patterns on short strings, pcall,
-- xpcall, coroutines (a yield across pcall too), print (a note), tables of modest size.
local cfg = stepc.recipe("tiny")
local layer = ("layers.12.mlp"):match("^layers%.(%d+)%.")
assert(layer == "12")
assert(select(2, ("a,b,c"):gsub(",", ";")) == 2)
assert(("  x  "):match("^%s*(.-)%s*$") == "x")
assert(("moe_act"):match("^[%w_]+$") and ("x]y"):find("[]]") == 2 and ("(a(b)c)"):match("%b()") == "(a(b)c)")
assert(("THE (quick) fox"):match("%f[%a]%a+", 5) == "quick" and ("abab"):find("(ab)%1") == 1)
local n = 0
for w in ("core_attn mlp"):gmatch("%S+") do n = n + 1 end
assert(n == 2)
assert(not pcall(error, "caught"))
assert(select(2, xpcall(error, function(m) return "handled " .. m end, "x")) == "handled x")
local gen = coroutine.wrap(function() for i = 1, 3 do pcall(coroutine.yield, i) end end)
assert(gen() == 1 and gen() == 2)
local t = {}
for i = 1, 1000 do table.insert(t, i) end
table.move(t, 1, 10, 2)
assert(table.remove(t) == 1000 and ("ab"):rep(3) == "ababab")
setmetatable(t, { __index = function() return 0 end })
print("layer", layer)
cfg.train.seed = 7
return cfg
