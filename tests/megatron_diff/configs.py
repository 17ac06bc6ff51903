#!/usr/bin/env python3
"""configs.py — the configurations of the Megatron differential test (tests/megatron_diff/).

Each configuration is a base recipe (one of BASES) and stepc overrides. The list is deterministic
(a fixed seed), so the recorded Megatron verdicts (verdicts.txt) stay matched to it.

  configs.py            print one configuration per line: ID BASE KEY=VALUE ...
"""
import random

# The fields of each base recipe that Megatron's checks read, as the recipe file sets them
# (the rest are stepc's defaults, which are Megatron's).
BASES = {
    "dense": ("models/bench_m.lua", dict(
        num_layers=16, hidden_size=2048, num_attention_heads=32, num_query_groups=8, kv_channels=64,
        ffn_hidden_size=8192, seq_length=4096, attention_dropout=0.0, hidden_dropout=0.0,
        micro_batch_size=2, global_batch_size=2, world_size=1)),
    "moe": ("tests/rules/moe.lua", dict(
        num_layers=4, hidden_size=128, num_attention_heads=4, num_query_groups=2, kv_channels=None,
        ffn_hidden_size=352, seq_length=64, attention_dropout=0.0, hidden_dropout=0.0,
        micro_batch_size=4, global_batch_size=8, world_size=1,
        num_moe_experts=8, moe_router_topk=2, moe_ffn_hidden_size=128, moe_grouped_gemm=True)),
}

