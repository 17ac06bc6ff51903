#!/usr/bin/env python3
"""Runs one case of tests/cli/cases.txt: `run_case.py STEPC NAME` (from the source root)."""
import os, subprocess, sys

def load_cases(path):
    cases = {}
    for line in open(path, encoding="utf-8"):
        if not line.strip() or line.startswith("#"):
            continue
        name, code, text, recipe, overrides = [f.strip() for f in line.rstrip("\n").split("|", 4)]
        cases[name] = (int(code), text, recipe, overrides.split())
    return cases

def main():
    if sys.argv[1] == "--list":
        print(";".join(load_cases(os.path.join(os.path.dirname(__file__), "cases.txt"))))
        return
    stepc, name = sys.argv[1], sys.argv[2]
    code, text, recipe, overrides = load_cases(os.path.join(os.path.dirname(__file__), "cases.txt"))[name]
    marker = "/tmp/stepc_pwned"
    if os.path.exists(marker):
        os.remove(marker)
    args = [stepc, "check"] + ([recipe] if recipe else []) + overrides
    p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    out = p.stdout + p.stderr
    ok = True
    if p.returncode < 0 or p.returncode > 4:
        print(f"FAIL {name}: crashed or bad exit code {p.returncode}")
        ok = False
    if p.returncode != code:
        print(f"FAIL {name}: exit {p.returncode}, expected {code}")
        ok = False
    if text not in out:
        print(f"FAIL {name}: expected text not found: {text!r}")
        ok = False
    if os.path.exists(marker):
        print(f"FAIL {name}: the recipe escaped the sandbox and created {marker}")
        ok = False
    print("--- output ---\n" + out)
    sys.exit(0 if ok else 1)

if __name__ == "__main__":
    main()
