local cfg = stepc.recipe("tiny")
local f = io.open("/etc/passwd")
return cfg
