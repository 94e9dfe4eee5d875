"""What the vendor's documentation lists as supported (recipes/vendor-support.toml), per matrix cell."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass

from builder.paths import RECIPES_DIR
from builder.plan.cells import Cell

VENDOR_SUPPORT_FILE = RECIPES_DIR / "vendor-support.toml"


@dataclass(frozen=True)
class VendorSupport:
    """`status`: "listed", "not listed" or "n/a" (no vendor table applies, e.g. the CPU cell)."""

    status: str
    detail: str
    sources: tuple[str, ...] = ()


def load(path=VENDOR_SUPPORT_FILE) -> dict:
    """The data file as a dict ({} when it is absent: every cell is then "not listed")."""
    return tomllib.loads(path.read_text()) if path.is_file() else {}


def support_of(cell: Cell, data: dict) -> VendorSupport:
    """Whether the cited ROCm pages list this cell's torch line and arch for its ROCm release."""
    if cell.flavor != "rocm":
        return VendorSupport("n/a", "no vendor support table applies to this flavor")
    release = (data.get("rocm") or {}).get(cell.accel_version or "")
    if not release:
        return VendorSupport("not listed", f"no cited vendor data for ROCm {cell.accel_version}")
    sources = tuple(dict.fromkeys((release["pytorch_source"], release["archs_source"])))
    missing = []
    if cell.torch not in release["pytorch"]:
        missing.append(f"PyTorch {cell.torch} (listed: {', '.join(release['pytorch'])})")
    if cell.arch not in release["archs"]:
        missing.append(f"{cell.arch} (listed: {', '.join(release['archs'])})")
    if missing:
        return VendorSupport("not listed", f"ROCm {cell.accel_version} docs do not list " + " or ".join(missing),
                             sources)
    return VendorSupport("listed", f"ROCm {cell.accel_version} docs list PyTorch {cell.torch} and {cell.arch}",
                         sources)
