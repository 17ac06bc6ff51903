local cfg = stepc.recipe("gpt3_paper")
return cfg
