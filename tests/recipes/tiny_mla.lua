-- tiny_mla: multi-latent attention (Moonlight / DeepSeek-V3's attention) in dense layers at test
-- size, for tensor parallelism's tests (tests/api/tp.sh): MLA (q low-rank 48, kv low-rank 32, qk 16
-- + rope 8, v 16; the flash backend pads v to the qk head dim), SwiGLU MLPs, RMSNorm, untied
-- embeddings, fp32. tiny_mla_moe.lua is the same attention with MoE layers.
return {
  model = {
    num_layers = 3,
    hidden_size = 64,
    num_attention_heads = 4,
    ffn_hidden_size = 128,
    normalization = "RMSNorm",
    gated_linear_unit = true,
    activation_func = "silu",
    add_bias_linear = false,
    position_embedding_type = "rope",
    attention_dropout = 0.0,
    hidden_dropout = 0.0,
    attention_backend = "flash",
    share_embeddings_and_output_weights = false,
    vocab_size = 256,
    seq_length = 32,
    bf16 = false,
    multi_latent_attention = true,
    q_lora_rank = 48,
    kv_lora_rank = 32,
    qk_head_dim = 16,
    qk_pos_emb_head_dim = 8,
    v_head_dim = 16,
  },
  train = { micro_batch_size = 2, global_batch_size = 4, train_iters = 20, seed = 11 },
  optimizer = { lr = 3e-3, min_lr = 3e-4, lr_warmup_iters = 2, lr_decay_style = "cosine", weight_decay = 0.1 },
  data = { mock = true },
}
