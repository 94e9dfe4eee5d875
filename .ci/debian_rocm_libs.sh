#!/usr/bin/env bash
# Fetch real ROCm 6.4 userspace libraries from Debian sid and unpack them (no install, no GPU needed), for the
# code-object tests (tests/integration/test_rocm_libs_debian.py). The host's apt sources are left alone: apt reads a sources
# list, package lists and an archive cache of its own under the cache dir. A cache dir that already holds the
# unpacked root is reused as is (delete it to refetch).
#
#   bash .ci/debian_rocm_libs.sh [CACHE_DIR]
# CACHE_DIR defaults to $ENVBUILD_ROCM_LIBS_CACHE, else .envbuild/debian-rocm in this repository; the tests
# read CACHE_DIR/root from the same variable.
#
# Packages: rocBLAS (fat binary + Tensile kernel files), hipBLASLt (TensileLite kernel files, fewer GPUs),
# rocRAND and rocFFT (fat binaries), HIP runtime, and the hipRAND/hipFFT wrappers (DT_NEEDED on rocRAND/rocFFT).
set -euo pipefail

CACHE=${1:-${ENVBUILD_ROCM_LIBS_CACHE:-$(dirname "$0")/../.envbuild/debian-rocm}}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
KEYRING=${DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
PACKAGES=(librocblas4 libhipblaslt1 librocrand1 librocfft0 libamdhip64-6 libhiprand1 libhipfft0)

if [ -f "$CACHE/root/.complete" ]; then
  echo "debian_rocm_libs: reusing $CACHE/root"
  cat "$CACHE/root/.complete"
  exit 0
fi
[ -r "$KEYRING" ] || { echo "debian_rocm_libs: needs $KEYRING (apt-get install debian-archive-keyring)" >&2; exit 1; }

mkdir -p "$CACHE/lists/partial" "$CACHE/debs"
CACHE=$(cd "$CACHE" && pwd)
echo "deb [arch=amd64 signed-by=$KEYRING] $MIRROR sid main" >"$CACHE/sid.list"
APT=(-o "Dir::Etc::SourceList=$CACHE/sid.list" -o Dir::Etc::SourceParts=/dev/null
     -o "Dir::State::Lists=$CACHE/lists" -o Dir::State::Status=/dev/null -o APT::Sandbox::User="$(id -un)")

start=$(date +%s)
apt-get "${APT[@]}" -qq update
(cd "$CACHE/debs" && apt-get "${APT[@]}" -qq download "${PACKAGES[@]}")
fetched=$(date +%s)

rm -rf "$CACHE/root.partial"
mkdir "$CACHE/root.partial"
for deb in "$CACHE"/debs/*.deb; do dpkg-deb -x "$deb" "$CACHE/root.partial"; done
{
  for deb in "$CACHE"/debs/*.deb; do
    echo "$(dpkg-deb -f "$deb" Package)=$(dpkg-deb -f "$deb" Version) $(stat -c %s "$deb") bytes"
  done
} >"$CACHE/root.partial/.complete"
rm -rf "$CACHE/root"
mv "$CACHE/root.partial" "$CACHE/root"
rm -f "$CACHE"/debs/*.deb
done_at=$(date +%s)

cat "$CACHE/root/.complete"
echo "debian_rocm_libs: fetched in $((fetched - start)) s, unpacked in $((done_at - fetched)) s: $(du -sh "$CACHE/root" | cut -f1) in $CACHE/root"
