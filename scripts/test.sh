#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, table, property, fixture, CLI,
# router, TLS, chart and end-to-end tests (the end-to-end and chart tests build
# etcd, kube-apiserver, helm, kube-controller-manager, Flux and Argo CD from
# the Go module proxy on first use), then
# the container image.
set -euo pipefail
cd "$(dirname "$0")/.."
# Flux and Argo CD, which tests/e2e_gitops.rs builds, declare go 1.27.
export GOTOOLCHAIN=go1.27.3
cargo fmt --all -- --check
cargo clippy --locked --all-targets -- -D warnings
cargo test --locked --all-targets
scripts/test-image.sh
