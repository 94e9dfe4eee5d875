# The pinned Python stack from requirements.lock, sentencepiece from the wheel built in its own stage,
# torch held at the version the torch stage installed (no pin below may replace it).
source "$(dirname "$0")/lib.sh"
lock=/opt/envbuild/requirements.lock
pip_install --no-index --no-deps /sentencepiece/sentencepiece-*.whl
held=$(mktemp)
python -c 'import importlib.metadata as md; print("torch==" + md.version("torch"))' >"$held"
pip_install -c "$lock" -c "$held" -r "$lock"
python -m pip check
python -m pip freeze --all >/opt/envbuild/pip-freeze.txt
