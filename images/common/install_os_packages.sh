# Accelerator packages from the repositories the base image already configures: for a ROCm source build,
# the libraries torch's build finds and its binaries link (recipes/rocm.toml source_build_packages).
# Nothing to do when OS_PACKAGES is empty (e.g. the official-wheel route: those wheels carry their own).
# Pins (recipes/rocm.toml apt_pin): an entry written name=version installs exactly that version; a name listed in
# ROCM_APT_BUILD_PACKAGES installs at its one version of repository build ROCM_APT_BUILD (none or several fail the
# step); any other name installs what the repository serves. The versions installed are printed.
source "$(dirname "$0")/lib.sh"

# The one version of package $1 the configured repositories offer that belongs to repository build $2 (a ROCm
# version ends in .<release>-<build id>~<distro>, e.g. .60200-66~22.04); fails, naming what it found, unless there
# is exactly one. Reads the package lists (`apt-get update` first).
apt_build_version() {
  local found
  found=$(apt-cache madison "$1" | awk -F'|' -v build=".$2" '{
    gsub(/ /, "", $2)
    if (length($2) > length(build) && substr($2, length($2) - length(build) + 1) == build) print $2
  }' | sort -u)
  if [ -z "$found" ] || [ "$(printf '%s\n' "$found" | wc -l)" -ne 1 ]; then
    found=${found:-none}
    echo "envbuild: $1: expected one version of repository build $2, found: ${found//$'\n'/ } (offered:" \
      "$(apt-cache madison "$1" | awk -F'|' '{gsub(/ /, "", $2); printf "%s ", $2}')); the release's apt_pin in" \
      "recipes/ does not match its repository" >&2
    return 1
  fi
  printf '%s\n' "$found"
}

if [ -z "${OS_PACKAGES:-}" ]; then
  echo "no accelerator packages to install"
  exit 0
fi
read -r -a entries <<<"$OS_PACKAGES"
read -r -a by_build <<<"${ROCM_APT_BUILD_PACKAGES:-}"
apt-get update -qq
specs=()
for entry in "${entries[@]}"; do
  spec=$entry
  if [[ $entry != *=* ]] && [[ " ${by_build[*]} " == *" $entry "* ]]; then
    version=$(apt_build_version "$entry" "$ROCM_APT_BUILD")
    spec="$entry=$version"
  fi
  specs+=("$spec")
done
# MIOpen's precompiled kernel databases for the cell's GPU (as PyTorch's .ci/docker/common/install_rocm.sh
# installs every unversioned miopen-hip-gfx* package; here only $MIOPEN_KDB_ARCH's): without them MIOpen compiles
# its kernels at first use. Not pinned: their versions were not read in a public record (recipes/rocm.toml)
if [ -n "${MIOPEN_KDB_ARCH:-}" ]; then
  mapfile -t kdbs < <(apt-cache search --names-only "^miopen-hip-${MIOPEN_KDB_ARCH}" | awk '{print $1}' | grep -F -v . || true)
  if [ "${#kdbs[@]}" -eq 0 ]; then
    echo "envbuild: no miopen-hip-${MIOPEN_KDB_ARCH}* kernel database package in the ROCm repository" >&2
    exit 1
  fi
  specs+=("${kdbs[@]}")
fi
apt-get install -y -qq --no-install-recommends "${specs[@]}"
names=("${specs[@]%%=*}")
dpkg-query -W -f 'installed ${Package}=${Version}\n' "${names[@]}"
apt_clean
