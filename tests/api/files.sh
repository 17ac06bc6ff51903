#!/usr/bin/env bash
# files.sh STEPC — the file promises of docs/promises.md ("Files") through the artifact's train and
# stepc import: a save replaces only a checkpoint (or nothing), an import only a regular file, and
# a FIFO, a device or a directory where the runtime reads a file is refused at once (every command
# runs under `timeout`: a read that blocks fails the test). Exit 0 ok, 1 a failure, 77 no C compiler.
set -uo pipefail
command -v cc >/dev/null || { echo "SKIP: no C compiler (stepc build links the artifact)"; exit 77; }
stepc=$1 T="timeout 60"
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sums() { (cd "$1" && find . -type f | sort | xargs md5sum); }
# refused CMD...: must exit 4 (never 124: it hung) with $want in its stderr
refused() {
  $T "$@" >"$tmp/out" 2>&1
  local rc=$?
  [ $rc -eq 124 ] && fail "it blocked: $*"
  [ $rc -eq 4 ] && grep -q -- "$want" "$tmp/out" || { cat "$tmp/out"; fail "exit $rc, not 4 with \"$want\": $*"; }
}
art=$tmp/art
"$stepc" build models/tiny.lua -o "$art" >"$tmp/build.out" 2>&1 || { cat "$tmp/build.out"; fail "stepc build"; }
TR=("$art/train" --device cpu --steps 1)

# ---- train --save DIR ----
mkdir "$tmp/d" && echo x >"$tmp/d/thesis.tex"
want="thesis.tex, which no checkpoint holds" refused "${TR[@]}" --save "$tmp/d"
[ "$(cat "$tmp/d/thesis.tex")" = x ] && [ "$(ls -A "$tmp/d")" = thesis.tex ] || fail "the user's folder was changed"
before=$(sums "$art")
want="not a stepc checkpoint" refused "${TR[@]}" --save "$art"
[ "$(sums "$art")" = "$before" ] || fail "--save into the artifact's own directory changed it"
mkfifo "$tmp/fifo"
want="a FIFO, not a checkpoint directory" refused "${TR[@]}" --save "$tmp/fifo"
[ -p "$tmp/fifo" ] || fail "the FIFO was replaced"
ls -A "$tmp" | grep -q saving && fail "a refused save left a staging directory"
echo "ok: --save into a folder of the user's files, the artifact's directory or a FIFO is refused and changes nothing"

mkdir "$tmp/empty" && $T "${TR[@]}" --save "$tmp/empty" >/dev/null 2>&1 && [ -f "$tmp/empty/state.json" ] || fail "a save into an empty directory"
$T "$art/train" --device cpu --steps 2 --save "$tmp/empty" >/dev/null 2>&1 && grep -q '"step": 2,' "$tmp/empty/state.json" || fail "a save over an earlier checkpoint"
echo notes >"$tmp/empty/notes.txt"
want="notes.txt, which no checkpoint holds" refused "${TR[@]}" --save "$tmp/empty"
[ "$(cat "$tmp/empty/notes.txt")" = notes ] && grep -q '"step": 2,' "$tmp/empty/state.json" || fail "the checkpoint with notes.txt was changed"
rm "$tmp/empty/notes.txt"
mkdir "$tmp/.empty.saving" && echo mine >"$tmp/.empty.saving/mine.txt"
want="the staging directory of a save" refused "${TR[@]}" --save "$tmp/empty"
[ "$(cat "$tmp/.empty.saving/mine.txt")" = mine ] || fail "a folder named like a save's staging directory was cleared"
rm -r "$tmp/.empty.saving"
echo "ok: an empty directory and an earlier checkpoint are saved into; a checkpoint with another file, or a staging name taken, is refused"

