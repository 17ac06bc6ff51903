-- llama3_70b_fp8: Llama 3 70B laid out as the recompute guide's historical H100 measurement
-- (the recompute guide's measured table, restated in docs/recompute.md; Bridge PR #3107): SFT with FP8 current scaling
-- (fp8 = hybrid, fp8_recipe = tensorwise), seq 4096, MBS 1, GBS 32, TP 4, PP 4, VPP 5, DP 2 on 32
-- H100s, sequence parallel with TP, the distributed optimizer, core_attn recompute as that run's
-- baseline. Architecture from Meta's config.json for Meta-Llama-3-70B: 80 layers, d8192, 64 heads /
-- 8 kv groups, ffn 28672, vocab 128256, rope_theta 500000, rms_norm_eps 1e-5, untied head.
-- stepc's own step computes in bf16; the per-rank report counts what Transformer Engine keeps in
-- fp8 (compiler/plan/memrank.c): fp8 copies of the linears' saved inputs and cached fp8 weights with
-- their transposes. docs/recompute.md sets its rows beside the guide's.
local cfg = stepc.recipe("bench_m")
cfg.model.num_layers = 80
cfg.model.hidden_size = 8192
cfg.model.num_attention_heads = 64
cfg.model.num_query_groups = 8
cfg.model.kv_channels = 128
cfg.model.ffn_hidden_size = 28672
cfg.model.seq_length = 4096
cfg.model.share_embeddings_and_output_weights = false
-- perf_recipes/_common.py, _benchmark_common: TE's parallel cross entropy
cfg.model.cross_entropy_loss_fusion = true
cfg.model.cross_entropy_fusion_impl = "te"
cfg.model.attention_backend = "fused"
cfg.model.fp8 = "hybrid"
cfg.model.fp8_recipe = "tensorwise"
cfg.model.tensor_model_parallel_size = 4
cfg.model.pipeline_model_parallel_size = 4
cfg.model.virtual_pipeline_model_parallel_size = 5
cfg.model.sequence_parallel = true
cfg.model.recompute_granularity = "selective"
cfg.model.recompute_modules = { "core_attn" }
cfg.train.micro_batch_size = 1
cfg.train.global_batch_size = 32
cfg.train.world_size = 32
cfg.optimizer.use_distributed_optimizer = true
-- Precision as Megatron-Bridge's llama3_70b_sft_32gpu_h100_fp8cs_config
-- (perf_recipes/llama/h100/llama3.py): a bf16 gradient buffer (grad_reduce_in_fp32 = False) and
-- bf16_with_fp8_current_scaling_mixed's fp8_param_gather = True, i.e. fp8 primary weights.
cfg.model.fp8_param = true
cfg.ddp = { grad_reduce_in_fp32 = false }
-- The same recipe's CUDA graphs (and the PR-era perf config, LLAMA3_70B_SFT_CONFIG_H100_FP8_CS_V1 in
-- scripts/performance/configs/llama/llama3_workload_base_configs.py): Transformer Engine graphs of
-- each layer's MLP (cuda_graph_impl = "transformer_engine", cuda_graph_scope = ["mlp"], Megatron's
-- cuda_graph_modules). Megatron accepts mlp recompute inside it (hidden_dropout = 0).
cfg.model.cuda_graph_impl = "transformer_engine"
cfg.model.cuda_graph_modules = { "mlp" }
return cfg
