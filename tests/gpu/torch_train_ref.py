#!/usr/bin/env python3
"""torch_train_ref.py — stepc's training run against PyTorch: the same model from the same initial
weights on the same batches with the same optimizer, and the two loss curves side by side.

    python3 tests/gpu/torch_train_ref.py DUMPDIR [--stepc STEPC.json] [--steps N]
        [--torch-device cpu|cuda] [--bf16-scale auto|off|autocast|pure|both] [--out TORCH.json]

DUMPDIR is written by `gpu_step dump SPEC DUMPDIR --device cpu [K=V ...]` (tests/gpu/dump.c):
weights.safetensors (the fp32 initial weights: stepc's CPU and GPU executors start from the same
values, cpu_exec_init_params / rt_exec_init_params), batches.safetensors (int32 tokens/targets of
steps 1..batch_steps, (steps, micro-batches, micro_batch_size, seq), drawn by stepc's own data
source, runtime/cpu/data.c, keyed by (train.seed, step, micro-batch): nothing is re-sampled here)
and meta.json (shape fields, the optimizer and LR-schedule fields, the data source).
STEPC.json is the output of `stepc run SPEC --device cpu|cuda --steps N --json [K=V ...]` with the
same recipe and overrides as the dump.

PyTorch's side (written from Megatron's rules, not from stepc's code; the model is torch_model.py,
shared with torch_ref.py):
  step s = 1..N: for each micro-batch mb the loss of batches[s-1, mb] (mean token cross-entropy),
  backward of loss / num_microbatches (the gradients accumulate, the gradient of the mean);
  the step's loss is the mean of the micro-batch losses;
  LR: linear warm-up lr*s/warmup for s <= warmup, then constant | linear | cosine from lr down to
  min_lr over [warmup, lr_decay_iters], min_lr after it;
  torch.nn.utils.clip_grad_norm_(clip_grad): coefficient clip/(norm + 1e-6) when below 1;
  torch.optim.AdamW(betas, eps) with weight_decay on the >= 2-D parameters only (Megatron: no
  decay on biases and norm weights), its per-parameter step count for the bias corrections.
The LR of every step is checked against stepc's `lr` column (an independent schedule), and
stepc's `grad_norm` column is printed beside torch's.

The comparison: first loss, mean of the last 20 steps, total drop (first - last-20 mean), the
largest per-step |loss difference| and the largest |difference| of the trailing 10-step moving
averages. Measured on the tiny recipe over the GPL-3 text, 200 steps (docs/gpu-runtime.md,
"Training curve against PyTorch"):

  stepc cpu (fp32) vs PyTorch fp32 (CPU, torch 2.9):
    the same arithmetic in the same precision; the two runs differ only in summation order (a
    few ulps per op), and that difference grows as training goes on: it is below stepc's printed
    precision (1e-6) for the first ~10 steps, 1e-5 around step 30 and 1e-4 by step 200, both in
    the per-step difference and the moving average (measured: max per-step 9.0e-5 and max MA10
    5.6e-5 over 200 steps; 40 steps: 5.3e-6 / 4.4e-6).
    Gate: first loss |diff| <= 1e-5, max per-step |diff| <= 1e-3, max MA10 |diff| <= 5e-4, LR
    relative difference <= 1e-5 at every step. 10x the measured drift: any real difference in
    the model or the optimizer (a missing weight-decay exemption, a bias correction off by one
    step, clipping applied twice, a different LR step) moves the curve by 1e-3..1e-1 within a
    few dozen steps (see the docs for what each measured).
  stepc cuda (bf16 compute, fp32 master/grads/moments) vs PyTorch fp32:
    bf16 roundings change every step's update a little, and the trajectories part like two
    seeds of the same run. PyTorch's own bf16 runs against its fp32 run give the scale, printed
    beside stepc's numbers on every run (--bf16-scale): on the CPU here, 200 steps, autocast
    max per-step 0.057, max MA10 0.027, last-20 mean diff 0.010; pure bf16 (bf16 weights and
    activations from an fp32 master, as stepc's recipe) 0.106 / 0.071 / 0.042.
    Gate: first loss |diff| <= 1e-2 (bf16 forward of the same weights: ~2e-3), max MA10 |diff|
    <= 0.15, last-20 mean |diff| <= 0.1, per-step |diff| <= 0.3, LR as above. A broken gradient
    or optimizer on the GPU leaves the loss ~0.5..3 above the curve.
Exit 0 pass, 1 fail, 2 bad input, 77 torch is not importable. Torch and the standard library only.
"""
import argparse
import json
import math
import os
import sys
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch without numpy: harmless here
try:
    import torch
