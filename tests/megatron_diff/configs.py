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
    "dense": ("models/llama3_2_1b.lua", dict(
        num_layers=16, hidden_size=2048, num_attention_heads=32, num_query_groups=8, kv_channels=64,
        ffn_hidden_size=8192, seq_length=4096, attention_dropout=0.0, hidden_dropout=0.0,
        micro_batch_size=2, global_batch_size=2, world_size=1)),
    "moe": ("tests/rules/moe.lua", dict(
        num_layers=4, hidden_size=128, num_attention_heads=4, num_query_groups=2, kv_channels=None,
        ffn_hidden_size=352, seq_length=64, attention_dropout=0.0, hidden_dropout=0.0,
        micro_batch_size=4, global_batch_size=8, world_size=1,
        num_moe_experts=8, moe_router_topk=2, moe_ffn_hidden_size=128, moe_grouped_gemm=True)),
}

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


if __name__ == "__main__":
    for cid, base, ov in configs():
        print(cid, base, *ov)
