# sentencepiece built from its sdist (never the binary wheel); the wheel lands in /dist/sentencepiece.
source "$(dirname "$0")/lib.sh"
apt_install cmake pkg-config make g++
python -m pip wheel --no-deps --no-binary sentencepiece --find-links /wheelhouse \
  -w /dist/sentencepiece "sentencepiece==${SENTENCEPIECE_VERSION}"
apt_clean
