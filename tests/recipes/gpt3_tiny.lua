-- gpt3_tiny: the GPT-3 paper's architecture (models/gpt3_paper.lua) at test size, for gradient
-- checks and training tests on the CPU: LayerNorm, GELU MLP of 4h, biases, learned absolute
-- positions, unfused attention, dropout 0.1 on attention and hidden states, tied embeddings,
-- fp32 (so no master copies), MHA.
return {
  model = {
    num_layers = 2,
    hidden_size = 32,
    num_attention_heads = 4,
    normalization = "LayerNorm",
    gated_linear_unit = false,
    activation_func = "gelu",
    add_bias_linear = true,
    position_embedding_type = "learned_absolute",
    attention_dropout = 0.1,
    hidden_dropout = 0.1,
    attention_backend = "unfused",
    share_embeddings_and_output_weights = true,
    vocab_size = 64,
    seq_length = 16,
    bf16 = false,
  },
  train = { micro_batch_size = 2, global_batch_size = 4, train_iters = 20, seed = 7 },
  optimizer = { lr = 1e-3, min_lr = 1e-4, lr_warmup_iters = 2, lr_decay_style = "linear", weight_decay = 0.1 },
  data = { mock = true },
}
