#!/usr/bin/env bash
# The whole test suite, every tier: formatting, lints, unit, table, property,
# fixture, CLI, router, TLS, chart and end-to-end tests (`--features e2e`: plain
# `cargo test` leaves out the tests that start a control plane; these build
# etcd, kube-apiserver, kubectl, helm, kube-controller-manager, Flux and Argo CD
# from the Go module proxy on first use), the kubectl e2e and the chart test
# again on the oldest supported Kubernetes, 60 s of each fuzz target, then the
# container image.
set -euo pipefail
cd "$(dirname "$0")/.."
# Flux and Argo CD, which tests/e2e_gitops.rs builds, declare go 1.27.
export GOTOOLCHAIN=go1.27.3
# The newest supported Kubernetes first (scripts/build-tools.sh), whatever the shell says.
unset DRIFTGUARD_KUBE_VERSION
# The generative oracle (tests/e2e_oracle.rs) replays a seed whose every edit
# is known to pass, so that whether a change lands is never a draw; new seeds
# are explored by hand (ORACLE_SEED=<any> cargo test --features e2e --test e2e_oracle), and a
# disagreement one finds becomes a fix and a unit test (docs/oracle.md).
export ORACLE_SEED="${ORACLE_SEED:-7}"
# Cargo builds outside the checkout unless told otherwise, like the Go tools
# and the fuzz build: a clean clone (CI) reuses the dependencies every earlier
# run built (minutes on 2 cores) and rebuilds only driftguard's own crates.
# Each clone's path adds its own copy of those, so past 24 GiB it starts empty.
if [ -z "${CARGO_TARGET_DIR:-}" ]; then
  export CARGO_TARGET_DIR="${XDG_CACHE_HOME:-${HOME}/.cache}/driftguard/cargo-target"
  if [ "$(du -s --block-size=1G "${CARGO_TARGET_DIR}" 2>/dev/null | cut -f1)" -gt 24 ] 2>/dev/null; then
    echo "==> ${CARGO_TARGET_DIR} is over 24 GiB: starting it again" >&2
    rm -rf "${CARGO_TARGET_DIR}"
  fi
fi
cargo fmt --all -- --check
# On a fresh machine the Go tools are most of a run: every one of them is
# built in the background from here on, one at a time, in the order the tests
# first need them, so their builds use the cores that the Rust build and the
# end-to-end tests (mostly waiting on control planes) leave idle. A test that
# needs a tool waits for its build (build-tools.sh locks each tool) or builds
# it itself. With the tools cached this ends in seconds. What it built and how
# long each took: target/build-tools.log.
prebuild_pid=""
fuzz_pid=""
image_pid=""
# A failure below leaves no build, fuzzer or image build running after the script. Each
# kill may find its process gone: `|| true`, or errexit, which holds inside
# the trap too, would turn a passing run's exit status into 1.
trap 'for pid in ${prebuild_pid} ${fuzz_pid} ${image_pid}; do pkill -P "${pid}" 2>/dev/null || true; kill "${pid}" 2>/dev/null || true; done' EXIT
mkdir -p target
(
  scripts/build-tools.sh etcd kube-apiserver kubectl helm
  scripts/build-tools.sh gitops
  for version in $(scripts/build-tools.sh kube-versions | tail -n +2); do
    DRIFTGUARD_KUBE_VERSION="${version}" scripts/build-tools.sh kube-apiserver kubectl
  done
) >/dev/null 2>target/build-tools.log &
prebuild_pid=$!
cargo clippy --locked --workspace --all-targets --all-features -- -D warnings
cargo test --locked --workspace --all-targets --all-features
# Every fuzz target for 60 s, where the nightly toolchain is (fuzz.sh installs
# cargo-fuzz from crates.io if it is missing): CI has nightly, so there a
# missing one fails rather than skips. Fuzzing takes one core; it runs beside
# the older-version pass below, which mostly waits on its control planes.
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  scripts/fuzz.sh 60 &
  fuzz_pid=$!
elif [ "${CI:-}" = true ]; then
  echo "fuzz: the nightly toolchain is missing; CI must run the fuzz targets" >&2
  exit 1
else
  echo "fuzz: skipped (no nightly toolchain or cargo-fuzz)" >&2
fi
# Everything above ran on the newest supported Kubernetes. The kubectl e2e
# (driftguard register and the chart's install), the chart test and the
# atomic-map table's check run again on every other supported version; the
# GitOps e2e runs on the newest only.
versions=$(scripts/build-tools.sh kube-versions)
for version in $(tail -n +2 <<<"${versions}"); do
  echo "== Kubernetes ${version}: e2e_kubectl, chart, e2e_schema" >&2
  DRIFTGUARD_KUBE_VERSION="${version}" cargo test --locked --features e2e --test e2e_kubectl --test chart --test e2e_schema
done
# The image's release build (one core once LTO links) runs beside the
# fuzzers' last minutes (one core) instead of after them.
scripts/test-image.sh &
image_pid=$!
if [ -n "${fuzz_pid}" ]; then
  wait "${fuzz_pid}"
  fuzz_pid=""
fi
wait "${image_pid}"
image_pid=""
