# The ROCm apt signing key, fetched again and checked against its fingerprint before any apt-get runs:
# the base image carries the key as it was when the image was made, and when AMD re-signs or rotates it
# every `apt-get update` against repo.radeon.com fails (ROCm/ROCm-docker#83, ROCm/ROCm#2362), the
# official-wheel route included. PyTorch's CI image re-imports it on every build (.ci/docker/common/
# install_rocm.sh: `curl ... rocm.gpg.key | apt-key add -`); here it is also checked against
# $ROCM_KEY_FINGERPRINT (recipes/rocm.toml, with its source) so a substituted key stops the build.
# Nothing to do when the base image has no repo.radeon.com source (e.g. the plain-Ubuntu route, whose
# amdgpu-install package brings its own key).
source "$(dirname "$0")/lib.sh"
sources=$(grep -rls 'repo\.radeon\.com' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null || true)
if [ -z "$sources" ]; then
  echo "no repo.radeon.com apt source in the base image; no ROCm key to refresh"
  exit 0
fi
key="$TMPDIR/rocm.gpg.key"
curl -fsSL -o "$key" "$ROCM_KEY_URL"
export GNUPGHOME="$TMPDIR/gnupg"
mkdir -m 700 "$GNUPGHOME"
got=$(gpg --batch --show-keys --with-colons "$key" | awk -F: '$1 == "fpr" {print $10; exit}')
if [ "$got" != "$ROCM_KEY_FINGERPRINT" ]; then
  echo "envbuild: $ROCM_KEY_URL has fingerprint '${got:-none}', expected $ROCM_KEY_FINGERPRINT (recipes/rocm.toml);" \
    "if AMD rotated the key, check the new one against AMD's install docs and update the recipe" >&2
  exit 1
fi
# the keyring the base image imported into (apt-key add, ROCm-docker dev/Dockerfile-ubuntu-22.04@9bb8831)
# takes the new signatures; sources that name their own keyring (signed-by=) get the key there
if [ -s /etc/apt/trusted.gpg ]; then
  gpg --batch --quiet --no-default-keyring --keyring /etc/apt/trusted.gpg --import "$key"
fi
for keyring in $(grep -rhos 'signed-by=[^] ]*' $sources | cut -d= -f2 | sort -u); do
  gpg --batch --yes --dearmor -o "$keyring" "$key"
done
gpg --batch --yes --dearmor -o /etc/apt/trusted.gpg.d/rocm.gpg "$key"
echo "ROCm apt key $got refreshed from $ROCM_KEY_URL"
