"""Who made an image: a vendor image envbuild recognises by its name or path, read from the tag alone.

AMD publishes its PyTorch images as `rocm/pytorch:<tag>` on Docker Hub (ROCm/rocm-install-on-linux
docs/install/3rd-party/pytorch-install.rst, "Docker image support"); LUMI ships
PyTorch SIFs under /appl/local/containers/ (the `sif-images/` folder, e.g.
lumi-pytorch-rocm-6.0.3-python-3.12-pytorch-v2.3.1.sif, DeiC-HPC/cotainr#67). The label is derived again from the
tag wherever it is shown, so a result cannot claim a vendor its tag does not name.
"""

from __future__ import annotations

import re

_AMD = re.compile(r"(?:docker\.io/|index\.docker\.io/)?rocm/pytorch(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?")
_LUMI = re.compile(r"/appl/local/containers/(?:[A-Za-z0-9_+-][A-Za-z0-9._+-]*/)*[A-Za-z0-9_+-][A-Za-z0-9._+-]*\.sif")


def vendor_label(tag: str | None) -> str | None:
    """ "AMD image rocm/pytorch:…" or "LUMI SIF <name>" for a vendor image's tag or path; None for any other."""
    if not isinstance(tag, str):
        return None
    if _AMD.fullmatch(tag):
        return f"AMD image {tag.removeprefix('docker.io/').removeprefix('index.docker.io/')}"
    if _LUMI.fullmatch(tag):
        return f"LUMI SIF {tag.rsplit('/', 1)[-1]}"
    return None
