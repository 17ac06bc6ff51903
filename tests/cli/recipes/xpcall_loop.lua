-- The same with xpcall and a message handler that loops too.
local function f() while true do end end
local function h() while true do end end
while true do xpcall(f, h) end
