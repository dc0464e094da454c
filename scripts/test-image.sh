#!/usr/bin/env bash
# Builds the FROM-scratch image with Debian's podman (installed if missing) and
# checks it: one static binary, non-root, and it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v podman >/dev/null 2>&1; then
  echo "==> installing podman from Debian" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman >&2
fi
# The release profile, not the shipped one's fat LTO: the same binary and
# image layout, built minutes faster.
image=$(DRIFTGUARD_PROFILE=release scripts/build-image.sh localhost/driftguard:test)
user=$(podman --storage-driver vfs image inspect "$image" --format '{{.Config.User}}')
layers=$(podman --storage-driver vfs image inspect "$image" --format '{{len .RootFS.Layers}}')
# `podman run` needs to set resource limits, which some sandboxes (this CI's)
# refuse; then run the image's filesystem directly: an empty root with the
# binary, as the image's user.
if ! version=$(podman --storage-driver vfs run --rm --network none "$image" --version 2>&1); then
  echo "podman run is not possible here ($version); running the image's root with chroot" >&2
  root=$(podman --storage-driver vfs image mount "$image")
  version=$(chroot --userspec=65532:65532 "$root" /driftguard --version)
  podman --storage-driver vfs image unmount "$image" >/dev/null
fi
[ "$user" = "65532:65532" ] || { echo "image runs as '$user', not 65532:65532"; exit 1; }
[ "$layers" = "1" ] || { echo "image has $layers layers, expected the binary alone"; exit 1; }
[[ "$version" == driftguard* ]] || { echo "the image does not run: $version"; exit 1; }
echo "image ok: $image ($version, user $user, $layers layer)"
