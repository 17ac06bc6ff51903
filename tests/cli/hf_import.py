#!/usr/bin/env python3
"""hf_import.py STEPC — `stepc import` and `stepc export` never train another model than the weights
were made for. Hugging Face Llama directories are written here by hand (config.json as
transformers' LlamaConfig writes it, safetensors files with HF's names) for models/tiny.lua's shape:
the good directory imports, sharded or not (byte-identical parameters); each config key that
changes the model (rope_theta, hidden_act, biases, rms_norm_eps, rope_scaling other than Llama 3's
with the recipe's factor, the layer count, a
missing config.json) and each tensor the recipe has no place for (an extra layer, an untied head
into a tied recipe) is refused with the key or tensor named; an export through a recipe with fewer
layers than its source is refused instead of truncated, and an export imports back bit for bit."""
import json
import os
import struct
import subprocess
import sys
import random
import tempfile

STEPC = sys.argv[1]
L, D, H, G, F, V = 4, 128, 4, 2, 352, 256
HD = D // H
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)
    else:
        print("ok:", what)


def tensors(layers=L, lm_head=True, seed=0):
    rng = random.Random(seed)
    t = {}

    def w(name, *shape):
        n = 1
        for d in shape:
            n *= d
        t[name] = (list(shape), rng.randbytes(2 * n))  # bf16 bits

    w("model.embed_tokens.weight", V, D)
    for l in range(layers):
        p = f"model.layers.{l}."
        w(p + "input_layernorm.weight", D)
        w(p + "self_attn.q_proj.weight", H * HD, D)
        w(p + "self_attn.k_proj.weight", G * HD, D)
        w(p + "self_attn.v_proj.weight", G * HD, D)
        w(p + "self_attn.o_proj.weight", D, H * HD)
        w(p + "post_attention_layernorm.weight", D)
        w(p + "mlp.gate_proj.weight", F, D)
        w(p + "mlp.up_proj.weight", F, D)
        w(p + "mlp.down_proj.weight", D, F)
    w("model.norm.weight", D)
    if lm_head:
        w("lm_head.weight", V, D)
    return t


def write_st(path, t):
    header, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, (shape, b) in t.items():
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in header.items()}


CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": D, "intermediate_size": F,
          "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": G, "head_dim": HD,
          "vocab_size": V, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
          "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
          "rope_scaling": None, "torch_dtype": "bfloat16"}
