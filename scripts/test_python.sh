#!/usr/bin/env bash
# The Python package's tests (python/tests): a virtual environment in the
# ignored third_party/pyenv with maturin, numpy, pytest and ray[data] from
# PyPI; the package built from this tree (one release build of the crate,
# in the same target folder as cargo's) and installed; its type stubs
# checked (mypy.stubtest); then pytest, which compares its results with the
# `pulsed` binary's.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=third_party/pyenv
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV" || {
        echo "test_python.sh: python3 -m venv failed (apt-get install python3-venv?)" >&2
        exit 1
    }
fi
"$VENV/bin/python" -m pip install --quiet maturin numpy pytest mypy "ray[data]" >&2 || {
    echo "test_python.sh: could not install maturin, numpy, pytest, mypy, ray[data] from PyPI (no network?)" >&2
    exit 1
}
# maturin (no build isolation: the one just installed) runs from the venv
export PATH="$PWD/$VENV/bin:$PATH"
# the binary the tests compare with (scripts/test.sh has built it already)
cargo build --release --bin pulsed
"$VENV/bin/python" -m pip install --quiet --no-build-isolation --force-reinstall --no-deps . >&2
# the native module's stub against the module itself, and the package's types
"$VENV/bin/python" -m mypy.stubtest pulsed._pulsed
"$VENV/bin/python" -m mypy --ignore-missing-imports python/pulsed python/tests
"$VENV/bin/python" -m pytest -q python/tests "$@"
