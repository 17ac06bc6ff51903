#!/usr/bin/env bash
# dp_fp8_param.sh STEPC TEST_DP PROGRAM_PLAY — fp8 primary weights (model.fp8_param) with the
# distributed optimizer under data parallelism (Megatron Bridge's fp8_param_gather; docs/fp8.md) on
# tests/recipes/tiny_fp8.lua (current scaling), on the CPU device, ranks as threads:
#  - DP 2 with ZeRO-1 = DP 2 without it, bitwise (losses, grad norms, every parameter byte on every
#    rank): each master's owner updates and casts it with the whole tensor's amax (ZeRO-1's shards
#    are whole tensors, so the owner holds all of it), the fp8 data, transpose and scale_inv travel
#    from it; the same fp8 bytes as a cast of the whole master on every rank;
#  - TP 2 x DP 2 with ZeRO-1 = TP 2 x DP 2 without it, bitwise (losses and the gathered parameters);
#  - both resumed from their sharded checkpoints = the uninterrupted runs, bitwise;
#  - memory: the fp32 masters of the fp8 linears lie in the optimizer-state region, each on its owner:
#    every rank's measured region and shard are stepc plan's (plan.json), its shard about half of
#    plain DP's state, and the per-rank report's params, weights and optimizer bytes are plan.json's;
#  - the CUDA launch programs play on a recording device;
#  - routed experts in fp8 (tiny_mla_moe_fp8.lua): DP 2 and EP 2 x DP 2 with ZeRO-1 = without, bitwise
#    (losses and the gathered parameters: an expert's master comes from its owner in the
#    expert-data-parallel group), resumed bitwise;
#  - delayed scaling (tests/recipes/tiny_fp8_delayed.lua): DP 2 with ZeRO-1 = DP 2 without it,
#    bitwise, and resumed bitwise — only the owner's cast records a weight's amax, and the update's
#    all-reduce (max) over every rank (the amax group) hands it to the others.
set -uo pipefail
stepc=$1 t=$2 play=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
R=tests/recipes/tiny_fp8.lua
build() { "$stepc" build "$R" model.fp8_param=true train.global_batch_size=8 "${@:2}" -o "$tmp/$1" >"$tmp/$1.log" 2>&1 || { cat "$tmp/$1.log"; fail "stepc build $1"; }; }
Z=optimizer.use_distributed_optimizer=true TP="model.tensor_model_parallel_size=2 train.world_size=4"
build dp2 train.world_size=2
build zero2 train.world_size=2 $Z
build tpdp $TP
build tpdpz $TP $Z
"$t" equal "$tmp/dp2" 2 "$tmp/zero2" 2 4 "$tmp" || fail "fp8_param: ZeRO-1 on 2 ranks against DP 2"
"$t" resume "$tmp/zero2" 2 4 2 "$tmp" || fail "fp8_param: ZeRO-1 resumed"
"$t" run "$tmp/tpdp" 4 4 "$tmp/tpdp.safetensors" >"$tmp/tpdp.txt" || { cat "$tmp/tpdp.txt"; fail "TP 2 x DP 2"; }
"$t" run "$tmp/tpdpz" 4 4 "$tmp/tpdpz.safetensors" >"$tmp/tpdpz.txt" || { cat "$tmp/tpdpz.txt"; fail "TP 2 x DP 2, ZeRO-1"; }
diff <(grep '^step' "$tmp/tpdp.txt") <(grep '^step' "$tmp/tpdpz.txt") || fail "TP 2 x DP 2: ZeRO-1's losses differ"
cmp -s "$tmp/tpdp.safetensors" "$tmp/tpdpz.safetensors" || fail "TP 2 x DP 2: ZeRO-1's gathered parameters differ"
echo "ok: TP 2 x DP 2 with ZeRO-1 = without: 4 steps' losses, grad norms and the gathered parameters bitwise"
mkdir -p "$tmp/res" && "$t" resume "$tmp/tpdpz" 4 4 2 "$tmp/res" || fail "TP 2 x DP 2, ZeRO-1 resumed"
"$stepc" plan "$R" model.fp8_param=true train.global_batch_size=8 train.world_size=2 $Z --json >"$tmp/zero2.plan.json" 2>/dev/null || fail "stepc plan"
for a in dp2 zero2; do "$t" measure "$tmp/$a" 2 "$tmp/$a.m.safetensors" >"$tmp/$a.measure" || { cat "$tmp/$a.measure"; fail "measure $a"; }; done
python3 - "$tmp" <<'PY' || fail "the per-rank memory"
import json, sys
tmp = sys.argv[1]
def measured(a):
    return [dict(zip(("rank", "arena", "region", "state", "max_allocated", "predicted"), map(int, l.split()[1:])))
            for l in open(f"{tmp}/{a}.measure") if l.startswith("measure ")]
