#!/usr/bin/env python3
"""test_ops_numpy.py OP_RUN — ops of the op table against NumPy versions written here from their
definitions, not from stepc's code: the op's fp64 CPU reference (ir/ops, run by tests/python/op_run.c)
must agree with NumPy in fp64 to 1e-12 relative to the output's scale.

GeGLU (Megatron's gated_linear_unit with activation_func=gelu, mlp.py's glu(): torch.chunk(x, 2,
-1), F.gelu(x_glu) * x_linear, F.gelu the exact erf form): forward, and the backward as the
derivative of sum(dy * y) by central differences of this NumPy forward (rows of [a | b]), plus the
closed form. Exit 77 without numpy."""

import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not importable by", sys.executable)
    sys.exit(77)

erf = np.vectorize(math.erf)


def gelu(x):
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def geglu(x):
    a, b = np.split(x, 2, axis=-1)
    return gelu(a) * b


def run(op_run, tmp, op, ins, outs):
    args = [op_run, op]
    for i, x in enumerate(ins):
        p = os.path.join(tmp, f"in{i}.bin")
        x.astype("<f8").tofile(p)
        args.append(p + ":" + "x".join(map(str, x.shape)))
    args.append("--")
    for i, shape in enumerate(outs):
        args.append(os.path.join(tmp, f"out{i}.bin") + ":" + "x".join(map(str, shape)))
    subprocess.run(args, check=True)
    return [np.fromfile(os.path.join(tmp, f"out{i}.bin"), dtype="<f8").reshape(s) for i, s in enumerate(outs)]


def close(name, got, want, tol=1e-12):
    err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-300))
    ok = err <= tol
    print(f"{'PASS' if ok else 'FAIL'} {name}: max |diff| / max |want| = {err:.2e} (limit {tol:g})")
    return ok


def main():
    op_run = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="stepc-ops-")
    rng = np.random.default_rng(22)
    n, f = 6, 40
    x = rng.uniform(-4, 4, size=(n, 2 * f))
    dy = rng.uniform(-1, 1, size=(n, f))
    ok = True
    (y,) = run(op_run, tmp, "geglu", [x], [(n, f)])
    ok &= close("geglu forward = gelu(a) * b", y, geglu(x))
    (dx,) = run(op_run, tmp, "geglu_bwd", [dy, x], [(n, 2 * f)])
    a, b = np.split(x, 2, axis=-1)
    pdf = np.exp(-0.5 * a * a) / math.sqrt(2 * math.pi)
    closed = np.concatenate([dy * b * (0.5 * (1 + erf(a / math.sqrt(2))) + a * pdf), dy * gelu(a)], -1)
    ok &= close("geglu backward = closed form", dx, closed)
    h, fd = 1e-5, np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        fd[idx] = ((geglu(xp) - geglu(xm)) * dy).sum() / (2 * h)
    ok &= close("geglu backward = central differences of the NumPy forward", dx, fd, 1e-8)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
