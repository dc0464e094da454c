#!/usr/bin/env bash
# One command: a real kube-apiserver and etcd, driftguard registered as a
# webhook, and kubectl showing a denial, a dry-run warning and a break-glass.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin driftguard --example demo
exec target/release/examples/demo
