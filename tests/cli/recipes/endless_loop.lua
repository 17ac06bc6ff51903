local cfg = stepc.recipe("tiny")
while true do end
return cfg
