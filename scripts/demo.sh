#!/usr/bin/env bash
# One command: a real kube-apiserver and etcd, driftguard registered as a
# webhook, and kubectl showing a denial, a dry-run warning and a break-glass.
#   scripts/demo.sh          Argo CD-managed objects written as the controller
#   scripts/demo.sh --flux   the real Flux controllers in the loop: a commit
#                            synced, `kubectl edit` denied, break-glass that
#                            survives Flux's reconciles, and Git wins at expiry
#   scripts/demo.sh --adopt  the adoption path: audit, `driftguard report`, enforce
set -euo pipefail
cd "$(dirname "$0")/.."
# Flux is built from the Go module proxy on first use and declares go 1.27.
export GOTOOLCHAIN=go1.27.3
case "${1:-}" in
  --flux)
    cargo build --release --bin driftguard --bin kubectl-driftguard --example demo_flux
    exec target/release/examples/demo_flux ;;
  --adopt)
    cargo build --release --bin driftguard --example demo_adopt
    exec target/release/examples/demo_adopt ;;
  "")
    cargo build --release --bin driftguard --example demo
    exec target/release/examples/demo ;;
  *) echo "usage: scripts/demo.sh [--flux|--adopt]" >&2; exit 2 ;;
esac
