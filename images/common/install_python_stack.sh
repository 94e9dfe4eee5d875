# The locked Python stack (requirements.lock, from recipes/locks/: every distribution with its hashes, pip's
# hash-checking mode), sentencepiece from the wheel built in its own stage, then what the installed torch
# still needs and only its index has (e.g. pytorch-triton-rocm), with torch held at the installed build and
# recorded in /opt/envbuild/from-torch-index.txt.
# Every pip step installs with --no-compile (lib.sh); the whole site-packages is then byte-compiled once,
# here, with checked-hash .pyc files: their header holds a hash of the source instead of its mtime
# (https://peps.python.org/pep-0552/), so two builds write equal files and imports stay fast.
source "$(dirname "$0")/lib.sh"
lock=/opt/envbuild/requirements.lock
pip_install --no-index --no-deps /sentencepiece/sentencepiece-*.whl
# the lock was resolved against PyPI: its install asks no other index (TORCH_INDEX_URL only for what follows)
TORCH_INDEX_URL='' pip_install --no-deps --require-hashes -r "$lock"
missing=$(python - <<'PY'
import importlib.metadata as md
from packaging.requirements import Requirement

for text in md.requires("torch") or []:
    req = Requirement(text)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    try:
        md.version(req.name)
    except md.PackageNotFoundError:
        print(req)
PY
)
: >/opt/envbuild/from-torch-index.txt
if [ -n "$missing" ]; then
  held=$(mktemp)
  python -c 'import importlib.metadata as md; print("torch==" + md.version("torch"))' >"$held"
  before=$(mktemp)
  python -m pip freeze --all >"$before"
  echo "not in the lock, from torch's index: $(echo "$missing" | tr '\n' ' ')"
  mapfile -t wanted <<<"$missing"
  pip_install -c "$held" "${wanted[@]}"
  python -m pip freeze --all | grep -vxFf "$before" >/opt/envbuild/from-torch-index.txt || true
fi
python -m pip check
python -m pip freeze --all >/opt/envbuild/pip-freeze.txt
site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# compileall exits 1 when a file is not valid for this Python (torch ships py312-only test files); pip's
# own compile step skips those silently, so they are only counted here
if ! python -m compileall -q -j0 --invalidation-mode checked-hash "$site" >"$TMPDIR/compileall.log"; then
  echo "compileall: $(grep -c '^\*\*\* Error compiling' "$TMPDIR/compileall.log") file(s) not valid for $(python -V)"
fi
