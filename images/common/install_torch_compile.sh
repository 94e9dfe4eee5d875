# torch.compile's backend for a source-built torch: $TORCH_COMPILE_PACKAGE (e.g. pytorch-triton-rocm==3.0.0, the
# version the official ROCm wheel of the same release requires: recipes/torch.toml) from the PyTorch index only
# ($TORCH_INDEX_URL: PyPI's pytorch-triton-rocm stops at 2.1.0), or by path from wheelhouse/, with --no-deps:
# nothing else comes from that index; its requirements must be in the lock (the runtime stage's `pip check` fails
# the build if one is not). Pinned by version only:
# no published sha256 of the index's wheels was found (docs/rocm-route.md, "Triton on source cells").
source "$(dirname "$0")/lib.sh"
if [ -z "${TORCH_COMPILE_PACKAGE:-}" ] || [ -z "${TORCH_INDEX_URL:-}" ]; then
  echo "envbuild: TORCH_COMPILE_PACKAGE ('${TORCH_COMPILE_PACKAGE:-}') and TORCH_INDEX_URL ('${TORCH_INDEX_URL:-}')" \
    "must both be set" >&2
  exit 1
fi
python -m pip install --no-compile --no-deps --index-url "$TORCH_INDEX_URL" --find-links /wheelhouse \
  "$TORCH_COMPILE_PACKAGE"
check_installed "${TORCH_COMPILE_PACKAGE%%==*}" "${TORCH_COMPILE_PACKAGE#*==}"
