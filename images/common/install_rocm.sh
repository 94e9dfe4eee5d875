# ROCm userspace with amdgpu-install (no kernel driver: containers use the host's amdgpu-dkms).
# Skipped when AMDGPU_INSTALL_VERSION is empty, i.e. the base image already ships ROCm.
source "$(dirname "$0")/lib.sh"
if [ -z "${AMDGPU_INSTALL_VERSION:-}" ]; then
  echo "ROCm comes with the base image; amdgpu-install skipped"
  exit 0
fi
apt_install ca-certificates curl
deb=/tmp/amdgpu-install.deb
curl -fsSL -o "$deb" \
  "https://repo.radeon.com/amdgpu-install/${ROCM_VERSION}/ubuntu/${OS_CODENAME}/amdgpu-install_${AMDGPU_INSTALL_VERSION}-1_all.deb"
apt_install "$deb"
amdgpu-install -y --usecase=rocm --no-dkms
rm -f "$deb"
apt_clean
