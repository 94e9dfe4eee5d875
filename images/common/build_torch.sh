# Build a torch wheel from /src/pytorch for $ARCH_ENV targets; the wheel lands in /torch-dist.
# Its version is $TORCH_VERSION, local label included (2.4.1+rocm6.2): PYTORCH_BUILD_VERSION with
# PYTORCH_BUILD_NUMBER=1 is taken as is (pytorch tools/generate_torch_version.py).
# Build tools: the tag's requirements.txt, constrained by $TORCH_BUILD_PINS (cmake<4: recipes/build-tools.toml).
# MAX_JOBS: given, or min(nproc, available memory / COMPILE_JOB_MEM_MB) -- a compile job can need ~4.5 GB.
source "$(dirname "$0")/lib.sh"
cd /src/pytorch
read -r -a pins <<<"${TORCH_BUILD_PINS:-}"
constraints=$(mktemp)
printf '%s\n' "${pins[@]}" >"$constraints"
pip_install -c "$constraints" -r requirements.txt "${pins[@]}"
cmake --version | head -n 1
if [ -n "${TORCH_SOURCE_PREPARE:-}" ]; then
  read -r -a prepare <<<"$TORCH_SOURCE_PREPARE"
  "${prepare[@]}"
fi
if [ -z "${MAX_JOBS:-}" ]; then
  avail_mb=$(awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo)
  MAX_JOBS=$((avail_mb / COMPILE_JOB_MEM_MB))
  if [ "$MAX_JOBS" -gt "$(nproc)" ]; then MAX_JOBS=$(nproc); fi
  if [ "$MAX_JOBS" -lt 1 ]; then MAX_JOBS=1; fi
fi
echo "MAX_JOBS=$MAX_JOBS (available memory ${avail_mb:-?} MB, $(nproc) CPUs)"
export MAX_JOBS CCACHE_DIR=/root/.cache/ccache
# setup.py hands BUILD_*/USE_*/CMAKE_* environment variables to CMake (tools/setup_helpers/cmake.py)
export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_HIP_COMPILER_LAUNCHER=ccache
# CMake finds the venv's packages (as vLLM's docker/Dockerfile.rocm_base and pytorch's README set it)
CMAKE_PREFIX_PATH="$(python -c 'import sys; print(sys.prefix)')${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export CMAKE_PREFIX_PATH PYTORCH_BUILD_VERSION="$TORCH_VERSION" PYTORCH_BUILD_NUMBER=1
python setup.py bdist_wheel
ccache --show-stats || true
shopt -s nullglob
wheels=(dist/torch-"$TORCH_VERSION"-*.whl)
if [ "${#wheels[@]}" -ne 1 ]; then
  echo "envbuild: expected one dist/torch-$TORCH_VERSION-*.whl; dist/ holds: $(ls dist)" >&2
  exit 1
fi
mkdir -p /torch-dist
cp "${wheels[0]}" /torch-dist/
