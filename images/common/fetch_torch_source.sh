# The pinned torch tag with its submodules (shallow), into /src/pytorch.
source "$(dirname "$0")/lib.sh"
git clone --depth 1 --branch "$TORCH_GIT_TAG" --recurse-submodules --shallow-submodules --jobs 4 \
  "$TORCH_GIT_URL" /src/pytorch
git -C /src/pytorch log -1 --format='torch source at %H'
