#!/usr/bin/env python3
"""eval_run.py STEPC — `stepc run --eval-data PATH --eval-every N` (compiler/cli/run_artifact.c): the
validation loss in the steps where it ran (--json "eval_loss", text "val"), none elsewhere; the
training losses, grad norms and LRs bitwise those of the run without evaluations (stepc_eval changes
no state); the same validation batch every time (two runs agree); usage and file errors."""
import json
import subprocess
import sys

stepc = sys.argv[1]
base = [stepc, "run", "models/tiny.lua", "--device", "cpu", "--steps", "4"]


def run(*extra):
    r = subprocess.run([*base, *extra], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


ok = True
rc, plain, _ = run("--json")
rc2, ev, err = run("--json", "--eval-every", "2", "--eval-data", "README.md")
a, b = json.loads(plain)["steps"], json.loads(ev)["steps"]
where = [s["step"] for s in b if "eval_loss" in s]
same = all(x[k] == y[k] for x, y in zip(a, b) for k in ("loss", "lr", "grad_norm")) and len(a) == len(b) == 4
print(f"--json: eval_loss at steps {where}; training bitwise the run without evaluations: {same}")
ok &= rc == rc2 == 0 and where == [2, 4] and same and all(0 < s["eval_loss"] < 10 for s in b if "eval_loss" in s)
_, again, _ = run("--json", "--eval-every", "2", "--eval-data", "README.md")
ok &= [s.get("eval_loss") for s in json.loads(again)["steps"]] == [s.get("eval_loss") for s in b]
rc, text, _ = run("--eval-every", "3", "--eval-data", "README.md")
lines = [l for l in text.splitlines() if l.startswith("step")]
print(f"text: {sum(' val ' in l for l in lines)} of {len(lines)} step lines carry val")
ok &= rc == 0 and [" val " in l for l in lines] == [False, False, True, False]
rc, text, _ = run("--eval-data", "README.md")  # no --eval-every: after the last step
ok &= rc == 0 and [" val " in l for l in text.splitlines() if l.startswith("step")] == [False, False, False, True]
rc, _, err = run("--eval-every", "2")
print(f"--eval-every without --eval-data: exit {rc}: {err.strip()}")
ok &= rc == 3 and "add --eval-data PATH" in err
rc, _, err = run("--eval-data", "/nonexistent/val.txt")
print(f"a missing --eval-data file: exit {rc}: {err.strip()[:120]}")
ok &= rc == 4 and "--eval-data /nonexistent/val.txt" in err
print("ok" if ok else "FAILED")
sys.exit(0 if ok else 1)
