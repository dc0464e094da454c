#!/usr/bin/env bash
# Runs cargo-fuzz targets in fuzz/ (all, or those named) for SECONDS each
# (default 60) with libFuzzer's memory and per-input time limits, after seeding
# each target's corpus from tests/data and ../shared/fixtures; prints how many
# inputs each executed and its peak RSS. Needs the nightly toolchain and
# cargo-fuzz:
#   rustup toolchain install nightly && cargo install cargo-fuzz --locked
#   scripts/fuzz.sh SECONDS [TARGET...]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "${root}/fuzz"
SECONDS_EACH="${1:-60}"
shift || true
# Outside the checkout, like the Go tools: every clone on the machine reuses
# the ASan build of the dependencies (minutes cold).
target_dir="${DRIFTGUARD_FUZZ_TARGET:-${XDG_CACHE_HOME:-${HOME}/.cache}/driftguard/fuzz-target}"
# -rss_limit_mb counts the whole process, and ASan's quarantine of freed memory
# alone may hold 256 MB by default: a long run over a large corpus then passed
# 512 MB with no input using much (the reported input replays in 8 ms). A
# smaller quarantine keeps the limit about driftguard's own memory.
export ASAN_OPTIONS="${ASAN_OPTIONS:-quarantine_size_mb=32}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  mapfile -t targets < <(cargo +nightly fuzz list)
fi

fixtures="${root}/../shared/fixtures"
if [ ! -d "${fixtures}" ]; then
  echo "==> ${fixtures} absent: seeding from tests/data only" >&2
  fixtures=""
fi

# The files each target starts from: admission bodies for the review targets,
# YAML (and JSON, which YAML reads) for the policy and manifest readers.
seeds_for() {
  local data="${root}/tests/data"
  case "$1" in
    judge | mutating_patch)
      ls "${data}"/*.json "${data}"/upstream/admission/*.json
      [ -z "${fixtures}" ] || ls "${fixtures}"/admission/*.json
      ;;
    policy)
      ls "${data}"/*.yaml "${data}"/seed/*.yaml "${data}"/crds/*.yaml
      ;;
    application)
      ls "${data}"/seed/*.yaml "${data}"/crds/argocd-*.yaml
      [ -z "${fixtures}" ] || ls "${fixtures}"/argocd/*.json
      ;;
  esac
}

for target in "${targets[@]}"; do
  corpus="corpus/${target}"
  mkdir -p "${corpus}"
  seeded=0
  while read -r file; do
    # Larger files would raise libFuzzer's default -max_len to their size and
    # slow every mutation (the 270 KB Argo CD normalizer cases).
    if [ "$(stat -c %s "${file}")" -gt 65536 ]; then
      echo "==> ${target}: seed ${file#"${root}"/} over 64 KiB, skipped" >&2
      continue
    fi
    # Named by content: seeding again adds nothing.
    cp "${file}" "${corpus}/seed-$(sha1sum <"${file}" | cut -c1-16)"
    seeded=$((seeded + 1))
  done < <(seeds_for "${target}")
  log="$(mktemp)"
  echo "==> ${target}: ${SECONDS_EACH}s, ${seeded} seed file(s)" >&2
  if ! cargo +nightly fuzz run --target-dir "${target_dir}" "${target}" -- -max_total_time="${SECONDS_EACH}" \
      -rss_limit_mb=512 -timeout=2 -print_final_stats=1 >"${log}" 2>&1; then
    tail -n 60 "${log}" >&2
    echo "==> ${target}: FAILED (artifacts in fuzz/artifacts/${target})" >&2
    exit 1
  fi
  grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "${log}" | sed "s/^/${target} /"
  rm -f "${log}"
done
