#!/usr/bin/env python3
"""The GPU tests launch each kernel with as many arguments as it takes: `gpu_test_args.py SOURCE_DIR`.

tests/gpu/*.c launch the kernels of kernels/*.cuh by name through cuLaunchKernel with an array of
argument pointers (`void *a[] = {&x, &n}; gpu_launch(g, "name", ..., a);`). The driver reads as many
pointers as the kernel has parameters, so an array one short makes the kernel read garbage as its
last argument: an illegal address at run time on the GPU, found only there (2026-12-05: the
embedding_backward_position check lacked the sequence-parallel rank pointer the kernel gained).
This check runs without a GPU: every launch whose argument array is a literal in the same file is
compared with the kernel's parameter count; a kernel name no .cuh defines is reported too.
Exits 0 when every launch matches, 1 with one line a mismatch."""
import glob, os, re, sys

root = sys.argv[1] if len(sys.argv) > 1 else "."


def strip_comments(s):
    s = re.sub(r"/\*.*?\*/", "", s, flags=re.S)
    return re.sub(r"//[^\n]*", "", s)


def top_level_count(body):
    """Comma-separated items of an initializer or parameter list, nested brackets kept whole."""
    depth, n, item = 0, 0, False
    for ch in body:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            n, item = n + (1 if item else 0), False
        elif not ch.isspace():
            item = True
    return n + (1 if item else 0)


params = {}
for path in glob.glob(os.path.join(root, "kernels", "*.cuh")):
    src = strip_comments(open(path).read())
    for m in re.finditer(r'extern\s+"C"\s+__global__\s+void\s+(?:__\w+__\s*\([^)]*\)\s*)*(\w+)\s*\(', src):
        depth, i = 1, m.end()
        while depth and i < len(src):
            depth += {"(": 1, ")": -1}.get(src[i], 0)
            i += 1
        params[m.group(1)] = top_level_count(src[m.end():i - 1])

bad, checked = [], 0
for path in sorted(glob.glob(os.path.join(root, "tests", "gpu", "*.c"))):
    src = strip_comments(open(path).read())
    arrays = []  # (position, name, count) of every `*name[] = {...}`
    for m in re.finditer(r"\*\s*(\w+)\s*\[\s*\]\s*=\s*\{", src):
        depth, i = 1, m.end()
        while depth and i < len(src):
            depth += {"{": 1, "}": -1}.get(src[i], 0)
            i += 1
        arrays.append((m.start(), m.group(1), top_level_count(src[m.end():i - 1])))
    rel = os.path.relpath(path, root)
    for m in re.finditer(r'gpu_launch\s*\(\s*\w+\s*,\s*"(\w+)"', src):
        name = m.group(1)
        depth, i = 1, src.index("(", m.start()) + 1
        while depth and i < len(src):
            depth += {"(": 1, ")": -1}.get(src[i], 0)
            i += 1
        last = src[src.index("(", m.start()) + 1:i - 1].rsplit(",", 1)[-1].strip()
        line = src.count("\n", 0, m.start()) + 1
        if name not in params:
            bad.append(f"{rel}:{line}: gpu_launch of {name}, which no kernels/*.cuh defines")
            continue
        seen = [n for pos, a, n in arrays if a == last and pos < m.start()]
        if not seen:
            continue  # an array built elsewhere (a helper's parameter): not a literal here
        checked += 1
        if seen[-1] != params[name]:
            bad.append(f"{rel}:{line}: {name} takes {params[name]} arguments, the launch passes {seen[-1]} ({last})")

for b in bad:
    print("FAIL " + b)
print(f"{checked} launches checked against {len(params)} kernels, {len(bad)} mismatched")
sys.exit(1 if bad or checked == 0 else 0)
