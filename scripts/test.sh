#!/usr/bin/env bash
# The README's test command: everything CI checks, installing what it needs.
set -euo pipefail
cd "$(dirname "$0")/.."
# Silero VAD v6 weights (PyPI wheel, not committed) for the VAD tests
bash scripts/fetch_silero.sh
cargo test --release --all-targets
cargo test --release --doc
