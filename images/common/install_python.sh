# Python $PYTHON_VERSION (from the base image, the OS, or $PYTHON_PPA) and the image venv /opt/venv.
source "$(dirname "$0")/lib.sh"
py="python${PYTHON_VERSION}"
usable() {
  command -v "$py" >/dev/null && "$py" - <<'PY'
import ensurepip, os, sysconfig, venv  # noqa: F401  (venv + headers for source builds)
raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))
PY
}
if ! usable; then
  if [ -n "${PYTHON_PPA:-}" ] && [ "$PYTHON_VERSION" != "${SYSTEM_PYTHON:-}" ]; then
    apt_install software-properties-common gpg-agent
    add-apt-repository -y "$PYTHON_PPA"
  fi
  apt_install "$py" "$py-venv" "$py-dev"
  apt_clean
fi
"$py" -m venv /opt/venv
/opt/venv/bin/python --version
