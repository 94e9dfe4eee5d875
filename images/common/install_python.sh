# Python $PYTHON_VERSION (from the base image, the OS, or $PYTHON_PPA when the OS lacks it), the image venv
# /opt/venv, and the venv's own pinned pip/setuptools/wheel (/opt/envbuild/venv.lock, hash-checked): a venv
# made from the OS Python starts with the OS's pip (Ubuntu 22.04: 22.0.2, Debian 12: 23.0.1) and no `wheel`,
# which cannot build setup.py-only sdists such as sentencepiece 0.2.0 (recipes/build-tools.toml says where
# each pin comes from; recipes/locks/ holds their hashes).
source "$(dirname "$0")/lib.sh"
py="python${PYTHON_VERSION}"
usable() {
  command -v "$py" >/dev/null && "$py" - <<'PY'
import ensurepip, os, sysconfig, venv  # noqa: F401  (venv + headers for source builds)
raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))
PY
}
if ! usable; then
  apt-get update -qq
  if ! apt-cache show "$py-venv" >/dev/null 2>&1 && [ -n "${PYTHON_PPA:-}" ]; then
    echo "the OS has no $py; adding $PYTHON_PPA"
    apt_install software-properties-common gpg-agent
    add-apt-repository -y "$PYTHON_PPA"
  fi
  apt_install "$py" "$py-venv" "$py-dev"
  apt_clean
fi
"$py" -m venv /opt/venv
if grep -q '^[^#]' /opt/envbuild/venv.lock; then
  pip_install --no-deps --require-hashes -r /opt/envbuild/venv.lock
fi
/opt/venv/bin/python --version
/opt/venv/bin/python -m pip --version
