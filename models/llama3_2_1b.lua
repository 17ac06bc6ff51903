-- llama3_2_1b: Llama 3.2 1B, the benchmark's shape M (docs/benchmarks.md: d2048, 16 layers,
-- 32 heads / 8 kv groups, ffn 8192, vocab 128256, seq 4096, micro-batch 2, 1.50 B parameters).
-- Architecture numbers from Meta's config.json for Llama-3.2-1B (rope_theta 500000, rms_norm_eps
-- 1e-5, head_dim 64). Meta ties the output head to the embedding (1.24 B); the benchmark's PyTorch
-- anchor unties it (1.50 B), and so does this recipe, so that both run the same model.
-- This is the default recipe of the README's quick start.
return {
  model = {
    num_layers = 16,
    hidden_size = 2048,
    num_attention_heads = 32,
    num_query_groups = 8,
    kv_channels = 64,
    ffn_hidden_size = 8192,
    normalization = "RMSNorm",
    layernorm_epsilon = 1e-5,
    gated_linear_unit = true,
    activation_func = "silu",
    add_bias_linear = false,
    position_embedding_type = "rope",
    rotary_base = 500000,
    attention_dropout = 0.0,
    hidden_dropout = 0.0,
    attention_backend = "auto",
    share_embeddings_and_output_weights = false,
    vocab_size = 128256,
    seq_length = 4096,
    bf16 = true,
  },
  train = { micro_batch_size = 2, global_batch_size = 2, train_iters = 20, seed = 1234, world_size = 1 },
  optimizer = { lr = 3e-4, min_lr = 3e-5, lr_warmup_iters = 2, weight_decay = 0.1,
                adam_beta1 = 0.9, adam_beta2 = 0.95, adam_eps = 1e-8, clip_grad = 1.0 },
  data = {}, -- mock tokens from train.seed; data.path=FILE trains on a text file instead
}
