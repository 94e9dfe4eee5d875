# The accelerator userspace as Python wheels (the pip-ROCm route, ROCm 7.14 and later): $ACCEL_REQUIREMENTS
# (space-separated, e.g. `rocm[libraries,device-gfx942]==7.14.0`) from the torch index only, before torch, so that
# torch's own requirement on them (PyTorch's 7.14 wheels ask for `rocm[libraries,device-all]`) is already met and
# never pulls every GPU's device code. --index-url, not --extra-index-url: PyPI's rocm-sdk-* names are placeholders,
# not the SDK, and must never win a version race.
source "$(dirname "$0")/lib.sh"
: "${ACCEL_REQUIREMENTS:?envbuild: ACCEL_REQUIREMENTS is empty}"
: "${TORCH_INDEX_URL:?envbuild: the accelerator wheels need TORCH_INDEX_URL (the index that carries them)}"
read -ra wanted <<<"$ACCEL_REQUIREMENTS"
for requirement in "${wanted[@]}"; do
  case "$requirement" in
    *device-all*) echo "envbuild: refusing $requirement: one arch's device package only" >&2; exit 1 ;;
  esac
done
python -m pip install --no-compile --find-links /wheelhouse --index-url "$TORCH_INDEX_URL" "${wanted[@]}"
python -m pip freeze --all | grep -iE '^(rocm|amd-)' || true
