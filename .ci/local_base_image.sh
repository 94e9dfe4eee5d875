#!/usr/bin/env bash
# Make the local base image envbuild-local/debian:bookworm without any registry:
# debootstrap a minimal Debian bookworm root and `docker import` it (~1 min). Skipped if it exists.
set -euo pipefail

DOCKER=${DOCKER:-/usr/bin/docker}
[ -x "$DOCKER" ] || DOCKER=$(command -v docker)
IMAGE=${ENVBUILD_LOCAL_BASE:-envbuild-local/debian:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if "$DOCKER" image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "local_base_image: $IMAGE already exists; skipping"
  exit 0
fi
command -v debootstrap >/dev/null 2>&1 || { echo "local_base_image: needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }

rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
echo "local_base_image: debootstrap --variant=minbase bookworm from $MIRROR"
debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" >/dev/null
rm -rf "$rootfs"/var/cache/apt/archives/*.deb
tar -C "$rootfs" -c . | "$DOCKER" import - "$IMAGE" >/dev/null
echo "local_base_image: imported $IMAGE"
