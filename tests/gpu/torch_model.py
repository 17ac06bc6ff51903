"""torch_model.py — an independent PyTorch model of stepc's dense recipes, shared by torch_ref.py
(the first step's loss and gradients) and torch_train_ref.py (a whole training run).

Hugging Face Llama layout (separate q/k/v projections, gate/up projections, RMSNorm, rotate_half
RoPE, repeat_kv GQA) plus the GPT-style options stepc's recipes have (LayerNorm with bias, linear
biases, learned absolute positions, exact GELU, tied head), functional over a dict of parameters.
stepc's fused tensors are split onto it by mapping() and concatenated back by from_torch(), so a
layout mistake on either side (Q/K/V order, head order inside a group, [gate|up] order, weight
orientation, RoPE pairing) shows up as an O(1) error, never as noise. Also: a safetensors reader
(the format stepc's dumps use), standard library and torch only.
"""
import json
import math
import struct

import torch
import torch.nn.functional as F

ST_DTYPES = {"F32": torch.float32, "F64": torch.float64, "I32": torch.int32, "I64": torch.int64, "BF16": torch.bfloat16,
             "F16": torch.float16, "U8": torch.uint8}


def read_safetensors(path):
    """{name: tensor} of a safetensors file (header: u64 little-endian length, JSON; then data)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        dt = ST_DTYPES[e["dtype"]]
        t = torch.frombuffer(bytearray(data[b:end]), dtype=dt) if end > b else torch.zeros(0, dtype=dt)
        out[name] = t.reshape(e["shape"]).clone()
    return out


# ---------------------------------------------------------------------------------------------
# stepc name -> torch (HF Llama-style) name(s). A fused stepc tensor is split along dim 0 into
# the listed parts, in order, with the row counts given (functions of the shape fields):
#
#   stepc                                       shape            torch
#   embedding.word_embeddings.weight            (V, C)           embed_tokens.weight
#   embedding.position_embeddings.weight        (S, C)           embed_positions.weight   (learned_absolute)
#   layers.i.input_layernorm.{weight,bias}      (C)              layers.i.input_layernorm.{weight,bias}
#   layers.i.self_attention.linear_qkv.weight   ((H+2G)D, C)     rows [0,HD) q_proj | [HD,HD+GD) k_proj | [HD+GD,..) v_proj
#                                                                (row h*D+d of q_proj is head h, dim d; k/v likewise per group)
#   layers.i.self_attention.linear_qkv.bias     ((H+2G)D)        q_proj.bias | k_proj.bias | v_proj.bias
#   layers.i.self_attention.linear_proj.*       (C, HD)          layers.i.self_attn.o_proj.*
#   layers.i.pre_mlp_layernorm.*                (C)              layers.i.post_attention_layernorm.*
#   layers.i.mlp.linear_fc1.weight   GLU        (2F, C)          rows [0,F) gate_proj | [F,2F) up_proj   (act(gate) * up)
#                                    no GLU     (F, C)           up_proj
#   layers.i.mlp.linear_fc2.*                   (C, F)           layers.i.mlp.down_proj.*
#   final_layernorm.*                           (C)              norm.*
#   output_layer.weight                         (V, C)           lm_head.weight           (absent when tied: embed_tokens)
# Every linear weight is (out, in), torch.nn.Linear's orientation: y = x W^T + b.
# ---------------------------------------------------------------------------------------------
def mapping(m):
    H, G, D, F_ = m["num_attention_heads"], m["num_query_groups"], m["kv_channels"], m["ffn_hidden_size"]
    glu = m["gated_linear_unit"]
    rows = {}

    def one(stepc, torch_name):
        rows[stepc] = [(torch_name, None)]

    one("embedding.word_embeddings.weight", "embed_tokens.weight")
    one("embedding.position_embeddings.weight", "embed_positions.weight")
    for i in range(m["num_layers"]):
        p, q = f"layers.{i}.", f"layers.{i}."
        for kind in ("weight", "bias"):
            one(p + "input_layernorm." + kind, q + "input_layernorm." + kind)
            rows[p + "self_attention.linear_qkv." + kind] = [(q + "self_attn.q_proj." + kind, H * D),
                                                            (q + "self_attn.k_proj." + kind, G * D),
                                                            (q + "self_attn.v_proj." + kind, G * D)]
            one(p + "self_attention.linear_proj." + kind, q + "self_attn.o_proj." + kind)
            one(p + "pre_mlp_layernorm." + kind, q + "post_attention_layernorm." + kind)
            if glu:
                rows[p + "mlp.linear_fc1." + kind] = [(q + "mlp.gate_proj." + kind, F_), (q + "mlp.up_proj." + kind, F_)]
            else:
                one(p + "mlp.linear_fc1." + kind, q + "mlp.up_proj." + kind)
            one(p + "mlp.linear_fc2." + kind, q + "mlp.down_proj." + kind)
    for kind in ("weight", "bias"):
        one("final_layernorm." + kind, "norm." + kind)
    one("output_layer.weight", "lm_head.weight")
    return rows


def to_torch(stepc_tensors, rows):
    """stepc tensors -> torch parameters (split along dim 0 where fused). Every stepc tensor must map."""
    out = {}
    for name, t in stepc_tensors.items():
        if name not in rows:
            raise KeyError(f"stepc tensor {name} has no row in the mapping table")
        parts = rows[name]
        if parts[0][1] is None:
            out[parts[0][0]] = t
            continue
        sizes = [n for _, n in parts]
        if sum(sizes) != t.shape[0]:
            raise ValueError(f"{name}: dim 0 is {t.shape[0]}, the mapping splits {sizes}")
        for (tn, _), piece in zip(parts, torch.split(t, sizes, dim=0)):
            out[tn] = piece.contiguous()
    return out


def from_torch(torch_grads, rows, names):
    """torch gradients -> stepc's fused tensors (concatenated back along dim 0)."""
    return {n: torch.cat([torch_grads[tn] for tn, _ in rows[n]], dim=0) for n in names}


