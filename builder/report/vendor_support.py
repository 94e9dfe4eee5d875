"""What AMD and PyTorch each claim for a matrix cell: AMD's compatibility tables, PyTorch's official wheels.

AMD: recipes/vendor-support.toml (the 6.1.2 / 6.2 pages, read by hand) and, for the later releases, AMD's
machine-readable tables copied under recipes/vendor/ (builder.plan.vendor_matrix). PyTorch: whether the
PyTorch index carries an official wheel of the cell's torch line for its ROCm release (recipes/torch.toml).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass

from builder.paths import RECIPES_DIR
from builder.plan import vendor_matrix
from builder.plan.cells import Cell

VENDOR_SUPPORT_FILE = RECIPES_DIR / "vendor-support.toml"


@dataclass(frozen=True)
class VendorSupport:
    """`status`: "listed" (AMD lists the torch line and the arch), "wheel only" (AMD's table does not, but the cell's
    torch is published as a wheel: PyTorch's official one, or AMD's own build on AMD's index), "not listed" or "n/a"
    (no vendor table applies, e.g. the CPU cell)."""

    status: str
    detail: str
    sources: tuple[str, ...] = ()


def load(path=VENDOR_SUPPORT_FILE) -> dict:
    """The hand-read pages (`rocm`), AMD's parsed tables per recipe release (`amd`), the wheels the recipes take
    (`pytorch`: release -> torch line -> wheel requirement) and who builds them where not PyTorch (`builders`:
    release -> "AMD"); {} parts when their files are absent."""
    data = tomllib.loads(path.read_text()) if path.is_file() else {}
    from builder.plan.recipes import load as load_recipes

    recipes = load_recipes()
    points = vendor_matrix.load() if vendor_matrix.VENDOR_DIR.is_dir() else {}
    data["amd"] = {version: vendor_matrix.for_release(version, points) for version in recipes.releases.get("rocm", {})}
    data["builders"] = {v: r.wheel_builder for v, r in recipes.releases.get("rocm", {}).items() if r.wheel_builder}
    data["pytorch"] = {
        version: {
            line: f"torch {t.version}+{suffix}"
            for line, t in recipes.torch.items()
            if "rocm" in t.flavors
            for suffix in t.wheel_suffixes
            if suffix in release.wheel_suffixes
        }
        for version, release in recipes.releases.get("rocm", {}).items()
    }
    return data


def support_of(cell: Cell, data: dict) -> VendorSupport:
    """What AMD's cited tables list for the cell's ROCm release, and whether PyTorch ships its wheel."""
    if cell.flavor != "rocm":
        return VendorSupport("n/a", "no vendor support table applies to this flavor")
    version = cell.accel_version or ""
    wheel = (data.get("pytorch") or {}).get(version, {}).get(cell.torch)
    builder = (data.get("builders") or {}).get(version)  # the release takes torch from its vendor's index
    if wheel and builder:
        pytorch = f"{builder}: its own build of torch, {wheel}, on its index (not PyTorch's)"
    else:
        pytorch = f"PyTorch: official wheel {wheel}" if wheel else f"PyTorch: no official torch {cell.torch} wheel"
    amd, sources = _amd_claim(cell, data)
    if amd is None:
        return VendorSupport(
            "wheel only" if wheel else "not listed", f"AMD: no cited table for ROCm {version}; {pytorch}", sources
        )
    listed, text = amd
    status = "listed" if listed else ("wheel only" if wheel else "not listed")
    return VendorSupport(status, f"AMD: {text}; {pytorch}", sources)


def _amd_claim(cell: Cell, data: dict) -> tuple[tuple[bool, str] | None, tuple[str, ...]]:
    """((listed, what AMD's table says), its sources), or (None, ()) when no AMD table covers the release."""
    version = cell.accel_version or ""
    page = (data.get("rocm") or {}).get(version)
    if page:
        lines, archs = list(page["pytorch"]), list(page["archs"])
        sources = tuple(dict.fromkeys((page["pytorch_source"], page["archs_source"])))
        where = f"ROCm {version} docs"
    else:
        points = (data.get("amd") or {}).get(version) or []
        if not points:
            return None, ()
        lines = sorted({line for p in points for line in p.pytorch}, key=lambda v: [int(x) for x in v.split(".")])
        archs = sorted({a for p in points for a in p.archs})
        sources = tuple(dict.fromkeys(p.source for p in points))
        where = f"AMD's table for ROCm {', '.join(p.version for p in points)}"
    missing = []
    if cell.torch not in lines:
        missing.append(f"PyTorch {cell.torch} (listed: {', '.join(lines)})")
    if cell.arch not in archs:
        missing.append(f"{cell.arch} (listed: {', '.join(archs)})")
    if missing:
        return (False, f"{where} does not list " + " or ".join(missing)), sources
    return (True, f"{where} lists PyTorch {cell.torch} and {cell.arch}"), sources
