#!/usr/bin/env bash
# fp8_parallel.sh STEPC TEST_DP PROGRAM_PLAY — fp8 under tensor and data parallelism on the CPU device
# (issues 24, 25):
# models/tiny.lua in fp32 weights with fp8 linears (E4M3 forward, E5M2 gradients: "hybrid"), the fp8
# emulation rounding every cast as the GPU does.
#
# Current scaling ("tensorwise") under TP scales as Transformer Engine does: a sequence-parallel
# column-parallel linear's input and a row-parallel linear's output gradient are cast after their
# all-gather, so every rank casts the whole tensor (TE reduces their amax over the TP group and
# gathers fp8: the same bytes); a rank's weight shard, a row-parallel linear's input and a
# column-parallel linear's output gradient are cast with the shard's own amax, as TE does. So the
# step is not the one-rank fp8 step: some elements round to neighbouring fp8 values. What is
# checked, against the one-rank fp8 step, is that the first step's gradients are no farther from
# it than fp8's own quantization error is from the fp32 step (tests/api/fp8_grads.py says how and
# why): TP 2, TP 2 + SP, TP 4 + SP (replicated KV: 2 groups over 4 ranks), TP 2 x DP 2, and
# delayed scaling at TP 2 + SP. Delayed scaling reduces the current amaxes over the TP group before
# each update — over every rank of the job, Megatron's amax reduction group (TP x DP) — so after a
# step every rank's weight scales are the one-rank step's, bitwise, and the gradients nearly the
# one-rank step's.
# Delayed scaling under data parallelism: DP 2 (one micro-batch a rank) against one rank with both
# micro-batches — not the same step: one rank updates its scales between its micro-batches, the DP
# ranks once over both (the maximum of their amaxes) — so within 1e-2; its weight scales after a step
# the one-rank step's bitwise; DP 2 with ZeRO-1 = DP 2 bitwise; DP 2 and TP 2 x DP 2 (+ SP) resumed
# bitwise (a checkpoint holds rank 0's state: ranks whose states drifted apart would not resume
# bitwise).
# Then 4 steps of training: losses and grad norms within 1e-2 relative of one rank's, ranks bitwise
# alike (test_dp run); with fp8 primary weights (fp8_param) the same steps bitwise; resumed from a TP checkpoint = the uninterrupted run bitwise; the bf16
# programs (fp8 GEMMs, the delayed update's all-reduce (max) over the amax group) played on a
# recording device.
set -uo pipefail
stepc=$1 t=$2 play=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
here=$(dirname "$0")
F8="model.fp8=hybrid model.fp8_recipe=tensorwise"
DL="model.fp8=hybrid model.fp8_recipe=delayed model.fp8_amax_history_len=4 model.fp8_amax_compute_algo=max"
TP2="model.tensor_model_parallel_size=2 train.world_size=2"
SP=model.sequence_parallel=true
# AdamW whose first update is the gradient / 1000 (fp8_grads.py)
G="optimizer.adam_beta1=0 optimizer.adam_beta2=0 optimizer.adam_eps=1000 optimizer.lr=1 optimizer.clip_grad=0 \
optimizer.weight_decay=0 optimizer.lr_warmup_iters=0"
build() {
  local name=$1
  shift
  "$stepc" build models/tiny.lua "$@" -o "$tmp/$name" >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "stepc build $name"; }
}
run() { # run NAME RANKS STEPS
  "$t" run "$tmp/$1" "$2" "$3" "$tmp/$1.safetensors" >"$tmp/$1.txt" 2>&1 || { cat "$tmp/$1.txt"; fail "$1 on $2 ranks"; }
}
# ---- the first step's gradients
B32=model.bf16=false
build g_exact $B32 $G
build g_one $B32 $G $F8
build g_tp2 $B32 $G $F8 $TP2
build g_sp2 $B32 $G $F8 $TP2 $SP
build g_sp4 $B32 $G $F8 model.tensor_model_parallel_size=4 train.world_size=4 $SP
build g_tp2dp2 $B32 $G $F8 model.tensor_model_parallel_size=2 train.world_size=4
build g_done $B32 $G $DL
build g_dsp2 $B32 $G $DL $TP2 $SP
"$t" run "$tmp/g_exact" 1 0 "$tmp/init.safetensors" >/dev/null 2>&1 || fail "the initial parameters"
for a in g_exact:1 g_one:1 g_done:1 g_tp2:2 g_sp2:2 g_sp4:4 g_tp2dp2:4 g_dsp2:2; do run "${a%:*}" "${a#*:}" 1; done
s() { echo "$tmp/$1.safetensors"; }
python3 "$here/fp8_grads.py" "$(s init)" "$(s g_exact)" "$(s g_one)" tp2 "$(s g_tp2)" sp2 "$(s g_sp2)" \
  sp4 "$(s g_sp4)" tp2dp2 "$(s g_tp2dp2)" || fail "current scaling's gradients under TP"
python3 "$here/fp8_grads.py" "$(s init)" "$(s g_exact)" "$(s g_done)" delayed_sp2 "$(s g_dsp2)" ||
  fail "delayed scaling's gradients under TP"
