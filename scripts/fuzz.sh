#!/usr/bin/env bash
# Builds the fuzz targets (fuzz/, docs/fuzzing.md) and runs each for a
# bounded time from its seed corpus in fuzz/corpus/TARGET; fails on any
# crash, panic, hang or leak-free OOM that libFuzzer reports.
#
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]   # default: 20 s, every target
#
# libFuzzer on the stable toolchain: libfuzzer-sys (from crates.io) compiles
# LLVM's libFuzzer with the system C++ compiler, and rustc's stable
# `-C passes=sancov-module` flags instrument the code; no cargo tool is
# installed and no nightly needed. New inputs the runs find go to
# target's fuzz-corpus folder, not into the repository's seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH="${1:-20}"
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
    TARGETS=(wav audio safetensors config arpa tokenizer tokens realtime form)
fi
HOST="$(rustc -vV | sed -n 's/^host: //p')"
# What cargo-fuzz passes, less the nightly-only sanitizer flags. `--target`
# keeps these flags off build scripts and proc-macros.
FLAGS=(
    -Cpasses=sancov-module
    -Cllvm-args=-sanitizer-coverage-level=4
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters
    -Cllvm-args=-sanitizer-coverage-pc-table
    -Cllvm-args=-sanitizer-coverage-trace-compares
    --cfg=fuzzing
)
export CARGO_ENCODED_RUSTFLAGS="$(IFS=$'\x1f'; echo "${FLAGS[*]}")"
TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
(cd fuzz && CARGO_TARGET_DIR="$TARGET_DIR/fuzz" cargo build --release --locked --target "$HOST" \
    $(printf -- '--bin %s ' "${TARGETS[@]}"))
BIN="$TARGET_DIR/fuzz/$HOST/release"
WORK="$TARGET_DIR/fuzz/runs"
failed=()
for t in "${TARGETS[@]}"; do
    mkdir -p "$WORK/$t/corpus" "$WORK/$t/artifacts"
    log="$WORK/$t/log.txt"
    # -timeout: an input that runs 10 s is a hang; -rss_limit_mb: one that
    # needs 2 GB is a failure too. Found inputs go to $WORK, the seeds
    # are read only.
    if "$BIN/$t" "$WORK/$t/corpus" "fuzz/corpus/$t" \
        -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$WORK/$t/artifacts/" -print_final_stats=1 >"$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        echo "fuzz: $t: ${runs:-?} runs, no crash" >&2
    else
        echo "fuzz: $t FAILED; its log's end ($log):" >&2
        tail -n 40 "$log" >&2
        failed+=("$t")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: failing targets: ${failed[*]} (inputs in $WORK/TARGET/artifacts)" >&2
    exit 1
fi
