#!/usr/bin/env bash
# The README's test command: everything CI checks, installing what it needs.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --release --all-targets
cargo test --release --doc
