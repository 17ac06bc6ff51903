-- Each call is allowed (about 10^8 steps at worst) and runs few Lua instructions, so only the
-- wall-clock deadline stops the loop.
local s = ("a"):rep(300)
while true do s:find(".-.-b") end
