#!/usr/bin/env python3
"""test_hf_export.py STEPC — `stepc export` / `stepc import` (compiler/cli/export_hf.c) against an
independent implementation: the exported Hugging Face Llama directory is loaded (with the
`safetensors` package where it is installed, else by this file's own reader of the format) and
run through a NumPy Llama forward written here from Hugging Face's definition (RMSNorm, rotate_half
RoPE with theta^(-2i/d), grouped-query causal attention, SwiGLU); its mean token loss must be the
loss stepc's CPU reference reports for the same parameters and batch (fp32 both, different
operation order: within 1e-4 relative). The import of the export must give back stepc's
parameters byte for byte, and a step from them bitwise the same loss. Exit 77 without numpy."""

import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not importable by", sys.executable)
    sys.exit(77)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))
import stepc  # noqa: E402

OV = ["model.num_layers=2", "model.seq_length=32", "train.micro_batch_size=2", "train.global_batch_size=2"]


def read_safetensors(path):
    """{name: float32 array}; the safetensors package's torch reader where it is there (bf16)."""
    try:
        from safetensors import safe_open  # noqa: F401
        import torch  # noqa: F401
        out = {}
        with safe_open(path, framework="pt") as f:
            for k in f.keys():
                out[k] = f.get_tensor(k).float().numpy()
        return out, "the safetensors package"
    except ImportError:
        pass
    d = open(path, "rb").read()
    n = struct.unpack("<Q", d[:8])[0]
    h = json.loads(d[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        b = d[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
        if v["dtype"] == "BF16":
            a = (np.frombuffer(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif v["dtype"] == "F32":
            a = np.frombuffer(b, dtype=np.float32)
        else:
            raise ValueError(f"{k}: dtype {v['dtype']}")
        out[k] = a.reshape(v["shape"]).astype(np.float32)
    return out, "this test's reader"


def llama_loss(hf_dir, tokens, targets):
    z, how = llama_logits(hf_dir, tokens)
    z = z - z.max(-1, keepdims=True)
    lse = np.log(np.exp(z).sum(-1))
    return float((lse - np.take_along_axis(z, targets[..., None], -1)[..., 0]).mean()), how


def llama_logprobs(hf_dir, tokens, targets):
    """Each token's log-probability of its target (float64, (B, T)) under the NumPy Llama."""
    z, how = llama_logits(hf_dir, tokens)
    z = z - z.max(-1, keepdims=True)
    lse = np.log(np.exp(z).sum(-1))
    return np.take_along_axis(z, targets[..., None], -1)[..., 0] - lse, how


def llama_logits(hf_dir, tokens):
    """The NumPy Llama's logits (B, T, V) in fp64 for tokens (B, T), and which reader loaded it."""
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    w, how = read_safetensors(os.path.join(hf_dir, "model.safetensors"))
    H, G, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g

    B, T = tokens.shape
    x = w["model.embed_tokens.weight"][tokens]
    inv = theta ** (-np.arange(0, D, 2, dtype=np.float64) / D)
    ang = np.arange(T)[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, -1).astype(np.float32)[None, :, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, -1).astype(np.float32)[None, :, None, :]

    def rope(t):
        half = np.concatenate([-t[..., D // 2:], t[..., :D // 2]], -1)
        return t * cos + half * sin

    mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), 1)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = rope((h @ w[p + "self_attn.q_proj.weight"].T).reshape(B, T, H, D))
        k = rope((h @ w[p + "self_attn.k_proj.weight"].T).reshape(B, T, G, D))
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(B, T, G, D)
        k, v = np.repeat(k, H // G, 2), np.repeat(v, H // G, 2)
        s = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(D) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        a = np.einsum("bhqk,bkhd->bqhd", s / s.sum(-1, keepdims=True), v).reshape(B, T, H * D)
        x = x + a @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms(x, w["model.norm.weight"])
    head = w["lm_head.weight"] if not cfg["tie_word_embeddings"] else w["model.embed_tokens.weight"]
    return (x @ head.T).astype(np.float64), how


def main():
    stepc_bin = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="stepc-hf-")
    recipe = os.path.join(REPO, "models", "tiny.lua")
    art, params, hf, back = (os.path.join(tmp, n) for n in ("art", "p.safetensors", "hf", "back.safetensors"))
    subprocess.run([stepc_bin, "build", recipe, *OV, "-o", art], check=True, capture_output=True)
    rng = np.random.default_rng(5)
    seq = rng.integers(0, 256, size=(2, 33), dtype=np.int32)
    tokens, targets = seq[:, :-1].copy(), seq[:, 1:].copy()
    with stepc.Step(art, device="cpu") as s:
        s.init_params(11)
        s.save_params(params)
    # The saved file holds the parameters in their stored precision; a step from that file
    # (not from init_params' in-memory state) is what the export must reproduce.
    with stepc.Step(art, device="cpu") as s:
        s.load_params(params)
        s.bind_batch(tokens, targets)
        loss = s.step().loss
    subprocess.run([stepc_bin, "export", recipe, *OV, "--from", params, "-o", hf], check=True, capture_output=True)
    ref, how = llama_loss(hf, tokens, targets)
    rel = abs(ref - loss) / abs(ref)
    print(f"stepc's CPU reference loss {loss!r}; the NumPy Llama on the export ({how}) {ref!r}; relative difference {rel:.2e}")
    ok = rel < 1e-4
    subprocess.run([stepc_bin, "import", recipe, *OV, "--from", hf, "-o", back], check=True, capture_output=True)
    a, _ = read_safetensors(params)
    b, _ = read_safetensors(back)
    same = sorted(a) == sorted(b) and all(np.array_equal(a[k].view(np.uint32), b[k].view(np.uint32)) for k in a)
    print(f"import of the export: {len(b)} tensors, {'every one bitwise stepc' + chr(39) + 's' if same else 'DIFFERENT'}")
    with stepc.Step(art, device="cpu") as s:
        s.load_params(back)
        s.bind_batch(tokens, targets)
        loss2 = s.step().loss
    print(f"a step from the imported parameters: loss {loss2!r} ({'bitwise' if loss2 == loss else 'DIFFERENT'})")
    r = subprocess.run([stepc_bin, "export", os.path.join(REPO, "tests", "recipes", "gpt3_tiny.lua"), "--from", params, "-o",
                        os.path.join(tmp, "no")], capture_output=True, text=True)
    refused = r.returncode == 4 and "not Llama-style" in r.stderr
    print(f"a GPT-3-style recipe refused: {refused} ({r.stderr.strip()})")
    ov = [o for o in OV if not o.startswith("model.num_layers")] + ["model.num_layers=2"]
    r = subprocess.run([stepc_bin, "import", recipe, *ov, "model.hidden_size=256", "--from", hf, "-o",
                        os.path.join(tmp, "wide.safetensors")], capture_output=True, text=True)
    wrong = r.returncode == 4 and "config.json: hidden_size is 128 where the recipe's model.hidden_size is 256" in r.stderr
    print(f"an import into other shapes refused: {wrong} ({r.stderr.strip()})")
    r = subprocess.run([stepc_bin, "export", recipe, *OV, "model.ffn_hidden_size=256", "--from", params, "-o",
                        os.path.join(tmp, "narrow")], capture_output=True, text=True)
    wrong2 = r.returncode == 4 and "linear_fc1.weight has shape [704, 128]; the recipe's is [512, 128]" in r.stderr
    print(f"an export from other shapes refused: {wrong2} ({r.stderr.strip()})")
    return 0 if ok and same and loss2 == loss and refused and wrong and wrong2 else 1


if __name__ == "__main__":
    sys.exit(main())
