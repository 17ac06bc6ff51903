-- A coroutine stopped by the limit keeps Lua's hooks off; coroutine.wrap must not then run its
-- pending __close handler, which would loop with nothing to stop it.
local mt = {}
local t = setmetatable({}, mt)
mt.__close = function() while true do end end
local f = coroutine.wrap(function()
  local x <close> = t
  while true do end
end)
f()
return stepc.recipe("tiny")
