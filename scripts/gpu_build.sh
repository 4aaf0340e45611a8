#!/usr/bin/env bash
# Builds, here, everything a run on the GPU machine needs into .gpu/ (ignored
# by git, carried by the device tool): the CLI and the GPU test executables,
# stripped and packed with the Silero weights. Then, with the device tool:
#   run  carry [".gpu"]  command: bash scripts/gpu_run.sh   (BENCH=1 for figures)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/fetch_silero.sh
rm -rf .gpu && mkdir -p .gpu/bin
cargo build --release --quiet
cp target/release/pulsed .gpu/bin/pulsed
TESTS=(gpu_nvrtc gpu_kernel_cache gpu_op_attention gpu_op_conv gpu_op_norm gpu_runner gpu_whisper)
args=()
for t in "${TESTS[@]}"; do args+=(--test "$t"); done
cargo test --release --no-run --message-format=json "${args[@]}" 2>/dev/null |
    python3 -c '
import json, shutil, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        shutil.copy(m["executable"], ".gpu/bin/" + m["target"]["name"])
'
for t in "${TESTS[@]}"; do [ -x ".gpu/bin/$t" ] || { echo "gpu_build.sh: no executable for $t" >&2; exit 1; }; done
strip .gpu/bin/*
tar -C . -cJf .gpu/pack.tar.xz -C .gpu bin --transform 's,^bin,.gpu/bin,' 2>/dev/null || tar -cJf .gpu/pack.tar.xz .gpu/bin
tar -cJf .gpu/silero.tar.xz third_party/silero/*.safetensors
rm -rf .gpu/bin
du -sh .gpu/*