plan, built = json.load(open(f"{tmp}/zero2.plan.json")), json.load(open(f"{tmp}/zero2/plan.json"))
for k in ("params", "weights_bytes", "optimizer_bytes"):
    assert plan["ranks"][0][k] == built["ranks"][0][k], (k, plan["ranks"][0][k], built["ranks"][0][k])
reg = built["arena"]["optimizer_region"]
plain = measured("dp2")
for m in measured("zero2"):
    r = m["rank"]
    print(f"rank {r}: region {m['region']} B, holds {m['state']} B (plan.json {reg['shard_bytes'][r]}; report "
          f"{plan['ranks'][0]['optimizer_bytes']:.0f} B even), plain DP 2 {plain[r]['state']} B; allocated {m['arena']} B "
          f"(plain DP 2 {plain[r]['arena']})")
    assert m["region"] == reg["bytes"] and m["state"] == reg["shard_bytes"][r]
    assert abs(m["state"] - plain[r]["state"] / 2) < 0.01 * plain[r]["state"]
    assert m["arena"] < plain[r]["arena"]
print("ok: per-rank memory = plan.json = stepc plan")
PY
for a in zero2 tpdpz; do
  grep -q fp8_cast_transpose_f32 "$tmp/$a/program.txt" || fail "$a: no cast of the masters in program.txt"
  "$play" "$tmp/$a" >"$tmp/play.txt" 2>&1 || { cat "$tmp/play.txt"; fail "$a: launch program played"; }
  head -1 "$tmp/play.txt"
done
R=tests/recipes/tiny_fp8_delayed.lua
build ddp2 train.world_size=2
build dzero2 train.world_size=2 $Z
"$t" equal "$tmp/ddp2" 2 "$tmp/dzero2" 2 4 "$tmp" || fail "fp8_param, delayed: ZeRO-1 on 2 ranks against DP 2"
mkdir -p "$tmp/dres" && "$t" resume "$tmp/dzero2" 2 4 2 "$tmp/dres" || fail "fp8_param, delayed: ZeRO-1 resumed"
# routed experts in fp8 (tests/recipes/tiny_mla_moe_fp8.lua, grouped fp8 linears): DP 2 and EP 2 x DP 2
# with ZeRO-1 = without, bitwise (the experts' masters owned over the expert-data-parallel group,
# gathered from there into model.safetensors), EP 2 x DP 2 resumed bitwise
R=tests/recipes/tiny_mla_moe_fp8.lua
build mdp2 train.world_size=2
build mzero2 train.world_size=2 $Z
"$t" equal "$tmp/mdp2" 2 "$tmp/mzero2" 2 3 "$tmp" || fail "fp8_param, MoE: ZeRO-1 on 2 ranks against DP 2"
EP="model.expert_model_parallel_size=2 train.world_size=4"
build mep $EP
build mepz $EP $Z
"$t" run "$tmp/mep" 4 3 "$tmp/mep.safetensors" >"$tmp/mep.txt" || { cat "$tmp/mep.txt"; fail "MoE EP 2 x DP 2"; }
"$t" run "$tmp/mepz" 4 3 "$tmp/mepz.safetensors" >"$tmp/mepz.txt" || { cat "$tmp/mepz.txt"; fail "MoE EP 2 x DP 2, ZeRO-1"; }
diff <(grep '^step' "$tmp/mep.txt") <(grep '^step' "$tmp/mepz.txt") || fail "MoE EP 2 x DP 2: ZeRO-1's losses differ"
cmp -s "$tmp/mep.safetensors" "$tmp/mepz.safetensors" || fail "MoE EP 2 x DP 2: ZeRO-1's gathered parameters differ"
echo "ok: MoE fp8 EP 2 x DP 2 with ZeRO-1 = without: 3 steps' losses, grad norms and the gathered parameters bitwise"
mkdir -p "$tmp/mres" && "$t" resume "$tmp/mepz" 4 3 1 "$tmp/mres" || fail "MoE EP 2 x DP 2, ZeRO-1 resumed"
echo "ok: dp_fp8_param"
