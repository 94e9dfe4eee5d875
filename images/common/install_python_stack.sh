# The pinned Python stack from requirements.lock, sentencepiece from the wheel built in its own stage.
source "$(dirname "$0")/lib.sh"
lock=/opt/envbuild/requirements.lock
pip_install --no-index --no-deps /sentencepiece/sentencepiece-*.whl
pip_install -c "$lock" -r "$lock"
python -m pip check
python -m pip freeze --all >/opt/envbuild/pip-freeze.txt
