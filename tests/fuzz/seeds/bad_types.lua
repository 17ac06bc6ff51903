return { model = { hidden_size = 1, num_layers = {}, [3] = 4 }, train = 5 }
