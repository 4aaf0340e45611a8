#!/usr/bin/env bash
# Brings a Whisper folder to the GPU machine, which reaches no registry and
# takes at most 64 MiB a call (the tree included): split here into parts
# that each travel in a call of their own, back to back on one warm machine
# (its /tmp stays while it is warm), then joined there and checked.
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
    rm -rf $PARTS && mkdir -p $PARTS
    split -b "${mb}000000" -d -a 1 "$src/model.safetensors" $PARTS/weights.
    n=0
    for p in $PARTS/weights.*; do mkdir -p $PARTS/part$n && mv "$p" $PARTS/part$n/; n=$((n + 1)); done
    last=$PARTS/part$((n - 1))
    cp "$src"/*.json "$last/"
    (cd "$src" && sha256sum model.safetensors) >"$last/SHA256"
    echo "$name" >"$last/NAME"
    du -sh $PARTS/part*
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
    name=$(cat $STAGE/NAME)
    dst=${XDG_CACHE_HOME:-$HOME/.cache}/pulsed/models/$name
    mkdir -p "$dst"
    cat $STAGE/weights.* >"$dst/model.safetensors"
    cp $STAGE/*.json "$dst/"
    (cd "$dst" && sha256sum -c $STAGE/SHA256) || { echo "gpu_stage.sh: a part is missing or damaged: stage again" >&2; exit 3; }
    ;;
*)
    echo "usage: gpu_stage.sh split NAME [PART_MB] | take | join" >&2; exit 2
    ;;
esac
