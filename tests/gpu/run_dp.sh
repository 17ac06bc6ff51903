#!/usr/bin/env bash
# run_dp.sh — data parallel on one GPU (issue 12): NCCL with world size 1, loaded at run time
# (libnccl.so.2), each gradient bucket's collective enqueued on the communication stream (a second
# CUDA stream, forked from stepc's by an event) right after the launch that last writes its
# gradients, joined back before the tail, and captured inside the full-iteration CUDA graph, must
# leave the step bitwise what it is without NCCL. For tiny (flash attention, bf16) and gpt3_tiny
# (bf16, unfused attention, dropout 0.1), eager, full_iteration and scoped graphs (tiny:
# transformer_engine [attn]; gpt3_tiny: local), where the collectives run between the graphs:
#   stepc run ART --device cuda --steps N --json              (no communicator)
#   stepc run ART --device cuda --steps N --json --dp-join    (NCCL, one rank)
#   stepc run ART_ZERO --device cuda --steps N --json --dp-join
#       (ZeRO-1, optimizer.use_distributed_optimizer=true: reduce to the owner, the masked
#        optimizer, the norm partials summed over the ranks, the parameters broadcast)
# compared on the bits of every step's loss and grad norm; the full-iteration runs must replay
# (graph: true after the warm-up) and report comm "nccl"; the graph's node count is printed
# beside the one without NCCL (the collectives, events and waits are nodes of it).
# Then one profiled step of tiny and of tiny's ZeRO-1 with NCCL (--profile --timeline): the
# "comm stream:" line must name one bucket collective, and the trace must hold a "comm stream"
# track with the bucket's slice (ZeRO-1: the norm exchange and the parameter broadcast too); the
# overlap it measures is printed (on one GPU NCCL's one-rank collectives are nearly free: the
# overlap's size is to be measured with two ranks).
# ZeRO-1's memory at world size 1: the optimizer-state region (the masters and moments, out of the
# arena) holds the whole state, as stepc plan --json predicts; arena + region <= the plain step's.
# Also: a DP-2 artifact opened alone is refused with its message.
#
# Run from the repository root with this machine's build/ carried (the GPU machine has no Lua
# headers to build stepc): tests/gpu/run_dp.sh (BUILD names another build tree, default build). The
# artifacts are built there by $BUILD/stepc (NVRTC and cc, as run_single_driver.sh part 1). Logs and summary.txt go to $OUT (or gpu-logs).
# Exit 0 all PASS, 1 a FAIL, 77 no GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
BUILD=${BUILD:-build}
DEST=${OUT:-gpu-logs}
mkdir -p "$DEST"
STEPS=${STEPS:-8}
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || { echo "SKIP: no GPU"; exit 77; }
fails=0
say() { echo "$*" | tee -a "$DEST/summary.txt"; }
: >"$DEST/summary.txt"
say "== $(date -u +%FT%TZ) $(hostname) commit ${STEPC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$DEST/summary.txt" 2>&1
say "libnccl: $(ldconfig -p | awk '/libnccl.so.2/ {print $NF}' | head -1)"
# stepc build links the archives and headers at the paths stepc was built with
home=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
[ -n "$home" ] && [ ! -e "$home" ] && { mkdir -p "$(dirname "$home")" && ln -s "$root" "$home"; }
export STEPC_CACHE_DIR=/tmp/stepc-cache
ART=/tmp/dp-arts
rm -rf "$ART" && mkdir -p "$ART"
build() { # name recipe overrides...
  local name=$1 recipe=$2
  shift 2
  "$BUILD/stepc" build "$recipe" "$@" -o "$ART/$name" >"$DEST/build_$name.log" 2>&1 || { say "FAIL build $name: $(tail -2 "$DEST/build_$name.log")"; fails=1; }
}
build tiny models/tiny.lua
build tiny_fi models/tiny.lua model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false
build gpt3 tests/recipes/gpt3_tiny.lua model.bf16=true
build gpt3_fi tests/recipes/gpt3_tiny.lua model.bf16=true model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false
build tiny_dp2 models/tiny.lua train.world_size=2
ZERO=optimizer.use_distributed_optimizer=true
build tiny_zero models/tiny.lua $ZERO
build tiny_zero_fi models/tiny.lua $ZERO model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false
build gpt3_zero tests/recipes/gpt3_tiny.lua model.bf16=true $ZERO
build gpt3_zero_fi tests/recipes/gpt3_tiny.lua model.bf16=true $ZERO model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false
# scoped graphs: the collectives run between them (after the graph holding a bucket's last write)
TE_ATTN="model.cuda_graph_impl=transformer_engine model.cuda_graph_modules=[attn]"
build tiny_sc models/tiny.lua $TE_ATTN
build tiny_sc_zero models/tiny.lua $ZERO $TE_ATTN
build gpt3_sc tests/recipes/gpt3_tiny.lua model.bf16=true model.cuda_graph_impl=local
build gpt3_sc_zero tests/recipes/gpt3_tiny.lua model.bf16=true $ZERO model.cuda_graph_impl=local

