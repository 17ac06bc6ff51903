local cfg = stepc.recipe("moonlight_16b")
return cfg
