local layers = { 1, 0, 1, 0 }
return {
  model = {
    num_layers = 4,
    hidden_size = 64,
    num_attention_heads = 4,
    vocab_size = 256,
    seq_length = 32,
    moe_layer_freq = layers,
    recompute_modules = { "core_attn", "mlp" },
  },
  train = { micro_batch_size = 2 },
}
