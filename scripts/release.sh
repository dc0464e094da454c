#!/usr/bin/env bash
# Builds a release into target/dist-artifacts/vVERSION/, each file with its
# sha256 in SHA256SUMS (verify: cd there && sha256sum -c SHA256SUMS):
#   driftguard_vVERSION_linux_amd64.tar.gz   the server, static (dist profile), LICENSE
#   kubectl-driftguard_linux_amd64.tar.gz    the plugin, static, LICENSE (krew's archive)
#   driftguard.yaml                          the krew manifest, with that archive's sha256
#   driftguard-VERSION.tgz                   the Helm chart (helm package)
#   driftguard-image_vVERSION.oci.tar        the image (podman save), tagged localhost/driftguard:VERSION
#                                            (the chart's default tag is its appVersion, VERSION)
# Usage: scripts/release.sh [BASE_URI]   (where the archives will be served, for krew)
# DRIFTGUARD_PROFILE=release: without fat LTO, minutes faster, to try the script.
# Takes the dist profile's fat-LTO build of both binaries: about 15 minutes cold
# on 2 cores. Needs podman for the image and builds helm (scripts/build-tools.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-https://example.invalid/driftguard}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
profile=${DRIFTGUARD_PROFILE:-dist}
out=target/dist-artifacts/v${version}
rm -rf "${out}" && mkdir -p "${out}/stage"
# The flags scripts/build-image.sh builds with, so that its build is this one.
RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=true \
  cargo build --locked --profile "${profile}" --target x86_64-unknown-linux-gnu \
  --bin driftguard --bin kubectl-driftguard >&2
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
bin=${target_dir}/x86_64-unknown-linux-gnu/${profile}
cp "${bin}/driftguard" LICENSE "${out}/stage/"
tar -C "${out}/stage" -czf "${out}/driftguard_v${version}_linux_amd64.tar.gz" driftguard LICENSE
KREW_BIN="${bin}/kubectl-driftguard" scripts/krew-package.sh "${base}" >&2
cp target/krew/kubectl-driftguard_linux_amd64.tar.gz target/krew/driftguard.yaml "${out}/"
helm=$(scripts/build-tools.sh helm | tail -1)
"${helm}" package charts/driftguard --version "${version}" --app-version "${version}" \
  --destination "${out}" >&2
DRIFTGUARD_PROFILE="${profile}" scripts/build-image.sh "localhost/driftguard:${version}" >&2
podman --storage-driver vfs save --format oci-archive -o "${out}/driftguard-image_v${version}.oci.tar" \
  "localhost/driftguard:${version}"
rm -rf "${out}/stage"
(cd "${out}" && sha256sum -- * >SHA256SUMS && cat SHA256SUMS)
echo "${out}"
