# Sourced by every install script: strict mode, proxy CA from the optional BuildKit secret, helpers.
# The CA is only read from the secret mount (/run/secrets/envbuild_ca); it is never copied into a layer.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1

ENVBUILD_CA=/run/secrets/envbuild_ca
APT_CA_CONF=/etc/apt/apt.conf.d/99envbuild-ca
# temporary files of the step (mktemp, pip's build dirs) live here and go when the step ends: a randomly
# named file left in /tmp would make two builds differ
TMPDIR=$(mktemp -d)
export TMPDIR
trap 'rm -rf "$TMPDIR" "$APT_CA_CONF"' EXIT
if [ -s "$ENVBUILD_CA" ]; then
  export PIP_CERT=$ENVBUILD_CA SSL_CERT_FILE=$ENVBUILD_CA REQUESTS_CA_BUNDLE=$ENVBUILD_CA \
    CURL_CA_BUNDLE=$ENVBUILD_CA GIT_SSL_CAINFO=$ENVBUILD_CA
  # apt (and tools calling apt, e.g. amdgpu-install) over https; removed again when the step ends
  echo "Acquire::https::CAInfo \"$ENVBUILD_CA\";" >"$APT_CA_CONF"
fi

apt_install() {
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "$@"
}

# apt's package lists and archives, and the logs and caches apt/dpkg/ldconfig/debconf write with each run
# (times, or content in hash order): removed in the layer that made them, so two builds give equal layers.
apt_clean() {
  apt-get clean
  rm -rf /var/lib/apt/lists/* /var/log/apt/* /var/log/dpkg.log /var/log/alternatives.log \
    /var/cache/ldconfig/aux-cache /var/cache/debconf/*-old /var/lib/dpkg/*-old
}

# pip of the image's venv; local wheels (the build context's wheelhouse/) are always offered.
# --no-compile: site-packages is byte-compiled once, with checked hashes, at the end (install_python_stack.sh).
# A timestamp-based .pyc holds the source's mtime at install (https://peps.python.org/pep-0552/) and would
# differ in every build; py_compile (what pip and ensurepip call) already defaults to checked-hash while
# SOURCE_DATE_EPOCH is set (https://docs.python.org/3/library/py_compile.html), the compile step says so
# explicitly.
pip_install() {
  local extra=()
  if [ -n "${TORCH_INDEX_URL:-}" ]; then extra=(--extra-index-url "$TORCH_INDEX_URL"); fi
  python -m pip install --no-compile --find-links /wheelhouse "${extra[@]}" "$@"
}

# fail unless distribution $1 is installed at exactly version $2 (its metadata: no import, since the package's
# own requirements may only come with a later step)
check_installed() {
  python - "$1" "$2" <<'PY'
import importlib.metadata as md
import sys

name, want = sys.argv[1:]
got = md.version(name)
assert got == want, f"installed {name} {got}, expected {want}"
print(name, got)
PY
}
