-- A plain find is a memcmp at every position: 12 M positions x 4 MiB each.
local s = ("a"):rep(1 << 24)
local p = ("a"):rep(1 << 22) .. "b"
return { x = s:find(p, 1, true) }
