#!/usr/bin/env bash
# Live streams against one `pulsed serve`: for each client count, a fresh
# server, `pulsed load` over the WAVs, then the server's /metrics (the
# shared decoder's thread time by kind). Writes LOG_DIR/serve-N.log,
# load-N.txt and metrics-N.txt; prints each run's summary.
#
#   scripts/serve_load.sh BIN LOG_DIR "16 64 128" WAV... [-- SERVE_ARGS...]
#
# SERVE_ARGS default: --model whisper-base-streaming-640ms --language en
# --device cuda --shared-decoder. PULSED_GPU_TIMING=1 in the environment
# logs each runner planned, with its time, into serve-N.log; MISBEHAVING=M
# adds M misbehaving clients to each run (`pulsed load --misbehaving`).
set -uo pipefail
BIN=${1:?pulsed binary}; LOGS=${2:?log folder}; COUNTS=${3:?client counts}
shift 3
WAVS=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do WAVS+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
ARGS=("$@")
[ ${#ARGS[@]} -gt 0 ] || ARGS=(--model whisper-base-streaming-640ms --language en --device cuda --shared-decoder)
mkdir -p "$LOGS"
PORT=18433
for n in $COUNTS; do
    "$BIN" serve "${ARGS[@]}" --port $PORT --max-streams $((n + ${MISBEHAVING:-0} + 16)) >"$LOGS/serve-$n.log" 2>&1 &
    server=$!
    # a server that exits (a model it cannot load) ends the run at once
    for _ in $(seq 600); do
        curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
        kill -0 $server 2>/dev/null || break
        sleep 0.2
    done
    if ! kill -0 $server 2>/dev/null; then
        echo "== $n clients: the server exited before it was ready:" >&2
        tail -3 "$LOGS/serve-$n.log" >&2
        exit 1
    fi
    t0=$SECONDS
    "$BIN" load --url "ws://127.0.0.1:$PORT/v1/realtime" --clients "$n" --ramp 5 \
        --duration "${DURATION:-120}" ${MISBEHAVING:+--misbehaving "$MISBEHAVING"} \
        "${WAVS[@]}" >"$LOGS/load-$n.txt" 2>&1
    curl -s "http://127.0.0.1:$PORT/metrics" >"$LOGS/metrics-$n.txt"
    kill -INT $server; wait $server 2>/dev/null
    echo "== $n clients ($((SECONDS - t0)) s)"
    cat "$LOGS/load-$n.txt"
    grep -E '^pulsed_decoder_' "$LOGS/metrics-$n.txt"
    awk '/runner for .* planned/ { n[$4]++; ms[$4] += $(NF-1) } END { for (k in n) printf "%s runners planned: %d, %.0f ms\n", k, n[k], ms[k] }' "$LOGS/serve-$n.log"
done
