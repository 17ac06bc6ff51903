#!/usr/bin/env bash
# artifact.sh STEPC STEP_LITERAL — `stepc build` on the shipped dense recipes (no GPU needed): each
# artifact has every file, its plan.json parses, its cubin defines every kernel its step.c launches,
# libstep.so exports the stepc.h API, and step.c compiled alone launches exactly what the
# executor's dispatch launches (STEP_LITERAL, tests/api/step_literal.c). On tiny it also trains: the artifact's train (running the
# compiled step.c) gives bitwise the losses of the same schedule through the library's loop
# (train --library), and `stepc run DIR` runs it.
set -uo pipefail
stepc=$1
literal=$2
# Building libstep.so links the build tree's archives and Debian's static Lua with the system C
# compiler: a machine without that toolchain (the GPU machine has no Lua) runs artifacts but does
# not build them, so the test skips there.
for need in /usr/lib/x86_64-linux-gnu/liblua5.4.a "$(command -v cc)" "$(command -v readelf)"; do
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
  for f in recipe.lua plan.json kernels.cu kernels.sm_90.cubin step.c libstep.so train stepc.h; do
    [ -s "$tmp/$name/$f" ] || fail "$name: no $f"
  done
  python3 -c "import json,sys; p=json.load(open(sys.argv[1])); assert p['arena']['peak_bytes'] > 0" "$tmp/$name/plan.json" ||
    fail "$name: plan.json does not parse"
  local funcs kernels missing=0
  funcs=$(readelf -Ws "$tmp/$name/kernels.sm_90.cubin" | awk '$4 == "FUNC" {print $NF}' | sort -u)
  kernels=$(grep -o '^    LAUNCH([a-z0-9_]*' "$tmp/$name/step.c" | cut -d'(' -f2 | sort -u)
  [ -n "$kernels" ] || grep -q "The CUDA backend does not run this step" "$tmp/$name/step.c" || fail "$name: step.c launches no kernel"
  for k in $kernels; do
    grep -qx "$k" <<<"$funcs" || { echo "$name: kernel $k is not in the cubin"; missing=1; }
  done
  [ $missing -eq 0 ] || fail "$name: kernels missing from the cubin"
  local syms
  syms=$(nm -D --defined-only "$tmp/$name/libstep.so")
  grep -q ' stepc_step$' <<<"$syms" || fail "$name: libstep.so does not export stepc_step"
  grep -q ' stepc_generated_step$' <<<"$syms" || fail "$name: libstep.so has no generated step"
  cc -shared -fPIC -O0 -o "$tmp/$name/step_only.so" "$tmp/$name/step.c" 2>"$tmp/$name.cc" || { cat "$tmp/$name.cc"; fail "$name: step.c alone does not compile"; }
  "$literal" "$tmp/$name/recipe.lua" "$tmp/$name/step_only.so" || fail "$name: step.c's literals are not the dispatch's launches"
  echo "ok: $name: $(grep -c '^  OP(' "$tmp/$name/step.c") ops in step.c, $(wc -w <<<"$kernels") kernels, all in the cubin"
}
build tiny tiny
build gpt2_small_llama gpt2_small_llama
build llama3_2_1b llama3_2_1b
build gpt3_paper gpt3_paper model.attention_backend=flash model.attention_dropout=0
# unfused attention with attention and hidden dropout; full recompute (replays); MLA + MoE, which
# the CUDA backend does not run yet (step.c then holds no CUDA work and says why)
build gpt3_tiny tests/recipes/gpt3_tiny.lua model.bf16=true
# the generated elementwise kernels (compiler/ew_fuse.c): 4 backward ADD -> DROPOUT_BWD chains,
# launched from step.c, their source in kernels.cu after the hand-written files
n_ew=$(grep -c '^    LAUNCH(ew_add_dropout_bwd_' "$tmp/gpt3_tiny/step.c")
[ "$n_ew" -eq 4 ] || fail "gpt3_tiny: step.c launches $n_ew generated ADD -> DROPOUT_BWD kernels, expected 4"
grep -q '^// stepc-file: generated/ew_add_dropout_bwd_' "$tmp/gpt3_tiny/kernels.cu" || fail "gpt3_tiny: kernels.cu has no generated kernel"
echo "ok: gpt3_tiny: $n_ew generated elementwise launches"
build tiny_full tiny model.recompute_granularity=full model.recompute_method=uniform model.recompute_num_layers=1
build tiny_mla_moe tests/recipes/tiny_mla_moe.lua
# per-layer scoped graphs: the plan pins the scopes' static outputs; step.c's functions are what the
# graphs capture
build tiny_te tiny model.cuda_graph_impl=transformer_engine "model.cuda_graph_modules=[attn]"
# -o creates missing parent folders (the README builds into art/tiny)
"$stepc" build models/tiny.lua -o "$tmp/new/parent/tiny" >"$tmp/nested.out" 2>&1 || { cat "$tmp/nested.out"; fail "stepc build -o into new folders"; }
[ -s "$tmp/new/parent/tiny/libstep.so" ] || fail "stepc build -o into new folders: no libstep.so"

# tiny trains from its artifact, and the compiled step.c is bitwise the library's schedule
"$tmp/tiny/train" --device cpu --steps 3 --json >"$tmp/gen.json" 2>"$tmp/gen.err" || { cat "$tmp/gen.err"; fail "train"; }
grep -q "generated step" "$tmp/gen.err" || fail "train did not run the generated step: $(cat "$tmp/gen.err")"
"$tmp/tiny/train" --device cpu --steps 3 --json --library >"$tmp/lib.json" 2>/dev/null || fail "train --library"
python3 - "$tmp/gen.json" "$tmp/lib.json" <<'PY' || fail "generated and library losses differ"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["generated"] and not b["generated"]
la, lb = [s["loss"] for s in a["steps"]], [s["loss"] for s in b["steps"]]
print("generated", la, "library", lb)
assert la == lb and len(la) == 3
PY
"$stepc" run "$tmp/tiny" --device cpu --steps 2 >"$tmp/run.out" 2>&1 || { cat "$tmp/run.out"; fail "stepc run DIR"; }
grep -q "compiled step.c" "$tmp/run.out" || fail "stepc run DIR did not run the compiled step: $(cat "$tmp/run.out")"
cat "$tmp/run.out"
echo "ok: the artifacts build and tiny's trains"
