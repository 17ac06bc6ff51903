-- llama3_8b: Llama 3 8B, numbers from Meta's config.json for Meta-Llama-3-8B: d4096, 32 layers,
-- 32 heads / 8 kv groups, ffn 14336, vocab 128256, rope_theta 500000, rms_norm_eps 1e-5, untied
-- head; seq 8192 and micro-batch 1 as the benchmark's L8 shape (docs/benchmarks.md), whose
-- layers are this model's.
local cfg = stepc.recipe("bench_m")
cfg.model.num_layers = 32
cfg.model.hidden_size = 4096
cfg.model.num_attention_heads = 32
cfg.model.num_query_groups = 8
cfg.model.kv_channels = 128
cfg.model.ffn_hidden_size = 14336
cfg.model.seq_length = 8192
cfg.train.micro_batch_size = 1
cfg.train.global_batch_size = 1
return cfg