for a in tiny tiny_fi gpt3 gpt3_fi tiny_sc gpt3_sc; do
  "$BUILD/stepc" run "$ART/$a" --device cuda --steps "$STEPS" --json >"$DEST/${a}_plain.json" 2>"$DEST/${a}_plain.err" ||
    { say "FAIL $a without NCCL: $(tail -2 "$DEST/${a}_plain.err")"; fails=1; }
  NCCL_DEBUG=${NCCL_DEBUG:-WARN} "$BUILD/stepc" run "$ART/$a" --device cuda --steps "$STEPS" --json --dp-join \
    >"$DEST/${a}_nccl.json" 2>"$DEST/${a}_nccl.err" || { say "FAIL $a with NCCL: $(tail -2 "$DEST/${a}_nccl.err")"; fails=1; }
  z=${a/_fi/_zero_fi}; [ "$z" = "$a" ] && z=${a}_zero
  NCCL_DEBUG=${NCCL_DEBUG:-WARN} "$BUILD/stepc" run "$ART/$z" --device cuda --steps "$STEPS" --json --dp-join \
    >"$DEST/${a}_zero.json" 2>"$DEST/${a}_zero.err" || { say "FAIL $z (ZeRO-1) with NCCL: $(tail -2 "$DEST/${a}_zero.err")"; fails=1; }
done

python3 - "$DEST" 2>&1 <<'EOF' | tee -a "$DEST/summary.txt"; [ "${PIPESTATUS[0]}" -eq 0 ] || fails=1
import json, sys
dest = sys.argv[1]
bad = 0
for a, kind in [(a, k) for a in ("tiny", "tiny_fi", "gpt3", "gpt3_fi", "tiny_sc", "gpt3_sc") for k in ("nccl", "zero")]:
    try:
        p = json.load(open(f"{dest}/{a}_plain.json"))
        n = json.load(open(f"{dest}/{a}_{kind}.json"))
    except Exception as e:
        print(f"FAIL {a} {kind}: no result ({e})"); bad = 1; continue
    bits = lambda d: [(s["loss"].hex(), s["grad_norm"].hex()) for s in d["steps"]]
    ok = bits(p) == bits(n) and len(p["steps"]) > 0
    fi = a.endswith("_fi") or a.endswith("_sc")  # full-iteration or scoped graphs: must replay
    replayed = all(s["graph"] for s in n["steps"][-2:]) if fi else True
    ok = ok and n.get("comm") == "nccl" and p.get("comm") == "none" and replayed
    print(f"{'PASS' if ok else 'FAIL'} {a}{' ZeRO-1' if kind == 'zero' else ''} ({n['mode']}): NCCL world size 1 {'==' if bits(p) == bits(n) else '!='} no NCCL, "
          f"{len(n['steps'])} steps, last loss {n['steps'][-1]['loss']!r} vs {p['steps'][-1]['loss']!r}; comm {n.get('comm')}; "
          f"replayed {replayed}; graph nodes {n['measure']['graph_nodes']} (without NCCL {p['measure']['graph_nodes']}); "
          f"ms/step {n['steps'][-1]['ms']:.3f} vs {p['steps'][-1]['ms']:.3f}")
    bad |= not ok
sys.exit(bad)
EOF

# the distributed optimizer's memory at world size 1: the optimizer-state region holds the whole
# state (one rank owns every tensor); it is what stepc plan --json predicts, and the allocated
# bytes at most the plain step's (the masters and moments moved from the arena into the region,
# packed at 16 bytes instead of the arena's 256), the predicted peak stepc plan's and at most the plain
# step's (at world size 1 the plan has no staging: a --dp-join run allocates its own, outside the plan)
for a in tiny gpt3; do
  z=""; [ "$a" = gpt3 ] && z="model.bf16=true"
  r=models/tiny.lua; [ "$a" = gpt3 ] && r=tests/recipes/gpt3_tiny.lua
  "$BUILD/stepc" plan "$r" $z $ZERO --json >"$DEST/${a}_zero.plan.json" 2>"$DEST/${a}_zero.plan.err" || { say "FAIL stepc plan $a ZeRO-1"; fails=1; }
