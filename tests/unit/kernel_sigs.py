#!/usr/bin/env python3
"""kernel_sigs.py — checks kernels/kernel_list.h against the kernels' declarations in kernels/*.cuh.

    python3 tests/unit/kernel_sigs.py [REPO]          # exit 0 equal, 1 a difference (each printed)
    python3 tests/unit/kernel_sigs.py [REPO] --print  # the list as it should be

Every STEPC_KERNEL(name, "sig") row gives one letter per parameter (kernels/kernel_list.h says
which); the step recorder (runtime/record.c) reads launch arguments by it and step.c's literals are
printed by it, so a row that disagrees with the kernel would launch it with garbage. The parser
knows the two forms kernels/ uses: a plain `extern "C" __global__ void NAME(...)` and a macro whose
body declares `extern "C" __global__ void ... NAME(...)`, instantiated as `MACRO(realname, ...)`.
"""
import glob
import os
import re
import sys

LETTER = {"int": "i", "unsigned": "u", "unsigned int": "u", "long": "l", "long long": "l", "unsigned long long": "q",
          "float": "f", "double": "d"}


def strip_comments(s):
    s = re.sub(r"/\*.*?\*/", " ", s, flags=re.S)
    return re.sub(r"//[^\n]*", " ", s)


def params(text):
    out = ""
    for p in text.split(","):
        p = p.replace("\\", " ").replace("__restrict__", " ")
        p = re.sub(r"\bconst\b", " ", p)
        p = re.sub(r"\s+", " ", p).strip()
        if not p:
            continue
        if "*" in p:
            out += "p"
            continue
        t = re.sub(r"\s*\b\w+$", "", p).strip()
        if t not in LETTER:
            raise ValueError("parameter type %r" % p)
        out += LETTER[t]
    return out


DECL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)\s*)?(\w+)\s*\(([^)]*)\)')


def declared(repo):
    sigs = {}
    for f in sorted(glob.glob(os.path.join(repo, "kernels", "*.cuh"))):
        src = strip_comments(open(f).read())
        macros = {}
        for m in re.finditer(r"#define\s+(\w+)\(([^)]*)\)((?:[^\n]*\\\n)*[^\n]*)", src):
            body = DECL.search(m.group(3))
            if body:
                macros[m.group(1)] = (m.group(2).split(",")[0].strip(), body)
        for m in DECL.finditer(src):
            if m.group(1) in [v[0] for v in macros.values()]:
                continue
            sigs[m.group(1)] = params(m.group(2))
        for name, (arg, body) in macros.items():
            for inst in re.finditer(r"^\s*%s\((\w+)\s*," % name, src, flags=re.M):
                sigs[inst.group(1)] = params(body.group(2))
    return sigs


def listed(repo):
    text = open(os.path.join(repo, "kernels", "kernel_list.h")).read()
    return [(m.group(1), m.group(2)) for m in re.finditer(r'^STEPC_KERNEL\((\w+),\s*"(\w*)"\)', text, flags=re.M)]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    repo = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    decl = declared(repo)
    if "--print" in sys.argv:
        for n, _ in listed(repo) or [(k, "") for k in decl]:
            print('STEPC_KERNEL(%s, "%s")' % (n, decl.get(n, "?")))
        return 0
    bad = 0
    rows = listed(repo)
    if not rows:
        print("kernels/kernel_list.h has no STEPC_KERNEL(name, \"sig\") rows")
        return 1
    for n, s in rows:
        if n not in decl:
            print("%s: listed in kernel_list.h, declared in no kernels/*.cuh" % n)
            bad += 1
        elif decl[n] != s:
            print('%s: kernel_list.h says "%s", the declaration is "%s"' % (n, s, decl[n]))
            bad += 1
    print("%d kernels checked, %d differ" % (len(rows), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
