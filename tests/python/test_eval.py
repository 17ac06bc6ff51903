#!/usr/bin/env python3
"""test_eval.py STEPC — Step.eval (stepc_eval) on the CPU device against an independent reference:
the per-token log-probabilities of a batch are those of the NumPy Llama of test_hf_export.py (written
from Hugging Face's definition) run on `stepc export`'s directory of the same parameters (fp32 against
float64: within 1e-5 absolute; 1.1e-6 measured), 0 on ignored (-100) targets; the loss is what the next step reports on
the batch (bitwise) and minus the mean of the log-probabilities; the parameters, masters and moments
are unchanged by it (a checkpoint after it is byte for byte the one before); a step after it is the
step without it. Both output-layer forms: the logits then the cross entropy, and the chunked
LINEAR_CROSS_ENTROPY. Exit 77 without numpy."""

import filecmp
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
sys.path.insert(0, HERE)
from test_hf_export import REPO, llama_logprobs  # noqa: E402
import stepc  # noqa: E402  (test_hf_export put python/ on the path)

OV = ["model.num_layers=2", "model.seq_length=32", "train.micro_batch_size=2", "train.global_batch_size=4"]


def case(stepc_bin, tmp, extra):
    recipe = os.path.join(REPO, "models", "tiny.lua")
    tag = "chunked" if extra else "plain"
    art, params, hf = (os.path.join(tmp, f"{n}-{tag}") for n in ("art", "p.safetensors", "hf"))
    subprocess.run([stepc_bin, "build", recipe, *OV, *extra, "-o", art], check=True, capture_output=True)
    rng = np.random.default_rng(9)
    seq = rng.integers(0, 256, size=(4, 33), dtype=np.int32)
    tokens, targets = seq[:, :-1].copy(), seq[:, 1:].copy()
    masked = targets.copy()
    masked[:, ::5] = -100
    ok = True
    with stepc.Step(art, device="cpu") as s:
        s.init_params(11)
        s.save_params(params)
        s.load_params(params)  # the parameters as the file (and so the export) holds them
        s.save_checkpoint(os.path.join(tmp, f"before-{tag}"))
        loss, lp = s.eval(tokens, masked, logprobs=True)
        s.save_checkpoint(os.path.join(tmp, f"after-{tag}"))
        same = all(filecmp.cmp(os.path.join(tmp, f"before-{tag}", f), os.path.join(tmp, f"after-{tag}", f), shallow=False)
                   for f in ("model.safetensors", "optimizer.safetensors"))
        s.bind_batch(tokens, masked)
        st = s.step()
    subprocess.run([stepc_bin, "export", recipe, *OV, "--from", params, "-o", hf], check=True, capture_output=True)
    ref, how = llama_logprobs(hf, tokens, targets)
    keep = masked >= 0
    err = float(np.abs(lp[keep] - ref[keep]).max())
    zeros = bool((lp[~keep] == 0).all())
    # the step's normaliser: every token of a micro-batch (or, with loss masks, its kept tokens)
    mb = lp.reshape(2, -1)
    mean_all = float((-mb.sum(1) / mb.shape[1]).mean())
    mean_kept = float((-mb.sum(1) / keep.reshape(2, -1).sum(1)).mean())
    rel = min(abs(mean_all - loss), abs(mean_kept - loss)) / loss
    print(f"{tag}: log-probs vs the NumPy Llama on the export ({how}): max |difference| {err:.2e} over {int(keep.sum())} "
          f"tokens; ignored targets 0: {zeros}; eval loss {loss!r}, the next step's {st.loss!r} "
          f"({'bitwise' if loss == st.loss else 'DIFFERENT'}); -mean log-prob relative to the loss {rel:.1e}; "
          f"checkpoint unchanged by eval: {same}")
    ok &= err < 1e-5 and zeros and loss == st.loss and rel < 2e-6 and same and lp.shape == tokens.shape
    # a step after an evaluation is the step without it
    with stepc.Step(art, device="cpu") as a, stepc.Step(art, device="cpu") as b:
        a.load_params(params), b.load_params(params)
        a.bind_batch(tokens, targets), b.bind_batch(tokens, targets)
        v = a.eval(seq[:, 1:], targets)
        sa, sb = a.step(), b.step()
        print(f"{tag}: a step after an evaluation (loss {v!r}): {sa.loss!r} / {sa.grad_norm!r}; without: {sb.loss!r} / "
              f"{sb.grad_norm!r}")
        ok &= sa.loss == sb.loss and sa.grad_norm == sb.grad_norm and a.info.step == b.info.step == 1
        try:
            a.eval(tokens[:, :5], targets[:, :5])
            ok = False
        except ValueError as e:
            print(f"{tag}: a batch of another shape refused: {e}")
    return ok


def main():
    tmp = tempfile.mkdtemp(prefix="stepc-eval-")
    ok = case(sys.argv[1], tmp, []) & case(sys.argv[1], tmp, ["model.output_layer_chunks=2"])
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
