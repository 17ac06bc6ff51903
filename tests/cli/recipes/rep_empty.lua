-- Repeating the empty string allocates nothing but loops 2^50 times.
local s = (""):rep(1 << 50)
return stepc.recipe("tiny")
