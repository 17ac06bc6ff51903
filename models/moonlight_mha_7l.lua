-- moonlight_mha_7l: the MoE benchmark shape of issue 11, matching the PyTorch anchor torch_moe.py
-- (--layers 7): one dense layer then six Moonlight-16B-shaped MoE layers — d2048, 16 heads of 128
-- with plain multi-head attention (not MLA), 64 routed experts of 1408 with top-6 (softmax over the
-- chosen six, as torch_moe.py's renormalised top-k), two shared experts (2816), dense ffn 11264,
-- vocab 163840, untied head, seq 4096, micro-batch 1, one GPU, 4.28 B parameters. No load-balancing
-- loss (the anchor has none). For the MLA variant run models/moonlight_16b.lua with
-- model.num_layers=7, one GPU: see docs/benchmarks.md.
return {
  model = {
    num_layers = 7,
    hidden_size = 2048,
    num_attention_heads = 16,
    kv_channels = 128,
    ffn_hidden_size = 11264,
    normalization = "RMSNorm",
    layernorm_epsilon = 1e-5,
    gated_linear_unit = true,
    activation_func = "silu",
    add_bias_linear = false,
    position_embedding_type = "rope",
    rotary_base = 50000,
    attention_dropout = 0.0,
    hidden_dropout = 0.0,
    attention_backend = "auto",
    share_embeddings_and_output_weights = false,
    vocab_size = 163840,
    seq_length = 4096,
    num_moe_experts = 64,
    moe_router_topk = 6,
    moe_ffn_hidden_size = 1408,
    moe_shared_expert_intermediate_size = 2816,
    moe_layer_freq = { 0, 1, 1, 1, 1, 1, 1 },
    moe_grouped_gemm = true,
    moe_token_dispatcher_type = "alltoall",
    moe_aux_loss_coeff = 0.0,
  },
  train = { micro_batch_size = 1, global_batch_size = 1, train_iters = 20, seed = 1234 },
  optimizer = { lr = 3e-4, min_lr = 3e-5, weight_decay = 0.1, adam_beta1 = 0.9, adam_beta2 = 0.95,
                adam_eps = 1e-8, clip_grad = 1.0 },
  data = {},
}
