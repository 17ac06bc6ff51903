#!/usr/bin/env python3
"""torch_train_ref.py — stepc's training run against PyTorch: the same model from the same initial
weights on the same batches with the same optimizer, and the two loss curves side by side.

    python3 tests/gpu/torch_train_ref.py DUMPDIR [--stepc STEPC.json] [--steps N]
        [--torch-device cpu|cuda] [--scale auto|off|ulp|autocast|pure|all] [--seeds K]
        [--out TORCH.json] [--label NAME] [--threads N]

DUMPDIR is written by `gpu_step dump SPEC DUMPDIR --device cpu|cuda [K=V ...]` (tests/gpu/dump.c):
weights.safetensors (the fp32 initial weights as that device holds them: the parameters on cpu,
the fp32 masters on cuda; both from train.seed), batches.safetensors (int32 tokens/targets of
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
largest per-step |loss difference|, the largest |difference| of the trailing 10-step moving
averages, and the step where the two runs part (|diff| > 1e-4). Measured on the tiny recipe over
the GPL-3 text, 200 steps (docs/gpu-runtime.md, "Training curve against PyTorch"):

  The run is chaotic after its first loss spike (step 18, LR 3e-3 with 8 sequences a step): two
  PyTorch fp32 runs whose initial weights differ by +-1 ulp agree to <= 1.3e-6 through step 17,
  part at steps 24-29, and differ by up to 0.12 on single steps, 0.042 in the 10-step moving average
  and 0.034 in the last-20 mean by step 200 (7 runs on a 2-core CPU, torch 2.15; 6 on the H200,
  torch 2.11: 0.107 / 0.031 / 0.020). Rounding alone decides the curve's details past step ~25, so
  no gate over 200 steps can be tighter than that floor; --scale prints it on every run.

  stepc cpu (fp32) vs PyTorch fp32, tight where the arithmetic allows it:
    steps 1-15 in lockstep: every |loss diff| <= 1e-5 and grad_norm relative diff <= 1e-4
    (measured 6.7e-7 and 3.0e-6, at stepc's printed precision of 1e-6; torch on the H200: 6.1e-7,
    1.3e-6). Each of these slips moves a loss in steps 1-15 by 9e-4..0.77 (torch runs with the
    slip, against torch): weight decay on 1-D params too 1.5e-3, gradients summed instead of
    averaged over micro-batches 3.1e-3, linear instead of cosine decay 8.8e-4, the LR one step
    late 0.77, beta2 0.999 2.1e-2, eps 1e-6 3.5e-2, no clipping 0.43: 88x the limit and more.
    Then the whole curve within 2x the fp32 floor above: max per-step |diff| <= 0.25, max MA10
    |diff| <= 0.08, last-20 mean |diff| <= 0.07 (measured 0.078 / 0.030 / 0.011 against torch on
    this CPU; 0.035 / 0.010 / 6e-4 against torch on the H200). The LR column within 1e-5
    relative of the schedule at every step (stepc prints 7 digits).
  stepc cuda (bf16 compute, fp32 master/grads/moments) vs PyTorch fp32: no lockstep (bf16 parts
    from fp32 at once); the scale is PyTorch's own bf16 runs against its fp32 run, printed beside
    (--scale autocast and pure, auto for a cuda file). 6 runs each on the H200: autocast first
    loss <= 3e-5, per-step <= 0.92, MA10 <= 0.18, last-20 <= 0.080; bf16 weights+activations
    (stepc's recipe) 2.3e-4 / 0.69 / 0.10 / 0.082. Gate: first loss <= 2e-3, max per-step <= 1.5,
    max MA10 <= 0.3, last-20 mean <= 0.15 (about 1.7x the worst bf16 run), LR as above. Measured
    stepc cuda: 1.0e-4 / 0.22 / 0.055 / 0.028. A loss that stays flat or diverges is off by
    0.5..3; subtle optimizer slips on the GPU are for the LR column and gpu_step's tests.
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
    "cuda": {"first": 2e-3, "step": 1.5, "ma": 0.3, "last": 0.15},
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


def perturb_ulp(weights, seed):
    """Every weight moved by -1, 0 or +1 ulp (drawn from seed): how far fp32 rounding alone carries the curve."""
    g = torch.Generator().manual_seed(seed)
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
    return {"lock": max(abs(x) for x in d[:lock_n]), "lock_n": lock_n, "parts_at": parts, "runs": 1, "first_a": a[0], "first_b": b[0], "first": abs(d[0]), "last_a": last_a, "last_b": last_b,
            "last": abs(last_a - last_b), "drop_a": a[0] - last_a, "drop_b": b[0] - last_b,
            "step": abs(d[step_i]), "step_at": step_i + 1, "ma": abs(ma[ma_i]), "ma_at": ma_i + wm}


def worst_of(runs):
    """The largest of each difference over several runs' curve_stats (the positions of the worst)."""
    out = dict(runs[0])
    for r in runs[1:]:
        for k, at in (("lock", None), ("first", None), ("last", None), ("step", "step_at"), ("ma", "ma_at")):
            if r[k] > out[k]:
                out[k] = r[k]
                if at:
                    out[at] = r[at]
        if r["last"] >= out["last"]:
            out["last_a"], out["last_b"] = r["last_a"], r["last_b"]
        parts = [p for p in (out["parts_at"], r["parts_at"]) if p]
        out["parts_at"] = min(parts) if parts else None
    out["runs"] = len(runs)
    return out


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
    ap.add_argument("dump", nargs="?", help="the gpu_step dump directory")
    ap.add_argument("--stepc", help="stepc's loss file (`stepc run ... --json`); without it PyTorch only trains")
    ap.add_argument("--steps", type=int, default=0, help="steps to train (default: the stepc file's, else batch_steps)")
    ap.add_argument("--torch-device", default=None, help="cpu or cuda (default: cuda when available)")
    ap.add_argument("--scale", default="auto", choices=["auto", "off", "ulp", "autocast", "pure", "all"],
                    help="PyTorch runs against its own fp32 run, printed for scale: ulp (fp32 from weights moved by "
                         "1 ulp), autocast / pure (bf16); auto: ulp for a cpu stepc file, autocast and pure for cuda")
    ap.add_argument("--seeds", type=int, default=1, help="runs per --scale mode (weights moved by +-1 ulp from "
                    "different seeds); the worst of each difference is printed")
    ap.add_argument("--out", help="write PyTorch's per-step losses here (stepc's JSON layout)")
    ap.add_argument("--label", default="", help="a name for the summary lines")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (CPU)")
    ap.add_argument("--row-header", action="store_true", help="print the header of the ROW lines' table and exit")
    args = ap.parse_args()
    if args.row_header:
        print(ROW_HEADER)
        return 0
    if not args.dump:
        ap.error("the dump directory (gpu_step dump SPEC DIR) is required")

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
        runs = []
        for seed in range(args.seeds):  # ulp: seeds 0..K-1; bf16: the dumped weights, then seeds 1..K-1
            w = perturb_ulp(tw, seed) if mode == "ulp" or seed > 0 else tw
            try:
                run = train(m, w, batches, n, dev, "fp32" if mode == "ulp" else mode)
            except FloatingPointError as e:
                print(f"NOTE {e}")
                continue
            runs.append(curve_stats([r["loss"] for r in run], rl))
        if runs:
            scale[mode] = worst_of(runs)
            print(f"PyTorch {SCALE_NAMES[mode]}: {len(runs)} x {n} steps in {time.time() - t0:.1f} s")

    print(f"{'step':>5} {'torch fp32':>11}" + (f" {'stepc ' + dev_name:>11} {'diff':>10} {'lr':>10} {'|g| torch':>10} {'|g| stepc':>10}" if stepc else ""))
    for i in range(n):
        if i < 5 or (i + 1) % 20 == 0 or i == n - 1:
            line = f"{i + 1:>5} {rl[i]:>11.6f}"
            if stepc:
                line += (f" {stepc[i]['loss']:>11.6f} {stepc[i]['loss'] - rl[i]:>10.2e} {ref[i]['lr']:>10.3e} "
                         f"{ref[i]['grad_norm']:>10.4f} {stepc[i]['grad_norm']:>10.4f}")
            print(line)
    for mode, st in scale.items():
        tag = f" (worst of {st['runs']})" if st["runs"] > 1 else ""
        print(f"     scale: PyTorch {SCALE_NAMES[mode]}{tag} vs PyTorch fp32: steps 1-{st['lock_n']} max {st['lock']:.2e}, first "
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
    # one row of run_text_curve.sh's markdown table (ROW_HEADER), for bench/RESULTS.md
    bf = scale.get("pure") or scale.get("autocast") or scale.get("ulp")
    print(f"ROW | {label} | PyTorch {torch.__version__} fp32 {dev.type} | {n} | {st['first_a']:.4f} / {st['first_b']:.4f} | "
          f"{st['last_a']:.4f} / {st['last_b']:.4f} | {st['drop_a']:.3f} / {st['drop_b']:.3f} | {st['lock']:.1e} | "
          f"{st['parts_at'] or '-'} | {st['step']:.1e} | {st['ma']:.1e} | "
          f"{(SCALE_NAMES[bf_mode(scale)] + ': ' + format(bf['step'], '.1e') + ', ' + format(bf['ma'], '.1e')) if bf else '-'} | "
          f"{'PASS' if not fails else 'FAIL'} |")
    return 1 if fails else 0


ROW_HEADER = ("| stepc | PyTorch | steps | first loss (stepc / torch) | last-20 mean | drop | steps 1-15 max diff | "
              "part at step | max step diff | max MA10 diff | PyTorch's own spread (step, MA10) | gate |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|")


def bf_mode(scale):
    return next(k for k in ("pure", "autocast", "ulp") if k in scale)


if __name__ == "__main__":
    sys.exit(main())
