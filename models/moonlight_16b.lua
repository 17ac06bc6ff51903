-- moonlight_16b: Moonlight-16B-A3B (Moonshot AI; DeepSeek-V3 layout), laid out as the recompute
-- guide's matched H100 run (docs/benchmarks.md, "Moonlight 16B"): BF16
-- pre-training, seq 4096, MBS 1, GBS 4, TP 2, PP 1, CP 1, EP 8 on 8 GPUs, mock data, the []
-- control of recompute_modules. Architecture from Moonshot's config.json: 27 layers (the first
-- dense, 26 MLA + MoE), d2048, 16 heads, MLA without q low-rank, kv_lora_rank 512, qk nope 128 +
-- rope 64, v 128, 64 routed experts of 1408 with top-6, 2 shared experts (2816), dense ffn 11264,
-- vocab 163840, rope_theta 50000. TP 2 with MoE needs sequence parallelism (MCORE-68). Experts are
-- not tensor-parallel (ETP 1): with ETP = TP = 2, EP 8 would need 16 GPUs (STEPC-9).
-- Precision as Megatron-Bridge's moonlight_16b_pretrain_config (recipes/moonlight/moonlight_16b.py):
-- bf16 gradient buffer (ddp.grad_reduce_in_fp32 = false) and the precision-aware optimizer with
-- fp32 masters (stored as 16-bit remainders) and bf16 moments.
local moe_layers = { 0 }
for i = 2, 27 do moe_layers[i] = 1 end
return {
  model = {
    num_layers = 27,
    hidden_size = 2048,
    num_attention_heads = 16,
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
    attention_backend = "fused",
    share_embeddings_and_output_weights = false,
    -- the Bridge recipe: TE's parallel cross entropy, from the TE release the guide's Bridge
    -- (600d069b) locks in uv.lock, 2.17.1: it writes the bf16 gradient into the logits in place
    -- (no fp32 logits gradient before TE 2.18; compiler/plan/memrank.c, megatron_loss_bytes)
    cross_entropy_loss_fusion = true,
    cross_entropy_fusion_impl = "te",
    transformer_engine_version = "2.17.1",
    vocab_size = 163840,
    seq_length = 4096,
    multi_latent_attention = true,
    kv_lora_rank = 512,
    qk_head_dim = 128,
    qk_pos_emb_head_dim = 64,
    v_head_dim = 128,
    num_moe_experts = 64,
    moe_router_topk = 6,
    moe_ffn_hidden_size = 1408,
    moe_shared_expert_intermediate_size = 2816,
    moe_layer_freq = moe_layers,
    moe_grouped_gemm = true,
    moe_token_dispatcher_type = "alltoall",
    -- the Bridge recipe (and DeepSeekV3Bridge): shared experts on a side stream during the
    -- dispatch; their fc1 then saves its own all-gathered input (compiler/plan/memrank.c)
    moe_shared_expert_overlap = true,
    moe_aux_loss_coeff = 0.001,
    tensor_model_parallel_size = 2,
    expert_model_parallel_size = 8,
    expert_tensor_parallel_size = 1,
    sequence_parallel = true,
    recompute_granularity = "selective",
    recompute_modules = {},
  },
  train = { micro_batch_size = 1, global_batch_size = 4, train_iters = 20, seed = 1234, world_size = 8 },
  optimizer = { lr = 3e-4, min_lr = 3e-5, weight_decay = 0.1, adam_beta1 = 0.9, adam_beta2 = 0.95,
                adam_eps = 1e-8, clip_grad = 1.0, use_distributed_optimizer = true,
                use_precision_aware_optimizer = true, main_grads_dtype = "bf16", main_params_dtype = "fp32",
                exp_avg_dtype = "bf16", exp_avg_sq_dtype = "bf16" },
  ddp = { grad_reduce_in_fp32 = false },
  data = {}, -- mock tokens from train.seed; data.path=FILE trains on a text file instead
}
