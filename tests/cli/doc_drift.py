#!/usr/bin/env python3
"""Docs that quote stepc's output say what it prints: `doc_drift.py STEPC`.

- docs/cpu-reference.md's example of `stepc run --device cpu --json` names exactly the keys that
  `stepc run models/tiny.lua --device cpu --steps 1 --json` prints (top level, a step, measure);
- models/tiny.lua's comment gives the parameter count `stepc plan --json` reports
  (ranks[0].params)."""
import json, re, subprocess, sys
from checks import check, finish

stepc = sys.argv[1]


def stepc_json(*args):
    p = subprocess.run([stepc] + list(args), capture_output=True, text=True, timeout=600)
    check(p.returncode == 0, f"stepc {' '.join(args)}: exit {p.returncode}: {p.stderr[-1500:]}")
    return json.loads(p.stdout) if p.returncode == 0 else None


# the doc's example: the first `{...}` code span after "with `--json`" in the command-line section
doc = open("docs/cpu-reference.md", encoding="utf-8").read()
m = re.search(r"with `--json`.*?`(\{.*?\})`", doc, re.S)
check(m, "docs/cpu-reference.md: no `--json` example")
out = stepc_json("run", "models/tiny.lua", "--device", "cpu", "--steps", "1", "--json")
if m and out:
    text = m.group(1)
    steps = re.search(r'"steps": \[(\{.*?\})', text, re.S)
    measure = re.search(r'"measure":\s*(\{.*?\})', text, re.S)
    keys = lambda s: set(re.findall(r'"([a-z_0-9]+)"(?=\s*:)', s))  # "key": value
    step_keys = keys(steps.group(1)) if steps else set()
    measure_keys = set(re.findall(r'"([a-z_0-9]+)"', measure.group(1))) if measure else set()  # a list of names
    top = keys(re.sub(r'"steps": \[.*?\]|"measure":\s*\{.*?\}', "", text, flags=re.S))
    top |= {k for k, found in (("steps", steps), ("measure", measure)) if found}
    check(top == set(out), f"run --json top-level keys: doc {sorted(top)}, printed {sorted(out)}")
    check(out.get("steps") and step_keys == set(out["steps"][0]), f"a step's keys: doc {sorted(step_keys)}, printed {sorted(out['steps'][0]) if out.get('steps') else None}")
    check(measure_keys == set(out.get("measure", {})), f"measure keys: doc {sorted(measure_keys)}, printed {sorted(out.get('measure', {}))}")

plan = stepc_json("plan", "models/tiny.lua", "--json")
tiny = open("models/tiny.lua", encoding="utf-8").read()
counts = [int(x.replace(",", "")) for x in re.findall(r"^--.*= ([0-9][0-9,]*)\b", tiny, re.M)]
if plan:
    params = plan["ranks"][0]["params"]
    check(counts and counts[-1] == params, f"models/tiny.lua says {counts[-1:] or 'no count'} parameters, stepc plan {params}")
    print(f"tiny: {params} parameters")
finish("doc_drift")