# ---- reads: a FIFO or a device where the runtime reads a file ----
ck=$tmp/empty
cp -r "$ck" "$tmp/ck_fifo" && rm "$tmp/ck_fifo/state.json" && mkfifo "$tmp/ck_fifo/state.json"
want="is a FIFO, not a regular file" refused "${TR[@]}" --resume "$tmp/ck_fifo"
cp -r "$ck" "$tmp/ck_fifo2" && rm "$tmp/ck_fifo2/model.safetensors" && mkfifo "$tmp/ck_fifo2/model.safetensors"
want="cannot read model.safetensors" refused "${TR[@]}" --resume "$tmp/ck_fifo2"
mkdir "$tmp/art_fifo" && cp "$art/train" "$art/libstep.so" "$art/libstep.sum" "$tmp/art_fifo/" && mkfifo "$tmp/art_fifo/step.img"
want="is a FIFO, not a regular file" refused "$tmp/art_fifo/train" --device cpu --steps 1
rm "$tmp/art_fifo/step.img" && ln -s /dev/zero "$tmp/art_fifo/step.img"
want="is a character device, not a regular file" refused "$tmp/art_fifo/train" --device cpu --steps 1
mkdir "$tmp/so_fifo" && cp "$art/step.img" "$art/libstep.sum" "$tmp/so_fifo/" && mkfifo "$tmp/so_fifo/libstep.so"
want="libstep.so is a FIFO, not a regular file" refused "$stepc" run "$tmp/so_fifo" --device cpu --steps 1
echo "ok: a FIFO for state.json, model.safetensors, step.img or libstep.so (stepc run), and /dev/zero for step.img, are refused at once"

# ---- a checkpoint of another step ----
"$stepc" build models/tiny.lua model.num_layers=4 -o "$tmp/art4" >"$tmp/build4.out" 2>&1 || { cat "$tmp/build4.out"; fail "build 4 layers"; }
$T "$tmp/art4/train" --device cpu --steps 1 --save "$tmp/ck4" >/dev/null 2>&1 || fail "the 4-layer checkpoint"
"$stepc" build models/tiny.lua model.num_layers=2 -o "$tmp/art2" >"$tmp/build2.out" 2>&1 || { cat "$tmp/build2.out"; fail "build 2 layers"; }
want="saved by another step" refused "$tmp/art2/train" --device cpu --steps 2 --resume "$tmp/ck4"
echo "ok: a 4-layer checkpoint is refused by a 2-layer artifact"

# ---- stepc import -o PATH ----
$T "$stepc" export models/tiny.lua --from "$ck" -o "$tmp/hf" >"$tmp/export.out" 2>&1 || { cat "$tmp/export.out"; fail "stepc export"; }
$T "$stepc" import models/tiny.lua --from "$tmp/hf" -o "$tmp/p.safetensors" >/dev/null 2>&1 && [ -f "$tmp/p.safetensors" ] || fail "import"
$T "$stepc" import models/tiny.lua --from "$tmp/hf" -o "$tmp/p.safetensors" >/dev/null 2>&1 || fail "import over a regular file"
echo keep >"$tmp/target" && ln -s "$tmp/target" "$tmp/link"
mkfifo "$tmp/out_fifo" && mkdir "$tmp/out_dir"
for o in link out_fifo out_dir; do
  want="refusing to replace it" refused "$stepc" import models/tiny.lua --from "$tmp/hf" -o "$tmp/$o"
done
[ -L "$tmp/link" ] && [ "$(cat "$tmp/target")" = keep ] && [ -p "$tmp/out_fifo" ] && [ -d "$tmp/out_dir" ] || fail "an import target changed"
ls "$tmp" | grep -q '\.tmp$' && fail "a refused import left its temporary file"
cp -r "$tmp/hf" "$tmp/hf_fifo" && rm "$tmp/hf_fifo/model.safetensors" && mkfifo "$tmp/hf_fifo/model.safetensors"
want="is a FIFO, not a regular file" refused "$stepc" import models/tiny.lua --from "$tmp/hf_fifo" -o "$tmp/q.safetensors"
mkdir "$tmp/hf_cfg" && mkfifo "$tmp/hf_cfg/config.json"
want="config.json exists and is a FIFO" refused "$stepc" export models/tiny.lua --from "$ck" -o "$tmp/hf_cfg"
[ -p "$tmp/hf_cfg/config.json" ] && [ "$(ls -A "$tmp/hf_cfg")" = config.json ] || fail "export wrote beside a FIFO config.json"
echo "ok: import -o over a symbolic link, a FIFO or a directory is refused and leaves it; a FIFO for the HF weights, or for export's config.json, is refused"