# ---------------------------------------------------------------------------------------------
# The model, functional over a dict of parameters P (Hugging Face Llama's math and names).
# ---------------------------------------------------------------------------------------------
def norm(m, P, prefix, x):
    eps = m["layernorm_epsilon"]
    if m["normalization"] == "RMSNorm":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * P[prefix + ".weight"]
    if m["normalization"] == "LayerNorm":
        return F.layer_norm(x, (x.shape[-1],), P[prefix + ".weight"], P[prefix + ".bias"], eps)
    raise ValueError("normalization " + m["normalization"])


def linear(P, prefix, x):
    return F.linear(x, P[prefix + ".weight"], P.get(prefix + ".bias"))


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(m, T, dev, dt):
    D = m["kv_channels"]
    inv_freq = 1.0 / (m["rotary_base"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T, D)
    return emb.cos().to(dev, dt), emb.sin().to(dev, dt)


def activation(m, x):
    a = m["activation_func"]
    if a == "silu":
        return F.silu(x)
    if a == "gelu":
        return F.gelu(x)  # exact (erf) form, as Megatron's and stepc's
    if a == "relu":
        return F.relu(x)
    if a == "squared_relu":
        return F.relu(x).pow(2)
    raise ValueError("activation_func " + a)


def attention(m, P, prefix, x, cos, sin):
    B, T, _ = x.shape
    H, G, D = m["num_attention_heads"], m["num_query_groups"], m["kv_channels"]
    q = linear(P, prefix + ".q_proj", x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
    k = linear(P, prefix + ".k_proj", x).view(B, T, G, D).transpose(1, 2)
    v = linear(P, prefix + ".v_proj", x).view(B, T, G, D).transpose(1, 2)
    if m["position_embedding_type"] == "rope":
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
    rep = H // G  # HF repeat_kv: query head h reads kv head h // rep
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D))
    mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
    p = torch.softmax(s.masked_fill(mask, float("-inf")).float(), dim=-1).to(q.dtype)
    o = (p @ v).transpose(1, 2).reshape(B, T, H * D)
    return linear(P, prefix + ".o_proj", o)


def mlp(m, P, prefix, x):
    if m["gated_linear_unit"]:
        return linear(P, prefix + ".down_proj", activation(m, linear(P, prefix + ".gate_proj", x)) * linear(P, prefix + ".up_proj", x))
    return linear(P, prefix + ".down_proj", activation(m, linear(P, prefix + ".up_proj", x)))


def forward_loss(m, P, tokens, targets):
    B, T = tokens.shape
    x = F.embedding(tokens, P["embed_tokens.weight"])
    if m["position_embedding_type"] == "learned_absolute":
        x = x + P["embed_positions.weight"][:T]
    cos, sin = rope_cos_sin(m, T, x.device, x.dtype)
    for i in range(m["num_layers"]):
        p = f"layers.{i}"
        x = x + attention(m, P, p + ".self_attn", norm(m, P, p + ".input_layernorm", x), cos, sin)
        x = x + mlp(m, P, p + ".mlp", norm(m, P, p + ".post_attention_layernorm", x))
    x = norm(m, P, "norm", x)
    head = P["embed_tokens.weight"] if m["share_embeddings_and_output_weights"] else P["lm_head.weight"]
    logits = F.linear(x, head)
    return F.cross_entropy(logits.float().reshape(B * T, -1), targets.reshape(B * T).long())
