"""torch_model.py — an independent PyTorch model of stepc's dense recipes, shared by torch_ref.py
(the first step's loss and gradients) and torch_train_ref.py (a whole training run).

Hugging Face Llama layout (separate q/k/v projections, gate/up projections, RMSNorm, rotate_half
RoPE, repeat_kv GQA) plus the GPT-style options stepc's recipes have (LayerNorm with bias, linear
biases, learned absolute positions, exact GELU, tied head), functional over a dict of parameters.
stepc's fused tensors are split onto it by mapping() and concatenated back by from_torch(), so a
layout mistake on either side (Q/K/V order, head order inside a group, [gate|up] order, weight
orientation, RoPE pairing) shows up as an O(1) error, never as noise. MLA + MoE recipes use Hugging
Face's DeepSeek-V3 layout (mapping_mla_moe), hybrid Mamba stacks Megatron's MambaStack with a Mamba-2
mixer written from the paper's recurrence (mapping_hybrid, mamba_mixer). Also: a safetensors reader
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

    if m.get("hybrid_override_pattern"):
        return mapping_hybrid(m)
    if m.get("multi_latent_attention") or any(m.get("moe_layers", [])):
        return mapping_mla_moe(m)
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
    """stepc tensors -> torch parameters (split along dim 0 where fused). Every stepc tensor must map.
    A part may carry a third element, a row permutation: torch piece = stepc piece[perm]. A 3-d
    stepc tensor (grouped experts, (E, out, in)) is split along its first two dims flattened."""
    out = {}
    for name, t in stepc_tensors.items():
        if name not in rows:
            raise KeyError(f"stepc tensor {name} has no row in the mapping table")
        parts = rows[name]
        if parts[0][1] is None:
            out[parts[0][0]] = t
            continue
        if t.dim() == 3:
            t = t.reshape(-1, t.shape[2])
        sizes = [p[1] for p in parts]
        if sum(sizes) != t.shape[0]:
            raise ValueError(f"{name}: dim 0 is {t.shape[0]}, the mapping splits {sizes}")
        for p, piece in zip(parts, torch.split(t, sizes, dim=0)):
            out[p[0]] = (piece[p[2]] if len(p) > 2 else piece).contiguous()
    return out


def from_torch(torch_grads, rows, names):
    """torch gradients -> stepc's fused tensors (concatenated back along dim 0, permutations undone;
    grouped experts' tensors come back flattened to (E*out, in), which compare() flattens anyway)."""
    def back(p):
        g = torch_grads[p[0]]
        return g[torch.argsort(p[2])] if len(p) > 2 else g
    return {n: torch.cat([back(p) for p in rows[n]], dim=0) for n in names}


