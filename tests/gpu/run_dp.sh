#!/usr/bin/env bash
# run_dp.sh — data parallel on one GPU (issue 12): NCCL with world size 1, loaded at run time
# (libnccl.so.2), its all-reduces enqueued on stepc's stream after each gradient bucket's last op
# and captured inside the full-iteration CUDA graph, must leave the step bitwise what it is without
# NCCL. For tiny (flash attention, bf16) and gpt3_tiny (bf16, unfused attention, dropout 0.1),
# eager and full_iteration:
#   stepc run ART --device cuda --steps N --json              (no communicator)
#   stepc run ART --device cuda --steps N --json --dp-join    (NCCL, one rank)
# compared on the bits of every step's loss and grad norm; the full-iteration runs must replay
# (graph: true after the warm-up) and report comm "nccl"; the graph's node count is printed
# beside the one without NCCL (the all-reduces are nodes of it).
# Also: a DP-2 artifact opened alone is refused with its message; ZeRO-1 with 2 ranks is refused
# on cuda with its message (it runs on the CPU device only so far).
#
# Run from the repository root with this machine's build/ carried (the GPU machine has no Lua
# headers to build stepc): tests/gpu/run_dp.sh. The artifacts are built there by build/stepc
# (NVRTC and cc, as run_single_driver.sh part 1). Logs and summary.txt go to $OUT (or gpu-logs).
# Exit 0 all PASS, 1 a FAIL, 77 no GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
DEST=${OUT:-gpu-logs}
mkdir -p "$DEST"
STEPS=${STEPS:-8}
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || { echo "SKIP: no GPU"; exit 77; }
fails=0
say() { echo "$*" | tee -a "$DEST/summary.txt"; }
: >"$DEST/summary.txt"
say "== $(date -u +%FT%TZ) $(hostname) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$DEST/summary.txt" 2>&1
say "libnccl: $(ldconfig -p | awk '/libnccl.so.2/ {print $NF}' | head -1)"
# stepc build links the archives and headers at the paths stepc was built with
home=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' build/CMakeCache.txt 2>/dev/null)
[ -n "$home" ] && [ ! -e "$home" ] && { mkdir -p "$(dirname "$home")" && ln -s "$root" "$home"; }
export STEPC_CACHE_DIR=/tmp/stepc-cache
ART=/tmp/dp-arts
rm -rf "$ART" && mkdir -p "$ART"
build() { # name recipe overrides...
  local name=$1 recipe=$2
  shift 2
  build/stepc build "$recipe" "$@" -o "$ART/$name" >"$DEST/build_$name.log" 2>&1 || { say "FAIL build $name: $(tail -2 "$DEST/build_$name.log")"; fails=1; }
}
build tiny models/tiny.lua
build tiny_fi models/tiny.lua model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false
build gpt3 tests/recipes/gpt3_tiny.lua model.bf16=true
build gpt3_fi tests/recipes/gpt3_tiny.lua model.bf16=true model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false
build tiny_dp2 models/tiny.lua train.world_size=2
build tiny_zero2 models/tiny.lua train.world_size=2 optimizer.use_distributed_optimizer=true

for a in tiny tiny_fi gpt3 gpt3_fi; do
  build/stepc run "$ART/$a" --device cuda --steps "$STEPS" --json >"$DEST/${a}_plain.json" 2>"$DEST/${a}_plain.err" ||
    { say "FAIL $a without NCCL: $(tail -2 "$DEST/${a}_plain.err")"; fails=1; }
  NCCL_DEBUG=${NCCL_DEBUG:-WARN} build/stepc run "$ART/$a" --device cuda --steps "$STEPS" --json --dp-join \
    >"$DEST/${a}_nccl.json" 2>"$DEST/${a}_nccl.err" || { say "FAIL $a with NCCL: $(tail -2 "$DEST/${a}_nccl.err")"; fails=1; }
done

python3 - "$DEST" 2>&1 <<'EOF' | tee -a "$DEST/summary.txt"; [ "${PIPESTATUS[0]}" -eq 0 ] || fails=1
import json, sys
dest = sys.argv[1]
bad = 0
for a in ("tiny", "tiny_fi", "gpt3", "gpt3_fi"):
    try:
        p = json.load(open(f"{dest}/{a}_plain.json"))
        n = json.load(open(f"{dest}/{a}_nccl.json"))
    except Exception as e:
        print(f"FAIL {a}: no result ({e})"); bad = 1; continue
    bits = lambda d: [(s["loss"].hex(), s["grad_norm"].hex()) for s in d["steps"]]
    ok = bits(p) == bits(n) and len(p["steps"]) > 0
    fi = a.endswith("_fi")
    replayed = all(s["graph"] for s in n["steps"][-2:]) if fi else True
    ok = ok and n.get("comm") == "nccl" and p.get("comm") == "none" and replayed
    print(f"{'PASS' if ok else 'FAIL'} {a} ({n['mode']}): NCCL world size 1 {'==' if bits(p) == bits(n) else '!='} no NCCL, "
          f"{len(n['steps'])} steps, last loss {n['steps'][-1]['loss']!r} vs {p['steps'][-1]['loss']!r}; comm {n.get('comm')}; "
          f"replayed {replayed}; graph nodes {n['measure']['graph_nodes']} (without NCCL {p['measure']['graph_nodes']}); "
          f"ms/step {n['steps'][-1]['ms']:.3f} vs {p['steps'][-1]['ms']:.3f}")
    bad |= not ok
sys.exit(bad)
EOF

# refusals: a DP-2 artifact alone; ZeRO-1 over 2 ranks on cuda (one GPU: the ranks would share it,
# which NCCL refuses, so only the message is checked, from rank 0 alone with a short timeout)
build/stepc run "$ART/tiny_dp2" --device cuda --steps 1 >"$DEST/dp2_alone.out" 2>"$DEST/dp2_alone.err" &&
  { say "FAIL a DP-2 artifact ran alone"; fails=1; }
grep -q "planned for 2 data-parallel ranks" "$DEST/dp2_alone.err" && say "PASS a DP-2 artifact alone is refused: $(tail -1 "$DEST/dp2_alone.err")" ||
  { say "FAIL no clear refusal for a DP-2 artifact alone: $(tail -1 "$DEST/dp2_alone.err")"; fails=1; }
RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 build/stepc run "$ART/tiny_zero2" --device cuda --steps 1 --comm-timeout 5 \
  >"$DEST/zero2.out" 2>"$DEST/zero2.err" && { say "FAIL ZeRO-1 over 2 ranks ran on cuda"; fails=1; }
grep -q "distributed optimizer" "$DEST/zero2.err" && say "PASS ZeRO-1 on cuda is refused: $(tail -1 "$DEST/zero2.err")" ||
  { say "FAIL no clear refusal for ZeRO-1 on cuda: $(tail -1 "$DEST/zero2.err")"; fails=1; }

say "== $([ $fails -eq 0 ] && echo PASS || echo FAIL): data parallel on one GPU"
exit $fails
