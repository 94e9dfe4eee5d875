# sentencepiece built from its sdist (never the binary wheel); the wheel lands in /dist/sentencepiece.
# --no-build-isolation: the build uses the venv's pinned setuptools/wheel (install_python.sh), not whatever
# an isolated build environment would download that day.
source "$(dirname "$0")/lib.sh"
apt_install cmake pkg-config make g++
python -m pip wheel --no-deps --no-build-isolation --no-binary sentencepiece --find-links /wheelhouse \
  -w /dist/sentencepiece "sentencepiece==${SENTENCEPIECE_VERSION}"
apt_clean
