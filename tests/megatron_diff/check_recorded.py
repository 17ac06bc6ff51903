#!/usr/bin/env python3
"""check_recorded.py — the stepc side of the Megatron differential test, for CI (no torch, no Megatron).

  check_recorded.py STEPC ROOT

Runs `stepc check` on every configuration of configs.py, the fixed list (configs()) and the random
one (random_configs(), every recipe of models/), and compares its verdict with Megatron's, as
run.py recorded them in verdicts.txt and verdicts_random.txt. Fails when a configuration disagrees
that is not listed in KNOWN (the differences docs/rules.md explains), or when a KNOWN one now agrees
(update the list and the docs), or when a verdicts file does not match configs.py.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import configs  # noqa: E402
from run import stepc_verdict  # noqa: E402

# Configuration id -> the reason stepc deliberately differs (docs/rules.md, "Megatron differential").
KNOWN = {
    "rand-036": "MCORE-23: an unknown recompute_modules name is refused at load under any granularity",
    "rand-186": "STEPC-1: recompute_num_layers=0 with the uniform method never ends in Megatron",
}


def recorded_verdicts(name):
    out = {}
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), name)) as fh:
        for line in fh:
            w = line.split("#", 1)[0].split()
            if w:
                out[w[0]] = w[1]
    return out


def main():
    stepc = os.path.abspath(sys.argv[1])
    sets = [("verdicts.txt", configs.configs()), ("verdicts_random.txt", configs.random_configs())]
    fails, agree, total = [], 0, 0
    for fname, cfgs in sets:
        recorded = recorded_verdicts(fname)
        if set(recorded) != {c[0] for c in cfgs}:
            sys.exit(f"{fname} does not match configs.py: rerun run.py --record")
        n_agree = 0
        for cid, base, ov in cfgs:
            s, why = stepc_verdict(stepc, configs.base_of(base)[0], ov)
            m = recorded[cid]
            n_agree += s == m
            if (s != m) != (cid in KNOWN):
                fails.append(f"{cid}: megatron {m}, stepc {s} ({why}); known: {cid in KNOWN}: {base} {' '.join(ov)}")
        print(f"{fname}: agreement with the recorded Megatron verdicts: {n_agree}/{len(cfgs)} = "
              f"{100.0 * n_agree / len(cfgs):.1f}%")
        agree, total = agree + n_agree, total + len(cfgs)
    for f in fails:
        print(f)
    print(f"{total - len(fails)} passed, {len(fails)} failed")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
