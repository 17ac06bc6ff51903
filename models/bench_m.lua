-- bench_m: the benchmark's shape M (docs/benchmarks.md: d2048, 16 layers, 32 heads / 8 kv groups,
-- ffn 8192, vocab 128256, seq 4096, micro-batch 2, 1.50 B parameters): Llama 3.2 1B's layers with
-- an untied output head and plain RoPE, as the benchmark's PyTorch anchor runs it. Until
-- 2026-12-04 this was models/llama3_2_1b.lua; bench/, the plan tests and the docs' measured numbers
-- are this recipe's. models/llama3_2_1b.lua is the real Llama 3.2 1B (tied head, Llama 3 RoPE
-- scaling, 1.24 B).
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
