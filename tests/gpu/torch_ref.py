#!/usr/bin/env python3
"""torch_ref.py — stepc's first training step against PyTorch on the same weights and batch.

    python3 tests/gpu/torch_ref.py DUMPDIR [--torch-device cpu|cuda] [--dtype float32|float64] [--no-bf16]

DUMPDIR is written by `gpu_step dump SPEC DUMPDIR --device cpu|cuda` (tests/gpu/dump.c):
weights.safetensors (fp32 weights before the step), grads.safetensors (the fp32 main gradients
after all micro-batches, before clipping and AdamW), batch.safetensors (int32 tokens/targets,
(num_microbatches, micro_batch_size, seq)) and meta.json (the model's shape fields and the loss of
every micro-batch).

The model here is written independently of stepc, in the Hugging Face Llama layout (separate
q/k/v projections, gate/up projections, RMSNorm, rotate_half RoPE, repeat_kv GQA) plus the
GPT-style options stepc's recipes have (LayerNorm with bias, linear biases, learned absolute
positions, exact GELU, tied head). stepc's fused tensors are split onto it by MAPPING below, and
the gradients are concatenated back the same way, so a layout mistake on either side (Q/K/V
order, head order inside a group, [gate|up] order, weight orientation, RoPE pairing) shows up as
an O(1) error, never as noise.

Loss: the mean over micro-batches of the mean token cross-entropy (stepc's step loss); the
gradients are those of that mean, which is what stepc's main gradients accumulate.

Tolerances (see docs/gpu-runtime.md, "Against PyTorch"):
  stepc cpu (fp32 everywhere) vs PyTorch fp32: the same math in the same precision; only the
    summation order differs, so errors are a few fp32 ulps amplified by the network (~1e-6):
    loss rel <= 1e-5, every gradient rel_l2 <= 1e-4 and cos >= 0.99999. This is the sharp check
    of the layout mapping.
  stepc cuda (bf16 weights/activations, fp32 accumulate) vs PyTorch fp32: bf16 rounds to 2^-9
    relative at each of ~10 tensors per layer, errors adding in quadrature: ~1% rel_l2 expected,
    as gpu_step grads measures against the CPU executor. loss rel <= 1e-2, rel_l2 <= 5e-2,
    cos >= 0.998. For scale, the same table is printed for PyTorch's own bf16 autocast against
    its fp32 run (not gated): stepc's error should be of the same order.
Exit 0 all within tolerance, 1 a failure, 2 bad input. Needs torch and the standard library only.
"""
import argparse
import json
import math
import os
import struct
import sys

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


def run_torch(m, weights, batch, dev, dtype, autocast_bf16=False):
    """Per-micro-batch losses and the gradients of their mean, as {torch name: fp64 cpu tensor}."""
    P = {n: t.detach().to(dev, dtype).clone().requires_grad_(True) for n, t in weights.items()}  # fresh leaves per run
    nmb = m["num_microbatches"]
    losses = []
    for mb in range(nmb):
        tok = batch["tokens"][mb].to(dev).long()
        tgt = batch["targets"][mb].to(dev).long()
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=autocast_bf16):
            loss = forward_loss(m, P, tok, tgt)
        (loss / nmb).backward()  # gradients accumulate as stepc's main gradients do
        losses.append(loss.item())
    return losses, {n: p.grad.detach().double().cpu() for n, p in P.items() if p.grad is not None}


