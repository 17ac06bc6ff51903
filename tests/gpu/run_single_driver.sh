#!/usr/bin/env bash
# run_single_driver.sh ART_ROOT — one compiled step, one runtime, on the GPU (issue 9):
#  1. `stepc run SPEC` (built here into the artifact cache, run through its libstep.so) for shapes S
#     and M as one full-iteration graph, beside the artifacts of the same recipes built on the CPU
#     machine (ART_ROOT/S_fi, ART_ROOT/M_fi): losses bitwise equal, step time and memory side by side;
#  2. then stepc's build tree and NVRTC are hidden (moved away) and every artifact under ART_ROOT
#     trains from a copy in /tmp through its own train; LD_DEBUG shows which libraries load;
#  3. the bitwise properties through that one driver: full-iteration replay and scoped graphs ==
#     eager (--graph-mode), each recompute setting == none, resume == uninterrupted; 4. the Python module with PyTorch CUDA tensors.
# Logs and a summary to $OUT. Exit 0 all held, 1 otherwise, 77 no GPU.
set -uo pipefail
ART=$1
DEST=${OUT:-gpu-logs}
mkdir -p "$DEST"
STEPS=${STEPS:-15}
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 || { echo "SKIP: no GPU"; exit 77; }
root=$PWD
fails=0
say() { echo "$*" | tee -a "$DEST/summary.txt"; }
# stepc build links the archives and headers at the paths it was built with
[ -e /work/main ] || { mkdir -p /work && ln -s "$root" /work/main; }
export STEPC_CACHE_DIR=/tmp/stepc-cache

# ---- 1. stepc run SPEC beside the carried artifacts (built with stepc's deterministic flash attention,
# so that the losses can be compared bit for bit; the models' default is auto = cuDNN)
NF="model.check_for_nan_in_loss_and_grad=false model.attention_backend=flash"
for s in "S gpt2_small_llama" "M bench_m"; do
  set -- $s
  ( time build/stepc run "models/$2.lua" --device cuda --steps "$STEPS" --json model.cuda_graph_impl=full_iteration $NF ) \
    >"$DEST/run_spec_$1.json" 2>"$DEST/run_spec_$1.err" || { say "FAIL stepc run $2: $(tail -2 "$DEST/run_spec_$1.err")"; fails=1; }
done

# the in-process harness (tests/gpu/step.c): gradients against the CPU reference executor, with
# the compiler's fusions and the plan that keeps fused groups apart
build/tests/gpu/gpu_step grads models/tiny.lua >"$DEST/gpu_step_grads_tiny.txt" 2>&1 || { say "FAIL gpu_step grads tiny"; fails=1; }
build/tests/gpu/gpu_step grads tests/recipes/gpt3_tiny.lua model.bf16=true model.attention_dropout=0 model.hidden_dropout=0 \
  >"$DEST/gpu_step_grads_gpt3.txt" 2>&1 || { say "FAIL gpu_step grads gpt3_tiny"; fails=1; }
say "gpu_step grads: tiny $(tail -1 "$DEST/gpu_step_grads_tiny.txt"); gpt3_tiny $(tail -1 "$DEST/gpu_step_grads_gpt3.txt")"

