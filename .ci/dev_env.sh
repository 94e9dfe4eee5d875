#!/usr/bin/env bash
# Make (or reuse) the development venv .venv from the locks: exactly the distributions CI tested, every one
# hash-checked (requirements-dev.lock; torch from requirements-dev-torch.lock, PyTorch's CPU build from its CPU
# index), and envbuild itself editable. Works on a stock Debian Python (no pip install into the system: PEP 668).
# Re-running it is cheap.
#   bash .ci/dev_env.sh && .venv/bin/envbuild run workload --local
# ENVBUILD_VENV: another venv folder; ENVBUILD_PYTHON: the interpreter that makes it (default python3; the torch lock
# has wheels for CPython 3.11 to 3.14 on x86_64 and aarch64 Linux).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${ENVBUILD_VENV:-.venv}
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ ! -x "$VENV/bin/python" ]; then
  "${ENVBUILD_PYTHON:-python3}" -m venv "$VENV" || {
    echo "dev_env: ${ENVBUILD_PYTHON:-python3} cannot make a venv; on Debian/Ubuntu: apt-get install python3-venv" >&2; exit 2; }
fi
"$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
  echo "dev_env: envbuild needs Python >= 3.10 ($("$VENV/bin/python" -V))" >&2; exit 2; }
# with bytecode: where PYTHONDONTWRITEBYTECODE is set (as on CI machines) nothing writes it later, and every process
# the tests start would compile what it imports (--no-compile: the tests without an engine took 851 s instead of 464 s)
pip=("$VENV/bin/python" -m pip install -q)
bash .ci/install_dev_torch.sh "$VENV/bin/python"   # first: a Python the torch lock has no wheel for stops here
"${pip[@]}" --require-hashes --no-deps -r requirements-dev.lock   # torch's dependencies among them
"${pip[@]}" --no-deps --no-build-isolation -e .   # setuptools comes from the lock, not the newest release
"$VENV/bin/python" -m pip check
sha256sum requirements-dev.lock requirements-dev-torch.lock | cut -d' ' -f1 >"$VENV/envbuild-dev-lock.sha256"   # tests/project/test_dev_lock.py reads it
echo "dev_env: $VENV ready ($("$VENV/bin/python" -m pip list --format=freeze | wc -l) distributions); activate: . $VENV/bin/activate"