def compare(stepc_grads, ref_grads, names):
    rows = []
    for n in names:
        a, r = stepc_grads[n].double().flatten(), ref_grads[n].double().flatten()
        rr = r.norm().item()
        rel = (a - r).norm().item() / (rr if rr > 0 else 1.0)
        aa = a.norm().item()
        cos = (a @ r).item() / (aa * rr) if aa > 0 and rr > 0 else (1.0 if aa == rr else 0.0)
        rows.append((n, a.numel(), rr, rel, cos))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dump")
    ap.add_argument("--torch-device", default=None, help="cpu or cuda (default: cuda when available)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"], help="PyTorch's reference precision")
    ap.add_argument("--no-bf16", action="store_true", help="skip the PyTorch bf16-autocast scale line")
    ap.add_argument("--quiet", action="store_true", help="print only failing rows and the summary")
    args = ap.parse_args()

    try:
        with open(os.path.join(args.dump, "meta.json")) as f:
            m = json.load(f)
        weights = read_safetensors(os.path.join(args.dump, "weights.safetensors"))
        grads = read_safetensors(os.path.join(args.dump, "grads.safetensors"))
        batch = read_safetensors(os.path.join(args.dump, "batch.safetensors"))
    except (OSError, ValueError, KeyError) as e:
        print(f"FAIL cannot read the dump in {args.dump}: {e}")
        return 2
    if m.get("format") != "stepc-torch-ref":
        print(f"FAIL {args.dump}/meta.json is not a gpu_step dump")
        return 2

    dev = torch.device(args.torch_device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.backends.cuda.matmul.allow_tf32 = False  # a true fp32 reference on the GPU too
    torch.backends.cudnn.allow_tf32 = False
    dtype = getattr(torch, args.dtype)
    torch.use_deterministic_algorithms(False)

    names = sorted(weights)
    if sorted(grads) != names:
        print("FAIL weights and grads hold different tensors:", sorted(set(weights) ^ set(grads)))
        return 1
    rows = mapping(m)
    try:
        tw = to_torch(weights, rows)
    except (KeyError, ValueError) as e:
        print(f"FAIL mapping: {e}")
        return 1

    cuda_dump = m["device"] == "cuda"
    lim_loss, lim_rel, lim_cos = (1e-2, 5e-2, 0.998) if cuda_dump else (1e-5, 1e-4, 0.99999)
    print(f"stepc {m['device']} ({m['compute_dtype']}) vs PyTorch {torch.__version__} {args.dtype} on {dev}: "
          f"L={m['num_layers']} C={m['hidden_size']} H={m['num_attention_heads']} G={m['num_query_groups']} "
          f"D={m['kv_channels']} F={m['ffn_hidden_size']} V={m['vocab_size']} T={m['seq_length']} "
          f"B={m['micro_batch_size']}x{m['num_microbatches']} {m['normalization']} "
          f"{'GLU-' if m['gated_linear_unit'] else ''}{m['activation_func']} pos={m['position_embedding_type']} "
          f"bias={m['add_bias_linear']} tied={m['share_embeddings_and_output_weights']} params={m['parameters']}")

    ref_losses, ref_tg = run_torch(m, tw, batch, dev, dtype)
    missing = [tn for n in names for tn, _ in rows[n] if tn not in ref_tg]
    if missing:
        print("FAIL PyTorch computed no gradient for", missing)
        return 1
    ref = from_torch(ref_tg, rows, names)

    fails = 0
    for mb, (a, r) in enumerate(zip(m["losses"], ref_losses)):
        rel = abs(a - r) / abs(r)
        ok = rel <= lim_loss
        fails += not ok
        print(f"{'PASS' if ok else 'FAIL'} loss micro-batch {mb}: stepc {a:.7f} torch {r:.7f} rel {rel:.2e} (limit {lim_loss:.0e})")
    mean_ref = sum(ref_losses) / len(ref_losses)
    rel = abs(m["loss"] - mean_ref) / abs(mean_ref)
    fails += rel > lim_loss
    print(f"{'PASS' if rel <= lim_loss else 'FAIL'} loss (mean): stepc {m['loss']:.7f} torch {mean_ref:.7f} rel {rel:.2e}")

    table = compare(grads, ref, names)
    bf16 = None
    if cuda_dump and not args.no_bf16:  # PyTorch's own bf16 error against its fp32 run, for scale
        bl, btg = run_torch(m, tw, batch, dev, torch.float32, autocast_bf16=True)
        bf16 = {r[0]: r for r in compare(from_torch(btg, rows, names), ref, names)}
        print(f"     (PyTorch bf16 autocast vs fp32 loss: {sum(bl) / len(bl):.7f} rel "
              f"{abs(sum(bl) / len(bl) - mean_ref) / abs(mean_ref):.2e})")
    hdr = f"     {'stepc tensor':<46} {'torch tensor(s)':<42} {'numel':>8} {'|grad|':>10} {'rel_l2':>9} {'cos':>10}"
    print(hdr + ("  torch-bf16 rel_l2" if bf16 else ""))
    worst_rel, worst_cos = 0.0, 1.0
    for n, numel, rr, rel, cos in table:
        ok = math.isfinite(rel) and rel <= lim_rel and cos >= lim_cos
        fails += not ok
        worst_rel, worst_cos = max(worst_rel, rel if math.isfinite(rel) else math.inf), min(worst_cos, cos)
        if ok and args.quiet:
            continue
        tnames = "|".join(tn.replace(f"layers.{n.split('.')[1]}.", "") if n.startswith("layers.") else tn for tn, _ in rows[n])
        line = f"{'PASS' if ok else 'FAIL'} {n:<46} {tnames[:42]:<42} {numel:>8} {rr:>10.3e} {rel:>9.2e} {cos:>10.7f}"
        print(line + (f"  {bf16[n][3]:.2e}" if bf16 else ""))
    extra = ""
    if bf16:
        extra = f"; PyTorch bf16 autocast worst rel_l2 {max(r[3] for r in bf16.values()):.2e}"
    print(f"{'FAIL' if fails else 'PASS'} {len(table)} gradients: worst rel_l2 {worst_rel:.2e} (limit {lim_rel:.0e}), "
          f"worst cos {worst_cos:.7f} (limit {lim_cos}){extra}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
