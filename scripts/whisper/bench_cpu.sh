#!/usr/bin/env bash
# One-thread CPU speed of pulsed's Whisper (f32 and int8 weights) against
# faster-whisper (float32 and int8) on ../shared/realdev, in one run on one
# machine, greedy and beam 5; prints audio seconds per wall second and WER.
# Needs faster-whisper (see reference_realdev.py's docstring; PYTHON names
# the interpreter that has it) and an otherwise idle machine.
#
#   bash scripts/whisper/bench_cpu.sh [whisper-tiny.en]
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${1:-whisper-tiny.en}
MANIFEST=../shared/realdev/manifest.jsonl
cargo build --release --quiet
echo "== machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), one thread"
for p in f32 int8; do
    echo "== pulsed $MODEL $p, greedy (--beam 1 --no-fallback --without-timestamps)"
    ./target/release/pulsed eval "$MANIFEST" --model "$MODEL" --device cpu --precision $p -j 1 \
        --beam 1 --no-fallback --without-timestamps 2>&1 | grep -E "audio s/s|audio in|all:"
    echo "== pulsed $MODEL $p, beam 5 (faster-whisper's defaults)"
    ./target/release/pulsed eval "$MANIFEST" --model "$MODEL" --device cpu --precision $p -j 1 \
        2>&1 | grep -E "audio s/s|audio in|all:"
done
echo "== faster-whisper $MODEL (cpu_threads=1)"
"${PYTHON:-python3}" scripts/whisper/reference_realdev.py "$MODEL" 2>&1 | grep -E "audio s per s|^speed|all" || true
