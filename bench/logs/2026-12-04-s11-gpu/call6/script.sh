#!/usr/bin/env bash
# GPU call (session 11): AdamW's multi-tensor kernel with streaming (.cs) loads and stores, A/B
# against the previous build in one lease: MoE7 and M, profile (optimizer class) and timed runs
# alternating; the losses must be bitwise the same (same arithmetic).
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
sed -i "s#/work/t-test/build#$PWD/build/prev#; s#/work/t-test#$PWD#" build/prev/stepc-layout.txt
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
t0=$(date +%s)
NF="model.check_for_nan_in_loss_and_grad=false"
for b in new prev; do
  S=build/stepc; [ $b = prev ] && S=build/prev/stepc
  timeout 150 $S run models/moonlight_mha_7l.lua --device cuda --steps 4 --profile $NF > $OUT/moe7_prof_$b.txt 2>&1; echo "moe7 prof $b rc=$? at $(( $(date +%s) - t0 )) s"
  grep -E "^optimizer|^grad_norm|^total" $OUT/moe7_prof_$b.txt
done
for round in 1 2; do for b in new prev; do
  S=build/stepc; [ $b = prev ] && S=build/prev/stepc
  timeout 120 $S run models/moonlight_mha_7l.lua --device cuda --steps 15 --json $NF > $OUT/moe7_${b}_$round.json 2>/dev/null
  python3 -c "
import json,statistics; d=json.load(open('$OUT/moe7_${b}_$round.json')); ms=[x['ms'] for x in d['steps'][3:]]; print('moe7 $b round $round median ms %.3f' % statistics.median(ms))"
done; done
python3 -c "
import json
a=json.load(open('$OUT/moe7_new_1.json'))['steps']; b=json.load(open('$OUT/moe7_prev_1.json'))['steps']
print('losses new == prev bitwise:', [x['loss'] for x in a] == [x['loss'] for x in b], [x['grad_norm'] for x in a] == [x['grad_norm'] for x in b])"
for b in new prev; do
  S=build/stepc; [ $b = prev ] && S=build/prev/stepc
  timeout 120 $S run models/bench_m.lua --device cuda --steps 4 --profile $NF > $OUT/m_prof_$b.txt 2>&1; echo "M prof $b rc=$?"; grep -E "^optimizer|^total" $OUT/m_prof_$b.txt
done
echo "done at $(( $(date +%s) - t0 )) s"
