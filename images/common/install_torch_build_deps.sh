# The torch source build's Python build tools, the last step of that stage that uses the network:
# cmake and ninja by hash (/opt/envbuild/torch-build.lock, from recipes/torch-build.lock; cmake<4: recipes/
# build-tools.toml), then the tag's own requirements.txt with them held ($TORCH_BUILD_PINS as constraints).
# The tag's requirements.txt names unpinned packages (numpy, pyyaml, typing-extensions, ...): those are
# resolved from PyPI on the day of the build and are NOT hash-checked (docs/rocm-route.md says so).
source "$(dirname "$0")/lib.sh"
cd /src/pytorch
TORCH_INDEX_URL='' pip_install --no-deps --require-hashes -r /opt/envbuild/torch-build.lock
read -r -a pins <<<"${TORCH_BUILD_PINS:-}"
constraints=$(mktemp)
printf '%s\n' "${pins[@]}" >"$constraints"
TORCH_INDEX_URL='' pip_install -c "$constraints" -r requirements.txt "${pins[@]}"
cmake --version | head -n 1
