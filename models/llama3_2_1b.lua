-- llama3_2_1b: Llama 3.2 1B as Meta ships it (config.json of meta-llama/Llama-3.2-1B): d2048,
-- 16 layers, 32 heads / 8 kv groups (head_dim 64), ffn 8192, vocab 128256, rms_norm_eps 1e-5,
-- rope_theta 500000 with Llama 3's RoPE scaling (factor 32, low / high frequency factors 1 and 4,
-- original context 8192: ir/ops/ops.h), the output head tied to the embedding: 1.24 B parameters
-- (1,235,814,400: `stepc plan --json` ranks[0].params). It agrees with what
-- `stepc import --print-recipe` derives from that config.json (tests/cli/hf_recipe_llama.py).
-- seq_length and the train / optimizer sections are training choices, not the checkpoint's (its
-- max_position_embeddings is 131072). The benchmark's shape M (untied head, no scaling) is
-- models/bench_m.lua. This is the default recipe of the README's quick start.
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
    rope_scaling = true,
    rope_scaling_factor = 32,
    attention_dropout = 0.0,
    hidden_dropout = 0.0,
    attention_backend = "auto",
    share_embeddings_and_output_weights = true,
    vocab_size = 128256,
    seq_length = 4096,
    bf16 = true,
  },
  train = { micro_batch_size = 2, global_batch_size = 2, train_iters = 20, seed = 1234, world_size = 1 },
  optimizer = { lr = 3e-4, min_lr = 3e-5, lr_warmup_iters = 2, weight_decay = 0.1,
                adam_beta1 = 0.9, adam_beta2 = 0.95, adam_eps = 1e-8, clip_grad = 1.0 },
  data = {}, -- mock tokens from train.seed; data.path=FILE trains on a text file instead
}