# The recipes of models/ for the random configurations (random_configs): the fields Megatron reads
# beyond those above, as each recipe file sets them. A recipe that keeps Megatron's default for a
# field leaves it out (see megatron_side.DEFAULTS).
_LLAMA = dict(BASES["dense"][1])
RECIPES = {
    "tiny": ("models/tiny.lua", dict(
        num_layers=4, hidden_size=128, num_attention_heads=4, num_query_groups=2, kv_channels=None,
        ffn_hidden_size=352, seq_length=64, attention_dropout=0.0, hidden_dropout=0.0,
        micro_batch_size=4, global_batch_size=8, world_size=1, attention_backend="flash")),
    "gpt2_small_llama": ("models/gpt2_small_llama.lua", dict(
        _LLAMA, num_layers=12, hidden_size=768, num_attention_heads=12, num_query_groups=12, kv_channels=64,
        ffn_hidden_size=2048, seq_length=1024, micro_batch_size=16, global_batch_size=16)),
    "gpt3_paper": ("models/gpt3_paper.lua", dict(
        num_layers=96, hidden_size=12288, num_attention_heads=96, num_query_groups=None, kv_channels=None,
        ffn_hidden_size=49152, seq_length=2048, attention_dropout=0.1, hidden_dropout=0.1,
        micro_batch_size=1, global_batch_size=64, world_size=64, normalization="LayerNorm",
        activation="gelu", add_bias_linear=True, position_embedding_type="learned_absolute",
        attention_backend="unfused", tensor_model_parallel_size=8, pipeline_model_parallel_size=8,
        sequence_parallel=True)),
    # shape M (models/bench_m.lua) under its old name: random_configs draws from the sorted names, and
    # verdicts_random.txt records those draws
    "llama3_2_1b": BASES["dense"],
    "llama3_70b_fp8": ("models/llama3_70b_fp8.lua", dict(
        _LLAMA, num_layers=80, hidden_size=8192, num_attention_heads=64, num_query_groups=8, kv_channels=128,
        ffn_hidden_size=28672, micro_batch_size=1, global_batch_size=32, world_size=32,
        attention_backend="fused", fp8="hybrid", fp8_recipe="tensorwise", tensor_model_parallel_size=4,
        pipeline_model_parallel_size=4, virtual_pipeline_model_parallel_size=5, sequence_parallel=True,
        recompute_granularity="selective", recompute_modules=["core_attn"], use_distributed_optimizer=True,
        fp8_param=True, cuda_graph_impl="transformer_engine", cuda_graph_modules=["mlp"])),
    "llama3_8b": ("models/llama3_8b.lua", dict(
        _LLAMA, num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8, kv_channels=128,
        ffn_hidden_size=14336, seq_length=8192, micro_batch_size=1, global_batch_size=1)),
    "moonlight_16b": ("models/moonlight_16b.lua", dict(
        num_layers=27, hidden_size=2048, num_attention_heads=16, num_query_groups=None, kv_channels=None,
        ffn_hidden_size=11264, seq_length=4096, attention_dropout=0.0, hidden_dropout=0.0,
        micro_batch_size=1, global_batch_size=4, world_size=8, attention_backend="fused",
        multi_latent_attention=True, kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64,
        v_head_dim=128, num_moe_experts=64, moe_router_topk=6, moe_ffn_hidden_size=1408,
        moe_shared_expert_intermediate_size=2816, moe_layer_freq=[0] + [1] * 26, moe_grouped_gemm=True,
        moe_token_dispatcher_type="alltoall", moe_shared_expert_overlap=True, tensor_model_parallel_size=2,
        expert_model_parallel_size=8, expert_tensor_parallel_size=1, sequence_parallel=True,
        recompute_granularity="selective", recompute_modules=[], use_distributed_optimizer=True,
        use_precision_aware_optimizer=True, main_grads_dtype="bf16", exp_avg_dtype="bf16",
        exp_avg_sq_dtype="bf16")),
    "moonlight_mha_7l": ("models/moonlight_mha_7l.lua", dict(
        num_layers=7, hidden_size=2048, num_attention_heads=16, num_query_groups=None, kv_channels=128,
        ffn_hidden_size=11264, seq_length=4096, attention_dropout=0.0, hidden_dropout=0.0,
        micro_batch_size=1, global_batch_size=1, world_size=1, num_moe_experts=64, moe_router_topk=6,
        moe_ffn_hidden_size=1408, moe_shared_expert_intermediate_size=2816, moe_layer_freq=[0] + [1] * 6,
        moe_grouped_gemm=True, moe_token_dispatcher_type="alltoall")),
    "nemotron3_nano": ("models/nemotron3_nano.lua", dict(
        hybrid_override_pattern="MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME", num_layers=52,
        hidden_size=2688, num_attention_heads=32, num_query_groups=2, kv_channels=128, ffn_hidden_size=1856,
        seq_length=8192, attention_dropout=0.0, hidden_dropout=0.0, micro_batch_size=1,
        global_batch_size=16, world_size=16, activation="squared_relu", position_embedding_type="none",
        attention_backend="fused", num_moe_experts=128, moe_router_topk=6, moe_ffn_hidden_size=1856,
        moe_shared_expert_intermediate_size=3712, moe_grouped_gemm=True, moe_token_dispatcher_type="flex",
        moe_flex_dispatcher_backend="hybridep", mamba_state_dim=128, mamba_head_dim=64, mamba_num_heads=64,
        mamba_num_groups=8, expert_model_parallel_size=8, recompute_granularity="selective",
        recompute_modules=["moe"], cuda_graph_impl="transformer_engine", cuda_graph_modules=["attn", "mamba"],
        use_distributed_optimizer=True)),
}
RECIPES["moonlight_mla_7l"] = ("models/moonlight_mla_7l.lua", dict(
    RECIPES["moonlight_16b"][1], num_layers=7, moe_layer_freq=[0] + [1] * 6, global_batch_size=1, world_size=1,
    attention_backend="auto", moe_shared_expert_overlap=False, tensor_model_parallel_size=1,
    expert_model_parallel_size=1, expert_tensor_parallel_size=None, sequence_parallel=False,
    recompute_granularity=None, recompute_modules=None, use_distributed_optimizer=False,
    use_precision_aware_optimizer=False, main_grads_dtype="fp32", exp_avg_dtype="fp32",
    exp_avg_sq_dtype="fp32"))

PAR = "model."


