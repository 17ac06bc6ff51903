#!/usr/bin/env bash
# artifact.sh STEPC PROGRAM_PLAY IMAGE_PLAN — `stepc build` on the shipped dense recipes (no GPU
# needed): each artifact has every file, its plan.json parses, its cubin defines every kernel its
# launch program launches (program.txt lists them), libstep.so exports the stepc.h API and nothing
# else, has a SONAME and needs neither Lua nor NVRTC, train loads it itself after checking it
# against libstep.sum, and the runtime's player launches exactly the program step.img holds
# (PROGRAM_PLAY, tests/api/program_play.c). On tiny it also trains; moved and copied elsewhere,
# with the build tree out of reach, it trains to the same bits; `stepc run DIR` and `stepc run
# SPEC` (through the artifact cache) give them too. Each step.img holds the very plan `stepc plan
# --json` reports for the same recipe and overrides (IMAGE_PLAN, tests/api/image_plan.c): peak,
# launch scratch, arena, optimizer region, every tensor's slot (the layout digest) and the launch
# program itself (its digest).
set -uo pipefail
stepc=$1
play=$2
image_plan=$3
# Building libstep.so links the build tree's archives with the system C compiler: a machine without
# that toolchain runs artifacts but does not build them, so the test skips there.
for need in "$(command -v cc)" "$(command -v readelf)"; do
  [ -n "$need" ] && [ -e "$need" ] || { echo "SKIP: no build toolchain here (${need:-cc or readelf} missing)"; exit 77; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
build() { # name recipe [overrides]
  local name=$1 recipe=$2 src=models/$2.lua
  shift 2
  [[ $recipe == */* ]] && src=$recipe
  "$stepc" build "$src" "$@" -o "$tmp/$name" >"$tmp/$name.out" 2>&1 || { cat "$tmp/$name.out"; fail "stepc build $recipe $*"; }
  for f in step.img recipe.lua plan.json program.txt kernels.cu kernels.sm_90.cubin libstep.so libstep.sum train stepc.h; do
    [ -s "$tmp/$name/$f" ] || fail "$name: no $f"
  done
  python3 -c "import json,sys; p=json.load(open(sys.argv[1])); assert p['arena']['peak_bytes'] > 0" "$tmp/$name/plan.json" ||
    fail "$name: plan.json does not parse"
  local funcs kernels missing=0
  funcs=$(readelf -Ws "$tmp/$name/kernels.sm_90.cubin" | awk '$4 == "FUNC" {print $NF}' | sort -u)
  kernels=$(grep -o '^  LAUNCH [a-z0-9_]*' "$tmp/$name/program.txt" | cut -d' ' -f4 | sort -u)
  [ -n "$kernels" ] || grep -q "The CUDA backend does not run this step" "$tmp/$name/program.txt" || fail "$name: the program launches no kernel"
  for k in $kernels; do
    grep -qx "$k" <<<"$funcs" || { echo "$name: kernel $k is not in the cubin"; missing=1; }
  done
  [ $missing -eq 0 ] || fail "$name: kernels missing from the cubin"
  local syms others dyn
  syms=$(nm -D --defined-only "$tmp/$name/libstep.so" | awk '$2 ~ /^[TDBRVW]$/ {print $3}')
  grep -qx 'stepc_step' <<<"$syms" || fail "$name: libstep.so does not export stepc_step"
  others=$(grep -v '^stepc_' <<<"$syms" | grep -v '^_' || true)
  [ -z "$others" ] || fail "$name: libstep.so exports more than the stepc_* API: $others"
  dyn=$(readelf -d "$tmp/$name/libstep.so" "$tmp/$name/train")
  grep -q 'SONAME.*\[libstep.so\]' <<<"$dyn" || fail "$name: libstep.so has no SONAME libstep.so"
  grep 'NEEDED' <<<"$dyn" | grep -q 'lua\|nvrtc\|/' && fail "$name: a NEEDED entry names Lua, NVRTC or a path: $(grep NEEDED <<<"$dyn")"
  # train loads libstep.so from its own directory once checked against libstep.sum (a truncated
  # library mapped by the dynamic loader is a SIGBUS before main): it must not NEED it
  readelf -d "$tmp/$name/train" | grep -q 'NEEDED.*libstep' && fail "$name: train links libstep.so (it must dlopen it after the check)"
  # (an AddressSanitizer build's instrumentation records its source files' full names for its
  # reports, whatever -ffile-prefix-map says: there only the artifact's own path is checked)
  local paths="$tmp\|$PWD/"
  grep -q 'NEEDED.*libasan' <<<"$dyn" && paths="$tmp"
  grep -q "$paths" "$tmp/$name/libstep.so" "$tmp/$name/train" "$tmp/$name/step.img" &&
    fail "$name: the artifact names a path of this machine (its own or stepc's source tree)"
  # (under fp8 `stepc plan` reports the single-rank bf16 step beside TE's per-rank layout, docs/fp8.md:
  # the artifact's plan.json is the fp8 step's own, so there is nothing of stepc plan's to compare)
  "$stepc" plan "$src" "$@" --json >"$tmp/$name.plan.json" 2>/dev/null || fail "$name: stepc plan --json"
  "$image_plan" "$tmp/$name" >"$tmp/$name.image.json" || fail "$name: image_plan"
  [[ " $* " == *" model.fp8="[eh]* || $(grep -c '^cfg.model.fp8 = ' "$src") -gt 0 ]] ||
  python3 - "$tmp/$name.plan.json" "$tmp/$name.image.json" <<'PY' || fail "$name: step.img holds another plan than stepc plan reports"
import json, sys
p, i = json.load(open(sys.argv[1]))["arena"], json.load(open(sys.argv[2]))
ls, lp = p.get("launch_scratch", {}), p.get("launch_program", {})
want = {"held_bytes": p["arena_bytes"] + p.get("optimizer_region", {}).get("bytes", 0), "arena_bytes": p["arena_bytes"],
        "region_bytes": p.get("optimizer_region", {}).get("bytes", 0), "layout_digest": p["layout_digest"],
        "scratch_bytes": ls.get("bytes", 0), "device_peak_bytes": ls.get("device_peak_bytes", p["arena_bytes"] + p.get("optimizer_region", {}).get("bytes", 0)),
        "program_records": lp.get("records", 0), "program_digest": lp.get("digest", "")}
bad = [f"{k}: plan {want[k]} image {i[k]}" for k in want if want[k] != i[k]]
print("\n".join(bad)) if bad else None
sys.exit(1 if bad else 0)
PY
  "$play" "$tmp/$name" || fail "$name: the player does not launch the artifact's program"
  echo "ok: $name: $(grep -c '^point ' "$tmp/$name/program.txt") points in the program, $(wc -w <<<"$kernels") kernels, all in the cubin"
}
build tiny tiny
build gpt2_small_llama gpt2_small_llama
build bench_m bench_m
# (the paper's TP 8 x PP 8 layout is planned, not executed: the single-rank step the paper's no-parallelism row describes)
build gpt3_paper gpt3_paper model.tensor_model_parallel_size=1 model.pipeline_model_parallel_size=1 model.sequence_parallel=false train.world_size=1 model.attention_backend=flash model.attention_dropout=0
# unfused attention with attention and hidden dropout; full recompute (replays); MLA + MoE (an fp32
# recipe: as such the CUDA backend does not run it and program.txt says why; with bf16=true it does)
build gpt3_tiny tests/recipes/gpt3_tiny.lua model.bf16=true
# the generated elementwise kernels (compiler/passes/ew_fuse.c): 4 backward ADD -> DROPOUT_BWD chains,
# launched by the program, their source in kernels.cu after the hand-written files
n_ew=$(grep -c '^  LAUNCH ew_add_dropout_bwd_' "$tmp/gpt3_tiny/program.txt")
[ "$n_ew" -eq 4 ] || fail "gpt3_tiny: the program launches $n_ew generated ADD -> DROPOUT_BWD kernels, expected 4"
grep -q '^// stepc-file: generated/ew_add_dropout_bwd_' "$tmp/gpt3_tiny/kernels.cu" || fail "gpt3_tiny: kernels.cu has no generated kernel"
echo "ok: gpt3_tiny: $n_ew generated elementwise launches"
build tiny_full tiny model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1
build tiny_mla_moe tests/recipes/tiny_mla_moe.lua
grep -q "The CUDA backend does not run this step" "$tmp/tiny_mla_moe/program.txt" || fail "tiny_mla_moe (fp32): program.txt does not say why there is no CUDA work"
# MLA + MoE in bf16 (issue 11): every MoE / MLA op has CUDA launches, dropless and with capacity
for v in "" "model.moe_expert_capacity_factor=1.0 model.moe_pad_expert_input_to_capacity=true" \
  "model.attention_backend=unfused model.moe_expert_capacity_factor=1.0 model.moe_shared_expert_intermediate_size=null" \
  "model.moe_router_topk=1 model.q_lora_rank=null" "model.moe_ffn_hidden_size=12"; do
  # shellcheck disable=SC2086
  build tiny_mla_moe_bf16 tests/recipes/tiny_mla_moe.lua model.bf16=true $v
  grep -q "The CUDA backend does not run this step" "$tmp/tiny_mla_moe_bf16/program.txt" && fail "tiny_mla_moe bf16 [$v]: refused on CUDA"
  for k in mla_head_split mla_head_concat router_linear_forward router_topk_forward softmax_rows_forward moe_aux_loss_forward \
    moe_dispatch moe_scatter_rows grouped_linear_forward moe_act_forward moe_gather_rows grouped_linear_dgrad \
    grouped_linear_wgrad moe_act_backward router_topk_backward softmax_rows_backward moe_aux_loss_backward \
    router_linear_dgrad; do
    grep -qE "^  LAUNCH $k(_tc|_ws)? " "$tmp/tiny_mla_moe_bf16/program.txt" || fail "tiny_mla_moe bf16 [$v]: the program never launches $k"
  done
  # the grouped GEMMs: tensor cores where every width is a multiple of 8 (forward and dgrad warp-specialised,
  # through TMA tensor maps the program lists), else the CUDA-core kernels (an expert ffn of 12: fc1's 24
  # outputs on the tensor cores, fc2's 12-wide input not)
  # (the weight gradient: two micro-batches add into the fp32 main gradient, where the tensor-core kernel
  # is faster; one micro-batch stores it, on the warp-specialised kernel: below)
  for k in grouped_linear_forward_ws grouped_linear_dgrad_ws grouped_linear_wgrad_tc; do
    grep -qE "^  LAUNCH $k " "$tmp/tiny_mla_moe_bf16/program.txt" || fail "tiny_mla_moe bf16 [$v]: the program never launches $k"
  done
  grep -qE "^#   tensor map 0 at A\+0x[0-9a-f]+: A\+0x[0-9a-f]+ bf16 \([0-9]+, [0-9]+\) box \(64, 128\)" "$tmp/tiny_mla_moe_bf16/program.txt" ||
    fail "tiny_mla_moe bf16 [$v]: program.txt lists no tensor map for the grouped GEMMs"
  if [ "$v" = "model.moe_ffn_hidden_size=12" ]; then
    grep -qE "^  LAUNCH grouped_linear_forward " "$tmp/tiny_mla_moe_bf16/program.txt" ||
      fail "tiny_mla_moe bf16 [$v]: the 12-wide fc2 does not fall back to the CUDA-core kernel"
  fi
  rm -rf "$tmp/tiny_mla_moe_bf16"
done
build tiny_mla_moe_one tests/recipes/tiny_mla_moe.lua model.bf16=true train.global_batch_size=2
grep -qE "^  LAUNCH grouped_linear_wgrad_ws " "$tmp/tiny_mla_moe_one/program.txt" ||
  fail "tiny_mla_moe bf16, one micro-batch: the stored weight gradient is not on grouped_linear_wgrad_ws"
grep -qE "^  LAUNCH grouped_linear_wgrad_tc " "$tmp/tiny_mla_moe_one/program.txt" &&
  fail "tiny_mla_moe bf16, one micro-batch: a stored weight gradient on grouped_linear_wgrad_tc"
rm -rf "$tmp/tiny_mla_moe_one"
echo "ok: tiny_mla_moe bf16: every MoE / MLA kernel launched by the program"
# per-layer scoped graphs: the plan pins the scopes' static outputs
build tiny_te tiny model.cuda_graph_impl=transformer_engine "model.cuda_graph_modules=[attn]"
# fp8 under both recipes (ir/ops/fp8.c): the casts and fp8 GEMMs; under delayed scaling the casts read
# their scales from the step's state and the program updates it (fp8_scale_update: twice a micro-batch,
# once in the tail) — played on the recording device with the rest; with recompute, whose replayed casts
# reuse the forward's scales
for f8 in "tests/recipes/tiny_fp8.lua" "tests/recipes/tiny_fp8_delayed.lua" \
  "tests/recipes/tiny_fp8_delayed.lua model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1"; do
  # shellcheck disable=SC2086
  build tiny_f8 $f8
  grep -qE "^  LAUNCH fp8_cast_transpose " "$tmp/tiny_f8/program.txt" || fail "$f8: the program never launches fp8_cast_transpose"
  # current scaling keeps the amax pass where no producer of ours folds it (the weights, cuDNN's and
  # cuBLASLt's outputs); a delayed cast knows its scale and folds its own amax: one launch, never a pass
  n_amax=$(grep -c '^  LAUNCH fp8_amax_partial ' "$tmp/tiny_f8/program.txt")
  if [[ $f8 == *delayed* ]]; then
    [ "$n_amax" -eq 0 ] || fail "$f8: $n_amax fp8_amax_partial launches under delayed scaling"
  else
    [ "$n_amax" -gt 0 ] || fail "$f8: the program never launches fp8_amax_partial"
  fi
  n_upd=$(grep -c '^  LAUNCH fp8_scale_update ' "$tmp/tiny_f8/program.txt")
  want=0
  [[ $f8 == *delayed* ]] && want=3
  [ "$n_upd" -eq "$want" ] || fail "$f8: the program launches fp8_scale_update $n_upd times, expected $want"
  rm -rf "$tmp/tiny_f8"
done
echo "ok: tiny in fp8, current and delayed scaling, played as its programs hold them"
# -o creates missing parent folders (the README builds into art/tiny)
"$stepc" build models/tiny.lua -o "$tmp/new/parent/tiny" >"$tmp/nested.out" 2>&1 || { cat "$tmp/nested.out"; fail "stepc build -o into new folders"; }
[ -s "$tmp/new/parent/tiny/libstep.so" ] || fail "stepc build -o into new folders: no libstep.so"

# tiny trains from its artifact
"$tmp/tiny/train" --device cpu --steps 3 --json >"$tmp/gen.json" 2>"$tmp/gen.err" || { cat "$tmp/gen.err"; fail "train"; }
"$tmp/tiny/train" --device cpu --steps 3 --library >/dev/null 2>&1 && fail "train --library (removed with step.c) was accepted"
"$stepc" run "$tmp/tiny" --device cpu --steps 2 >"$tmp/run.out" 2>&1 || { cat "$tmp/run.out"; fail "stepc run DIR"; }
cat "$tmp/run.out"
# moved, and copied as a tarball to a directory the build tree's paths do not reach: the same bits
mv "$tmp/tiny" "$tmp/moved"
(cd / && "$tmp/moved/train" --device cpu --steps 3 --json) >"$tmp/moved.json" 2>"$tmp/moved.err" || { cat "$tmp/moved.err"; fail "the moved artifact does not train"; }
mkdir -p "$tmp/elsewhere/x" && tar -C "$tmp" -cf "$tmp/art.tar" moved && tar -C "$tmp/elsewhere/x" -xf "$tmp/art.tar" && rm -rf "$tmp/moved"
(cd "$tmp/elsewhere" && env -i PATH=/usr/bin:/bin x/moved/train --device cpu --steps 3 --json) >"$tmp/copied.json" 2>"$tmp/copied.err" ||
  { cat "$tmp/copied.err"; fail "the unpacked artifact does not train"; }
# stepc run SPEC: the same recipe built into the artifact cache and run through its libstep.so
STEPC_CACHE_DIR="$tmp/cache" "$stepc" run models/tiny.lua --device cpu --steps 3 --json >"$tmp/spec.json" 2>"$tmp/spec.err" ||
  { cat "$tmp/spec.err"; fail "stepc run SPEC"; }
STEPC_CACHE_DIR="$tmp/cache" "$stepc" run models/tiny.lua --device cpu --steps 1 >/dev/null 2>"$tmp/spec2.err" || fail "stepc run SPEC again"
grep -q "cached" "$tmp/spec2.err" || fail "the second stepc run SPEC rebuilt the artifact: $(cat "$tmp/spec2.err")"
python3 - "$tmp/gen.json" "$tmp/moved.json" "$tmp/copied.json" "$tmp/spec.json" <<'PY' || fail "moved, copied or run SPEC losses differ"
import json, sys
runs = [json.load(open(p)) for p in sys.argv[1:]]
losses = [[s["loss"] for s in r["steps"]] for r in runs]
print("built / moved / unpacked / stepc run SPEC:", losses)
assert all(l == losses[0] for l in losses) and len(losses[0]) == 3
PY
echo "ok: the artifacts build, tiny's trains, moved and unpacked to the same bits"
