#!/usr/bin/env python3
"""test_transformers.py STEPC [--device cpu|cuda] — stepc's loss against Hugging Face transformers'
LlamaForCausalLM, a client nobody here wrote, on the same parameters and batch: stepc initialises a
Llama recipe, saves the parameters, `stepc export`s them as a Hugging Face directory
(config.json + model.safetensors), and transformers loads that directory and computes the loss of
the batch with `labels` (its cross entropy with ignore_index -100, the mean over the kept tokens);
stepc's first step reports the loss of the forward before its update. The evaluation step
(Step.eval, stepc_eval) on the same parameters gives each token's log-probability of its target,
compared token by token with transformers' log_softmax. Cases:

- models/tiny.lua at seq 64 (untied head, SwiGLU, GQA, RoPE);
- the same with Llama 3's RoPE scaling (model.rope_scaling, factor 32: the export writes
  rope_scaling {rope_type llama3, ...} and transformers applies its own llama3 frequency scaling);
- half of the targets masked with -100 over two micro-batches keeping different counts (Megatron's
  normalisation by the global batch's kept tokens is what transformers' mean over the non-ignored
  labels gives for the concatenated batch);
- a tied head (model.share_embeddings_and_output_weights, tie_word_embeddings in config.json).

Tolerances: on the CPU stepc's reference runs fp32 like transformers here (different operation
order): 1e-4 relative for the loss, 1e-4 absolute for each log-probability. On CUDA stepc computes in bf16 (fp32 accumulation), transformers in fp32 on
the same device: 2e-3 relative for the loss (the H200 on 2026-12-04: at most 4e-5); each token's
log-probability within 0.1 and their mean absolute difference within 0.01 (bf16 logits near
log(vocab) are a few ulps of 2^-5 off).

Exit 0 all within tolerance, 1 a difference, 77 (skip, with a notice) where torch or transformers
is not importable, or --device cuda has no GPU."""

import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import transformers
except ImportError as e:
    print(f"SKIP: {e.name} is not importable by {sys.executable} (this check needs torch and transformers)")
    sys.exit(77)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))
import stepc  # noqa: E402

BASE = ["model.num_layers=2", "model.seq_length=64", "train.micro_batch_size=2"]
CASES = [
    ("tiny", BASE + ["train.global_batch_size=2"], "none"),
    ("tiny, RoPE scaling llama3 x32", BASE + ["train.global_batch_size=2", "model.rope_scaling=true",
                                              "model.rope_scaling_factor=32"], "none"),
    ("tiny, half the targets masked, 2 micro-batches", BASE + ["train.global_batch_size=4"], "half"),
    ("tiny, tied head", BASE + ["train.global_batch_size=2", "model.share_embeddings_and_output_weights=true"], "none"),
]


def hf_loss(hf_dir, tokens, targets, device):
    """transformers' loss over the kept targets and each token's log-probability of its target (0
    where it is ignored)."""
    model = transformers.LlamaForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32).to(device)
    model.eval()
    with torch.no_grad():
        x = torch.tensor(tokens.reshape(-1, tokens.shape[-1]), dtype=torch.long, device=device)
        y = torch.tensor(targets.reshape(-1, targets.shape[-1]), dtype=torch.long, device=device)
        logits = model(input_ids=x).logits.float()
        # labels are the next-token targets already: transformers' shift is for labels = input_ids
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                                 ignore_index=-100)
        keep = y != -100
        lp = torch.log_softmax(logits, -1).gather(-1, torch.where(keep, y, 0)[..., None])[..., 0]
        lp = torch.where(keep, lp, torch.zeros_like(lp))
    return float(loss), lp.cpu().numpy().astype(np.float64)


def main():
    stepc_bin = sys.argv[1]
    device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        print("SKIP: --device cuda without a GPU torch can see")
        return 77
    tol = 1e-4 if device == "cpu" else 2e-3
    recipe = os.path.join(REPO, "models", "tiny.lua")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, stepc on {device}")
    bad = 0
    for name, ov, mask in CASES:
        tmp = tempfile.mkdtemp(prefix="stepc-tf-")
        art, params, hf = (os.path.join(tmp, n) for n in ("art", "p.safetensors", "hf"))
        r = subprocess.run([stepc_bin, "build", recipe, *ov, "-o", art], capture_output=True, text=True)
        if r.returncode:
            print(f"FAIL {name}: stepc build: {r.stderr.strip()[-400:]}")
            bad += 1
            continue
        with stepc.Step(art, device="cpu") as s:
            s.init_params(7)
            s.save_params(params)
            mb, rows, t = s.info.num_microbatches, s.info.micro_batch_size, s.info.batch_shape[1]
        r = subprocess.run([stepc_bin, "export", recipe, *ov, "--from", params, "-o", hf], capture_output=True, text=True)
        if r.returncode:
            print(f"FAIL {name}: stepc export: {r.stderr.strip()[-400:]}")
            bad += 1
            continue
        rng = np.random.default_rng(3)
        seq = rng.integers(0, 256, size=(mb * rows, t + 1), dtype=np.int32)
        tokens, targets = seq[:, :-1].copy(), seq[:, 1:].copy()
        if mask == "half":
            # micro-batch 0 keeps 3/4 of its targets, micro-batch 1 a quarter: half in all
            keep = rng.random(targets.shape) < np.where(np.arange(mb * rows)[:, None] < rows, 0.75, 0.25)
            targets[~keep] = -100
        with stepc.Step(art, device=device) as s:
            s.load_params(params)
            ev, lp = s.eval(tokens, targets, logprobs=True)
            s.bind_batch(tokens, targets)
            got = s.step().loss
        ref, ref_lp = hf_loss(hf, tokens, targets, device if device == "cuda" else "cpu")
        rel = abs(got - ref) / abs(ref)
        diff = np.abs(lp.reshape(ref_lp.shape).astype(np.float64) - ref_lp)
        lp_ok = diff.max() <= (1e-4 if device == "cpu" else 0.1) and (device == "cpu" or diff.mean() <= 0.01)
        ev_ok = abs(ev - got) <= 1e-6 * abs(got)  # the evaluation is the step's forward
        ok = rel <= tol and lp_ok and ev_ok
        bad += not ok
        kept = int((targets != -100).sum())
        print(f"{'PASS' if ok else 'FAIL'} {name}: stepc {got:.7f}, transformers {ref:.7f} "
              f"({kept} of {targets.size} targets kept), relative difference {rel:.2e} (tolerance {tol:g}); "
              f"eval loss {ev:.7f} ({'the step' + chr(39) + 's' if ev_ok else 'NOT the step' + chr(39) + 's'}); "
              f"log-probabilities: max |diff| {diff.max():.2e}, mean {diff.mean():.2e}")
    print(f"{len(CASES) - bad} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
