#!/usr/bin/env bash
# GPU call 2 (session 10): A/B of MoE7 between main 9c9dcec (prev: the norm read by
# norm_squared_multi) and b98c4a4 (the grouped wgrads write the expert gradients' norm partials),
# full-iteration graph and eager, alternating; then ncu on the Mamba kernels at Nemotron's shape.
set -uo pipefail
cd "$(dirname "$0")/.."
rm -rf build && cp -r gpubuild build
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
sed -e "s|/tmp/wt_prev/build|$PWD/build/prev|" -e "s|/tmp/wt_prev|$PWD|" gpubuild/prev/stepc-layout.txt > build/prev/stepc-layout.txt
export XDG_CACHE_HOME=/tmp/stepc-xdg STEPC_CACHE_DIR=/tmp/stepc-cache
t0=$(date +%s)
med() { python3 -c "
import json,statistics,sys; d=json.load(open(sys.argv[1])); ms=[x['ms'] for x in d['steps'][3:]]; print(sys.argv[2], d['mode'], 'median %.2f min %.2f max %.2f' % (statistics.median(ms), min(ms), max(ms)), 'grad_norm', d['steps'][-1]['grad_norm'])" "$1" "$2"; }
for round in 1 2; do
  for v in new prev; do
    B=build/stepc; [ $v = prev ] && B=build/prev/stepc
    timeout 120 $B run models/moonlight_mha_7l.lua --device cuda --steps 15 --json model.cuda_graph_impl=full_iteration model.check_for_nan_in_loss_and_grad=false > $OUT/moe7_${v}_graph_$round.json 2> $OUT/moe7_${v}_graph_$round.err
    med $OUT/moe7_${v}_graph_$round.json "round $round $v graph"
  done
done
for v in new prev; do
  B=build/stepc; [ $v = prev ] && B=build/prev/stepc
  timeout 120 $B run models/moonlight_mha_7l.lua --device cuda --steps 15 --json model.check_for_nan_in_loss_and_grad=false > $OUT/moe7_${v}_eager.json 2> $OUT/moe7_${v}_eager.err
  med $OUT/moe7_${v}_eager.json "$v eager"
done
echo "A/B done at $(( $(date +%s) - t0 )) s"
for k in mamba_chunk_states mamba_state_pass mamba_chunk_output mamba_chunk_backward; do
  STEPC_MAMBA_BENCH=1 timeout 90 /usr/local/cuda/bin/ncu --set full -k regex:"^$k\$" --launch-count 1 build/tests/gpu/gpu_kernels --only mamba --bench-only > $OUT/ncu_$k.txt 2>&1; echo "ncu $k rc=$? at $(( $(date +%s) - t0 )) s"
  grep -E "^  mamba_|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Theoretical Occupancy|L2 Hit|L1/TEX Hit|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Dynamic Shared|Block Limit" $OUT/ncu_$k.txt | head -30
  grep -E "^    (OPT|WRN|INF)" -A3 $OUT/ncu_$k.txt | head -40
done
echo "done at $(( $(date +%s) - t0 )) s"
