#!/usr/bin/env bash
# run_graphs.sh — step time by CUDA-graph mode on one GPU: eager, full_iteration and the scoped
# per-module graphs (transformer_engine [] / [attn] / [mlp], local []), for tiny and
# gpt2_small_llama (shape S), `stepc run --json`. Run from the repository root (or a copy holding
# build/ and models/):
#   bench/run_graphs.sh            STEPS (default 30 tiny, 15 S) steps; 3 warm-up steps each
# One JSON per run to $OUT (or ./bench-graphs-out), stderr to graphs.log, and a table on stdout.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DEST=${OUT:-bench-graphs-out}
mkdir -p "$DEST"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/stepc-xdg}
MODES=("none" "full_iteration" "transformer_engine []" "transformer_engine [attn]" "transformer_engine [mlp]" "local []")
printf "%-18s %-28s %10s %8s %7s %12s %10s\n" model mode median_ms graphs nodes eager_ops max_alloc_GB
for m in tiny:${TINY_STEPS:-30} gpt2_small_llama:${S_STEPS:-15}; do
  recipe=${m%%:*}; steps=${m##*:}
  for mode in "${MODES[@]}"; do
    set -- $mode
    impl=$1; mods=${2:-[]}
    tag=${recipe}_${impl}_$(echo "$mods" | tr -d '[],')
    timeout 180 "$BUILD/stepc" run "models/$recipe.lua" --device cuda --steps "$steps" --json model.cuda_graph_impl="$impl" \
      "model.cuda_graph_modules=$mods" model.cuda_graph_warmup_steps=3 model.check_for_nan_in_loss_and_grad=false \
      >"$DEST/$tag.json" 2>>"$DEST/graphs.log"
    rc=$?
    python3 - "$DEST/$tag.json" "$recipe" "$mode" "$rc" <<'PY'
import json, sys
path, recipe, mode, rc = sys.argv[1:]
try:
    m = json.load(open(path))["measure"]
    print("%-18s %-28s %10.3f %8d %7d %12d %10.3f" % (recipe, mode, m["median_ms"], m.get("graphs", 0), m["graph_nodes"],
          m.get("eager_ops_per_micro", -1), m["max_allocated_bytes"] / 1e9))
except Exception as e:
    print("%-18s %-28s failed (exit %s): %s" % (recipe, mode, rc, e))
PY
  done
done
