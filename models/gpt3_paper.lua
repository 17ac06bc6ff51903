-- gpt3_paper: the setting of Korthikanti et al., "Reducing Activation Recomputation in Large
-- Transformer Models" (arXiv 2205.05198), whose per-layer activation formula sbh(34 + 5as/h) the
-- planner is checked against: GPT-3 175B (Table 3: a=96, h=12288, L=96, s=2048, t=8, p=8,
-- micro-batch 1, vocab 51200), LayerNorm, GELU MLP of 4h, learned positions, biases, unfused
-- attention (scores and probabilities materialised), dropout 0.1 on attention and hidden states.
-- The data-parallel size (1) and global batch size are ours.
return {
  model = {
    num_layers = 96,
    hidden_size = 12288,
    num_attention_heads = 96,
    ffn_hidden_size = 49152,
    normalization = "LayerNorm",
    layernorm_epsilon = 1e-5,
    gated_linear_unit = false,
    activation_func = "gelu",
    add_bias_linear = true,
    position_embedding_type = "learned_absolute",
    attention_dropout = 0.1,
    hidden_dropout = 0.1,
    attention_backend = "unfused",
    share_embeddings_and_output_weights = true,
    vocab_size = 51200,
    seq_length = 2048,
    tensor_model_parallel_size = 8,
    pipeline_model_parallel_size = 8,
    sequence_parallel = true,
  },
  train = { micro_batch_size = 1, global_batch_size = 64, train_iters = 10, seed = 1234, world_size = 64 },
  optimizer = { lr = 6e-5, min_lr = 6e-6, weight_decay = 0.1, adam_beta1 = 0.9, adam_beta2 = 0.95,
                adam_eps = 1e-8, clip_grad = 1.0 },
  data = {}, -- mock tokens from train.seed; data.path=FILE trains on a text file instead
}
