#!/usr/bin/env python3
"""run.py — differential test of `stepc check` against Megatron-LM's own configuration checks.

  python run.py --stepc build/stepc --megatron /path/to/Megatron-LM [--set fixed|random]
                [--seed 23] [-n 300] [--record verdicts.txt] [--report report.txt]

For every configuration of configs.py (--set fixed: configs(), the two bases; --set random:
random_configs(seed, n), every recipe of models/): Megatron's verdict (megatron_side.py: parse_args,
validate_args, TransformerConfig.__post_init__, the model-build checks) and stepc's (`stepc check
BASE OVERRIDES`, exit 0 valid / 1 invalid). Prints the agreement rate and every disagreement.
--record writes Megatron's verdicts (the file check_recorded.py replays in CI without Megatron).
Run it with a Python that has torch (any CPU build) and Megatron-LM's source at the commit
docs/rules.md names.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import configs  # noqa: E402


def stepc_verdict(stepc, recipe, overrides):
    p = subprocess.run([stepc, "check", recipe, *overrides, "--json"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    try:
        diags = json.loads(p.stdout).get("diagnostics", [])
    except json.JSONDecodeError:
        diags = []
    errs = ", ".join(sorted({d["rule"] for d in diags if d["severity"] == "error"}))
    return {0: "accept", 1: "reject"}.get(p.returncode, f"exit{p.returncode}"), errs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stepc", required=True)
    ap.add_argument("--megatron", required=True, help="Megatron-LM source tree (holds megatron/)")
    ap.add_argument("--set", choices=["fixed", "random"], default="fixed")
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("-n", type=int, default=300)
    ap.add_argument("--record")
    ap.add_argument("--report")
    a = ap.parse_args()
    import megatron_side
    rows, agree = [], 0
    cfgs = configs.configs() if a.set == "fixed" else configs.random_configs(a.seed, a.n)
    for cid, base, ov in cfgs:
        recipe, fields = configs.base_of(base)
        m, mwhy = megatron_side.verdict(a.megatron, fields, ov)
        s, swhy = stepc_verdict(os.path.abspath(a.stepc), recipe, ov)
        agree += m == s
        rows.append((cid, base, ov, m, mwhy, s, swhy))
    n = len(rows)
    lines = [f"agreement: {agree}/{n} = {100.0 * agree / n:.1f}%"]
    for cid, base, ov, m, mwhy, s, swhy in rows:
        if m != s:
            lines.append(f"{cid}: megatron {m} ({mwhy}) stepc {s} ({swhy}): {base} {' '.join(ov)}")
    print("\n".join(lines))
    if a.report:
        with open(a.report, "w") as fh:
            fh.write("\n".join(lines) + "\n")
    if a.record:
        with open(a.record, "w") as fh:
            what = "configs()" if a.set == "fixed" else f"random_configs({a.seed}, {a.n})"
            fh.write(f"# Megatron-LM's verdict per configuration of configs.py {what} (run.py --record).\n")
            fh.write("# ID VERDICT  (accept / reject; the reason follows after '#')\n")
            for cid, base, ov, m, mwhy, s, swhy in rows:
                fh.write(f"{cid} {m}" + (f"  # {mwhy}" if mwhy else "") + "\n")


if __name__ == "__main__":
    main()
