-- gpt2_small_llama: the benchmark's shape S (docs/benchmarks.md): GPT-2-small size with the
-- Llama layer (RMSNorm, RoPE, SwiGLU, untied head): d768, 12 layers, 12 heads, ffn 2048,
-- vocab 50304 (GPT-2's 50257 padded to a multiple of 128), seq 1024, micro-batch 16, 162 M params.
local cfg = stepc.recipe("bench_m")
cfg.model.num_layers = 12
cfg.model.hidden_size = 768
cfg.model.num_attention_heads = 12
cfg.model.num_query_groups = 12
cfg.model.kv_channels = 64
cfg.model.ffn_hidden_size = 2048
cfg.model.rotary_base = 10000
cfg.model.vocab_size = 50304
cfg.model.seq_length = 1024
cfg.train.micro_batch_size = 16
cfg.train.global_batch_size = 16
return cfg
