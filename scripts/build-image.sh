#!/usr/bin/env bash
# Builds the driftguard image with podman (Debian's), from scratch: a static
# binary compiled here, no base image, no registry. Prints the image id.
# Usage: scripts/build-image.sh [TAG]
# DRIFTGUARD_PROFILE=release builds without the dist profile's fat LTO: minutes
# faster, for checking the image (scripts/test-image.sh), not for shipping it.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-localhost/driftguard:dev}
profile=${DRIFTGUARD_PROFILE:-dist}
# Stripped, without debug info: the image carries only what runs.
RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=true \
  cargo build --locked --profile "${profile}" --target x86_64-unknown-linux-gnu --bin driftguard >&2
# Wherever Cargo builds (CARGO_TARGET_DIR: scripts/test.sh shares one between
# clones), the image context takes the binary from target/image/.
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
mkdir -p target/image
cp "${target_dir}/x86_64-unknown-linux-gnu/${profile}/driftguard" target/image/driftguard
bin=target/image/driftguard
if ! ldd "$bin" 2>&1 | grep -qE "statically linked|not a dynamic executable"; then
  echo "$bin is not statically linked" >&2
  exit 1
fi
# vfs storage and chroot isolation: no overlay or user-namespace setup needed.
podman --storage-driver vfs build --isolation chroot -f Dockerfile -t "$tag" . >&2
podman --storage-driver vfs image inspect "$tag" --format '{{.Id}}'
