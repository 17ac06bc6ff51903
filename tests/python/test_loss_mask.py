#!/usr/bin/env python3
"""test_loss_mask.py STEPC [--device cuda] — loss masks (a target of -100, PyTorch's ignore_index) with Megatron's
normalisation on the CPU reference, against the NumPy Llama of test_hf_export.py (written from
Hugging Face's definition, not from stepc's code) run on the exported parameters: the step's loss
must be the sum of the kept tokens' cross entropies over the whole global batch (every
micro-batch) divided by the number of kept tokens in it, what torch.nn.functional.cross_entropy(
ignore_index=-100) gives over the batch's tokens.

- half the targets masked: the mean over the kept half (not half of it: the old division by every
  token);
- two micro-batches keeping 10 and 50 tokens: the sum over the 60 / 60 (neither the mean of the
  two micro-batches' means nor a division by all 128 tokens);
- gradients: a step that keeps only the first micro-batch's tokens gives the loss, gradient norm and
  updated parameters of the unmasked step on those sequences alone (an artifact of one
  micro-batch);
- a global batch with every target masked is refused with STEPC_ERR_ARGUMENT and changes nothing:
  the step count stays, and the next step's loss is the one a fresh handle gives.
--device cuda (tests/gpu/run_step_tests.sh, on a GPU): the same through the CUDA backend (bf16:
losses within 1e-2 relative, the updated parameters not compared), and a full-iteration CUDA
graph replayed over steps whose masks differ gives eager's losses bitwise (the step's loss
denominator is a device value staged each step, not a constant of the captured graph); with torch
and a GPU, a batch bound on the device (stepc_bind_batch_device) counts its kept targets too.
Exit 77 without numpy (or, with --device cuda, without a GPU)."""

import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not importable by", sys.executable)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, HERE)
import stepc  # noqa: E402
from test_hf_export import llama_logits, read_safetensors  # noqa: E402

# two micro-batches of 2 x 32 tokens (global batch 4 sequences); ONE: the first micro-batch alone
BASE = ["model.num_layers=2", "model.seq_length=32", "train.micro_batch_size=2"]
OV = BASE + ["train.global_batch_size=4"]
ONE = BASE + ["train.global_batch_size=2"]
IGNORE = -100
DEVICE = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--device" else "cpu"

failures = []


def check(what, ok, detail):
    print(f"{'ok  ' if ok else 'FAIL'} {what}: {detail}")
    if not ok:
        failures.append(what)


def numpy_ce(z, targets):
    """torch.nn.functional.cross_entropy(z, targets, ignore_index=-100): the mean over the kept."""
    z = z - z.max(-1, keepdims=True)
    lse = np.log(np.exp(z).sum(-1))
    keep = targets != IGNORE
    t = np.where(keep, targets, 0)
    per = lse - np.take_along_axis(z, t[..., None], -1)[..., 0]
    return float(per[keep].sum() / keep.sum()), float(per[keep].sum()), float(per.mean())


def step_from(art, params, tokens, targets):
    with stepc.Step(art, device=DEVICE, graph_mode="eager" if DEVICE == "cuda" else None) as s:
        s.load_params(params)
        s.bind_batch(tokens, targets)
        st = s.step()
        after = os.path.join(os.path.dirname(params), "after.safetensors")
        s.save_params(after)
        return st, read_safetensors(after)[0]


