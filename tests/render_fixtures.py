"""Helpers shared by the render tests: the golden cells, a fixed stand-in workload, tree comparison."""

from __future__ import annotations

import hashlib
from pathlib import Path

from builder.plan.render import StaticFiles
from builder.plan.resolve import Request

GOLDEN_DIR = Path(__file__).parent / "golden"
GOLDEN_WORKLOAD = GOLDEN_DIR / "workload"
GOLDEN_FILES = ("Dockerfile", "cell.def", "requirements.lock", "manifest.json")
#: `envbuild render` of the cell a test site's recipe folder adds (release 6.2.9, a copy of 6.2 under another base).
SITE_CELL_RENDER = ("render", "--rocm", "6.2.9", "--torch", "2.5", "--arch", "gfx90a")

#: The cells with golden files: name -> request.
GOLDEN_CELLS = {
    "rocm6.1.2-torch2.3-source": Request(accel_version="6.1.2", torch="2.3"),
    "rocm6.2-torch2.4-source": Request(accel_version="6.2", torch="2.4"),
    "rocm6.2-torch2.5-wheel": Request(accel_version="6.2", torch="2.5"),
    "rocm6.4-torch2.8-wheel": Request(accel_version="6.4", torch="2.8"),  # Ubuntu 22.04 base, pytorch-triton-rocm pin
    "rocm7.2-torch2.11-gfx942-wheel": Request(accel_version="7.2", torch="2.11", arch="gfx942"),  # Ubuntu 24.04 base
    "cpu-torch2.13": Request(flavor="cpu", torch="2.13"),
    # pip-ROCm route: plain Ubuntu, one arch's ROCm SDK wheels from PyTorch's index / AMD's index (split torch)
    "rocm7.14-torch2.14-gfx942-pip": Request(accel_version="7.14", torch="2.14", arch="gfx942"),
    "rocm10.0-torch2.13-gfx1151-pip": Request(accel_version="10.0", torch="2.13", arch="gfx1151"),
    # the stacks after 10.0: AMD's torch from AMD's index on MI250X (a "Build Passing" arch with a public record)
    "rocm10.1-torch2.14-gfx90a-pip": Request(accel_version="10.1", torch="2.14", arch="gfx90a"),
    "rocm7.14.1-torch2.11-gfx90a-pip": Request(accel_version="7.14.1", torch="2.11", arch="gfx90a"),
}


def golden_static() -> StaticFiles:
    """Context files with the stand-in workload, so goldens do not change when workload/ does."""
    return StaticFiles.read(GOLDEN_WORKLOAD)


def tree_digest(root: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under root."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
