#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, table, property, fixture and CLI tests.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --locked --all-targets -- -D warnings
cargo test --locked --all-targets
