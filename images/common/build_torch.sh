# Build a torch wheel from /src/pytorch for $ARCH_ENV targets; the wheel lands in /torch-dist.
# MAX_JOBS: given, or min(nproc, available memory / COMPILE_JOB_MEM_MB) -- a compile job can need ~4.5 GB.
source "$(dirname "$0")/lib.sh"
cd /src/pytorch
pip_install -c /opt/envbuild/requirements.lock -r requirements.txt cmake ninja wheel
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
export PYTORCH_BUILD_VERSION="$TORCH_VERSION" PYTORCH_BUILD_NUMBER=1
python setup.py bdist_wheel
ccache --show-stats || true
mkdir -p /torch-dist
cp dist/torch-*.whl /torch-dist/
