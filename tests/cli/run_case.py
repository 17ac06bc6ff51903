#!/usr/bin/env python3
"""Runs one case of tests/cli/cases.txt or tests/cli/verbs.txt: `run_case.py STEPC NAME` (from the
source root); `run_case.py --list cases|verbs` prints the names of one file's cases.

cases.txt runs `stepc check RECIPE OVERRIDES` (its header says the format). verbs.txt runs any
verb; each line is

    name | expected exit | texts that must appear on stdout+stderr | stepc arguments

where several texts are joined by &&, one starting with ! must NOT appear, @json says that stdout
must be one JSON document (parsed by python's json, which rejects invalid UTF-8), the arguments are
split as a shell would (shlex) and $TMP is replaced by a fresh temporary directory, removed
afterwards. Every case fails on a crash (a signal, or an exit code outside 0..5), on a run
longer than 50 s, and when a sandbox escape created /tmp/stepc_pwned."""
import json, os, shlex, shutil, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MARKER = "/tmp/stepc_pwned"


def load(kind):
    cases = {}
    for line in open(os.path.join(HERE, kind + ".txt"), encoding="utf-8"):
        if not line.strip() or line.startswith("#"):
            continue
        if kind == "cases":
            name, code, text, recipe, overrides = [f.strip() for f in line.rstrip("\n").split("|", 4)]
            cases[name] = (int(code), [text], ["check"] + ([recipe] if recipe else []) + overrides.split())
        else:
            name, code, text, args = [f.strip() for f in line.rstrip("\n").split("|", 3)]
            cases[name] = (int(code), [t.strip() for t in text.split("&&")], shlex.split(args))
    return cases


def main():
    if sys.argv[1] == "--list":
        print(";".join(load(sys.argv[2] if len(sys.argv) > 2 else "cases")))
        return
    stepc, name = sys.argv[1], sys.argv[2]
    cases = load("cases")
    cases.update(load("verbs"))
    code, texts, args = cases[name]
    if os.path.exists(MARKER):
        os.remove(MARKER)
    tmp = tempfile.mkdtemp(prefix="stepc_case_")
    argv = [stepc] + [a.replace("$TMP", tmp) for a in args]
    try:
        p = subprocess.run(argv, capture_output=True, timeout=50)
    except subprocess.TimeoutExpired:
        print(f"FAIL {name}: still running after 50 s: {' '.join(argv)}")
        sys.exit(1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = (p.stdout + p.stderr).decode("utf-8", "replace")
    fails = []
    if p.returncode < 0 or p.returncode > 5:
        fails.append(f"crashed or bad exit code {p.returncode}")
    if p.returncode != code:
        fails.append(f"exit {p.returncode}, expected {code}")
    for t in texts:
        if t == "@json":
            try:
                json.loads(p.stdout.decode("utf-8"))
            except ValueError as e:  # UnicodeDecodeError is a ValueError too
                fails.append(f"stdout is not one JSON document: {e}")
        elif t.startswith("!") and t[1:] in out:
            fails.append(f"unexpected text found: {t[1:]!r}")
        elif not t.startswith("!") and t not in out:
            fails.append(f"expected text not found: {t!r}")
    if os.path.exists(MARKER):
        fails.append(f"the recipe escaped the sandbox and created {MARKER}")
    for f in fails:
        print(f"FAIL {name}: {f}")
    print("--- " + " ".join(argv) + "\n--- output ---\n" + out[-4000:])
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
