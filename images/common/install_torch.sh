# torch of exactly $TORCH_VERSION (local label included), without its dependencies: they are in the lock
# (requirements.lock, installed with hashes by install_python_stack.sh, which also adds what only torch's
# index has). Usage: install_torch.sh WHEEL_DIR
# A wheel of that version for this Python in WHEEL_DIR (the source build's /torch-dist, or the context's
# wheelhouse/) is installed by path with no index, so an index's wheel of the same version can never win.
# Without such a wheel (the official-wheel route only) torch comes from the index by exact version: PyPI
# hosts no local versions, so `==2.5.1+rocm6.2` only matches the PyTorch index's build.
source "$(dirname "$0")/lib.sh"
dir=$1
pytag=$(python -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
shopt -s nullglob
wheels=("$dir"/torch-"$TORCH_VERSION"-"$pytag"-*.whl)
if [ "${#wheels[@]}" -gt 0 ]; then
  wheel=${wheels[0]}
  echo "torch $TORCH_VERSION by path: $(basename "$wheel") sha256 $(sha256sum "$wheel" | cut -d' ' -f1)"
  python -m pip install --no-compile --no-index --no-deps "$wheel"
elif [ "$dir" = /torch-dist ]; then
  echo "envbuild: the torch build left no torch-$TORCH_VERSION-$pytag-*.whl in $dir ($(ls "$dir"))" >&2
  exit 1
elif [ "$TORCH_VERSION" != "${TORCH_VERSION%%+*}" ] && [ -z "${TORCH_INDEX_URL:-}" ]; then
  # PyPI hosts no local versions: without the PyTorch index this would fail late, or find nothing
  echo "envbuild: torch $TORCH_VERSION needs TORCH_INDEX_URL (the PyTorch wheel index), which is empty" >&2
  exit 1
else
  pip_install --no-deps "torch==$TORCH_VERSION"
fi
# its metadata only: `import torch` needs the dependencies, which come with the lock (verify_image.py imports it)
check_installed torch "$TORCH_VERSION"
