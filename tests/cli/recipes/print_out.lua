-- A recipe's print must not reach stdout, where --json output goes.
local cfg = stepc.recipe("tiny")
print("hello from the recipe", 42)
return cfg
