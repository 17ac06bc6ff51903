#!/usr/bin/env python3
"""The repository stands alone: `standalone.py SOURCE_DIR`.

Nothing in it may cite a file that a person who clones it does not have: no path into the
development machine's shared folder (../shared, shared/reference, shared/bench) and no DESIGN.md;
every docs/NAME.md that a file names exists; every "megatron-rules.md §N" names a section that
docs/megatron-rules.md has; every path into the repository's own folders (compiler/x.c,
runtime/cuda/, ...) that a file or comment names exists, and so does every function a comment or
doc names as `name()`, or in code comments as a backticked identifier with a stepc module prefix (`rt_exec_new`).
Names of other projects (Megatron, PyTorch, CMake) and deliberate examples are listed below. And
no function of compiler/, runtime/ or ir/ is defined and never called (the stepc_* API aside)."""
import collections, os, re, subprocess, sys

root = sys.argv[1]
# Files allowed to cite what a clone lacks (none now; add one only with a reason).
KNOWN = set()
# Paths and names that are not this repository's: Megatron-LM/Bridge files, PyTorch and CMake
# functions, Transformer Engine and Megatron option names, and examples of a user's own paths.
FOREIGN = {"models/x.lua", "docs/NAME.md", "tests/cli/no_such_recipe.lua", "tests/cli/recipes/does_not_exist.lua",
           "docs/training/activation-recomputation.md", "scripts/performance/configs/llama/llama3_workload_base_configs.py",
           "max_memory_allocated", "max_memory_reserved", "enable_testing", "recompute_mlp", "fuse_unscale", "stepc_rt",
           "get_num_cublas_streams", "get_cublas_workspace_size_bytes", "get_global_memory_buffer",
           "models/gpt/gpt_layer_specs.py"}
OWN_DIRS = "compiler|runtime|ir|kernels|templates|tests|python|examples|bench|scripts|models|docs"
path_ref = re.compile(r"(?<![\w./-])((?:" + OWN_DIRS + r")/[\w./-]*\w)")
fn_call_ref = re.compile(r"\b([a-z][a-z0-9]*_[a-z0-9_]+)\(\)")
fn_tick_ref = re.compile(r"`([a-z][a-z0-9]*_[a-z0-9_]+)`")
PREFIXES = {"rt", "plan", "spec", "graph", "cpu", "memplan", "memrank", "cost", "fuse", "ew", "image", "artifact", "cubin",
            "step", "stepc", "schedule", "scope", "recompute", "lower", "diag", "validate", "frontend", "report", "sweep",
            "api", "st", "ckpt", "comm", "op", "ops", "tensor", "kernel", "flash", "export", "import", "hf", "json", "trace"}
EXT = (".c", ".h", ".md", ".lua", ".sh", ".py", ".txt", ".cmake", ".in", ".cuh")
SKIP_DIRS = {".git", "logs"}
bad_ref = re.compile(r"(\.\./shared|shared/reference|shared/bench|shared/hooks|DESIGN\.md|DESIGN §)")
doc_ref = re.compile(r"docs/([A-Za-z0-9_-]+\.md)")
rule_ref = re.compile(r"megatron-rules\.md[^§\n]{0,3}§(\d+(?:\.\d+)?)")


def source_files():
    # the repository's files (tracked, or new and not ignored): a developer's ignored local folders
    # (carried build outputs, fetched trees) are not the repository
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout.decode("utf-8", "replace")
        names = [n for n in out.split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = None
    if names is not None:
        for n in names:
            parts = n.split("/")
            if any(p in SKIP_DIRS or p.startswith("build") or p.startswith(".") for p in parts[:-1]):
                continue
            if os.path.isfile(os.path.join(root, n)):
                yield os.path.normpath(n)
        return
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("build") and not d.startswith(".")]
        for name in files:
            yield os.path.normpath(os.path.relpath(os.path.join(dirpath, name), root))


files_here = sorted(set(source_files()))
present = set(files_here)
present |= {os.path.dirname(p) for p in present}
for p in list(present):
    while "/" in p:
        p = p.rsplit("/", 1)[0]
        present.add(p)
defined = set()
stripped = {}  # code files without their comments
for rel in present:
    if rel.endswith((".c", ".h", ".cuh", ".py", ".in", ".sh")) and os.path.isfile(os.path.join(root, rel)):
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            code = f.read()
        # identifiers of the code, comments stripped: a comment must not vouch for the name it cites
        if rel.endswith((".py", ".sh")):
            code = re.sub(r"(?m)#.*$", "", code)
        else:
            code = re.sub(r"//[^\n]*|/\*.*?\*/", "", code, flags=re.S)
        defined |= set(re.findall(r"\b([A-Za-z_]\w*)\b", code))
        stripped[rel] = code


def dead_functions():
    """Functions with external linkage in the product's C files that nothing calls: the name occurs
    nowhere but at its definition and its declarations in headers."""
    uses = collections.Counter()
    decls = collections.Counter()
    for rel, code in stripped.items():
        uses.update(re.findall(r"\b([a-z_][a-z0-9_]*)\b", code))
        if rel.endswith(".h"):
            decls.update(re.findall(r"\b([a-z_][a-z0-9_]*)\s*\(", code))
    out = []
    for rel, code in stripped.items():
        if not rel.endswith(".c") or not rel.startswith(("compiler/", "runtime/", "ir/")):
            continue
        for m in re.finditer(r"^(?!static)[A-Za-z_][\w \*]*?\b([a-z_][a-z0-9_]*)\s*\([^;{]*\)\s*\{", code, re.M):
            name = m.group(1)
            if name != "main" and not name.startswith("stepc_") and uses[name] <= 1 + decls[name]:
                out.append(f"{rel}: {name} is defined and never called")
    return out


def stale_refs(rel, n, line):
    out = []
    for p in path_ref.findall(line):
        p = p.rstrip(".")
        if p in FOREIGN or p in present or os.path.exists(os.path.join(root, p)) or any(c in p for c in "*<$"):
            continue
        if re.search(r"\.(c|h|cuh|py|sh|lua|md|in|txt|json)$", p):
            out.append(f"{rel}:{n}: names {p}, which does not exist")
    names = fn_call_ref.findall(line)
    if rel.endswith((".c", ".h", ".cuh", ".in")):  # in code, a backticked module-prefixed name is a function
        names += [w for w in fn_tick_ref.findall(line) if w.split("_")[0] in PREFIXES]
    for w in names:
        if w not in defined and w not in FOREIGN:
            out.append(f"{rel}:{n}: names {w}, which nothing defines")
    return out


with open(os.path.join(root, "docs", "megatron-rules.md"), encoding="utf-8") as f:
    sections = set(re.findall(r"^#+ §(\d+(?:\.\d+)?) ", f.read(), re.M))
fails = []
for rel in files_here:
    rel_dir, name = os.path.split(rel)
    dirpath = os.path.join(root, rel_dir)
    if rel.startswith("tests/cli/recipes/"):
        continue
    if name.endswith(EXT) and name != "standalone.py":
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
            if not rel.startswith("bench/logs"):
                fails += stale_refs(rel, n, line)
            for sec in rule_ref.findall(line):
                if sec not in sections:
                    fails.append(f"{rel}:{n}: docs/megatron-rules.md has no §{sec}")
fails += dead_functions()
for f in fails:
    print("FAIL", f)
print("standalone: ok" if not fails else f"standalone: {len(fails)} problem(s)")
sys.exit(1 if fails else 0)
