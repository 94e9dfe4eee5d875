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
apt_clean
