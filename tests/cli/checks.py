"""What the CLI's Python tests share: check() records a failure and prints it; finish() prints the
verdict and exits 1 on any failure."""
import sys

fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL", what)
    return bool(cond)


def finish(name):
    print(f"{name}: ok" if not fails else f"{name}: {len(fails)} failure(s)")
    sys.exit(1 if fails else 0)
