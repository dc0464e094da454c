#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for SECONDS each (default 60) with
# libFuzzer's memory and per-input time limits, and prints how many inputs
# each executed. Needs the nightly toolchain and cargo-fuzz:
#   rustup toolchain install nightly && cargo install cargo-fuzz --locked
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
SECONDS_EACH="${1:-60}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
for target in $(cargo +nightly fuzz list); do
  mkdir -p "corpus/${target}"
  log="$(mktemp)"
  echo "==> ${target}: ${SECONDS_EACH}s" >&2
  if ! cargo +nightly fuzz run "${target}" -- -max_total_time="${SECONDS_EACH}" \
      -rss_limit_mb=512 -timeout=2 -print_final_stats=1 >"${log}" 2>&1; then
    tail -n 60 "${log}" >&2
    echo "==> ${target}: FAILED (artifacts in fuzz/artifacts/${target})" >&2
    exit 1
  fi
  grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "${log}" | sed "s/^/${target} /"
done
