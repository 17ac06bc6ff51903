#!/usr/bin/env python3
"""run_rules.py — the validator corpus runner (tests/rules/cases.txt).

  run_rules.py STEPC ROOT rule RULE_ID   every case of one rule id
  run_rules.py STEPC ROOT all            every case
  run_rules.py STEPC ROOT models         every shipped recipe in models/ passes `stepc check` (exit 0)
  run_rules.py STEPC ROOT coverage       every rule id the validator sources can emit has a
                                         reject-or-warn case and a pass case in the corpus

STEPC is the stepc binary; ROOT the repository root (cases name recipes relative to it).
Exit 0 when everything holds; otherwise prints one line per failure and exits 1.
"""
import glob
import json
import os
import re
import subprocess
import sys

RULE_RE = re.compile(r'"((?:MCORE|STEPC)-[0-9]+)"')
EXPECTS = ("reject", "warn", "note", "pass")


def load_cases(root):
    path = os.path.join(root, "tests", "rules", "cases.txt")
    aliases, cases = {}, []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if words[0] == "alias":
                aliases[words[1]] = words[2]
                continue
            if len(words) < 4 or words[1] not in EXPECTS or not words[2].isdigit():
                sys.exit(f"cases.txt:{lineno}: expected 'RULE reject|warn|pass EXIT RECIPE [KEY=VALUE ...]'")
            rule, expect, code, recipe = words[:4]
            cases.append({"line": lineno, "rule": rule, "expect": expect, "exit": int(code),
                          "recipe": aliases.get(recipe, recipe), "overrides": words[4:]})
    return cases


def run_check(stepc, root, recipe, overrides):
    p = subprocess.run([stepc, "check", recipe, *overrides, "--json"], cwd=root,
                       capture_output=True, text=True, timeout=60)
    try:
        out = json.loads(p.stdout)
    except json.JSONDecodeError:
        out = None
    return p.returncode, out, p.stderr


def describe(case):
    return f"cases.txt:{case['line']} {case['rule']} {case['expect']}: stepc check {case['recipe']} " + \
        " ".join(case["overrides"])


def check_case(stepc, root, case):
    """Returns a list of failure strings (empty when the case holds)."""
    code, out, err = run_check(stepc, root, case["recipe"], case["overrides"])
    head = describe(case)
    if out is None:
        return [f"{head}\n    no JSON on stdout (exit {code}); stderr: {err.strip()}"]
    fails = []
    diags = out.get("diagnostics", [])
    summary = "; ".join(f"{d['severity']} {d['rule']}: {d['message']}" for d in diags) or "no diagnostics"
    if code != case["exit"]:
        fails.append(f"exit {code}, expected {case['exit']}")
    if out.get("ok") != (code == 0):
        fails.append(f"\"ok\" is {out.get('ok')} but the exit code is {code}")
    mine = [d for d in diags if d["rule"] == case["rule"]]
    want = {"reject": "error", "warn": "warning", "note": "note"}.get(case["expect"])
    if want and not any(d["severity"] == want for d in mine):
        fails.append(f"no {want} {case['rule']}")
    if case["expect"] == "pass" and mine:
        fails.append(f"{case['rule']} reported although the case should pass")
    # Every validator diagnostic names its field and location and says what to change.
    for d in diags:
        if not RULE_RE.fullmatch('"' + d["rule"] + '"'):
            continue
        missing = [k for k in ("field", "message", "where", "hint") if not d.get(k)]
        if missing:
            fails.append(f"{d['rule']} has an empty {', '.join(missing)}")
    return [f"{head}\n    {f}\n    got: {summary}" for f in fails]


def cmd_cases(stepc, root, cases):
    fails = []
    for case in cases:
        fails += check_case(stepc, root, case)
    for f in fails:
        print("FAIL", f)
    print(f"{len(cases) - len({f.split(chr(10))[0] for f in fails})}/{len(cases)} cases hold")
    return 1 if fails or not cases else 0


def cmd_models(stepc, root):
    fails = 0
    recipes = sorted(glob.glob(os.path.join(root, "models", "*.lua")))
    for path in recipes:
        rel = os.path.relpath(path, root)
        code, out, err = run_check(stepc, root, rel, [])
        errors = [d for d in (out or {}).get("diagnostics", []) if d["severity"] == "error"]
        if code != 0 or out is None:
            fails += 1
            print(f"FAIL {rel}: exit {code}; " + "; ".join(f"{d['rule']}: {d['message']}" for d in errors)
                  + (err.strip() if out is None else ""))
        else:
            warns = [d["rule"] for d in out["diagnostics"]]
            print(f"ok   {rel}" + (f" (warnings: {', '.join(warns)})" if warns else ""))
    return 1 if fails or not recipes else 0


def emitted_rules(root):
    rules = set()
    # the field rules, and the graph checks `stepc check` runs after them (compiler/passes/scope.c)
    for path in glob.glob(os.path.join(root, "compiler", "validate", "validate*.c")) + [os.path.join(root, "compiler", "passes", "scope.c")]:
        with open(path, encoding="utf-8") as f:
            rules |= set(RULE_RE.findall(f.read()))
    return rules


def cmd_coverage(root, cases):
    rules = emitted_rules(root)
    fails = 0
    for rule in sorted(rules, key=lambda r: (r.split("-")[0], int(r.split("-")[1]))):
        kinds = {c["expect"] for c in cases if c["rule"] == rule}
        need = []
        if not kinds & {"reject", "warn", "note"}:
            need.append("a reject or warn case")
        if "pass" not in kinds:
            need.append("a pass case")
        if need:
            fails += 1
            print(f"FAIL {rule} is emitted by compiler/validate*.c but cases.txt lacks {' and '.join(need)}")
    unknown = {c["rule"] for c in cases} - rules - {"MCORE-9", "MCORE-10", "MCORE-13", "MCORE-14", "MCORE-23"}
    for rule in sorted(unknown):
        fails += 1
        print(f"FAIL cases.txt names {rule}, which no validator source emits (a typo, or a removed rule?)")
    print(f"{len(rules)} rule ids emitted by the validator; {fails} uncovered")
    return 1 if fails or not rules else 0


def main(argv):
    if len(argv) < 4:
        sys.exit(__doc__)
    stepc, root, mode = argv[1], argv[2], argv[3]
    cases = load_cases(root)
    if mode == "rule":
        return cmd_cases(stepc, root, [c for c in cases if c["rule"] == argv[4]])
    if mode == "all":
        return cmd_cases(stepc, root, cases)
    if mode == "models":
        return cmd_models(stepc, root)
    if mode == "coverage":
        return cmd_coverage(root, cases)
    sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
