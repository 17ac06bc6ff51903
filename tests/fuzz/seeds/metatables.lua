local t = setmetatable({}, {__index = function() error("x") end})
return { model = t, data = setmetatable({}, {__pairs = function() while true do end end}) }
