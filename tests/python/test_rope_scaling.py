#!/usr/bin/env python3
"""test_rope_scaling.py ROPE_DUMP — stepc's Llama 3 RoPE scaling (ir/ops/rope.c, model.rope_scaling)
against this file's NumPy implementation of Hugging Face's rope_type "llama3"
(_compute_llama3_parameters: factor, low_freq_factor 1, high_freq_factor 4,
original_max_position_embeddings 8192) and its rotate_half RoPE. rope_dump (tests/unit) prints
stepc's CPU reference on a fixed input; its fp64 output must equal the NumPy fp64 rotation to 1e-10 (angles up to 8191 rad),
its fp32 output to 1e-5, for Llama 3.2's factor 32 and Llama 3.1's 8 at head sizes 64 and 128 over
8192 positions (all three frequency bands occur). Without scaling it must equal the plain RoPE, and
the scaled output must differ from it by far more than the tolerance (the test fails on a RoPE
that ignores the factor). Exit 77 without numpy."""

import json
import math
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not importable by", sys.executable)
    sys.exit(77)


def hf_inv_freq(base, dim, factor, dtype):
    """Hugging Face's default inv_freq, then _compute_llama3_parameters' scaling when factor > 0."""
    inv_freq = 1.0 / (base ** (np.arange(0, dim, 2).astype(dtype) / dim))
    inv_freq = inv_freq.astype(dtype)
    if not factor:
        return inv_freq
    low_freq_factor, high_freq_factor, old_context_len = 1.0, 4.0, 8192
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return np.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama).astype(dtype)


def hf_rope(x, base, factor):
    """x (B, T, H, D) -> apply_rotary_pos_emb's q * cos + rotate_half(q) * sin, in fp64."""
    B, T, H, D = x.shape
    inv_freq = hf_inv_freq(base, D, factor, np.float64)
    freqs = np.outer(np.arange(T, dtype=np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)  # (T, D)
    cos, sin = np.cos(emb)[None, :, None, :], np.sin(emb)[None, :, None, :]
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * cos + np.concatenate([-x2, x1], axis=-1) * sin


def stepc_rope(dump, shape, base, factor):
    out = subprocess.run([dump] + [str(v) for v in shape] + [repr(base), repr(factor)], capture_output=True,
                         text=True, check=True).stdout
    d = json.loads(out)
    return (np.array(d[k], dtype=np.float64).reshape(shape) for k in ("x", "f64", "f32"))


def main():
    dump = sys.argv[1]
    fails = 0
    # the bands at base 500000: D=64 has pairs 14.., D=128 pairs 29.. past 2048-long waves
    cases = [((1, 8192, 1, 64), 500000.0, 32.0), ((1, 8192, 1, 128), 500000.0, 32.0),
             ((1, 8192, 1, 128), 500000.0, 8.0), ((2, 64, 2, 16), 10000.0, 32.0), ((1, 8192, 1, 64), 500000.0, 0.0)]
    for shape, base, factor in cases:
        x, y64, y32 = stepc_rope(dump, shape, base, factor)
        want = hf_rope(x, base, factor)
        e64, e32 = np.abs(y64 - want).max(), np.abs(y32 - want).max()
        plain = np.abs(want - hf_rope(x, base, 0.0)).max()
        # the inverse frequencies themselves, in fp32 as Hugging Face computes them, against fp64
        f32 = hf_inv_freq(np.float32(base), shape[3], np.float32(factor), np.float32).astype(np.float64)
        f64 = hf_inv_freq(base, shape[3], factor, np.float64)
        rf = np.abs(f32 / f64 - 1).max()
        bad = e64 > 1e-10 or e32 > 1e-5 or rf > 1e-6 or (factor and shape[1] == 8192 and plain < 0.1)
        fails += bad
        print(f"{'FAIL' if bad else 'PASS'} rope {shape} base {base:g} factor {factor:g}: |stepc fp64 - HF| {e64:.2e}, "
              f"fp32 {e32:.2e}; HF fp32 inv_freq vs fp64 {rf:.1e}; scaled vs unscaled {plain:.3f}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
