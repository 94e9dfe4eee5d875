# Accelerator packages from the repositories the base image already configures: for a ROCm source build,
# the libraries torch's build finds and its binaries link (recipes/rocm.toml source_build_packages).
# Nothing to do when OS_PACKAGES is empty (e.g. the official-wheel route: those wheels carry their own).
source "$(dirname "$0")/lib.sh"
if [ -z "${OS_PACKAGES:-}" ]; then
  echo "no accelerator packages to install"
  exit 0
fi
read -r -a packages <<<"$OS_PACKAGES"
apt_install "${packages[@]}"
# MIOpen's precompiled kernel databases for the cell's GPU (as PyTorch's .ci/docker/common/install_rocm.sh
# installs every unversioned miopen-hip-gfx* package; here only $MIOPEN_KDB_ARCH's): without them MIOpen
# compiles its kernels at first use
if [ -n "${MIOPEN_KDB_ARCH:-}" ]; then
  mapfile -t kdbs < <(apt-cache search --names-only "^miopen-hip-${MIOPEN_KDB_ARCH}" | awk '{print $1}' | grep -F -v . || true)
  if [ "${#kdbs[@]}" -eq 0 ]; then
    echo "envbuild: no miopen-hip-${MIOPEN_KDB_ARCH}* kernel database package in the ROCm repository" >&2
    exit 1
  fi
  apt-get install -y -qq --no-install-recommends "${kdbs[@]}"
fi
apt_clean
