return {
  model = { num_layers = 2 },
  trian = { seed = 1 },
}