def main():
    stepc_bin = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="stepc-mask-")
    recipe = os.path.join(REPO, "models", "tiny.lua")
    art, one, params, hf = (os.path.join(tmp, n) for n in ("art", "one", "p.safetensors", "hf"))
    for d, ov in ((art, OV), (one, ONE)):
        subprocess.run([stepc_bin, "build", recipe, *ov, "-o", d], check=True, capture_output=True)
    try:
        with stepc.Step(art, device=DEVICE) as s:
            s.init_params(11)
            s.save_params(params)
            info = s.info
    except stepc.StepcError as e:
        if e.status == stepc.Status.ERR_NO_DEVICE:
            print("SKIP:", e)
            return 77
        raise
    assert info.num_microbatches == 2, info
    subprocess.run([stepc_bin, "export", recipe, *OV, "--from", params, "-o", hf], check=True, capture_output=True)
    rng = np.random.default_rng(7)
    seq = rng.integers(0, 256, size=(4, 33), dtype=np.int32)
    tokens, full = seq[:, :-1].copy(), seq[:, 1:].copy()
    z, how = llama_logits(hf, tokens)  # causal: masking a target changes no logit
    # fp32 stepc against the fp64 NumPy forward, different operation order; bf16 on CUDA
    tol = 1e-4 if DEVICE == "cpu" else 1e-2
    same = 1e-6 if DEVICE == "cpu" else 1e-2  # two stepc runs of the same tokens

    st, _ = step_from(art, params, tokens, full)
    ref, _, _ = numpy_ce(z, full)
    check("no mask", abs(st.loss - ref) <= tol * ref, f"stepc {st.loss:.6f}, NumPy ({how}) {ref:.6f}")

    half = full.copy()
    half[:, 1::2] = IGNORE
    st, _ = step_from(art, params, tokens, half)
    ref, _, _ = numpy_ce(z, half)
    check("half the targets masked: the mean over the kept tokens", abs(st.loss - ref) <= tol * ref,
          f"stepc {st.loss:.6f}, NumPy ignore_index mean {ref:.6f} (the division by every token: {ref / 2:.6f})")

    uneven = np.full_like(full, IGNORE)
    keep0 = rng.choice(64, 10, replace=False)  # micro-batch 0: sequences 0-1, 10 kept
    keep1 = rng.choice(64, 50, replace=False)  # micro-batch 1: sequences 2-3, 50 kept
    uneven[:2].reshape(-1)[keep0] = full[:2].reshape(-1)[keep0]
    uneven[2:].reshape(-1)[keep1] = full[2:].reshape(-1)[keep1]
    st, _ = step_from(art, params, tokens, uneven)
    ref, _, _ = numpy_ce(z, uneven)
    per_mb = (numpy_ce(z[:2], uneven[:2])[0] + numpy_ce(z[2:], uneven[2:])[0]) / 2
    check("micro-batches keeping 10 and 50 tokens: the global count", abs(st.loss - ref) <= tol * ref,
          f"stepc {st.loss:.6f}, NumPy sum/60 {ref:.6f} (mean of the micro-batches' means {per_mb:.6f})")

    first = full.copy()
    first[2:] = IGNORE  # only micro-batch 0's tokens count
    st, p_masked = step_from(art, params, tokens, first)
    st1, p_one = step_from(one, params, tokens[:2], full[:2])
    ref, _, _ = numpy_ce(z[:2], full[:2])
    check("only the first micro-batch kept: its loss", abs(st.loss - ref) <= tol * ref and abs(st.loss - st1.loss) <= same * ref,
          f"stepc {st.loss:.7f}, one micro-batch unmasked {st1.loss:.7f}, NumPy {ref:.7f}")
    check("only the first micro-batch kept: the gradient norm", abs(st.grad_norm - st1.grad_norm) <= 10 * same * st1.grad_norm,
          f"{st.grad_norm:.7f} against one micro-batch's {st1.grad_norm:.7f}")
    worst = max(float(np.abs(p_masked[k] - p_one[k]).max()) for k in p_one)
    moved = max(float(np.abs(p_one[k] - read_safetensors(params)[0][k]).max()) for k in p_one)
    check("only the first micro-batch kept: the updated parameters", worst <= 1e-3 * moved or DEVICE == "cuda",
          f"largest difference {worst:.3g} (the update moved them by up to {moved:.3g})")

    with stepc.Step(art, device=DEVICE, graph_mode="eager" if DEVICE == "cuda" else None) as s:
        s.load_params(params)
        s.bind_batch(tokens, np.full_like(full, IGNORE))
        try:
            s.step()
            check("an all-masked batch is refused", False, "the step ran")
        except stepc.StepcError as e:
            check("an all-masked batch is refused", e.status == stepc.Status.ERR_ARGUMENT and "masked" in str(e),
                  f"{e.status!r}: {e}")
        check("the refusal changes nothing: the step count", s.info.step == 0, f"step {s.info.step}")
        s.bind_batch(tokens, half)
        after = s.step().loss
    fresh, _ = step_from(art, params, tokens, half)
    check("the refusal changes nothing: the next step", after == fresh.loss, f"{after!r} against a fresh handle's {fresh.loss!r}")
    if DEVICE == "cuda":
        cuda_only(art, params, tokens, full, half, uneven, z, tol)
    return 1 if failures else 0


def cuda_only(art, params, tokens, full, half, uneven, z, tol):
    masks = [full, half, uneven, half, full, uneven]
    runs = {}
    for mode in ("eager", "full_iteration"):
        with stepc.Step(art, device="cuda", graph_mode=mode) as s:
            s.load_params(params)
            runs[mode] = []
            for t in masks:
                s.bind_batch(tokens, t)
                st = s.step()
                runs[mode].append((st.loss, st.grad_norm, st.replayed))
    e, g = runs["eager"], runs["full_iteration"]
    check("a full-iteration graph over steps with different masks = eager, bitwise",
          [r[:2] for r in e] == [r[:2] for r in g] and any(r[2] for r in g),
          f"eager {[round(r[0], 6) for r in e]}, graph {[round(r[0], 6) for r in g]} (replayed {[r[2] for r in g]})")
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError
    except ImportError:
        print("skip a batch bound on the device: no torch with CUDA here")
        return
    with stepc.Step(art, device="cuda", graph_mode="eager") as s:
        s.load_params(params)
        s.bind_batch_device(torch.from_numpy(tokens).cuda(), torch.from_numpy(uneven).cuda())
        loss = s.step().loss
    ref, _, _ = numpy_ce(z, uneven)
    check("a batch bound on the device: the global count", abs(loss - ref) <= tol * ref, f"stepc {loss:.6f}, NumPy {ref:.6f}")


if __name__ == "__main__":
    sys.exit(main())
