-- recipe text and values with terminal escape sequences: every diagnostic shows them as \xHH
print('\27]0;owned\7\27[2J', '\194\155', '\155')
local cfg = stepc.recipe('tiny')
cfg.data.path = 'a\27[31mb'
cfg.model['x\27[1m'] = 1
cfg.train['\n\27[A'] = 2
return cfg
