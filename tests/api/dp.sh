#!/usr/bin/env bash
# dp.sh STEPC TEST_DP — data parallel on the CPU device (issue 12), bitwise (masked targets too):
#   DP 2 and DP 4 (one micro-batch of 4 sequences per rank) against DP 1 with 2 and 4 accumulated
#   micro-batches — losses, grad norms and every parameter byte after several steps, ranks as
#   threads (test_dp) and as processes (stepc run --nproc, the artifact's own libstep.so);
#   a resumed DP run against the uninterrupted one; a rank that exits, one that hangs; a rank with
#   another artifact; an artifact of DP N opened alone; the profiled step's measured timeline;
#   the distributed optimizer's per-rank memory (its optimizer-state region) against stepc plan.
set -uo pipefail
stepc=$1 t=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
build() { "$stepc" build models/tiny.lua "${@:2}" -o "$tmp/$1" >"$tmp/$1.log" 2>&1 || { cat "$tmp/$1.log"; fail "stepc build $1"; }; }
build dp1_2 train.global_batch_size=8
build dp2 train.world_size=2 train.global_batch_size=8
build dp1_4 train.global_batch_size=16
build dp4 train.world_size=4 train.global_batch_size=16
build zero2 train.world_size=2 train.global_batch_size=8 optimizer.use_distributed_optimizer=true
build zero4 train.world_size=4 train.global_batch_size=16 optimizer.use_distributed_optimizer=true
build dp2_other train.world_size=2 train.global_batch_size=8 model.num_layers=2
STEPS=${DP_STEPS:-4}
"$t" env || fail "launcher environments"
"$t" equal "$tmp/dp1_2" 1 "$tmp/dp2" 2 "$STEPS" "$tmp" || fail "DP 2 against DP 1"
"$t" equal "$tmp/dp1_4" 1 "$tmp/dp4" 4 "$STEPS" "$tmp" || fail "DP 4 against DP 1"
TEST_DP_BIND=1 "$t" equal "$tmp/dp1_2" 1 "$tmp/dp2" 2 2 "$tmp" || fail "DP 2 against DP 1, bound batches"
# loss masks: the ranks keep different numbers of targets; the loss and gradients divide by the
# global batch's kept count (summed over the ranks), so DP 4 is still DP 1 with 4 micro-batches
TEST_DP_BIND=1 TEST_DP_MASK=1 "$t" equal "$tmp/dp1_4" 1 "$tmp/dp4" 4 2 "$tmp" || fail "DP 4 against DP 1, masked targets"
# the distributed optimizer (ZeRO-1): bitwise plain DP; its sharded checkpoint resumes bitwise
"$t" equal "$tmp/dp2" 2 "$tmp/zero2" 2 "$STEPS" "$tmp" || fail "ZeRO-1 on 2 ranks against DP 2"
"$t" equal "$tmp/dp4" 4 "$tmp/zero4" 4 "$STEPS" "$tmp" || fail "ZeRO-1 on 4 ranks against DP 4"
"$t" resume "$tmp/zero4" 4 "$STEPS" 2 "$tmp" || fail "ZeRO-1 resume"
"$t" reshard "$tmp/zero2" 2 "$tmp/zero4" 4 "$tmp" || fail "a ZeRO-1 checkpoint under another world size"
"$t" resume "$tmp/dp2" 2 "$STEPS" 2 "$tmp" || fail "DP 2 resume"
"$t" disagree "$tmp/dp2" 2 "$tmp" || fail "ranks that load different checkpoints"
"$t" exit "$tmp/dp2" 2 || fail "a rank that exits"
"$t" hang "$tmp/dp4" 4 || fail "a rank that hangs"
"$t" refuse "$tmp/dp2" "$tmp/dp2_other" 2 || fail "a rank with another artifact"
"$t" world "$tmp/dp2" || fail "DP 2 opened alone"
"$t" stranger "$tmp/dp2" || fail "strangers at the rendezvous"
"$t" guard "$tmp/dp2" || fail "the rendezvous' guards (timeouts, the secret, the listen address)"
# the distributed optimizer's memory: every rank holds only its shard of the masters and moments
# (the optimizer-state region, the largest shard), so the allocated bytes shrink with DP; measured
# on every rank (stepc_measure) against stepc plan --json: the region and each rank's shard exactly
# (optimizer_state_bytes is the shard without its 16-byte padding), and memrank's even 12/DP bytes
# per parameter within the whole-tensor granularity (a rank's shard of a bucket differs from an
# even 1/DP of it by less than the bucket's largest tensor's state, 12 bytes per element)
for a in dp2:2 zero2:2 dp4:4 zero4:4; do
  n=${a#*:} a=${a%:*}
  w=$([ "$a" = "${a#zero}" ] && echo "" || echo optimizer.use_distributed_optimizer=true)
  "$stepc" plan models/tiny.lua train.world_size=$n train.global_batch_size=$((4 * n)) $w --json >"$tmp/$a.plan.json" || fail "stepc plan $a"
  "$t" measure "$tmp/$a" "$n" "$tmp/$a.params.safetensors" >"$tmp/$a.measure" || { cat "$tmp/$a.measure"; fail "measure $a"; }
done
python3 - "$tmp" <<'EOF' || fail "the distributed optimizer's per-rank memory"
import json, math, struct, sys
tmp = sys.argv[1]
def measured(a):
    rows = [l.split()[1:] for l in open(f"{tmp}/{a}.measure") if l.startswith("measure ")]
    return [dict(zip(("rank", "arena", "region", "state", "max_allocated", "predicted"), map(int, r))) for r in rows]
with open(f"{tmp}/zero4.params.safetensors", "rb") as f:
    head = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
numel = [math.prod(v["shape"]) for k, v in head.items() if k != "__metadata__"]
params, largest = sum(numel), max(numel)
plain = {n: measured(f"dp{n}") for n in (2, 4)}
for n in (2, 4):
    plan = json.load(open(f"{tmp}/zero{n}.plan.json"))
    reg, ideal = plan["arena"]["optimizer_region"], plan["ranks"][0]["optimizer_bytes"]
    nb = plan["scopes"]["gradient_buckets"]
    bound = nb * 12 * largest
    whole = plain[n][0]["state"]
    print(f"DP {n}, distributed optimizer ({params} parameters, largest tensor {largest}, {nb} bucket(s)): stepc plan: region "
          f"{reg['bytes']} B (rank {reg['largest_rank']}'s shard), shards {reg['shard_bytes']}; memrank's even 12/{n} B/param "
          f"{ideal:.0f} B; plain DP {n} holds {whole} B on every rank, arena {plain[n][0]['arena']} B")
    for m in measured(f"zero{n}"):
        r = m["rank"]
        print(f"  rank {r}: measured region {m['region']} B, holds {m['state']} B (plan {reg['shard_bytes'][r]}), allocated "
              f"{m['arena']} B (plain DP {plain[n][r]['arena']}: {m['arena'] - plain[n][r]['arena']:+d}), predicted peak {m['predicted']} B")
        assert m["region"] == reg["bytes"], "the region as allocated is not stepc plan's"
        assert 0 <= reg["shard_bytes"][r] - m["state"] < 16 * len(numel) * 3, "a rank's shard is not stepc plan's"
        assert abs(m["region"] - ideal) <= bound and abs(m["state"] - whole / n) <= bound, "a shard outside the whole-tensor bound"
        # the arena (fp32 CPU plan) no longer holds the state: plain DP's minus the whole state plus the region
        assert m["arena"] == plain[n][r]["arena"] - whole + m["region"], "the allocated bytes do not shrink by the state not held"
        assert m["max_allocated"] == m["arena"] and m["predicted"] <= m["arena"]
    assert sum(m["state"] for m in measured(f"zero{n}")) == whole, "the shards do not add up to the whole state"
print("ok: the distributed optimizer holds one shard of the masters and moments per rank, as stepc plan predicts")
EOF
# processes: stepc run --nproc through libstep.so, the losses' bits against DP 1's
losses() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("\n".join(x["loss"].hex()+" "+x["grad_norm"].hex() for x in d["steps"]))' "$1"; }
"$stepc" run "$tmp/dp1_4" --device cpu --steps 3 --json >"$tmp/r1.json" || fail "stepc run DP 1"
"$stepc" run "$tmp/dp4" --device cpu --steps 3 --nproc 4 --json >"$tmp/r4.json" 2>"$tmp/r4.err" || { cat "$tmp/r4.err"; fail "stepc run --nproc 4"; }
diff <(losses "$tmp/r1.json") <(losses "$tmp/r4.json") || fail "stepc run --nproc 4 differs from DP 1"
echo "ok: stepc run --nproc 4 (processes, each an artifact libstep.so) = DP 1: $(losses "$tmp/r4.json" | tr '\n' ' ')"
# the profiled step's measured timeline (stepc run --profile --timeline): the bucket's collective
# on the "comm stream" track beside the step's points (the host collectives overlap nothing: 0 %);
# ZeRO-1's norm exchange and parameter broadcast there too
for a in dp2 zero2; do
  "$stepc" run "$tmp/$a" --device cpu --steps 1 --nproc 2 --profile --timeline "$tmp/$a.tl.json" >"$tmp/$a.prof" 2>"$tmp/$a.prof.err" ||
    { cat "$tmp/$a.prof.err"; fail "stepc run $a --profile --timeline"; }
  grep -q "^comm stream: 1 bucket collective .*(0 %)" "$tmp/$a.prof" || fail "$a: no comm stream line: $(grep comm "$tmp/$a.prof")"
  python3 - "$tmp/$a.tl.json" "$a" <<'EOF' || fail "$a: the measured timeline"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
tracks = {e["tid"]: e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
comm = {e["name"] for e in ev if e.get("ph") == "X" and tracks[e["tid"]] == "comm stream"}
pts = sorted((e for e in ev if e.get("ph") == "X" and tracks[e["tid"]] == "step stream"), key=lambda e: e["ts"])
want = {"bucket 0"} | ({"ZeRO-1 norm exchange", "ZeRO-1 parameter broadcast"} if sys.argv[2] == "zero2" else set())
assert want <= comm, f"comm stream slices {comm}, want {want}"
assert len(pts) > 100 and all(a["ts"] + a["dur"] <= b["ts"] + 1e-3 for a, b in zip(pts, pts[1:])), "the step's points overlap"
print(f"ok: {sys.argv[2]} --profile --timeline: {len(pts)} point slices on the step stream, {sorted(comm)} on the comm stream")
EOF
done
# processes: rank 1 of a stepc run --nproc 2 job killed (SIGKILL) mid-run: the job ends within the
# timeout, rank 0 naming the rank that went away
"$stepc" run "$tmp/dp2" --device cpu --steps 1000 --nproc 2 --comm-timeout 20 >"$tmp/kill.out" 2>"$tmp/kill.err" &
job=$!
victim=""
for _ in $(seq 200); do # wait for rank 1's process (a child of the job) and its first step
  for c in $(pgrep -P "$job" || true); do
    tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | grep -qx 'RANK=1' && [ "$(cat /proc/$c/comm 2>/dev/null)" = stepc ] && victim=$c
  done
  [ -n "$victim" ] && grep -q "step     1" "$tmp/kill.out" 2>/dev/null && break
  sleep 0.1
done
[ -n "$victim" ] || { kill "$job"; fail "rank 1's process never appeared"; }
t0=$(date +%s)
kill -9 "$victim"
wait "$job"
rc=$? t1=$(date +%s)
cat "$tmp/kill.err" | grep -v "^\[rank [01]\] build" | tail -4
[ $rc -ne 0 ] || fail "the job should fail when a rank is killed"
[ $((t1 - t0)) -le 25 ] || fail "the job took $((t1 - t0)) s to end after rank 1 was killed (timeout 20 s)"
grep -q "rank 1 closed its connection" "$tmp/kill.err" || fail "rank 0 should name rank 1: $(cat "$tmp/kill.err")"
grep -q "rank 1 was killed by signal 9" "$tmp/kill.err" || fail "stepc run --nproc should say rank 1 was killed"
echo "ok: rank 1 killed (SIGKILL) mid-run: the job ended $((t1 - t0)) s later with exit $rc, rank 0 naming rank 1"
"$stepc" run "$tmp/dp2" --device cpu --steps 2 >"$tmp/alone.out" 2>"$tmp/alone.err" && fail "DP 2 run alone should be refused"
grep -q "planned for 2 data-parallel ranks" "$tmp/alone.err" || { cat "$tmp/alone.err"; fail "no clear message for DP 2 alone"; }
echo "ok: data parallel on the CPU device"
