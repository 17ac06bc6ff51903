#!/usr/bin/env bash
# GPU call 3 (session 10): MoE7 full-iteration graph A/B, prev (9c9dcec) vs new (b98c4a4), 3 rounds alternating.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
sed -e "s|/tmp/wt_prev/build|$PWD/build/prev|" -e "s|/tmp/wt_prev|$PWD|" gpubuild/prev/stepc-layout.txt > build/prev/stepc-layout.txt
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
med() { python3 -c "
import json,statistics,sys; d=json.load(open(sys.argv[1])); ms=[x['ms'] for x in d['steps'][3:]]; print(sys.argv[2], d['mode'], 'median %.2f min %.2f' % (statistics.median(ms), min(ms)))" "$1" "$2"; }
mkdir -p $OUT/r
for round in 1 2 3; do
  for v in prev new; do
    B=build/stepc; [ $v = prev ] && B=build/prev/stepc
    timeout 120 $B run models/moonlight_mha_7l.lua --device cuda --steps 20 --json model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false > $OUT/r/${v}_$round.json 2> /dev/null
    med $OUT/r/${v}_$round.json "round $round $v" | tee -a $OUT/summary.txt
  done
done
