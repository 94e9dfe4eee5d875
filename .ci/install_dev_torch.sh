#!/usr/bin/env bash
# Install the development environment's torch into the venv of PYTHON: exactly requirements-dev-torch.lock, PyTorch's
# CPU build from PyTorch's CPU index, hash-checked (pip refuses a file whose sha256 the lock does not list, wherever it
# came from: the index, a mirror or a local folder of wheels). Its dependencies come from requirements-dev.lock.
#   bash .ci/install_dev_torch.sh .venv/bin/python      (.ci/dev_env.sh runs it)
# Exit 2, naming the index, when this Python or machine has no wheel in the lock or pip cannot get it.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${1:?usage: install_dev_torch.sh PYTHON}
LOCK=requirements-dev-torch.lock
INDEX=$(sed -n 's/^--index-url //p' "$LOCK")
tag=$("$PYTHON" -c 'import platform, sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}-cp{sys.version_info[0]}{sys.version_info[1]}-manylinux_2_28_{platform.machine()}")')
if ! grep -q "^#   wheel torch-[^ ]*-$tag\.whl " "$LOCK"; then
  have=$(sed -n 's/^#   wheel torch-[^-]*-\(cp[0-9]*\)-cp[0-9]*-manylinux_2_28_\([a-z0-9_]*\)\.whl .*/\1 \2/p' "$LOCK" | tr '\n' ',' | sed 's/,$//; s/,/, /g')
  echo "install_dev_torch: $LOCK has no torch wheel for this Python and machine ($tag); it pins $INDEX's wheels for: $have." >&2
  echo "install_dev_torch: use one of those Pythons (e.g. ENVBUILD_PYTHON=python3.12 bash .ci/dev_env.sh), or record the wheel's sha256 in recipes/wheel-hashes.toml and run python3 .ci/lock_dev_torch.py" >&2
  exit 2
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! "$PYTHON" -m pip install -q --require-hashes --no-deps -r "$LOCK" 2>"$log"; then
  cat "$log" >&2
  if grep -q "DO NOT MATCH THE HASHES" "$log"; then
    echo "install_dev_torch: refused a torch wheel whose sha256 $LOCK does not list (above); nothing was installed" >&2
  else
    echo "install_dev_torch: torch comes from PyTorch's CPU index, $INDEX, which pip could not reach or which lacks it" \
      "(above). Reach that index (a proxy, or PIP_EXTRA_INDEX_URL or PIP_FIND_LINKS naming a mirror or a folder holding" \
      "$(sed -n "s/^#   wheel \(torch-[^ ]*-$tag\.whl\) .*/\1/p" "$LOCK")): the hash check is the same" >&2
  fi
  exit 2
fi
installed=$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)
echo "install_dev_torch: torch ${installed:-not installed (pip --dry-run)} from $LOCK (hash-checked)"
