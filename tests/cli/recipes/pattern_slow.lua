-- Backtracking inside one string.find call runs no Lua instruction, so no hook sees it.
local s = ("a"):rep(5000)
while true do s:find(".-.-.-b") end
