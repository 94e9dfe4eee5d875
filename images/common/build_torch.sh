# Build a torch wheel from /src/pytorch for $ARCH_ENV targets; the wheel lands in /torch-dist. Offline: the
# build tools came in the step before (install_torch_build_deps.sh), and every proxy variable points at a
# closed local port here, so a download that torch's cmake would start (e.g. AOTriton's prebuilt tarball in
# torch 2.4-2.6, its git clone in 2.3) fails the build instead of fetching unpinned code; the flavor's
# build_env switches AOTriton's users off (recipes/flavors.toml says why).
# Its version is $TORCH_VERSION, local label included (2.4.1+rocm6.2): PYTORCH_BUILD_VERSION with
# PYTORCH_BUILD_NUMBER=1 is taken as is (pytorch tools/generate_torch_version.py).
# MAX_JOBS: given, or min(nproc, available memory / COMPILE_JOB_MEM_MB) -- a compile job can need ~4.5 GB.
source "$(dirname "$0")/lib.sh"
offline=http://127.0.0.1:9
export http_proxy=$offline https_proxy=$offline ftp_proxy=$offline all_proxy=$offline \
  HTTP_PROXY=$offline HTTPS_PROXY=$offline FTP_PROXY=$offline ALL_PROXY=$offline PIP_NO_INDEX=1
unset no_proxy NO_PROXY
cd /src/pytorch
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
export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
# HIP sources are compiled by hipcc / FindHIP, which call $HIP_CLANG_PATH/clang++ by absolute path and ignore
# CMAKE_*_COMPILER_LAUNCHER; so clang and clang++ are wrapped: the wrappers run ccache on the real binaries.
# PyTorch's CI does the same for its compiler cache (.ci/docker/common/install_cache.sh wraps the ROCm clang
# binaries). The wrapper directory's ../lib points at the real LLVM's, where hipcc looks for clang's headers.
if [ -n "${HIP_CLANG_REAL:-}" ] && [ -x "$HIP_CLANG_REAL/clang++" ]; then
  wrap=/opt/envbuild/hip-ccache
  mkdir -p "$wrap/bin"
  ln -sfn "$HIP_CLANG_REAL/../lib" "$wrap/lib"
  for compiler in clang clang++; do
    printf '#!/bin/sh\nexec ccache %s/%s "$@"\n' "$HIP_CLANG_REAL" "$compiler" >"$wrap/bin/$compiler"
    chmod +x "$wrap/bin/$compiler"
  done
  export HIP_CLANG_PATH=$wrap/bin
  echo "HIP compiles through ccache: HIP_CLANG_PATH=$HIP_CLANG_PATH -> $HIP_CLANG_REAL"
fi
# CMake finds the venv's packages (as vLLM's docker/Dockerfile.rocm_base and pytorch's README set it)
CMAKE_PREFIX_PATH="$(python -c 'import sys; print(sys.prefix)')${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export CMAKE_PREFIX_PATH PYTORCH_BUILD_VERSION="$TORCH_VERSION" PYTORCH_BUILD_NUMBER=1
ccache --zero-stats >/dev/null || true
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
