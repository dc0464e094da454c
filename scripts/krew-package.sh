#!/usr/bin/env bash
# Packages kubectl-driftguard for krew: the archive (the binary, dist profile,
# and LICENSE) and its manifest with the archive's sha256, in target/krew/.
# Usage: scripts/krew-package.sh [BASE_URI]   (where the archive will be served)
# KREW_BIN: a kubectl-driftguard already built (scripts/release.sh's static one).
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-https://example.invalid/driftguard}
version="v$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
bin=${KREW_BIN:-target/dist/kubectl-driftguard}
if [ -z "${KREW_BIN:-}" ]; then
  cargo build --locked --profile dist --bin kubectl-driftguard >&2
fi
out=target/krew
archive=kubectl-driftguard_linux_amd64.tar.gz
rm -rf "${out}" && mkdir -p "${out}/stage"
cp "${bin}" "${out}/stage/kubectl-driftguard" && cp LICENSE "${out}/stage/"
tar -C "${out}/stage" -czf "${out}/${archive}" kubectl-driftguard LICENSE
sha=$(sha256sum "${out}/${archive}" | cut -d' ' -f1)
sed -e "s|version: VERSION|version: ${version}|" \
  -e "s|uri: URI|uri: ${base}/${version}/${archive}|" \
  -e "s|sha256: SHA256|sha256: \"${sha}\"|" plugins/driftguard.yaml >"${out}/driftguard.yaml"
echo "${out}/driftguard.yaml (${archive}: sha256 ${sha})"
