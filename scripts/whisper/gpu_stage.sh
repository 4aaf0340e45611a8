#!/usr/bin/env bash
# Brings a Whisper folder to the GPU machine, which reaches no registry and
# takes at most 64 MiB a call (the tree included): its weights cut here into
# parts (scripts/carry.sh) that each travel in a call of their own, back to
# back on one warm machine (its /tmp stays while it is warm), then joined
# there and checked.
#   here:  bash scripts/whisper/gpu_stage.sh split whisper-tiny.en [PART_MB]
#          -> .cache/gpuw/part0 .. partN (carry one per call)
#   there: bash scripts/whisper/gpu_stage.sh take    (in every call: keeps the carried part)
#          bash scripts/whisper/gpu_stage.sh join    (after the last part: the folder in
#          $XDG_CACHE_HOME/pulsed/models, so `--model whisper-tiny.en` finds it)
# NAME may also be a folder (a student built by folder.py: joined there under
# its base name); GPUW=DIR keeps the parts elsewhere than .cache/gpuw, so two
# folders can be split side by side (the same GPUW in every call).
set -euo pipefail
cd "$(dirname "$0")/../.."
STAGE=/tmp/pulsed-stage
PARTS=${GPUW:-.cache/gpuw}
case "${1:-}" in
split)
    name=${2:?model name}; mb=${3:-34}
    src=${XDG_CACHE_HOME:-$HOME/.cache}/pulsed/models/$name
    [ -d "$name" ] && src=$name && name=$(basename "$name")
    [ -s "$src/model.safetensors" ] || { echo "gpu_stage.sh: no $src (bash scripts/fetch_whisper.sh $name)" >&2; exit 1; }
    [ -s "$src/config.json" ] || { echo "gpu_stage.sh: $src has no config.json" >&2; exit 1; }
    tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT && echo "$name" >"$tmp/NAME"
    bash scripts/carry.sh split "$src/model.safetensors" $PARTS "$mb" "$src"/*.json "$tmp/NAME"
    ;;
take)
    mkdir -p $STAGE
    found=0
    for d in $PARTS/part*; do [ -d "$d" ] && cp "$d"/* $STAGE/ && found=1; done
    [ $found = 1 ] || { echo "gpu_stage.sh: no part carried ($PARTS/part*)" >&2; exit 1; }
    ls -la $STAGE
    ;;
join)
    [ -s $STAGE/NAME ] || { echo "gpu_stage.sh: the last part is missing (a fresh machine?): stage again" >&2; exit 3; }
    bash scripts/carry.sh join $STAGE || { echo "gpu_stage.sh: a part is missing or damaged: stage again" >&2; exit 3; }
    dst=${XDG_CACHE_HOME:-$HOME/.cache}/pulsed/models/$(cat $STAGE/NAME)
    mkdir -p "$dst"
    cp $STAGE/model.safetensors $STAGE/*.json "$dst/"
    ;;
*)
    echo "usage: gpu_stage.sh split NAME [PART_MB] | take | join" >&2; exit 2
    ;;
esac