done
python3 - "$DEST" 2>&1 <<'EOF' | tee -a "$DEST/summary.txt"; [ "${PIPESTATUS[0]}" -eq 0 ] || fails=1
import json, sys
dest = sys.argv[1]
bad = 0
up = lambda x: (x + 255) // 256 * 256
for a in ("tiny", "gpt3"):
    try:
        plan = json.load(open(f"{dest}/{a}_zero.plan.json"))["arena"]
        z = json.load(open(f"{dest}/{a}_zero.json"))["measure"]
        p = json.load(open(f"{dest}/{a}_plain.json"))["measure"]
    except Exception as e:
        print(f"FAIL {a} ZeRO-1 memory: no result ({e})"); bad = 1; continue
    reg = plan.get("optimizer_region", {})
    scratch = plan.get("launch_scratch", {}).get("bytes", 0)  # the launch program's scratch, after the plan's buffers
    ok = (z.get("optimizer_region_bytes") == reg.get("bytes") == z.get("optimizer_state_bytes") and reg.get("shard_bytes") == [reg.get("bytes")]
          and z["arena_bytes"] == up(plan["arena_bytes"]) + up(reg["bytes"]) + scratch and z["arena_bytes"] <= p["arena_bytes"]
          and z["predicted_peak_bytes"] == plan.get("launch_scratch", {}).get("device_peak_bytes")
          and z["predicted_peak_bytes"] <= p["predicted_peak_bytes"])
    print(f"{'PASS' if ok else 'FAIL'} {a} ZeRO-1 memory at world size 1: region {z.get('optimizer_region_bytes')} B (stepc plan {reg.get('bytes')}, "
          f"state held {z.get('optimizer_state_bytes')}); arena + region {z['arena_bytes']} B (plan {up(plan['arena_bytes'])} + {up(reg.get('bytes', 0))} + launch scratch {scratch}; "
          f"plain {p['arena_bytes']}); max allocated {z['max_allocated_bytes']} (plain {p['max_allocated_bytes']}); predicted peak "
          f"{z['predicted_peak_bytes']} (stepc plan {plan.get('launch_scratch', {}).get('device_peak_bytes')}; plain {p['predicted_peak_bytes']})")
    bad |= not ok
sys.exit(bad)
EOF

# a DP-2 artifact opened alone is refused
"$BUILD/stepc" run "$ART/tiny_dp2" --device cuda --steps 1 >"$DEST/dp2_alone.out" 2>"$DEST/dp2_alone.err" &&
  { say "FAIL a DP-2 artifact ran alone"; fails=1; }
grep -q "planned for 2 data-parallel ranks" "$DEST/dp2_alone.err" && say "PASS a DP-2 artifact alone is refused: $(tail -1 "$DEST/dp2_alone.err")" ||
  { say "FAIL no clear refusal for a DP-2 artifact alone: $(tail -1 "$DEST/dp2_alone.err")"; fails=1; }

# one profiled step with NCCL: the communication stream's line and the measured timeline
for a in tiny tiny_zero; do
  NCCL_DEBUG=${NCCL_DEBUG:-WARN} "$BUILD/stepc" run "$ART/$a" --device cuda --steps 2 --dp-join --profile --timeline "$DEST/${a}_timeline.json" \
    >"$DEST/${a}_profile.out" 2>"$DEST/${a}_profile.err" || { say "FAIL $a --profile with NCCL: $(tail -2 "$DEST/${a}_profile.err")"; fails=1; }
  line=$(grep "^comm stream:" "$DEST/${a}_profile.out")
  python3 - "$DEST/${a}_timeline.json" "$a" "$line" <<'EOF' | tee -a "$DEST/summary.txt"; [ "${PIPESTATUS[0]}" -eq 0 ] || fails=1
import json, sys
path, a, line = sys.argv[1:4]
try:
    ev = json.load(open(path))["traceEvents"]
except Exception as e:
    print(f"FAIL {a} timeline: {e}"); sys.exit(1)
tracks = {e["tid"]: e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
comm = [e for e in ev if e.get("ph") == "X" and tracks.get(e["tid"]) == "comm stream"]
points = [e for e in ev if e.get("ph") == "X" and tracks.get(e["tid"]) == "step stream"]
names = sorted({e["name"] for e in comm})
want = ["bucket 0"] + (["ZeRO-1 norm exchange", "ZeRO-1 parameter broadcast"] if "zero" in a else [])
ok = line.startswith("comm stream: 1 bucket collective ") and all(w in names for w in want) and len(points) > 0
b = [e for e in comm if e["name"] == "bucket 0"]
last_bwd = max((e["ts"] + e["dur"] for e in points if e["args"]["micro_batch"] >= 0), default=0)
if b:
    print(f"{'PASS' if ok else 'FAIL'} {a} --profile with NCCL: {line!r}; comm stream slices {names}; bucket 0 at "
          f"{b[0]['ts']:.1f} us for {b[0]['dur']:.1f} us, the micro program ends at {last_bwd:.1f} us")
else:
    print(f"FAIL {a} --profile with NCCL: no bucket slice on the comm stream ({names}); {line!r}")
sys.exit(0 if ok else 1)
EOF
done

say "== $([ $fails -eq 0 ] && echo PASS || echo FAIL): data parallel on one GPU"
exit $fails
