local cfg = stepc.recipe("../../etc/passwd")
return cfg