# Llama 3.1 / 3.2's rope_scaling block as their config.json has it (the factor per test)
LLAMA3 = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def hf_dir(root, name, config=CONFIG, t=None, shards=1):
    d = os.path.join(root, name)
    os.makedirs(d)
    if config is not None:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f)
    t = tensors() if t is None else t
    if shards == 1:
        write_st(os.path.join(d, "model.safetensors"), t)
        return d
    names, wm = list(t), {}
    for s in range(shards):
        part = names[s::shards]
        fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        write_st(os.path.join(d, fn), {k: t[k] for k in part})
        wm.update({k: fn for k in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f)
    return d


def stepc(*args, env=None):
    p = subprocess.run([STEPC, *args], capture_output=True, text=True, timeout=120,
                       env=None if env is None else dict(os.environ, **env))
    return p.returncode, p.stdout + p.stderr


def refused(root, what, d, want, *overrides):
    rc, out = stepc("import", "models/tiny.lua", *overrides, "--from", d, "-o", os.path.join(root, what + ".st"))
    check(rc == 4 and want in out and not os.path.exists(os.path.join(root, what + ".st")),
          f"{what}: refused (exit {rc}) naming '{want}'" + ("" if want in out else f"; said: {out.strip()}"))


with tempfile.TemporaryDirectory() as root:
    good = hf_dir(root, "good")
    out = os.path.join(root, "good.st")
    rc, msg = stepc("import", "models/tiny.lua", "--from", good, "-o", out)
    check(rc == 0, f"a faithful directory imports ({msg.strip()})")
    t, p = tensors(), read_st(out) if rc == 0 else {}
    q = b"".join(t[f"model.layers.1.self_attn.{x}_proj.weight"][1] for x in "qkv")
    check(p.get("layers.1.self_attention.linear_qkv.weight") == q, "q, k, v rows concatenate into linear_qkv")

    sharded = hf_dir(root, "sharded", shards=3)
    rc, msg = stepc("import", "models/tiny.lua", "--from", sharded, "-o", os.path.join(root, "sharded.st"))
    check(rc == 0 and read_st(os.path.join(root, "sharded.st")) == p, f"a sharded directory imports the same bytes ({msg.strip()})")

    for key, value, want in [("rope_theta", 500000.0, "rope_theta is 500000 where the recipe's model.rotary_base is 10000"),
                             ("hidden_act", "gelu", "hidden_act is \"gelu\""),
                             ("attention_bias", True, "attention_bias is true"),
                             ("mlp_bias", True, "mlp_bias is true"),
                             ("rms_norm_eps", 1e-6, "rms_norm_eps is 1e-06 where the recipe's model.layernorm_epsilon"),
                             ("rope_scaling", dict(LLAMA3, factor=32.0), "rope_scaling is llama3 with factor 32 where the recipe's model.rope_scaling is false"),
                             ("num_key_value_heads", 4, "num_key_value_heads is 4"),
                             ("model_type", "mistral", "model_type is \"mistral\""),
                             ("tie_word_embeddings", True, "tie_word_embeddings is true where the recipe's model.share_embeddings_and_output_weights is false")]:
        refused(root, "cfg_" + key, hf_dir(root, "cfg_" + key, dict(CONFIG, **{key: value})), want)
    # Llama 3 RoPE scaling: accepted with the recipe's factor and Megatron's constants, else refused
    # naming both values
    SC = ["model.rope_scaling=true", "model.rope_scaling_factor=32"]
    scaled = hf_dir(root, "scaled", dict(CONFIG, rope_scaling=dict(LLAMA3, factor=32.0)))
    rc, msg = stepc("import", "models/tiny.lua", *SC, "--from", scaled, "-o", os.path.join(root, "scaled.st"))
    check(rc == 0 and read_st(os.path.join(root, "scaled.st")) == p, f"llama3 rope_scaling with the recipe's factor imports ({msg.strip()})")
    for what, rs, want, ov in [
            ("factor", dict(LLAMA3, factor=32.0), "rope_scaling.factor is 32 where the recipe's model.rope_scaling_factor is 8", ["model.rope_scaling=true"]),
            ("low", dict(LLAMA3, factor=32.0, low_freq_factor=2.0), "rope_scaling.low_freq_factor is 2; stepc's Llama has 1", SC),
            ("high", dict(LLAMA3, factor=32.0, high_freq_factor=8.0), "rope_scaling.high_freq_factor is 8; stepc's Llama has 4", SC),
            ("orig", dict(LLAMA3, factor=32.0, original_max_position_embeddings=4096),
             "rope_scaling.original_max_position_embeddings is 4096; stepc's Llama has 8192", SC),
            ("yarn", {"rope_type": "yarn", "factor": 32.0}, "rope_scaling.rope_type is \"yarn\"", SC),
            ("none", None, "rope_scaling is null where the recipe's model.rope_scaling is true", SC)]:
        refused(root, "rs_" + what, hf_dir(root, "rs_" + what, dict(CONFIG, rope_scaling=rs)), want, *ov)
    cfg = dict(CONFIG)
    del cfg["num_key_value_heads"]
    refused(root, "cfg_default_kv", hf_dir(root, "cfg_default_kv", cfg), "num_key_value_heads is 4")
    refused(root, "no_config", hf_dir(root, "no_config", None), "config.json: No such file")
    refused(root, "layers5", hf_dir(root, "layers5", dict(CONFIG, num_hidden_layers=5), tensors(5)), "num_hidden_layers is 5")
    refused(root, "extra_layer", hf_dir(root, "extra_layer", CONFIG, tensors(5)), "holds model.layers.4.")
    refused(root, "untied_into_tied", hf_dir(root, "untied_into_tied", dict(CONFIG, tie_word_embeddings=True)),
            "holds lm_head.weight", "model.share_embeddings_and_output_weights=true")
    bad = hf_dir(root, "bad_index", shards=2)
    with open(os.path.join(bad, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": {"model.norm.weight": "../good/model.safetensors"}}, f)
    refused(root, "bad_index", bad, "not a file of the directory")

    # export: a 4-layer source through a 2-layer recipe is refused, not truncated
    rc, msg = stepc("export", "models/tiny.lua", "model.num_layers=2", "--from", out, "-o", os.path.join(root, "hf2"))
    check(rc == 4 and "holds layers.2." in msg and not os.path.exists(os.path.join(root, "hf2", "model.safetensors")),
          f"export through fewer layers is refused ({msg.strip()})")
    rc, msg = stepc("export", "models/tiny.lua", "--from", out, "-o", os.path.join(root, "hf4"))
    back = os.path.join(root, "back.st")
    rc2, msg2 = stepc("import", "models/tiny.lua", "--from", os.path.join(root, "hf4"), "-o", back) if rc == 0 else (rc, msg)
    check(rc == 0 and rc2 == 0 and read_st(back) == p, f"an export imports back bit for bit ({msg.strip()} {msg2.strip()})")
    # a model over the shard limit (STEPC_HF_SHARD_BYTES, the test knob for HF's 5 GB) exports as
    # shards + index, as save_pretrained writes them, and imports back bit for bit
    hs = os.path.join(root, "hf_shards")
    rc, msg = stepc("export", "models/tiny.lua", "--from", out, "-o", hs, env={"STEPC_HF_SHARD_BYTES": "150000"})
    files = sorted(os.listdir(hs)) if rc == 0 else []
    idx = json.load(open(os.path.join(hs, "model.safetensors.index.json"))) if "model.safetensors.index.json" in files else {}
    shards = [f for f in files if f.startswith("model-")]
    n = len(shards)
    wm = idx.get("weight_map", {})
    sizes = [os.path.getsize(os.path.join(hs, f)) for f in shards]
    st_bytes = sum(sum(len(v) for v in read_st(os.path.join(hs, f)).values()) for f in shards)
    check(rc == 0 and n > 1 and shards == [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
          and "model.safetensors" not in files and set(wm.values()) == set(shards) and len(wm) == 3 + 9 * L
          and all(k in read_st(os.path.join(hs, f)) for k, f in wm.items())
          and idx["metadata"]["total_size"] == st_bytes and max(sizes) < 150000 + 4096,
          f"a sharded export: {n} shards {sizes}, index of {len(wm)} names ({msg.strip()})")
    rc, msg = stepc("import", "models/tiny.lua", "--from", hs, "-o", os.path.join(root, "shards_back.st"))
    check(rc == 0 and read_st(os.path.join(root, "shards_back.st")) == p, f"the sharded export imports back bit for bit ({msg.strip()})")
    rc, msg = stepc("export", "models/tiny.lua", "--from", out, "-o", hs)
    check(rc == 0 and sorted(os.listdir(hs)) == ["config.json"] + shards + ["model.safetensors"],
          f"an unsharded export over a sharded one removes the index ({sorted(os.listdir(hs))})")
    # export with rope_scaling writes Llama 3's block, which the import accepts with that recipe
    rc, msg = stepc("export", "models/tiny.lua", *SC, "--from", out, "-o", os.path.join(root, "hf_sc"))
    cfg = json.load(open(os.path.join(root, "hf_sc", "config.json"))) if rc == 0 else {}
    check(cfg.get("rope_scaling") == dict(LLAMA3, factor=32.0), f"export writes rope_scaling ({cfg.get('rope_scaling')}; {msg.strip()})")
    rc, msg = stepc("import", "models/tiny.lua", *SC, "--from", os.path.join(root, "hf_sc"), "-o", os.path.join(root, "sc_back.st"))
    check(rc == 0 and read_st(os.path.join(root, "sc_back.st")) == p, f"and imports back with the recipe ({msg.strip()})")
    refused(root, "sc_into_plain", os.path.join(root, "hf_sc"), "model.rope_scaling is false")

    # import --print-recipe: a recipe from config.json with which the import passes the check
    for name in ("hf4", "hf_sc"):
        rc, lua = stepc("import", "--print-recipe", os.path.join(root, name))
        rpath = os.path.join(root, name + "_recipe.lua")
        with open(rpath, "w") as f:
            f.write(lua)
        rc2, msg = stepc("import", rpath, "--from", os.path.join(root, name), "-o", os.path.join(root, name + "_pr.st")) if rc == 0 else (rc, lua)
        check(rc == 0 and rc2 == 0 and read_st(os.path.join(root, name + "_pr.st")) == p and ("rope_scaling = true" in lua) == (name == "hf_sc"),
              f"--print-recipe {name}: the import with the printed recipe passes ({msg.strip()})")
    rc, msg = stepc("import", "--print-recipe", os.path.join(root, "cfg_hidden_act"))
    check(rc == 4 and "hidden_act is \"gelu\"" in msg, f"--print-recipe refuses what stepc's Llama cannot express ({msg.strip()})")

print(f"{failures} failed")
sys.exit(1 if failures else 0)
