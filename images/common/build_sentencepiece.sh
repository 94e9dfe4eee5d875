# sentencepiece built from its sdist (never the binary wheel); the wheel lands in /dist/sentencepiece.
# --no-build-isolation: the build uses the venv's pinned setuptools/wheel (install_python.sh), not whatever
# an isolated build environment would download that day.
# Reproducible: the sdist is unpacked in a fixed directory and built there (pip builds a local directory
# in place), -ffile-prefix-map rewrites that directory in __FILE__ strings and debug info
# (https://gcc.gnu.org/onlinedocs/gcc/Overall-Options.html), and `wheel` takes the zip entry times from
# SOURCE_DATE_EPOCH (set in the base stage).
source "$(dirname "$0")/lib.sh"
apt_install cmake pkg-config make g++
src=/src/sentencepiece
# the sdist is hash-checked against the lock (/opt/envbuild/sentencepiece.lock, from recipes/locks/)
python -m pip download --no-deps --no-build-isolation --no-binary :all: --find-links /wheelhouse -d "$TMPDIR/sdist" \
  --require-hashes -r /opt/envbuild/sentencepiece.lock
mkdir -p "$src"
tar -xzf "$TMPDIR"/sdist/sentencepiece-"${SENTENCEPIECE_VERSION}".tar.gz -C "$src" --strip-components=1
export CFLAGS="-ffile-prefix-map=$src=. ${CFLAGS:-}" CXXFLAGS="-ffile-prefix-map=$src=. ${CXXFLAGS:-}"
python -m pip wheel --no-deps --no-build-isolation -w /dist/sentencepiece "$src"
apt_clean
