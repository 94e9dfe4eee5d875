# The pinned Python stack from requirements.lock, sentencepiece from the wheel built in its own stage,
# torch held at the version the torch stage installed (no pin below may replace it).
# Every pip step installs with --no-compile (lib.sh); the whole site-packages is then byte-compiled once,
# here, with checked-hash .pyc files: their header holds a hash of the source instead of its mtime
# (https://peps.python.org/pep-0552/), so two builds write equal files and imports stay fast.
source "$(dirname "$0")/lib.sh"
lock=/opt/envbuild/requirements.lock
pip_install --no-index --no-deps /sentencepiece/sentencepiece-*.whl
held=$(mktemp)
python -c 'import importlib.metadata as md; print("torch==" + md.version("torch"))' >"$held"
pip_install -c "$lock" -c "$held" -r "$lock"
python -m pip check
python -m pip freeze --all >/opt/envbuild/pip-freeze.txt
site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# compileall exits 1 when a file is not valid for this Python (torch ships py312-only test files); pip's
# own compile step skips those silently, so they are only counted here
if ! python -m compileall -q -j0 --invalidation-mode checked-hash "$site" >"$TMPDIR/compileall.log"; then
  echo "compileall: $(grep -c '^\*\*\* Error compiling' "$TMPDIR/compileall.log") file(s) not valid for $(python -V)"
fi