except ImportError:
    print("SKIP torch is not importable")
    sys.exit(77)

sys.dont_write_bytecode = True  # no __pycache__ in the source tree for torch_model
from torch_model import forward_loss, mapping, read_safetensors, to_torch

WINDOW_LAST = 20  # steps averaged for the end of the curve
WINDOW_MA = 10  # trailing moving-average window
LOCKSTEP = 15  # steps before fp32 rounding differences have grown (measured: see the docstring)
DIVERGED = 1e-4  # the per-step |diff| printed as where the two runs part (not gated)

# Per stepc device: lockstep (cpu: every |loss diff| and grad_norm relative diff in steps
# 1..LOCKSTEP), first (cuda: the first loss), then the whole curve: step (max per-step |diff|), ma
# (max |MA10 diff|), last (|diff| of the last-20 means). Why these numbers: the docstring.
LIMITS = {
    "cpu": {"lockstep": 1e-5, "gnorm": 1e-4, "step": 0.25, "ma": 0.08, "last": 0.07},
    "cuda": {"first": 5e-3, "step": 1.5, "ma": 0.3, "last": 0.15},
}
LR_REL = 1e-5  # stepc prints lr as %e (7 significant digits): 5e-7 relative at worst


def lr_at(o, step):
    """Megatron's schedule: linear warm-up, then constant | linear | cosine decay to min_lr."""
    lr, min_lr, warmup, decay = o["lr"], o["min_lr"], o["lr_warmup_iters"], o["lr_decay_iters"]
    if warmup > 0 and step <= warmup:
        return lr * step / warmup
    style = o["lr_decay_style"]
    if style == "constant":
        return lr
    if step > decay:
        return min_lr
    ratio = (step - warmup) / (decay - warmup) if decay > warmup else 1.0
    coeff = 1.0 - ratio if style == "linear" else 0.5 * (math.cos(math.pi * ratio) + 1.0)
    return min_lr + coeff * (lr - min_lr)


def train(m, weights, batches, nsteps, dev, mode):
    """nsteps steps from the dumped weights; mode fp32 | autocast | pure. Per step: loss, lr, grad_norm."""
    o = m["optimizer"]
    nmb = m["num_microbatches"]
    P = {n: t.detach().to(dev, torch.float32).clone().requires_grad_(True) for n, t in weights.items()}
    decay = [p for p in P.values() if p.dim() >= 2]
    no_decay = [p for p in P.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o["lr"], betas=(o["adam_beta1"], o["adam_beta2"]), eps=o["adam_eps"], foreach=False)
    params = list(P.values())
    tok_all = batches["tokens"].to(dev).long()
    tgt_all = batches["targets"].to(dev).long()
    out = []
    for s in range(1, nsteps + 1):
        lr = lr_at(o, s)
        for g in opt.param_groups:
            g["lr"] = lr
        loss_sum = 0.0
        for mb in range(nmb):
            tok, tgt = tok_all[s - 1, mb], tgt_all[s - 1, mb]
            if mode == "pure":  # bf16 weights and activations, fp32 master weights and gradients
                loss = forward_loss(m, {n: p.to(torch.bfloat16) for n, p in P.items()}, tok, tgt)
            else:
                with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=mode == "autocast"):
                    loss = forward_loss(m, P, tok, tgt)
            (loss / nmb).backward()
            loss_sum += loss.item()
        if o["clip_grad"] > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, o["clip_grad"]).item()
        else:
            norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params if p.grad is not None])).item()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss = loss_sum / nmb
        if not math.isfinite(loss):
            raise FloatingPointError(f"PyTorch {mode}: the loss is not finite at step {s}")
        out.append({"step": s, "loss": loss, "lr": lr, "grad_norm": norm})
    return out


SCALE_NAMES = {"ulp": "fp32 (weights +-1 ulp)", "autocast": "bf16 autocast", "pure": "bf16 weights+activations"}


