local cfg = stepc.recipe("nemotron3_nano")
return cfg
