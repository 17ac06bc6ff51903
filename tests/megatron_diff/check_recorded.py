#!/usr/bin/env python3
"""check_recorded.py — the stepc side of the Megatron differential test, for CI (no torch, no Megatron).

  check_recorded.py STEPC ROOT

Runs `stepc check` on every configuration of configs.py and compares its verdict with Megatron's,
as run.py recorded it in verdicts.txt. Fails when a configuration disagrees that is not listed in
KNOWN (the differences docs/rules.md explains), or when a KNOWN one now agrees (update the list and
the docs), or when verdicts.txt does not match configs.py.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import configs  # noqa: E402
from run import stepc_verdict  # noqa: E402

# Configuration id -> the reason stepc deliberately differs (docs/rules.md, "Megatron differential").
# None at d98e8a64dd: the 21 uneven-VPP/PP layouts once listed here (STEPC-6) are refused by Megatron
# itself when it builds the model (get_num_layers_to_build), which megatron_side.py now calls.
KNOWN = {}


def main():
    stepc, root = os.path.abspath(sys.argv[1]), sys.argv[2]
    here = os.path.dirname(os.path.abspath(__file__))
    recorded = {}
    with open(os.path.join(here, "verdicts.txt")) as fh:
        for line in fh:
            w = line.split("#", 1)[0].split()
            if w:
                recorded[w[0]] = w[1]
    cfgs = configs.configs()
    if set(recorded) != {c[0] for c in cfgs}:
        sys.exit("verdicts.txt does not match configs.py: rerun run.py --record")
    fails, agree = [], 0
    for cid, base, ov in cfgs:
        s, why = stepc_verdict(stepc, configs.BASES[base][0], ov)
        m = recorded[cid]
        agree += s == m
        if (s != m) != (cid in KNOWN):
            fails.append(f"{cid}: megatron {m}, stepc {s} ({why}); known: {cid in KNOWN}: {base} {' '.join(ov)}")
    print(f"agreement with the recorded Megatron verdicts: {agree}/{len(cfgs)} = {100.0 * agree / len(cfgs):.1f}%")
    for f in fails:
        print(f)
    print(f"{len(cfgs) - len(fails)} passed, {len(fails)} failed")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
