# torch of exactly $TORCH_VERSION (local label included). Usage: install_torch.sh WHEEL_DIR
# A wheel of that version for this Python in WHEEL_DIR (the source build's /torch-dist, or the context's
# wheelhouse/) is installed by path with no index, so an index's wheel of the same version can never win;
# its own requirements then come from the index with torch held at that build. Without such a wheel (the
# official-wheel route only) torch comes from the index by exact version: PyPI hosts no local versions,
# so `==2.5.1+rocm6.2` only matches the PyTorch index's build.
source "$(dirname "$0")/lib.sh"
dir=$1
held=$(mktemp)
echo "torch==$TORCH_VERSION" >"$held"
pytag=$(python -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
shopt -s nullglob
wheels=("$dir"/torch-"$TORCH_VERSION"-"$pytag"-*.whl)
if [ "${#wheels[@]}" -gt 0 ]; then
  wheel=${wheels[0]}
  echo "torch $TORCH_VERSION by path: $(basename "$wheel") sha256 $(sha256sum "$wheel" | cut -d' ' -f1)"
  python -m pip install --no-compile --no-index --no-deps "$wheel"
  deps=$(mktemp)
  python - >"$deps" <<'PY'
import importlib.metadata as md
print("\n".join(r for r in md.requires("torch") or [] if "extra ==" not in r))
PY
  pip_install -c "$held" -r "$deps"
elif [ "$dir" = /torch-dist ]; then
  echo "envbuild: the torch build left no torch-$TORCH_VERSION-$pytag-*.whl in $dir ($(ls "$dir"))" >&2
  exit 1
else
  pip_install -c "$held" "torch==$TORCH_VERSION"
fi
python - <<PY
import importlib.metadata as md, torch
got = md.version("torch")
assert got == "$TORCH_VERSION" == torch.__version__, f"installed torch {got} ({torch.__version__}), expected $TORCH_VERSION"
print("torch", got, "hip", torch.version.hip, "cuda", torch.version.cuda)
PY