# ---------------------------------------------------------------------------------------------
# MLA + MoE (tests/recipes/tiny_mla_moe.lua): Hugging Face DeepSeek-V3 / Moonlight layout
# (modeling_deepseek.py), experts as separate modules:
#
#   stepc (layer i, prefix layers.i.)                shape                 torch (prefix layers.i.)
#   self_attention.linear_q_down_proj.weight         (ql, C)               self_attn.q_a_proj.weight
#   self_attention.q_layernorm.weight                (ql)                  self_attn.q_a_layernorm.weight
#   self_attention.linear_q_up_proj.weight           (H(dn+dr), ql)        self_attn.q_b_proj.weight   (rope rows permuted)
#   self_attention.linear_q_proj.weight  (no q lora) (H(dn+dr), C)         self_attn.q_proj.weight     (rope rows permuted)
#   self_attention.linear_kv_down_proj.weight        (kvl+dr, C)           self_attn.kv_a_proj_with_mqa.weight (rope rows permuted)
#   self_attention.kv_layernorm.weight               (kvl)                 self_attn.kv_a_layernorm.weight
#   self_attention.linear_kv_up_proj.weight          (H(dn+dv), kvl)       self_attn.kv_b_proj.weight
#   self_attention.linear_proj.weight                (C, H dv)             self_attn.o_proj.weight
#   mlp.router.weight                                (E, C)                mlp.gate.weight
#   mlp.experts.linear_fc1.weight                    (E, 2F, C)            mlp.experts.e.{gate_proj|up_proj}.weight, e = 0..E-1
#   mlp.experts.linear_fc2.weight                    (E, C, F)             mlp.experts.e.down_proj.weight
#   mlp.shared_experts.linear_fc{1,2}.weight                               mlp.shared_experts.{gate_proj|up_proj, down_proj}.weight
# Per head, q and kv_b rows are [nope dn | rope dr] and [k_nope dn | v dv], kv_a rows
# [compressed kvl | k_pe dr], on both sides. RoPE pairing differs: DeepSeek-V3 (and Megatron's
# MLA, multi_latent_attention=True in _apply_rotary_pos_emb_bshd) takes the rope part as
# interleaved pairs (x[0::2], x[1::2]) and moves them to halves before rotate_half; stepc's ROPE
# rotates the halves of the rope part as they come. The same function of the weights needs the
# rope rows permuted: torch rope row 2j = stepc row j, row 2j+1 = stepc row dr/2 + j.
# ---------------------------------------------------------------------------------------------
def rope_row_perm(n_heads, head, off, dr):
    """torch row -> stepc row for n_heads blocks of `head` rows whose rows [off, off+dr) are rope."""
    perm = torch.arange(n_heads * head)
    half = torch.cat([torch.stack([torch.tensor(j), torch.tensor(dr // 2 + j)]) for j in range(dr // 2)])
    for h in range(n_heads):
        perm[h * head + off:h * head + off + dr] = h * head + off + half
    return perm


def untied_rows():
    """The rows of an untied model's embedding, final norm and output layer."""
    return {"embedding.word_embeddings.weight": [("embed_tokens.weight", None)],
            "final_layernorm.weight": [("norm.weight", None)], "output_layer.weight": [("lm_head.weight", None)]}


def mapping_mla_moe(m):
    H, F_ = m["num_attention_heads"], m["ffn_hidden_size"]
    glu = m["gated_linear_unit"]
    mla = m.get("multi_latent_attention", False)
    rows = untied_rows()

    def one(stepc, torch_name):
        rows[stepc] = [(torch_name, None)]

    if not mla:
        raise ValueError("MoE without MLA is not mirrored (use the dense mapping's attention)")
    dn, dr, dv, kvl = m["qk_head_dim"], m["qk_pos_emb_head_dim"], m["v_head_dim"], m["kv_lora_rank"]
    qperm = rope_row_perm(H, dn + dr, dn, dr)
    kvperm = rope_row_perm(1, kvl + dr, kvl, dr)
    for i in range(m["num_layers"]):
        p, a = f"layers.{i}.", f"layers.{i}.self_attn."
        one(p + "input_layernorm.weight", f"layers.{i}.input_layernorm.weight")
        one(p + "pre_mlp_layernorm.weight", f"layers.{i}.post_attention_layernorm.weight")
        sa = p + "self_attention."
        if m.get("q_lora_rank") is not None:
            one(sa + "linear_q_down_proj.weight", a + "q_a_proj.weight")
            one(sa + "q_layernorm.weight", a + "q_a_layernorm.weight")
            rows[sa + "linear_q_up_proj.weight"] = [(a + "q_b_proj.weight", H * (dn + dr), qperm)]
        else:
            rows[sa + "linear_q_proj.weight"] = [(a + "q_proj.weight", H * (dn + dr), qperm)]
        rows[sa + "linear_kv_down_proj.weight"] = [(a + "kv_a_proj_with_mqa.weight", kvl + dr, kvperm)]
        one(sa + "kv_layernorm.weight", a + "kv_a_layernorm.weight")
        one(sa + "linear_kv_up_proj.weight", a + "kv_b_proj.weight")
        one(sa + "linear_proj.weight", a + "o_proj.weight")
        q = f"layers.{i}.mlp"
        if not m["moe_layers"][i]:
            mlp_rows(rows, glu, p + "mlp", q, F_)
            continue
        moe_rows(m, rows, p + "mlp", q)
    return rows


def mlp_rows(rows, glu, stepc, torch_prefix, width):
    """An MLP's rows: linear_fc1 = [gate_proj | up_proj] (GLU) or up_proj, linear_fc2 = down_proj."""
    if glu:
        rows[stepc + ".linear_fc1.weight"] = [(torch_prefix + ".gate_proj.weight", width),
                                             (torch_prefix + ".up_proj.weight", width)]
    else:
        rows[stepc + ".linear_fc1.weight"] = [(torch_prefix + ".up_proj.weight", None)]
    rows[stepc + ".linear_fc2.weight"] = [(torch_prefix + ".down_proj.weight", None)]


def moe_rows(m, rows, stepc, q):
    """The MoE block's rows: router, experts (split per expert, [gate | up] per expert), shared expert."""
    E, Fe, C, glu = m["num_moe_experts"], m["moe_ffn_hidden_size"], m["hidden_size"], m["gated_linear_unit"]
    rows[stepc + ".router.weight"] = [(q + ".gate.weight", None)]
    rows[stepc + ".experts.linear_fc1.weight"] = [
        (f"{q}.experts.{e}.{w}.weight", Fe) for e in range(E) for w in (("gate_proj", "up_proj") if glu else ("up_proj",))]
    rows[stepc + ".experts.linear_fc2.weight"] = [(f"{q}.experts.{e}.down_proj.weight", C) for e in range(E)]
    if m.get("moe_shared_expert_intermediate_size"):
        mlp_rows(rows, glu, stepc + ".shared_experts", q + ".shared_experts", m["moe_shared_expert_intermediate_size"])


# ---------------------------------------------------------------------------------------------
# Hybrid Mamba stacks (Megatron's MambaStack: hybrid_override_pattern, one layer a character):
#   M  Mamba-2 (MambaLayer: RMSNorm, MambaMixer, residual add)   layers.i.norm.weight, layers.i.mixer.*
#   *  attention alone (norm, self-attention, residual add)      layers.i.input_layernorm, self_attention.*
#   -  MLP alone (norm, MLP, residual add)                        layers.i.pre_mlp_layernorm, mlp.*
#   E  MoE alone (norm, router + experts, residual add)           layers.i.pre_mlp_layernorm, mlp.router/experts
# The mixer's tensors are kept whole and read inside mamba_mixer() in Megatron's layout:
#   mixer.in_proj.weight     (2 DI + 2 G N + H, C)   rows [z (DI) | x (DI) | B (G N) | C (G N) | dt (H)]
#   mixer.conv1d.weight      (DI + 2 G N, K + 1)     columns [conv1d.weight (K taps) | conv1d.bias], stepc's
#                                                    packing of nn.Conv1d's (C', 1, K) weight and (C') bias
#   mixer.ssm                (H, 3)                  columns [dt_bias | A_log | D], stepc's packing
#   mixer.norm.weight        (DI)                    RMSNormGated's weight (group_size DI / G)
#   mixer.out_proj.weight    (C, DI)
# ---------------------------------------------------------------------------------------------
def mapping_hybrid(m):
    H, G, D, F_ = m["num_attention_heads"], m["num_query_groups"], m["kv_channels"], m["ffn_hidden_size"]
    rows = untied_rows()

    def one(stepc, torch_name):
        rows[stepc] = [(torch_name, None)]

    for i, kind in enumerate(m["hybrid_override_pattern"]):
        p = q = f"layers.{i}."
        if kind == "M":
            one(p + "norm.weight", q + "norm.weight")
            for t in ("in_proj.weight", "conv1d.weight", "ssm", "norm.weight", "out_proj.weight"):
                one(p + "mixer." + t, q + "mixer." + t)
        elif kind == "*":
            one(p + "input_layernorm.weight", q + "input_layernorm.weight")
            rows[p + "self_attention.linear_qkv.weight"] = [(q + "self_attn.q_proj.weight", H * D),
                                                           (q + "self_attn.k_proj.weight", G * D),
                                                           (q + "self_attn.v_proj.weight", G * D)]
            one(p + "self_attention.linear_proj.weight", q + "self_attn.o_proj.weight")
        elif kind in "-E":
            one(p + "pre_mlp_layernorm.weight", q + "post_attention_layernorm.weight")
            if kind == "E":
                moe_rows(m, rows, p + "mlp", q + "mlp")
            else:
                mlp_rows(rows, m["gated_linear_unit"], p + "mlp", q + "mlp", F_)
        else:
            raise ValueError(f"hybrid layer kind {kind!r}")
    return rows


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
    factor = m.get("rope_scaling_factor", 0)
    if factor:  # Llama 3's scaling as Hugging Face's _compute_llama3_parameters (low 1, high 4, 8192)
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > 8192 / 1.0, inv_freq / factor, inv_freq)
        smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0)
        medium = ~(wavelen < 8192 / 4.0) & ~(wavelen > 8192 / 1.0)
        inv_freq = torch.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)
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


def mla_attention(m, P, prefix, x):
    """DeepseekV3Attention (modeling_deepseek.py), no YaRN scaling, causal."""
    B, T, _ = x.shape
    H, dn, dr, dv, kvl = (m["num_attention_heads"], m["qk_head_dim"], m["qk_pos_emb_head_dim"], m["v_head_dim"],
                          m["kv_lora_rank"])
    if m.get("q_lora_rank") is not None:
        q = linear(P, prefix + ".q_b_proj", norm(m, P, prefix + ".q_a_layernorm", linear(P, prefix + ".q_a_proj", x)))
    else:
        q = linear(P, prefix + ".q_proj", x)
    q = q.view(B, T, H, dn + dr).transpose(1, 2)
    q_nope, q_pe = torch.split(q, [dn, dr], dim=-1)
    ckv = linear(P, prefix + ".kv_a_proj_with_mqa", x)
    ckv, k_pe = torch.split(ckv, [kvl, dr], dim=-1)
    k_pe = k_pe.view(B, T, 1, dr).transpose(1, 2)
    kv = linear(P, prefix + ".kv_b_proj", norm(m, P, prefix + ".kv_a_layernorm", ckv)).view(B, T, H, dn + dv).transpose(1, 2)
    k_nope, v = torch.split(kv, [dn, dv], dim=-1)
    cos, sin = rope_cos_sin(dict(m, kv_channels=dr), T, x.device, x.dtype)

    def rope(t):  # DeepSeek-V3's apply_rotary_pos_emb: interleaved pairs to halves, then rotate_half
        b, h, s_, d = t.shape
        t = t.view(b, h, s_, d // 2, 2).transpose(4, 3).reshape(b, h, s_, d)
        return t * cos + rotate_half(t) * sin

    q_pe, k_pe = rope(q_pe), rope(k_pe)
    q = torch.cat([q_nope, q_pe], dim=-1)
    k = torch.cat([k_nope, k_pe.expand(B, H, T, dr)], dim=-1)
    s = (q @ k.transpose(-1, -2)) * (dn + dr) ** -0.5
    mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
    p = torch.softmax(s.masked_fill(mask, float("-inf")).float(), dim=-1).to(q.dtype)
    o = (p @ v).transpose(1, 2).reshape(B, T, H * dv)
    return linear(P, prefix + ".o_proj", o)


def moe(m, P, prefix, x):
    """The MoE MLP and its load-balancing loss: a softmax gate over all experts, top-k, the k
    weights renormalised to sum 1 (DeepSeek-V2's gate with norm_topk_prob; Megatron's softmax-after-
    top-k is the same function), experts as separate SwiGLU modules, a shared expert added, and
    Megatron's switch load-balancing loss coeff * E / (k N^2) * sum_e count_e * sum_t score_te over
    the N tokens of the micro-batch (counts before any dropping). With a capacity factor each
    expert keeps its first cap = ceil(N k / E * factor) tokens in token order (drop policy
    "position"; padding to capacity changes no value)."""
    B, T, C = x.shape
    E, k = m["num_moe_experts"], m["moe_router_topk"]
    h = x.reshape(B * T, C)
    N = h.shape[0]
    scores = torch.softmax(linear(P, prefix + ".gate", h).float(), dim=-1)  # (N, E)
    w, idx = torch.topk(scores, k, dim=-1, sorted=True)
    w = (w / w.sum(-1, keepdim=True)).to(h.dtype)
    keep = torch.ones(N, k, dtype=torch.bool, device=h.device)
    if m.get("moe_expert_capacity_factor") is not None:
        if m.get("moe_token_drop_policy", "position") != "position":
            raise ValueError("drop policy " + m["moe_token_drop_policy"])
        cap = max(1, math.ceil(N * k / E * m["moe_expert_capacity_factor"]))
        for e in range(E):
            tok, slot = (idx == e).nonzero(as_tuple=True)  # row-major: token order
            keep[tok[cap:], slot[cap:]] = False
    y = torch.zeros_like(h)
    for e in range(E):
        tok, slot = ((idx == e) & keep).nonzero(as_tuple=True)
        if tok.numel():
            y = y.index_add(0, tok, mlp(m, P, f"{prefix}.experts.{e}", h[tok]) * w[tok, slot, None])
    if m.get("moe_shared_expert_intermediate_size"):
        y = y + mlp(m, P, prefix + ".shared_experts", h)
    aux = None
    if m.get("moe_aux_loss_coeff", 0) > 0:
        counts = torch.bincount(idx.reshape(-1), minlength=E).to(scores.dtype)
        aux = m["moe_aux_loss_coeff"] * E / (k * N * N) * (counts * scores.sum(0)).sum()
    return y.view(B, T, C), aux


def mamba_mixer(m, P, prefix, x):
    """Megatron's MambaMixer on mamba_ssm's reference path, from the Mamba-2 paper's definitions (not
    stepc's code): in_proj; the causal depthwise conv1d with bias (nn.Conv1d, padding K - 1, cut to T)
    and SiLU over xBC; dt = softplus(dt + dt_bias), A = -exp(A_log); the SSD in its recurrent form per
    head h of group h // (H / G): S_t = exp(dt_t A) S_{t-1} + dt_t x_t B_t^T, y_t = S_t C_t, + D x_t;
    y silu(z); RMSNormGated without z (each group of DI / G channels by its rms, times the weight);
    out_proj."""
    B, T, _ = x.shape
    H, Pd, G, N, K = (m["mamba_num_heads"], m["mamba_head_dim"], m["mamba_num_groups"], m["mamba_state_dim"],
                      m["mamba_conv_kernel"])
    DI, GN = H * Pd, G * N
    z, xbc, dt = torch.split(linear(P, prefix + ".in_proj", x), [DI, DI + 2 * GN, H], dim=-1)
    cw = P[prefix + ".conv1d.weight"]  # (DI + 2GN, K + 1): the taps, then the bias
    xbc = F.conv1d(xbc.transpose(1, 2), cw[:, :K].unsqueeze(1), cw[:, K], padding=K - 1, groups=DI + 2 * GN)
    xbc = F.silu(xbc[..., :T].transpose(1, 2))
    xs, Bm, Cm = torch.split(xbc, [DI, GN, GN], dim=-1)
    ssm = P[prefix + ".ssm"]
    dt = F.softplus(dt + ssm[:, 0])  # (B, T, H)
    A = -torch.exp(ssm[:, 1])
    xs = xs.reshape(B, T, H, Pd)
    Bm = Bm.reshape(B, T, G, N).repeat_interleave(H // G, dim=2)  # head h reads group h // (H / G)
    Cm = Cm.reshape(B, T, G, N).repeat_interleave(H // G, dim=2)
    S = torch.zeros(B, H, Pd, N, dtype=x.dtype, device=x.device)
    ys = []
    for t in range(T):
        S = S * torch.exp(dt[:, t] * A)[:, :, None, None] + (dt[:, t, :, None] * xs[:, t])[..., None] * Bm[:, t, :, None, :]
        ys.append((S * Cm[:, t, :, None, :]).sum(-1))
    y = torch.stack(ys, dim=1) + ssm[:, 2][None, None, :, None] * xs
    y = y.reshape(B, T, DI) * F.silu(z)
    yg = y.reshape(B, T, G, DI // G)
    y = (yg * torch.rsqrt(yg.pow(2).mean(-1, keepdim=True) + m["layernorm_epsilon"])).reshape(B, T, DI)
    return linear(P, prefix + ".out_proj", y * P[prefix + ".norm.weight"])


def hybrid_layers(m, P, x, cos, sin):
    aux_total = 0.0
    for i, kind in enumerate(m["hybrid_override_pattern"]):
        p = f"layers.{i}"
        if kind == "M":
            x = x + mamba_mixer(m, P, p + ".mixer", norm(m, P, p + ".norm", x))
        elif kind == "*":
            x = x + attention(m, P, p + ".self_attn", norm(m, P, p + ".input_layernorm", x), cos, sin)
        elif kind == "-":
            x = x + mlp(m, P, p + ".mlp", norm(m, P, p + ".post_attention_layernorm", x))
        else:
            y, aux = moe(m, P, p + ".mlp", norm(m, P, p + ".post_attention_layernorm", x))
            x = x + y
            if aux is not None:
                aux_total = aux_total + aux
    return x, aux_total


def forward_loss(m, P, tokens, targets):
    B, T = tokens.shape
    x = F.embedding(tokens, P["embed_tokens.weight"])
    if m["position_embedding_type"] == "learned_absolute":
        x = x + P["embed_positions.weight"][:T]
    cos, sin = rope_cos_sin(m, T, x.device, x.dtype)
    x, aux_total = (hybrid_layers if m.get("hybrid_override_pattern") else dense_layers)(m, P, x, cos, sin)
    x = norm(m, P, "norm", x)
    head = P["embed_tokens.weight"] if m["share_embeddings_and_output_weights"] else P["lm_head.weight"]
    logits = F.linear(x, head)
    return F.cross_entropy(logits.float().reshape(B * T, -1), targets.reshape(B * T).long()) + aux_total


def dense_layers(m, P, x, cos, sin):
    aux_total = 0.0
    for i in range(m["num_layers"]):
        p = f"layers.{i}"
        hn = norm(m, P, p + ".input_layernorm", x)
        x = x + (mla_attention(m, P, p + ".self_attn", hn) if m.get("multi_latent_attention")
                 else attention(m, P, p + ".self_attn", hn, cos, sin))
        hn = norm(m, P, p + ".post_attention_layernorm", x)
        if m.get("moe_layers") and m["moe_layers"][i]:
            y, aux = moe(m, P, p + ".mlp", hn)
            x = x + y
            if aux is not None:
                aux_total = aux_total + aux
        else:
            x = x + mlp(m, P, p + ".mlp", hn)
    return x, aux_total
