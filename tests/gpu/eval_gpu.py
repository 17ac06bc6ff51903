#!/usr/bin/env python3
"""eval_gpu.py STEPC OUTDIR — Step.eval (stepc_eval) on CUDA: the per-token log-probabilities of a
bf16 tiny step against the CPU reference device's on the same parameters (within bf16 tolerance),
and in eager and full_iteration graph modes, an evaluation before every step leaves the training
bitwise (losses and grad norms of 6 steps against a run without evaluations; the evaluation's loss
equal to the next step's, bitwise: the same launches but the loss's fused backward). Both output
layers: the logits then the fused cross entropy, and the chunked one (its backward fused into the
forward's launch on CUDA, which the evaluation section lowers without). Prints PASS/FAIL lines."""
import os
import subprocess
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))
import stepc  # noqa: E402

stepc_bin, out = sys.argv[1], sys.argv[2]
ok = True


def line(good, msg):
    global ok
    ok &= bool(good)
    print(("PASS " if good else "FAIL ") + msg, flush=True)


for tag, extra in (("plain", []), ("chunked", ["model.output_layer_chunks=2"])):
    art, params = os.path.join(out, f"art-{tag}"), os.path.join(out, f"p-{tag}.safetensors")
    subprocess.run([stepc_bin, "build", os.path.join(REPO, "models", "tiny.lua"), "model.bf16=true", *extra, "-o", art],
                   check=True, capture_output=True)
    with stepc.Step(art, device="cpu") as c:
        c.init_params(11)
        c.save_params(params)
        rows, t = c.info.batch_shape
    rng = np.random.default_rng(3)
    seq = rng.integers(0, 256, size=(rows, t + 1), dtype=np.int32)
    tok, tg = seq[:, :-1].copy(), seq[:, 1:].copy()
    tg[:, ::6] = -100
    with stepc.Step(art, device="cpu") as c, stepc.Step(art, device="cuda", graph_mode="eager") as g:
        c.load_params(params), g.load_params(params)
        lc, pc = c.eval(tok, tg, logprobs=True)
        lg, pg = g.eval(tok, tg, logprobs=True)
    keep = tg >= 0
    d = np.abs(pc - pg)[keep]
    line(d.max() < 0.15 and abs(lc - lg) < 1e-2 * lc and (pg[~keep] == 0).all(),
         f"{tag}: cuda log-probs vs cpu: max |diff| {d.max():.3e}, mean {d.mean():.3e}; loss cuda {lg!r} cpu {lc!r}; "
         "ignored targets 0")
    for mode in ("eager", "full_iteration"):
        with stepc.Step(art, device="cuda", graph_mode=mode) as a, stepc.Step(art, device="cuda", graph_mode=mode) as b:
            a.load_params(params), b.load_params(params)
            same = eq = True
            for i in range(6):
                batch = rng.integers(0, 256, size=(rows, t + 1), dtype=np.int32)
                x, y = batch[:, :-1].copy(), batch[:, 1:].copy()
                v = a.eval(x, y)
                a.bind_batch(x, y), b.bind_batch(x, y)
                sa, sb = a.step(), b.step()
                same &= sa.loss == sb.loss and sa.grad_norm == sb.grad_norm
                eq &= v == sa.loss
                last = (v, sa.loss, sb.loss, sa.replayed)
            line(same and eq and a.info.step == b.info.step == 6,
                 f"{tag} {mode}: 6 steps with an evaluation before each bitwise those without: {same}; each evaluation's "
                 f"loss the next step's: {eq} (last {last[0]!r} / {last[1]!r} / {last[2]!r}, replayed {last[3]})")
print("ok" if ok else "FAILED")
sys.exit(0 if ok else 1)
