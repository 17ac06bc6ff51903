local cfg = stepc.recipe("tiny")
os.execute("touch /tmp/stepc_pwned")
return cfg
