# torch as a wheel: from the official index ($TORCH_INDEX_URL; empty = none), the build context's
# wheelhouse/, or the wheel a torch-source-build stage left in /torch-dist.
source "$(dirname "$0")/lib.sh"
links=()
if [ -d /torch-dist ]; then links=(--find-links /torch-dist); fi
pip_install "${links[@]}" "$TORCH_REQUIREMENT"
python -c 'import torch; print("torch", torch.__version__, "hip", torch.version.hip)'
