-- tiny: a Llama-style decoder of about 0.8 million parameters, for CPU tests and the README's
-- byte-level text demo. Its numbers are ours, chosen so that a step runs in milliseconds on a
-- laptop core: d128, 4 layers, 4 heads / 2 kv groups (GQA), SwiGLU 352, vocab 256 (bytes), seq 64.
-- Parameters: embedding 256*128 + head 256*128 (untied)
--             + 4 * (attn 128*(128+2*64)+128*128 + mlp 3*128*352 + two norms 2*128) + final norm 128
--             = 65,536 + 4 * 184,576 + 128 = 803,968 (`stepc plan --json`: ranks[0].params).
return {
  model = {
    num_layers = 4,
    hidden_size = 128,
    num_attention_heads = 4,
    num_query_groups = 2,
    ffn_hidden_size = 352,
    normalization = "RMSNorm",
    layernorm_epsilon = 1e-5,
    gated_linear_unit = true,
    activation_func = "silu",
    add_bias_linear = false,
    position_embedding_type = "rope",
    rotary_base = 10000,
    attention_dropout = 0.0,
    hidden_dropout = 0.0,
    attention_backend = "flash",
    share_embeddings_and_output_weights = false,
    vocab_size = 256,
    seq_length = 64,
  },
  train = { micro_batch_size = 4, global_batch_size = 8, train_iters = 200, seed = 1234 },
  optimizer = { lr = 3e-3, min_lr = 3e-4, lr_warmup_iters = 10, weight_decay = 0.1,
                adam_beta1 = 0.9, adam_beta2 = 0.95, adam_eps = 1e-8, clip_grad = 1.0 },
  data = { mock = true },
}
