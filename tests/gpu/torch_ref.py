#!/usr/bin/env python3
"""torch_ref.py — stepc's first training step against PyTorch on the same weights and batch.

    python3 tests/gpu/torch_ref.py DUMPDIR [--torch-device cpu|cuda] [--dtype float32|float64] [--no-bf16]

DUMPDIR is written by `gpu_step dump SPEC DUMPDIR --device cpu|cuda` (tests/gpu/dump.c):
weights.safetensors (fp32 weights before the step), grads.safetensors (the fp32 main gradients
after all micro-batches, before clipping and AdamW), batch.safetensors (int32 tokens/targets,
(num_microbatches, micro_batch_size, seq)) and meta.json (the model's shape fields and the loss of
every micro-batch).

The model (torch_model.py, shared with torch_train_ref.py) is written independently of stepc, in
the Hugging Face Llama layout (separate q/k/v projections, gate/up projections, RMSNorm,
rotate_half RoPE, repeat_kv GQA) plus the GPT-style options stepc's recipes have (LayerNorm with
bias, linear biases, learned absolute positions, exact GELU, tied head). stepc's fused tensors are
split onto it by torch_model.mapping(), and the gradients are concatenated back the same way, so a
layout mistake on either side (Q/K/V order, head order inside a group, [gate|up] order, weight
orientation, RoPE pairing) shows up as an O(1) error, never as noise. MLA + MoE recipes
(tests/recipes/tiny_mla_moe.lua) use torch_model's Hugging Face DeepSeek-V3 / Moonlight layout
(q_a/q_b/kv_a/kv_b projections and norms, a softmax top-k gate, experts as separate modules, a
shared expert, the load-balancing loss added to the loss) through mapping_mla_moe(); hybrid Mamba
stacks (tests/recipes/tiny_hybrid.lua) Megatron's MambaStack, the Mamba-2 mixer from the paper's
recurrence, through mapping_hybrid().

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
import sys

import torch

sys.dont_write_bytecode = True  # no __pycache__ in the source tree for torch_model
from torch_model import forward_loss, from_torch, mapping, read_safetensors, to_torch


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
    if m.get("multi_latent_attention"):
        print(f"     MLA q_lora={m['q_lora_rank']} kv_lora={m['kv_lora_rank']} qk={m['qk_head_dim']}+{m['qk_pos_emb_head_dim']} "
              f"v={m['v_head_dim']} attention={m['attention_backend']}")
    if any(m.get("moe_layers", [])):
        print(f"     MoE layers={[i for i, x in enumerate(m['moe_layers']) if x]} E={m['num_moe_experts']} "
              f"top{m['moe_router_topk']} F={m['moe_ffn_hidden_size']} shared={m['moe_shared_expert_intermediate_size']} "
              f"aux={m['moe_aux_loss_coeff']} capacity={m['moe_expert_capacity_factor']} "
              f"pad={m['moe_pad_expert_input_to_capacity']} drop={m['moe_token_drop_policy']}")

    ref_losses, ref_tg = run_torch(m, tw, batch, dev, dtype)
    for n in names:  # a routed expert that got no token has no autograd gradient: zero, as stepc's
        for tn, *_ in rows[n]:
            if tn not in ref_tg and ".experts." in tn:
                ref_tg[tn] = torch.zeros_like(tw[tn], dtype=torch.float64)
    missing = [tn for n in names for tn, *_ in rows[n] if tn not in ref_tg]
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
        tnames = "|".join(tn.replace(f"layers.{n.split('.')[1]}.", "") if n.startswith("layers.") else tn for tn, *_ in rows[n])
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