def _dense(rng):
    tp = rng.choice([1, 2, 4, 8, 16, 32])
    pp = rng.choice([1, 1, 2, 4, 3])
    cp = rng.choice([1, 1, 2])
    vpp = rng.choice([None, None, 2, 4, 3]) if pp > 1 else rng.choice([None, None, None, 2])
    dp = rng.choice([1, 2])
    ws = tp * pp * cp * dp * rng.choice([1, 1, 1, 1, 3]) // rng.choice([1, 1, 1, 1, 1, 2]) or 1
    o = {"model.tensor_model_parallel_size": tp, "model.pipeline_model_parallel_size": pp,
         "model.context_parallel_size": cp, "train.world_size": ws,
         "train.global_batch_size": 2 * max(1, ws // (tp * pp * cp))}
    if vpp:
        o["model.virtual_pipeline_model_parallel_size"] = vpp
    if tp > 1 and rng.random() < 0.6:
        o["model.sequence_parallel"] = True
    if rng.random() < 0.3:
        o["model.num_query_groups"] = rng.choice([1, 2, 4, 8, 16, 32])
    return o


def _recompute(rng, moe):
    o = {}
    g = rng.choice([None, "full", "selective", "selective"])
    if g == "full":
        o["model.recompute_granularity"] = "full"
        if rng.random() < 0.9:
            o["model.recompute_method"] = rng.choice(["uniform", "block"])
        if rng.random() < 0.9:
            o["model.recompute_num_layers"] = rng.choice([1, 2])
    elif g == "selective":
        o["model.recompute_granularity"] = "selective"
        labels = ["core_attn", "mlp", "layernorm"] + (["moe", "moe_act"] if moe else [])
        k = rng.choice([0, 1, 1, 2])
        if k or rng.random() < 0.5:
            o["model.recompute_modules"] = "[" + ",".join(rng.sample(labels, k)) + "]"
        if rng.random() < 0.03:  # MCORE-19: Megatron-LM refuses it, Core ignores it
            o["model.recompute_method"] = "uniform"
    return o


def _graphs(rng, moe):
    o = {}
    impl = rng.choice(["none", "local", "transformer_engine", "transformer_engine", "full_iteration"])
    if impl == "none":
        return o
    o["model.cuda_graph_impl"] = impl
    if impl == "full_iteration":
        if rng.random() < 0.85:
            o["model.check_for_nan_in_loss_and_grad"] = False
        return o
    mods = ["attn", "mlp"] + (["moe", "moe_router", "moe_preprocess"] if moe else [])
    k = rng.choice([0, 1, 1, 2])
    o["model.cuda_graph_modules"] = "[" + ",".join(rng.sample(mods, k)) + "]"
    return o


def _moe(rng):
    o = {}
    ep = rng.choice([1, 1, 2, 4, 8, 3])
    tp = rng.choice([1, 1, 2])
    etp = rng.choice([None, None, 1, 2])
    ws = max(ep * (etp or tp), tp) * rng.choice([1, 1, 2])
    o["model.expert_model_parallel_size"] = ep
    o["model.tensor_model_parallel_size"] = tp
    if etp:
        o["model.expert_tensor_parallel_size"] = etp
    o["train.world_size"] = ws
    o["train.global_batch_size"] = 4 * max(1, ws // tp)
    if tp > 1 and rng.random() < 0.8:
        o["model.sequence_parallel"] = True
    o["model.moe_token_dispatcher_type"] = rng.choice(["allgather", "alltoall", "alltoall", "flex"])
    if rng.random() < 0.5:
        o["model.moe_expert_capacity_factor"] = rng.choice([1.0, 1.5])
    if rng.random() < 0.4:
        o["model.moe_pad_expert_input_to_capacity"] = True
    if rng.random() < 0.15:
        o["model.moe_router_padding_for_fp8"] = True
        if rng.random() < 0.5:
            o["model.fp8"] = "e4m3"
            o["model.fp8_recipe"] = "tensorwise"
    if rng.random() < 0.2:
        o["model.moe_shared_expert_intermediate_size"] = 128
        if rng.random() < 0.5:
            o["model.moe_shared_expert_overlap"] = True
    if rng.random() < 0.1:
        o["model.moe_router_topk"] = rng.choice([4, 8, 9])
    if rng.random() < 0.1:
        o["model.moe_input_jitter_eps"] = 0.01
    return o


def _offload(rng):
    o = {}
    r = rng.random()
    if r < 0.4:
        o["model.cpu_offloading"] = True
    if rng.random() < 0.6:
        o["model.cpu_offloading_num_layers"] = rng.choice([0, 1, 2, 3, 4, 16])
    return o


def _fmt(v):
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is None:
        return "null"
    return str(v)


def _uneven(rng):
    """Pipeline splits: first/last stage sizes (Megatron's uneven PP), the embedding or loss counted
    as a layer, and layer counts that do not divide; drawn with their own seed so that the other
    families' configurations stay as recorded."""
    pp = rng.choice([2, 3, 4])
    o = {"model.pipeline_model_parallel_size": pp, "train.world_size": pp, "train.global_batch_size": 2}
    vpp = rng.choice([None, None, 2, 3, 4])
    if vpp:
        o["model.virtual_pipeline_model_parallel_size"] = vpp
    r = rng.random()
    if r < 0.7:
        if rng.random() < 0.7:
            o["model.num_layers_in_first_pipeline_stage"] = rng.choice([1, 2, 3, 4, 6, 8])
        if rng.random() < 0.6:
            o["model.num_layers_in_last_pipeline_stage"] = rng.choice([1, 2, 3, 4, 6, 8])
    if r > 0.55:
        if rng.random() < 0.6:
            o["model.account_for_embedding_in_pipeline_split"] = True
        if rng.random() < 0.6:
            o["model.account_for_loss_in_pipeline_split"] = True
    if rng.random() < 0.3:
        o["model.num_layers"] = rng.choice([14, 15, 18, 24])
    return o


def configs():
    rng = random.Random(13)
    out = []
    # (family, base, how many)
    plan = [("par", "dense", 120), ("rc", "dense", 80), ("cg", "dense", 60), ("rccg", "dense", 80),
            ("off", "dense", 50), ("moe", "moe", 120), ("moecg", "moe", 120), ("moeoff", "moe", 30)]
    for fam, base, n in plan:
        for i in range(n):
            moe = base == "moe"
            o = {}
            if fam == "par":
                o.update(_dense(rng))
            if fam in ("rc", "rccg", "moecg", "off", "moeoff"):
                o.update(_recompute(rng, moe))
            if fam in ("cg", "rccg", "moecg"):
                o.update(_graphs(rng, moe))
            if fam in ("moe", "moecg"):
                o.update(_moe(rng))
            if fam in ("off", "moeoff"):
                o.update(_offload(rng))
            if fam in ("cg", "rccg", "moecg") and rng.random() < 0.3:
                o["model.attention_dropout"] = 0.1
            out.append((f"{fam}-{i:03d}", base, [f"{k}={_fmt(v)}" for k, v in o.items()]))
    urng = random.Random(14)
    for i in range(60):
        o = _uneven(urng)
        out.append((f"unev-{i:03d}", "dense", [f"{k}={_fmt(v)}" for k, v in o.items()]))
    return out


def _rand_parallel(rng, f, moe):
    tp = rng.choice([1, 1, 2, 4, 8])
    pp = rng.choice([1, 1, 2, 3, 4])
    cp = rng.choice([1, 1, 1, 2])
    o = {"model.tensor_model_parallel_size": tp, "model.pipeline_model_parallel_size": pp,
         "model.context_parallel_size": cp}
    if rng.random() < 0.25:
        o["model.virtual_pipeline_model_parallel_size"] = rng.choice([2, 3, 4])
    if rng.random() < 0.15:
        o["model.num_layers_in_first_pipeline_stage"] = rng.choice([1, 2, 3, 4])
    if rng.random() < 0.15:
        o["model.num_layers_in_last_pipeline_stage"] = rng.choice([1, 2, 3, 4])
    if rng.random() < 0.1:
        o["model.account_for_embedding_in_pipeline_split"] = True
    if rng.random() < 0.1:
        o["model.account_for_loss_in_pipeline_split"] = True
    o["model.sequence_parallel"] = tp > 1 and rng.random() < 0.7
    ep, etp = 1, tp
    if moe:
        ep = rng.choice([1, 2, 4, 8, 3])
        o["model.expert_model_parallel_size"] = ep
        if rng.random() < 0.4:
            etp = rng.choice([1, 2])
            o["model.expert_tensor_parallel_size"] = etp
    elif rng.random() < 0.05:
        o["model.expert_model_parallel_size"] = 2
    ws = max(tp * pp * cp, etp * ep * pp) * rng.choice([1, 1, 2])
    if rng.random() < 0.1:
        ws = rng.choice([3, 6, 12, 24])
    o["train.world_size"] = ws
    dp = max(1, ws // (tp * pp * cp))
    o["train.global_batch_size"] = f["micro_batch_size"] * dp * rng.choice([1, 2])
    return o


def _rand_recompute(rng, f, moe):
    o = {}
    g = rng.choice([None, "full", "selective", "selective"])
    o["model.recompute_granularity"] = g
    if g == "full" or rng.random() < 0.05:
        o["model.recompute_method"] = rng.choice(["uniform", "block"])
        o["model.recompute_num_layers"] = rng.choice([0, 1, 1, 2, 3])
    labels = ["core_attn", "mlp", "layernorm"] + (["moe", "moe_act", "shared_experts"] if moe else [])
    if f.get("multi_latent_attention"):
        labels.append("mla_up_proj")
    if g is not None and rng.random() < 0.8:
        mods = rng.sample(labels, rng.choice([0, 1, 1, 2]))
        if rng.random() < 0.04:
            mods.append("coreattn")  # not a label: Megatron checks names under selective only
        o["model.recompute_modules"] = "[" + ",".join(mods) + "]"
    if rng.random() < 0.05:
        o["model.distribute_saved_activations"] = True
    if g == "selective" and rng.random() < 0.04:
        o["model.recompute_method"] = "uniform"
    return o


def _rand_graphs(rng, f, moe):
    impl = rng.choice(["none", "none", "local", "transformer_engine", "transformer_engine", "full_iteration"])
    o = {"model.cuda_graph_impl": impl}
    if impl == "full_iteration":
        o["model.cuda_graph_modules"] = "[]"
        if rng.random() < 0.85:
            o["model.check_for_nan_in_loss_and_grad"] = False
    elif impl != "none":
        mods = ["attn", "mlp"] + (["moe", "moe_router", "moe_preprocess"] if moe else [])
        if f.get("hybrid_override_pattern"):
            mods.append("mamba")
        o["model.cuda_graph_modules"] = "[" + ",".join(rng.sample(mods, rng.choice([0, 1, 1, 2]))) + "]"
    return o


def _rand_moe(rng, f):
    o = {"model.moe_token_dispatcher_type": rng.choice(["allgather", "alltoall", "alltoall", "flex"])}
    if rng.random() < 0.3:
        o["model.moe_expert_capacity_factor"] = rng.choice([1.0, 1.5])
    if rng.random() < 0.2:
        o["model.moe_pad_expert_input_to_capacity"] = True
    if rng.random() < 0.1:
        o["model.moe_router_padding_for_fp8"] = True
    if rng.random() < 0.3:
        o["model.moe_shared_expert_overlap"] = rng.random() < 0.7
    if rng.random() < 0.1:
        o["model.moe_router_topk"] = rng.choice([2, 4, 8])
    if rng.random() < 0.05:
        o["model.moe_input_jitter_eps"] = 0.01
    return o


def _rand_misc(rng, f):
    o = {}
    if rng.random() < 0.15:
        o["model.attention_dropout"] = rng.choice([0.0, 0.1])
    if rng.random() < 0.1:
        o["model.hidden_dropout"] = rng.choice([0.0, 0.1])
    if rng.random() < 0.1:
        o["model.cpu_offloading"] = True
    if rng.random() < 0.1:
        o["model.cpu_offloading_num_layers"] = rng.choice([0, 1, 2])
    if rng.random() < 0.1:
        o["model.fp8"] = rng.choice(["e4m3", "hybrid", None])
        o["model.fp8_recipe"] = rng.choice(["tensorwise", "delayed"])
    if rng.random() < 0.1:
        o["model.num_query_groups"] = rng.choice([1, 2, 4, 8])
    return o


def random_configs(seed=23, n=300):
    """Random configurations over every recipe of RECIPES and many fields, drawn from `seed`: each
    recipe's own settings with a random subset of field families overridden."""
    rng = random.Random(seed)
    names = sorted(RECIPES)
    out = []
    for i in range(n):
        name = rng.choice(names)
        f = RECIPES[name][1]
        moe = f.get("num_moe_experts") is not None
        o = {}
        if rng.random() < 0.6:
            o.update(_rand_parallel(rng, f, moe))
        if rng.random() < 0.5:
            o.update(_rand_recompute(rng, f, moe))
        if rng.random() < 0.4:
            o.update(_rand_graphs(rng, f, moe))
        if moe and rng.random() < 0.5:
            o.update(_rand_moe(rng, f))
        o.update(_rand_misc(rng, f))
        if f.get("multi_latent_attention") or f.get("num_query_groups") is None:
            o.pop("model.num_query_groups", None)
        out.append((f"rand-{i:03d}", name, [f"{k}={_fmt(v)}" for k, v in o.items()]))
    return out


def base_of(name):
    """(recipe path, Megatron fields) of a configuration's base: a BASES key or a RECIPES key."""
    return BASES.get(name) or RECIPES[name]


if __name__ == "__main__":
    for cid, base, ov in configs():
        print(cid, base, *ov)
