local cfg = stepc.recipe("tiny")
dofile("/etc/passwd")
return cfg
