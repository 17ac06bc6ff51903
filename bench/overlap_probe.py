#!/usr/bin/env python3
"""overlap_probe.py — can a memory-bound optimizer step hide under compute-bound GEMMs on one GPU?

A measurement for issue 10's remaining lever (docs/benchmarks.md, "Hiding the optimizer"): stepc's
optimizer step at shape M (bench_m, 1.50 B parameters) streams ~45 GB in ~11 ms, at DRAM
speed, after the backward; the forward GEMMs of the next step run at ~95% of the bf16 ceiling and
move little DRAM. If the optimizer of step k ran beside the forward of step k+1 (each layer's
update before that layer's forward reads it), how much of it would be hidden? This script runs
both workloads, alone and concurrently on two streams, with PyTorch (cuBLAS GEMMs of M's forward
shapes; torch._fused_adamw_ over fp32 tensors of M's parameter sizes), and prints the times:
  python3 bench/overlap_probe.py [--layers 16] [--reps 10]
hidden = (gemm + adam - together) / adam: 1.0 if the optimizer is free beside the GEMMs, 0 if the
two only serialise. PyTorch's fused AdamW moves 28 bytes a parameter (stepc's 30: it also writes
the bf16 copy); the GEMMs are M's forward (qkv, proj, fc1, fc2 per layer, 8192 tokens).
"""
import argparse
import statistics

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    dev = torch.device("cuda")
    T, H, F, QKV, V = 8192, 2048, 8192, 3072, 128256
    # forward GEMMs of M: x (T,H) through qkv, proj, fc1 (2F, SwiGLU), fc2
    x = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
    h = torch.randn(T, F, device=dev, dtype=torch.bfloat16)
    w = {k: torch.randn(n, m, device=dev, dtype=torch.bfloat16) * 0.02
         for k, (n, m) in {"qkv": (QKV, H), "proj": (H, H), "fc1": (2 * F, H), "fc2": (H, F)}.items()}
    outs = {k: torch.empty(T, w[k].shape[0], device=dev, dtype=torch.bfloat16) for k in w}

    def gemms():
        for _ in range(a.layers):
            torch.matmul(x, w["qkv"].t(), out=outs["qkv"])
            torch.matmul(x, w["proj"].t(), out=outs["proj"])
            torch.matmul(x, w["fc1"].t(), out=outs["fc1"])
            torch.matmul(h, w["fc2"].t(), out=outs["fc2"])

    # M's parameters: per layer qkv, proj, fc1, fc2 and two norms; embedding and output layer
    sizes = []
    for _ in range(16):
        sizes += [QKV * H, H * H, 2 * F * H, H * F, H, H]
    sizes += [V * H, H, V * H]
    n = sum(sizes)
    flat = [torch.zeros(n, device=dev, dtype=torch.float32) for _ in range(4)]
    for t in flat:
        t.normal_(0, 0.01)
    split = [list(t.split(sizes)) for t in flat]
    params, grads, m, v = split
    steps = [torch.ones((), device=dev, dtype=torch.float32) for _ in sizes]

    def adam():
        torch._fused_adamw_(params, grads, m, v, [], steps, lr=1e-4, beta1=0.9, beta2=0.95,
                            weight_decay=0.1, eps=1e-8, amsgrad=False, maximize=False)

    def timed(fn):
        ms = []
        for _ in range(a.reps + 2):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            ms.append(s.elapsed_time(e))
        return statistics.median(ms[2:])

    lo, hi = torch.cuda.Stream(priority=0), torch.cuda.Stream(priority=-1)
    main_s = torch.cuda.current_stream()

    def together(prio):
        def run():
            sa, sg = (lo, hi) if prio else (torch.cuda.Stream(), torch.cuda.Stream())
            sa.wait_stream(main_s)
            sg.wait_stream(main_s)
            with torch.cuda.stream(sa):
                adam()
            with torch.cuda.stream(sg):
                gemms()
            main_s.wait_stream(sa)
            main_s.wait_stream(sg)
        return run

    tg, ta = timed(gemms), timed(adam)
    flops = a.layers * 2 * T * H * (QKV + H + 2 * F) + a.layers * 2 * T * F * H
    print(f"GEMMs alone ({a.layers} layers of M's forward): {tg:.3f} ms, {flops / tg / 1e9:.1f} TFLOP/s")
    print(f"fused AdamW alone ({n / 1e9:.3f} B parameters, 28 B each): {ta:.3f} ms, {28 * n / ta / 1e6:.0f} GB/s")
    for prio in (True, False):
        tt = timed(together(prio))
        hidden = (tg + ta - tt) / ta
        print(f"together, {'GEMMs high priority' if prio else 'equal priorities'}: {tt:.3f} ms "
              f"(serial {tg + ta:.3f}); hidden {100 * hidden:.0f}% of the optimizer")


if __name__ == "__main__":
    main()