def perturb_ulp(weights):
    """Every weight moved by -1, 0 or +1 ulp (a fixed generator): how far fp32 rounding alone carries the curve."""
    g = torch.Generator().manual_seed(0)
    out = {}
    for name, t in weights.items():
        t = t.float().contiguous()
        bits = t.view(torch.int32) + torch.randint(-1, 2, t.shape, generator=g, dtype=torch.int32)
        out[name] = torch.where(t == 0, t, bits.view(torch.float32))
    return out


def curve_stats(a, b):
    """a, b: loss lists of equal length. The comparison's numbers (a minus b where signed)."""
    n = len(a)
    w = min(WINDOW_LAST, n)
    d = [x - y for x, y in zip(a, b)]
    step_i = max(range(n), key=lambda i: abs(d[i]))
    wm = min(WINDOW_MA, n)
    ma = [sum(d[i - wm + 1:i + 1]) / wm for i in range(wm - 1, n)]
    ma_i = max(range(len(ma)), key=lambda i: abs(ma[i]))
    last_a, last_b = sum(a[-w:]) / w, sum(b[-w:]) / w
    lock_n = min(LOCKSTEP, n)
    parts = next((i + 1 for i in range(n) if abs(d[i]) > DIVERGED), None)
    return {"lock": max(abs(x) for x in d[:lock_n]), "lock_n": lock_n, "parts_at": parts, "first_a": a[0], "first_b": b[0], "first": abs(d[0]), "last_a": last_a, "last_b": last_b,
            "last": abs(last_a - last_b), "drop_a": a[0] - last_a, "drop_b": b[0] - last_b,
            "step": abs(d[step_i]), "step_at": step_i + 1, "ma": abs(ma[ma_i]), "ma_at": ma_i + wm}


