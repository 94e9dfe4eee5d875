#!/usr/bin/env bash
# Re-resolve the development and test environment's lock, requirements-dev.lock: every distribution that
# `pip install -e '.[workload,test]'` brings, pinned with its sha256 hashes, for any Python >= 3.10 (uv's
# universal resolution). torch is left out here (requirements-dev-torch.lock pins it, the CPU build by the sha256
# of its wheels, written below from recipes/wheel-hashes.toml), but its dependencies are resolved from the CPU
# wheel of ENVBUILD_DEV_TORCH so that no CUDA-only package enters the lock.
#   bash .ci/lock_dev.sh        # then commit requirements-dev.lock; .ci/newest_releases.sh says what changed
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=${ENVBUILD_DEV_TORCH:-2.13.0}
UV=${UV:-$(command -v uv || echo .venv/bin/uv)}
[ -x "$UV" ] || { echo "lock_dev: needs uv (bash .ci/dev_env.sh installs it into .venv)" >&2; exit 2; }
# The CPU wheel: a local folder of wheels where this machine has one (pip's find-links), else PyTorch's CPU index.
if [ -d "${PIP_FIND_LINKS:-/opt/wheels}" ]; then
  source_args=(--find-links "${PIP_FIND_LINKS:-/opt/wheels}")
else
  source_args=(--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match)
fi
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
echo "torch==$TORCH+cpu" >"$constraints"
"$UV" pip compile pyproject.toml --extra workload --extra test --universal --generate-hashes \
  "${source_args[@]}" --constraint "$constraints" --no-emit-package torch --no-header --quiet \
  --output-file requirements-dev.lock.new
{
  echo "# The development and test environment, hash-locked (written by: bash .ci/lock_dev.sh; installed by"
  echo "# .ci/dev_env.sh). torch itself is not here: requirements-dev-torch.lock pins torch==$TORCH+cpu by hash."
  cat requirements-dev.lock.new
} >requirements-dev.lock
rm requirements-dev.lock.new
echo "lock_dev: wrote requirements-dev.lock ($(grep -c '^[a-z0-9].*==' requirements-dev.lock) distributions)"
python3 .ci/lock_dev_torch.py "$TORCH"
