#!/usr/bin/env python3
"""The repository stands alone: `standalone.py SOURCE_DIR`.

Nothing in it may cite a file that a person who clones it does not have: no path into the
development machine's shared folder (../shared, shared/reference, shared/bench) and no DESIGN.md;
every docs/NAME.md that a file names exists; every "megatron-rules.md §N" names a section that
docs/megatron-rules.md has."""
import os, re, sys

root = sys.argv[1]
# Files allowed to cite what a clone lacks (none now; add one only with a reason).
KNOWN = set()
EXT = (".c", ".h", ".md", ".lua", ".sh", ".py", ".txt", ".cmake", ".in", ".cuh")
SKIP_DIRS = {".git", "logs"}
bad_ref = re.compile(r"(\.\./shared|shared/reference|shared/bench|shared/hooks|DESIGN\.md|DESIGN §)")
doc_ref = re.compile(r"docs/([A-Za-z0-9_-]+\.md)")
rule_ref = re.compile(r"megatron-rules\.md[^§\n]{0,3}§(\d+(?:\.\d+)?)")

with open(os.path.join(root, "docs", "megatron-rules.md"), encoding="utf-8") as f:
    sections = set(re.findall(r"^#+ §(\d+(?:\.\d+)?) ", f.read(), re.M))
fails = []
for dirpath, dirs, files in os.walk(root):
    rel_dir = os.path.relpath(dirpath, root)
    dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("build") and not d.startswith(".")]
    if rel_dir.startswith("tests/cli/recipes"):
        continue
    for name in files:
        if not name.endswith(EXT) or name == "standalone.py":
            continue
        rel = os.path.normpath(os.path.join(rel_dir, name))
        try:
            text = open(os.path.join(dirpath, name), encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if bad_ref.search(line) and rel not in KNOWN:
                fails.append(f"{rel}:{n}: cites a file outside the repository: {line.strip()[:120]}")
            for doc in doc_ref.findall(line):
                if not os.path.exists(os.path.join(root, "docs", doc)):
                    fails.append(f"{rel}:{n}: docs/{doc} does not exist")
            for sec in rule_ref.findall(line):
                if sec not in sections:
                    fails.append(f"{rel}:{n}: docs/megatron-rules.md has no §{sec}")
for f in fails:
    print("FAIL", f)
print("standalone: ok" if not fails else f"standalone: {len(fails)} problem(s)")
sys.exit(1 if fails else 0)
