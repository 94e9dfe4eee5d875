#!/usr/bin/env bash
# Make (or reuse) the development venv .venv from the lock: exactly the distributions CI tested
# (requirements-dev.lock, hash-checked), torch by exact version, and envbuild itself editable.
# Works on a stock Debian Python (no pip install into the system: PEP 668). Re-running it is cheap.
#   bash .ci/dev_env.sh && .venv/bin/envbuild run workload --local
# ENVBUILD_VENV: another venv folder; ENVBUILD_DEV_TORCH: the torch version (2.13.0, the CPU wheel on CI;
# elsewhere add PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu for a CPU build).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${ENVBUILD_VENV:-.venv}
TORCH=${ENVBUILD_DEV_TORCH:-2.13.0}
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV" || {
    echo "dev_env: python3 cannot make a venv; on Debian/Ubuntu: apt-get install python3-venv" >&2; exit 2; }
fi
"$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
  echo "dev_env: envbuild needs Python >= 3.10 ($("$VENV/bin/python" -V))" >&2; exit 2; }
pip=("$VENV/bin/python" -m pip install -q)
"${pip[@]}" --require-hashes --no-deps -r requirements-dev.lock
"${pip[@]}" "torch==$TORCH"   # its dependencies are in the lock already: pip adds none
"${pip[@]}" --no-deps --no-build-isolation -e .   # setuptools comes from the lock, not the newest release
"$VENV/bin/python" -m pip check
sha256sum requirements-dev.lock | cut -d' ' -f1 >"$VENV/envbuild-dev-lock.sha256"   # tests/project/test_dev_lock.py reads it
echo "dev_env: $VENV ready ($("$VENV/bin/python" -m pip list --format=freeze | wc -l) distributions); activate: . $VENV/bin/activate"
