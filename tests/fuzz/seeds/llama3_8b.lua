local cfg = stepc.recipe("llama3_8b")
return cfg
