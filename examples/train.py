#!/usr/bin/env python3
"""train.py ARTIFACT_DIR [STEPS] — a PyTorch-style training loop around a compiled stepc step.

    build/stepc build models/tiny.lua -o art/tiny
    PYTHONPATH=python python3 examples/train.py art/tiny 20

Trains ARTIFACT_DIR's step (cuda when there is a GPU, else the CPU reference executor) on byte
windows of a text file (a byte-level model: models/tiny.lua has vocab 256), binding every
step's batch from NumPy; saves a checkpoint halfway, then opens a second Step, resumes from the
checkpoint and checks that the continuation is bitwise the uninterrupted run. Exit 0 when it is.
TEXT=FILE picks the text (default: the GPL-3, as examples/train_text does)."""

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
import stepc  # noqa: E402

SEED = 1234


def batch(text, info, step):
    """The batch of `step`: windows at offsets drawn from (SEED, step), so that a resumed run sees
    exactly the batches the uninterrupted one would; targets are the next byte."""
    rows, t = info.batch_shape
    rng = np.random.default_rng([SEED, step])
    starts = rng.integers(0, len(text) - t - 1, size=rows)
    windows = np.stack([text[s:s + t + 1] for s in starts]).astype(np.int32)
    return windows[:, :-1], windows[:, 1:]


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 3
    art, steps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20
    with open(os.environ.get("TEXT", "/usr/share/common-licenses/GPL-3"), "rb") as f:
        text = np.frombuffer(f.read(), dtype=np.uint8)
    with tempfile.TemporaryDirectory(prefix="stepc-train-") as tmp:
        return train(art, steps, text, os.path.join(tmp, "ckpt"))


def train(art, steps, text, ckpt):
    half = steps // 2

    losses = {}
    with stepc.Step(art) as s:
        info = s.info
        if info.vocab_size < 256:
            print(f"{art}: vocab_size {info.vocab_size} is too small for bytes", file=sys.stderr)
            return 3
        print(f"{art}: {info.parameters} parameters on {info.device} {info.gpu} ({info.graph_mode}), "
              f"batch {info.batch_shape}")
        s.init_params(SEED)
        for k in range(1, steps + 1):
            s.bind_batch(*batch(text, info, k))
            st = s.step()
            losses[st.step] = st.loss
            print(f"step {st.step:4d}  loss {st.loss:.6f}  lr {st.lr:.3e}  grad_norm {st.grad_norm:.4f}  {st.ms:8.2f} ms")
            if k == half:
                s.save_checkpoint(ckpt)
                print(f"checkpoint at step {k}: {ckpt}")
        m = s.measure()
        print(f"max allocated {m.max_allocated_bytes / 1e6:.2f} MB, predicted peak {m.predicted_peak_bytes / 1e6:.2f} MB")

    # a fresh Step, as a restarted job would open it; the device must be the same for the bits to be
    with stepc.Step(art, device=info.device) as r:
        r.load_checkpoint(ckpt)
        print(f"resumed at step {r.info.step}")
        same = True
        for k in range(r.info.step + 1, steps + 1):
            r.bind_batch(*batch(text, info, k))
            st = r.step()
            eq = st.loss == losses[st.step]
            same &= eq
            print(f"step {st.step:4d}  loss {st.loss:.6f}  {'bitwise equal' if eq else f'DIFFERS from {losses[st.step]!r}'}")
    print("the resumed run continues bitwise" if same else "the resumed run differs")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