# ---- 2. hide stepc and NVRTC; the artifacts run from a copy elsewhere
mv build /tmp/hidden-build
mkdir -p /tmp/hidden-nvrtc
: >/tmp/hidden-nvrtc.list
for f in $(ldconfig -p | awk '/libnvrtc/ {print $NF}') /usr/local/cuda/lib64/libnvrtc* /usr/local/cuda/targets/*/lib/libnvrtc*; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  mv "$f" "/tmp/hidden-nvrtc/$(basename "$f")" 2>/dev/null && echo "$f" >>/tmp/hidden-nvrtc.list
done
restore() { # put stepc's build tree and NVRTC back (a warm machine runs this script again)
  [ -d /tmp/hidden-build ] && mv /tmp/hidden-build "$root/build"
  while read -r f; do mv "/tmp/hidden-nvrtc/$(basename "$f")" "$f"; done </tmp/hidden-nvrtc.list
  : >/tmp/hidden-nvrtc.list
}
trap restore EXIT
sed 's/^/hidden: /' /tmp/hidden-nvrtc.list >"$DEST/hidden.txt"; echo "lua: $(ldconfig -p | grep -c lua) entries; stepc on PATH: $(command -v stepc || echo none)" >>"$DEST/hidden.txt"
rm -rf /tmp/arts && cp -r "$ART" /tmp/arts && cd /tmp/arts
run() { # name dir json [train flags]
  local name=$1 dir=$2 out=$3
  shift 3
  env -i PATH=/usr/bin:/bin LD_DEBUG=libs "./$dir/train" --device cuda --json "$@" >"$out" 2>"$DEST/$name.ld" ||
    { say "FAIL $name: $(grep -v '^ *[0-9]*:' "$DEST/$name.ld" | tail -2)"; fails=1; }
  grep -v '^ *[0-9]*:' "$DEST/$name.ld" >"$DEST/$name.err"
  if grep -q 'calling init: .*\(nvrtc\|lua\|libstepc\)' "$DEST/$name.ld"; then say "FAIL $name loaded NVRTC, Lua or stepc"; fails=1; fi
  grep 'calling init:' "$DEST/$name.ld" | sed 's/.*calling init: //' | sort -u >"$DEST/$name.libs"
  rm -f "$DEST/$name.ld"
}
for a in tiny tiny_fi tiny_te tiny_full tiny_sel gpt3 gpt3_fi gpt3_local gpt3_full; do run "$a" "$a" "$DEST/art_$a.json" --steps 6 --save "/tmp/ck_$a"; done
run S_fi S_fi "$DEST/art_S_fi.json" --steps "$STEPS"
run M_fi M_fi "$DEST/art_M_fi.json" --steps "$STEPS"
for a in tiny gpt3; do
  run "${a}_eager" "$a" "$DEST/art_${a}_eager.json" --steps 6 --graph-mode eager
  run "${a}_fi_mode" "$a" "$DEST/art_${a}_fi_mode.json" --steps 6 --graph-mode full_iteration
  run "${a}_first3" "$a" "$DEST/art_${a}_first3.json" --steps 3 --save "/tmp/ck3_$a"
  run "${a}_resumed" "$a" "$DEST/art_${a}_resumed.json" --steps 3 --resume "/tmp/ck3_$a"
done
run tiny_scoped_mode tiny_te "$DEST/art_tiny_te_eager.json" --steps 6 --graph-mode eager
cd "$root"

# ---- 3. the comparisons
python3 - "$DEST" >>"$DEST/summary.txt" 2>&1 <<'PY' || fails=1
import json, os, sys
from safetensors.torch import load_file
d = sys.argv[1]

def same_tensors(a, b):
    # the files' metadata names each step's fingerprint (which differs across recompute settings):
    # compare the tensors, bit for bit
    ta, tb = load_file(a), load_file(b)
    return ta.keys() == tb.keys() and all(ta[k].dtype == tb[k].dtype and ta[k].shape == tb[k].shape and
                                           ta[k].contiguous().view(-1).view(dtype=__import__("torch").uint8).equal(
                                               tb[k].contiguous().view(-1).view(dtype=__import__("torch").uint8)) for k in ta)
def load(n):
    return json.load(open(os.path.join(d, n)))
def losses(r):
    return [s["loss"] for s in r["steps"]]
bad = 0
def same(what, a, b, params=None):
    global bad
    la, lb = losses(load(a)), losses(load(b))
    ok = la == lb and len(la) > 0
    if params:
        ok = ok and same_tensors(*params)
    print(f"{'ok  ' if ok else 'FAIL'} {what}: {len(la)} losses {'==' if la == lb else '!='}" + (" and parameters" if params else "") +
          f" (last {la[-1]!r} vs {lb[-1]!r})")
    bad += not ok
def ck(a):
    return f"/tmp/ck_{a}/model.safetensors"
same("tiny full_iteration artifact == eager artifact", "art_tiny_fi.json", "art_tiny.json", (ck("tiny_fi"), ck("tiny")))
same("tiny --graph-mode full_iteration == eager", "art_tiny_fi_mode.json", "art_tiny_eager.json")
same("tiny scoped (transformer_engine [attn]) == eager", "art_tiny_te.json", "art_tiny_te_eager.json", (ck("tiny_te"), ck("tiny")))
same("tiny full recompute == none", "art_tiny_full.json", "art_tiny.json", (ck("tiny_full"), ck("tiny")))
same("tiny selective core_attn,mlp,layernorm == none", "art_tiny_sel.json", "art_tiny.json", (ck("tiny_sel"), ck("tiny")))
same("gpt3_tiny (dropout) full_iteration == eager", "art_gpt3_fi.json", "art_gpt3.json", (ck("gpt3_fi"), ck("gpt3")))
same("gpt3_tiny (dropout) local scoped == eager", "art_gpt3_local.json", "art_gpt3.json", (ck("gpt3_local"), ck("gpt3")))
same("gpt3_tiny (dropout) full recompute == none", "art_gpt3_full.json", "art_gpt3.json", (ck("gpt3_full"), ck("gpt3")))
for a in ("tiny", "gpt3"):
    r = losses(load(f"art_{a}_first3.json")) + losses(load(f"art_{a}_resumed.json"))
    u = losses(load(f"art_{a}.json"))
    ok = r == u
    print(f"{'ok  ' if ok else 'FAIL'} {a} resume at 3 == uninterrupted: {r == u}")
    bad += not ok
for shape in ("S", "M"):
    try:
        spec, art = load(f"run_spec_{shape}.json"), load(f"art_{shape}_fi.json")
    except Exception as e:
        print(f"FAIL {shape}: {e}"); bad += 1; continue
    ls, la = losses(spec), losses(art)
    med = lambda r: sorted(s["ms"] for s in r["steps"][3:])[len(r["steps"][3:]) // 2]
    ms, ma = spec["measure"], art["measure"]
    ok = ls == la
    print(f"{'ok  ' if ok else 'FAIL'} {shape}: stepc run SPEC == artifact built on the CPU machine: {len(ls)} losses {'==' if ok else '!='}; "
          f"median step {med(spec):.2f} ms (run SPEC) / {med(art):.2f} ms (artifact); max allocated {ms['max_allocated_bytes']/1e9:.3f} / "
          f"{ma['max_allocated_bytes']/1e9:.3f} GB, predicted {ms['predicted_peak_bytes']/1e9:.3f} / {ma['predicted_peak_bytes']/1e9:.3f} GB")
    bad += not ok
sys.exit(1 if bad else 0)
PY
cat "$DEST/summary.txt"
echo "libraries the tiny artifact's train loaded:"; cat "$DEST/tiny.libs"; cat "$DEST/hidden.txt"
# ---- 4. Python + PyTorch CUDA tensors (NVRTC and stepc still hidden)
PYTHONPATH=python python3 tests/gpu/python_torch.py /tmp/arts/tiny >"$DEST/python_torch.txt" 2>&1 || { say "FAIL python_torch: $(tail -3 "$DEST/python_torch.txt")"; fails=1; }
tail -2 "$DEST/python_torch.txt"
exit $fails
