-- A loop that catches the instruction limit's error with pcall and carries on.
local function f() while true do end end
while true do pcall(f) end
