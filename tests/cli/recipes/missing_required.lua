return {
  model = {
    num_layers = 2,
    hidden_size = 64,
  },
}
