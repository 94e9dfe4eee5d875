# Sourced by every install script: strict mode, proxy CA from the optional BuildKit secret, helpers.
# The CA is only read from the secret mount (/run/secrets/envbuild_ca); it is never copied into a layer.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1

ENVBUILD_CA=/run/secrets/envbuild_ca
APT_CA_CONF=/etc/apt/apt.conf.d/99envbuild-ca
if [ -s "$ENVBUILD_CA" ]; then
  export PIP_CERT=$ENVBUILD_CA SSL_CERT_FILE=$ENVBUILD_CA REQUESTS_CA_BUNDLE=$ENVBUILD_CA \
    CURL_CA_BUNDLE=$ENVBUILD_CA GIT_SSL_CAINFO=$ENVBUILD_CA
  # apt (and tools calling apt, e.g. amdgpu-install) over https; removed again when the step ends
  echo "Acquire::https::CAInfo \"$ENVBUILD_CA\";" >"$APT_CA_CONF"
  trap 'rm -f "$APT_CA_CONF"' EXIT
fi

apt_install() {
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "$@"
}

apt_clean() {
  apt-get clean
  rm -rf /var/lib/apt/lists/*
}

# pip of the image's venv; local wheels (the build context's wheelhouse/) are always offered.
pip_install() {
  local extra=()
  if [ -n "${TORCH_INDEX_URL:-}" ]; then extra=(--extra-index-url "$TORCH_INDEX_URL"); fi
  python -m pip install --find-links /wheelhouse "${extra[@]}" "$@"
}