# ---- training, resumed, the delayed state
build one $B32 $F8
build sp2 $B32 $F8 $TP2 $SP
build done $B32 $DL
build dsp2 $B32 $DL $TP2 $SP
for a in one:1 done:1 sp2:2 dsp2:2; do run "${a%:*}" "${a#*:}" 4; done
python3 "$here/against_one.py" "$tmp/one" "$tmp/sp2" sp2 4 1e-2 1e-2 || fail "sp2 against one rank"
python3 "$here/against_one.py" "$tmp/done" "$tmp/dsp2" delayed_sp2 4 1e-2 1e-2 || fail "delayed sp2 against one rank"
# fp8 primary weights (model.fp8_param) under TP: each rank casts its fp32 master shard; on the CPU
# device a bf16 param holds its master's value, so the step is the one without fp8_param, bitwise
build sp2p $B32 $F8 $TP2 $SP model.fp8_param=true
build dsp2p $B32 $DL $TP2 $SP model.fp8_param=true
for a in sp2p:sp2 dsp2p:dsp2; do
  run "${a%:*}" 2 4
  python3 "$here/against_one.py" "$tmp/${a#*:}" "$tmp/${a%:*}" "${a%:*}" 4 0 0 || fail "${a%:*} against ${a#*:}"
done
# delayed scaling under data parallelism
build ddp2 $B32 $DL train.world_size=2
build ddp2z $B32 $DL train.world_size=2 optimizer.use_distributed_optimizer=true
build dtp2dp2 $B32 $DL model.tensor_model_parallel_size=2 train.world_size=4 $SP
for a in ddp2:2 ddp2z:2 dtp2dp2:4; do run "${a%:*}" "${a#*:}" 4; done
python3 "$here/against_one.py" "$tmp/done" "$tmp/ddp2" delayed_dp2 4 1e-2 1e-2 || fail "delayed dp2 against one rank"
python3 "$here/against_one.py" "$tmp/done" "$tmp/dtp2dp2" delayed_tp2dp2 4 1e-2 1e-2 || fail "delayed tp2 x dp2 against one rank"
python3 "$here/against_one.py" "$tmp/ddp2" "$tmp/ddp2z" delayed_dp2_zero 4 0 0 || fail "delayed dp2 with ZeRO-1 against dp2"
for a in sp2:2 dsp2:2 done:1 ddp2:2 ddp2z:2 dtp2dp2:4; do
  n=${a#*:} a=${a%:*}
  mkdir -p "$tmp/res_$a"
  "$t" resume "$tmp/$a" $n 4 1 "$tmp/res_$a" >"$tmp/res_$a.txt" 2>&1 || { cat "$tmp/res_$a.txt"; fail "$a resumed"; }
  tail -1 "$tmp/res_$a.txt"
done
# the checkpoints at step 1: TP's weight scales = the one-rank step's, every rank's state alike
python3 - "$tmp/res_done/ckpt/optimizer.safetensors" "$tmp/res_dsp2/ckpt/shard.rank0.safetensors" \
  "$tmp/res_dsp2/ckpt/shard.rank1.safetensors" "$tmp/res_ddp2/ckpt/optimizer.safetensors" <<'PY' || fail "delayed scaling's state under TP"
import json, struct, sys
def state(p, k):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    v = json.loads(b[8:8 + n])[k]
    s, e = v["data_offsets"]
    return v["shape"], b[8 + n + s:8 + n + e]
one, r0, r1 = sys.argv[1:4]
for k in ("fp8_delayed.weights", "fp8_delayed.inputs", "fp8_delayed.grad_outputs"):
    assert state(r0, k) == state(r1, k), f"{k}: the TP ranks' states differ"
(shape, w1), (_, w0) = state(one, "fp8_delayed.weights"), state(r0, "fp8_delayed.weights")
row = 4 * shape[1]
assert w1[:row] == w0[:row], "the weights' scales differ from the one-rank step's (amax not reduced over TP?)"
(_, wd) = state(sys.argv[4], "fp8_delayed.weights")
assert w1[:row] == wd[:row], "DP 2's weight scales differ from the one-rank step's"
print(f"ok: delayed scaling at TP 2 + SP and DP 2 after a step: {shape[1]} weight scales = the one-rank step's, bitwise; the TP ranks' states alike")
PY
# ---- the bf16 programs, played
build cu_sp2 $F8 $TP2 $SP
build cu_dsp2 $DL $TP2 $SP
build cu_ddp2 $DL train.world_size=2
for a in cu_sp2 cu_dsp2 cu_ddp2; do
  "$play" "$tmp/$a" >"$tmp/play_$a.txt" 2>&1 || { cat "$tmp/play_$a.txt"; fail "$a's launch program played"; }
  head -1 "$tmp/play_$a.txt"
  grep -q "LAUNCH fp8_" "$tmp/$a/program.txt" || fail "$a's program runs no fp8 kernel"
done
for a in cu_dsp2 cu_ddp2; do
  n=$(grep -c "^point .* fp8_scale_update" "$tmp/$a/program.txt")
  m=$(grep -A1 "^point .* fp8_scale_update" "$tmp/$a/program.txt" | grep -c "COLL allreduce_max f32 amax")
  [ "$n" -gt 0 ] && [ "$n" = "$m" ] || fail "$a: of $n delayed updates, $m reduce their amaxes over every rank first"
done
echo "ok: fp8 under tensor and data parallelism"