def read_stepc(path):
    with open(path) as f:
        j = json.load(f)
    steps = j["steps"]
    for i, s in enumerate(steps):
        if s["step"] != i + 1:
            raise ValueError(f"{path}: entry {i} is step {s['step']}, want {i + 1}")
    return j.get("device", "?"), steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dump")
    ap.add_argument("--stepc", help="stepc's loss file (`stepc run ... --json`); without it PyTorch only trains")
    ap.add_argument("--steps", type=int, default=0, help="steps to train (default: the stepc file's, else batch_steps)")
    ap.add_argument("--torch-device", default=None, help="cpu or cuda (default: cuda when available)")
    ap.add_argument("--scale", default="auto", choices=["auto", "off", "ulp", "autocast", "pure", "all"],
                    help="PyTorch runs against its own fp32 run, printed for scale: ulp (fp32 from weights moved by "
                         "1 ulp), autocast / pure (bf16); auto: ulp for a cpu stepc file, autocast and pure for cuda")
    ap.add_argument("--out", help="write PyTorch's per-step losses here (stepc's JSON layout)")
    ap.add_argument("--label", default="", help="a name for the summary lines")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (CPU)")
    args = ap.parse_args()

    try:
        with open(os.path.join(args.dump, "meta.json")) as f:
            m = json.load(f)
        weights = read_safetensors(os.path.join(args.dump, "weights.safetensors"))
        batches = read_safetensors(os.path.join(args.dump, "batches.safetensors"))
        batch1 = read_safetensors(os.path.join(args.dump, "batch.safetensors"))
    except (OSError, ValueError, KeyError) as e:
        hint = " (a dump from before batches.safetensors: run gpu_step dump again)" if "batches" in str(e) else ""
        print(f"FAIL cannot read the dump in {args.dump}: {e}{hint}")
        return 2
    if m.get("format") != "stepc-torch-ref" or "optimizer" not in m or "batch_steps" not in m:
        print(f"FAIL {args.dump}/meta.json is not a gpu_step dump with the optimizer fields and batches")
        return 2
    bshape = list(batches["tokens"].shape)
    want = [m["batch_steps"], m["num_microbatches"], m["micro_batch_size"], m["seq_length"]]
    if bshape != want or list(batches["targets"].shape) != want:
        print(f"FAIL batches.safetensors is {bshape}, meta.json says {want}")
        return 2
    if not (torch.equal(batches["tokens"][0], batch1["tokens"]) and torch.equal(batches["targets"][0], batch1["targets"])):
        print("FAIL batches.safetensors step 1 differs from batch.safetensors (the step the dump ran)")
        return 2

    dev_name, stepc = None, None
    if args.stepc:
        try:
            dev_name, stepc = read_stepc(args.stepc)
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"FAIL cannot read stepc's loss file {args.stepc}: {e}")
            return 2
        if dev_name not in LIMITS:
            print(f"FAIL {args.stepc}: device {dev_name!r}, want cpu or cuda")
            return 2
    n = args.steps or (len(stepc) if stepc else m["batch_steps"])
    if n < 1 or n > m["batch_steps"]:
        print(f"FAIL {n} steps asked, the dump holds batches of {m['batch_steps']} (gpu_step dump with train.train_iters >= {n})")
        return 2
    if stepc and len(stepc) < n:
        print(f"FAIL {args.stepc} has {len(stepc)} steps, {n} asked")
        return 2

    dev = torch.device(args.torch_device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.backends.cuda.matmul.allow_tf32 = False  # a true fp32 reference on the GPU too
    torch.backends.cudnn.allow_tf32 = False
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        tw = to_torch(weights, mapping(m))
    except (KeyError, ValueError) as e:
        print(f"FAIL mapping: {e}")
        return 1

    o = m["optimizer"]
    label = args.label or f"stepc-{dev_name or 'none'}"
    print(f"{label}: {m['data']} data {os.path.basename(m['data_path']) or ''}, {n} steps of "
          f"{m['num_microbatches']}x{m['micro_batch_size']}x{m['seq_length']} tokens, L={m['num_layers']} "
          f"C={m['hidden_size']} params={m['parameters']}; AdamW lr {o['lr']:g} -> {o['min_lr']:g} "
          f"({o['lr_decay_style']}, warm-up {o['lr_warmup_iters']}, decay {o['lr_decay_iters']}), wd {o['weight_decay']:g} "
          f"(>= 2-D), betas ({o['adam_beta1']:g}, {o['adam_beta2']:g}), eps {o['adam_eps']:g}, clip {o['clip_grad']:g}; "
          f"PyTorch {torch.__version__} on {dev}")
    t0 = time.time()
    try:
        ref = train(m, tw, batches, n, dev, "fp32")
    except FloatingPointError as e:
        print(f"FAIL {e}")
        return 1
    print(f"PyTorch fp32: {n} steps in {time.time() - t0:.1f} s")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": f"torch-{dev.type}", "dtype": "float32", "torch": torch.__version__, "steps": ref}, f)
            f.write("\n")
    rl = [r["loss"] for r in ref]

    modes = {"auto": ["ulp"] if dev_name == "cpu" else ["autocast", "pure"] if dev_name == "cuda" else [], "off": [],
             "ulp": ["ulp"], "autocast": ["autocast"], "pure": ["pure"], "all": ["ulp", "autocast", "pure"]}[args.scale]
    scale = {}
    for mode in modes:
        t0 = time.time()
        try:
            if mode == "ulp":
                run = train(m, perturb_ulp(tw), batches, n, dev, "fp32")
            else:
                run = train(m, tw, batches, n, dev, mode)
        except FloatingPointError as e:
            print(f"NOTE {e}")
            continue
        scale[mode] = curve_stats([r["loss"] for r in run], rl)
        print(f"PyTorch {SCALE_NAMES[mode]}: {n} steps in {time.time() - t0:.1f} s")

    print(f"{'step':>5} {'torch fp32':>11}" + (f" {'stepc ' + dev_name:>11} {'diff':>10} {'lr':>10} {'|g| torch':>10} {'|g| stepc':>10}" if stepc else ""))
    for i in range(n):
        if i < 5 or (i + 1) % 20 == 0 or i == n - 1:
            line = f"{i + 1:>5} {rl[i]:>11.6f}"
            if stepc:
                line += (f" {stepc[i]['loss']:>11.6f} {stepc[i]['loss'] - rl[i]:>10.2e} {ref[i]['lr']:>10.3e} "
                         f"{ref[i]['grad_norm']:>10.4f} {stepc[i]['grad_norm']:>10.4f}")
            print(line)
    for mode, st in scale.items():
        print(f"     scale: PyTorch {SCALE_NAMES[mode]} vs PyTorch fp32: steps 1-{st['lock_n']} max {st['lock']:.2e}, first "
              f"{st['first']:.2e}, last-{WINDOW_LAST} mean {st['last_a']:.4f} vs {st['last_b']:.4f} (diff {st['last']:.2e}), "
              f"max |step diff| {st['step']:.2e} (step {st['step_at']}), max |MA{WINDOW_MA} diff| {st['ma']:.2e} "
              f"(step {st['ma_at']}), parts (> {DIVERGED:.0e}) at step {st['parts_at'] or '-'}")
    if not stepc:
        w = min(WINDOW_LAST, n)
        print(f"PASS PyTorch trained {n} steps: loss {rl[0]:.4f} -> last-{w} mean {sum(rl[-w:]) / w:.4f}")
        return 0

    lim = LIMITS[dev_name]
    sl = [x["loss"] for x in stepc[:n]]
    st = curve_stats(sl, rl)
    sc = lambda k: ("  [scale: " + ", ".join(f"{SCALE_NAMES[mode]} {x[k]:.2e}" for mode, x in scale.items()) + "]") if scale else ""
    checks = []
    if "lockstep" in lim:
        gn = max(abs(stepc[i]["grad_norm"] - ref[i]["grad_norm"]) / max(ref[i]["grad_norm"], 1e-30) for i in range(st["lock_n"]))
        checks.append((f"steps 1-{st['lock_n']} lockstep", st["lock"], lim["lockstep"],
                       f"first loss stepc {st['first_a']:.6f} torch {st['first_b']:.6f}", "lock"))
        checks.append((f"steps 1-{st['lock_n']} grad_norm rel", gn, lim["gnorm"], "", None))
    else:
        checks.append(("first loss", st["first"], lim["first"], f"stepc {st['first_a']:.6f} torch {st['first_b']:.6f}", "first"))
    checks += [
        (f"last-{WINDOW_LAST} mean", st["last"], lim["last"], f"stepc {st['last_a']:.6f} torch {st['last_b']:.6f}", "last"),
        ("max |step diff|", st["step"], lim["step"], f"at step {st['step_at']}", "step"),
        (f"max |MA{WINDOW_MA} diff|", st["ma"], lim["ma"], f"at step {st['ma_at']}", "ma"),
    ]
    fails = 0
    for name, v, limit, what, key in checks:
        ok = math.isfinite(v) and v <= limit
        fails += not ok
        print(f"{'PASS' if ok else 'FAIL'} {label} {name}: {v:.2e} (limit {limit:.2g}){', ' + what if what else ''}"
              f"{sc(key) if key else ''}")
    lr_bad = [(i + 1, stepc[i]["lr"], ref[i]["lr"]) for i in range(n)
              if abs(stepc[i]["lr"] - ref[i]["lr"]) > LR_REL * max(abs(ref[i]["lr"]), 1e-30)]
    if lr_bad:
        fails += 1
        i, a, b = lr_bad[0]
        print(f"FAIL {label} lr: {len(lr_bad)} steps differ by more than {LR_REL:.0e} relative; first at step {i}: stepc {a:.6e} torch {b:.6e}")
    else:
        print(f"PASS {label} lr: all {n} steps within {LR_REL:.0e} relative of the schedule")
    print(f"     {label} drop: stepc {st['drop_a']:.4f} torch {st['drop_b']:.4f}; the runs part (|diff| > {DIVERGED:.0e}) at "
          f"step {st['parts_at'] or '-'}")
    print(f"RESULT {label} vs PyTorch {torch.__version__} fp32 on {dev.type}, {n} steps: first {st['first_a']:.6f} / "
          f"{st['first_b']:.6f}, last-{WINDOW_LAST} mean {st['last_a']:.4f} / {st['last_b']:.4f}, drop {st['drop_a']:.4f} / "
          f"{st['drop_b']:.4f}, steps 1-{st['lock_n']} max |diff| {st['lock']:.1e}, max |step diff| {st['step']:.1e}, "
          f"max |MA{WINDOW_MA} diff| {st['ma']:.1e}" + "".join(
              f"; PyTorch {SCALE_NAMES[mode]}: {x['lock']:.1e}, {x['step']:.1e}, {x['ma']:.1e}" for mode, x in scale.items())
          + f": {'PASS' if not fails else 'FAIL'}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
