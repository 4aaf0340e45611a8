#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, what scripts/gpu_build.sh
# packed: every GPU test (ignored ones included), the README's first command
# on the GPU, and with BENCH=1 `pulsed bench --device cuda`. Logs go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
tar -xJf .gpu/pack.tar.xz && tar -xJf .gpu/silero.tar.xz || exit 1
# test executables look for fixtures under the path they were built in
here=$PWD
mkdir -p /work && [ -e /work/main ] || ln -s "$here" /work/main
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
# a Whisper folder staged by scripts/whisper/gpu_stage.sh, for the Whisper tests
if [ -d /tmp/pulsed-stage ]; then
    export XDG_CACHE_HOME=/tmp/xdg
    bash scripts/whisper/gpu_stage.sh join || exit 3
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
status=0
for t in ${TESTS:-gpu_nvrtc gpu_kernel_cache gpu_op_attention gpu_op_conv gpu_op_norm gpu_runner gpu_whisper}; do
    if .gpu/bin/$t --include-ignored --test-threads=1 --nocapture ${FILTER:-} >"$OUT/$t.log" 2>&1; then r=ok; else r=FAILED; status=1; fi
    echo "$t: $r: $(grep -E '^test result' "$OUT/$t.log" | tail -1)"
done
.gpu/bin/pulsed transcribe --model pulsed-en-ctc --device cuda fixtures/asr/hello.wav 2>&1 | tee "$OUT/transcribe.txt" || status=1
if [ "${BENCH:-0}" = 1 ]; then
    .gpu/bin/pulsed bench --device cuda 2>&1 | tee "$OUT/bench.txt" || status=1
fi
exit $status
