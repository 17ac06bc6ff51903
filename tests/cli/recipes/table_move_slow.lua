-- table.move loops in C over its range, nil to nil, allocating nothing.
table.move({}, 1, 1 << 50, 1)
return stepc.recipe("tiny")
