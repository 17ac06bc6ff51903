#!/usr/bin/env python3
"""hf_recipe_llama.py STEPC — models/llama3_2_1b.lua is the real Llama 3.2 1B: it agrees with what
`stepc import --print-recipe` derives from Meta's config.json for it (tests/cli/data/llama3_2_1b,
written from the model card's public values: hidden 2048, 16 layers, 32 heads, 8 kv heads,
intermediate 8192, vocab 128256, rms_norm_eps 1e-5, tied embeddings, rope_theta 500000 with the
llama3 rope_scaling of factor 32).

- every model field the printed recipe sets has the same value in models/llama3_2_1b.lua;
- both plan to Meta's parameter count, 1,235,814,400 (1.24 B: the embedding counted once), and, with
  the shipped recipe's training section, to the same peak;
- the benchmark's shape M stays models/bench_m.lua: untied, no scaling, 1,498,482,688 parameters."""
import json
import os
import re
import subprocess
import sys
import tempfile

from checks import check, finish

stepc = sys.argv[1]
CONFIG = "tests/cli/data/llama3_2_1b"
RECIPE = "models/llama3_2_1b.lua"


def model_fields(lua):
    """The `key = value` lines of a flat recipe's model table, values as Python values."""
    body = re.search(r"model\s*=\s*\{(.*?)\n\s*\}", lua, re.S)
    out = {}
    for k, v in re.findall(r"^\s*([a-z_0-9]+)\s*=\s*([^,\n]+),", body.group(1) if body else "", re.M):
        v = v.strip()
        out[k] = v == "true" if v in ("true", "false") else v.strip('"') if v.startswith('"') else float(v)
    return out


def plan(path, *ov):
    p = subprocess.run([stepc, "plan", path, *ov, "--json"], capture_output=True, text=True, timeout=600)
    check(p.returncode == 0, f"stepc plan {path}: exit {p.returncode}: {p.stderr[-800:]}")
    return json.loads(p.stdout)["ranks"][0] if p.returncode == 0 else {}


p = subprocess.run([stepc, "import", "--print-recipe", CONFIG], capture_output=True, text=True, timeout=60)
check(p.returncode == 0, f"stepc import --print-recipe {CONFIG}: exit {p.returncode}: {p.stderr.strip()}")
printed = model_fields(p.stdout)
shipped = model_fields(open(RECIPE, encoding="utf-8").read())
check(len(printed) >= 20, f"the printed recipe's model table has {len(printed)} fields")
for k, v in printed.items():
    check(shipped.get(k) == v, f"model.{k}: printed {v!r}, {RECIPE} {shipped.get(k)!r}")

tmp = tempfile.mkdtemp(prefix="stepc-hfrecipe-")
path = os.path.join(tmp, "printed.lua")
with open(path, "w") as f:
    f.write(p.stdout)
train = ["train.micro_batch_size=2", "train.global_batch_size=2"]
a, b = plan(RECIPE), plan(path, *train)
check(a.get("params") == 1235814400 and b.get("params") == 1235814400,
      f"parameters: {RECIPE} {a.get('params')}, printed {b.get('params')}, Meta's 1235814400")
check(a.get("max_allocated_bytes") == b.get("max_allocated_bytes") and a.get("max_allocated_bytes"),
      f"max allocated with the same training section: {a.get('max_allocated_bytes')} and {b.get('max_allocated_bytes')}")
m = plan("models/bench_m.lua")
fields = model_fields(open("models/bench_m.lua", encoding="utf-8").read())
check(m.get("params") == 1498482688 and fields.get("share_embeddings_and_output_weights") is False and
      "rope_scaling" not in fields, f"models/bench_m.lua is shape M: {m.get('params')} parameters, untied, no scaling")
print(f"{len(printed)} printed model fields agree; {RECIPE}: {a.get('params')} parameters, {a.get('max_allocated_bytes')} bytes max allocated; bench_m {m.get('params')}")
finish("hf_recipe_llama")
