"""AMD's machine-readable compatibility tables (copies under recipes/vendor/), parsed per ROCm point release.

Two files: `compatibility-matrix-historical-6.0.csv`, AMD's own CSV (one column per point release, 6.0.0 -
6.3.3), and `rocm-current.csv`, the rows of AMD's newer csv-tables (6.4.x - 7.2.x) in long form. Both give,
per point release, the Ubuntu versions, GPU targets and PyTorch lines AMD lists. Imported by builder.report
(vendor support in the report) and the resolver's callers; it imports nothing of envbuild but paths.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

from builder.paths import RECIPES_DIR

VENDOR_DIR = RECIPES_DIR / "vendor"
HISTORICAL = "compatibility-matrix-historical-6.0.csv"
CURRENT = "rocm-current.csv"
#: Where the copies come from (the report cites these).
HISTORICAL_SOURCE = (
    "https://github.com/ROCm/ROCm/blob/e396b4898f459db094bfd60b876f419f77eb9f09/"
    "docs/compatibility/compatibility-matrix-historical-6.0.csv"
)
CURRENT_SOURCE = "https://github.com/ROCm/legacy-rocm-build/blob/develop/docs/compatibility/compatibility-matrix.rst"

_GFX = re.compile(r"\bgfx[0-9a-f]{3,4}\b")
_LINE = re.compile(r"\b(\d+\.\d+)(?:\.\d+)?\b")
_UBUNTU = re.compile(r"Ubuntu ([0-9.]+(?:, [0-9.]+)*)")


@dataclass
class PointRelease:
    """What AMD lists for one ROCm point release ("6.3.1")."""

    version: str
    ubuntu: list[str] = field(default_factory=list)
    archs: list[str] = field(default_factory=list)
    pytorch: list[str] = field(default_factory=list)  # torch lines ("2.4")
    source: str = ""


class VendorMatrixError(Exception):
    """A copy under recipes/vendor/ does not have the shape AMD's tables have."""


def load(directory: Path = VENDOR_DIR) -> dict[str, PointRelease]:
    """Every point release both files describe (the current file wins where both do)."""
    releases = _historical(directory / HISTORICAL)
    releases.update(_read_current_table(directory / CURRENT))
    return releases


def for_release(release: str, releases: dict[str, PointRelease]) -> list[PointRelease]:
    """The point releases of a recipe release: "6.3" -> 6.3.0 ... 6.3.3; "6.2.4" -> 6.2.4 only."""
    return [p for v, p in sorted(releases.items()) if v == release or v.startswith(release + ".")]


def _historical(path: Path) -> dict[str, PointRelease]:
    """AMD's wide CSV: row 0 names the point releases; a row's first cell names its section, empty cells continue it."""
    rows = list(csv.reader(path.read_text().splitlines()))
    if not rows or rows[0][0].strip() != "ROCm Version":
        raise VendorMatrixError(f"{path}: first row must start with 'ROCm Version'")
    versions = [v.strip() for v in rows[0][1:]]
    releases = {v: PointRelease(v, source=HISTORICAL_SOURCE) for v in versions}
    section = ""
    for row in rows[1:]:
        head = row[0].strip() if row else ""
        if head:
            section = head
        for version, cell in zip(versions, row[1:]):
            entry = releases[version]
            if "Operating systems" in section:
                if match := _UBUNTU.search(cell):
                    entry.ubuntu += match.group(1).split(", ")
            elif "GPU / LLVM target" in section:
                entry.archs += _GFX.findall(cell)
            if head.startswith(":doc:`PyTorch"):
                entry.pytorch = _LINE.findall(cell)
            if head.startswith(("FRAMEWORK", ":doc:`TensorFlow")):
                section = head
    return releases


def _read_current_table(path: Path) -> dict[str, PointRelease]:
    """The long-form file: release,field,value,table (comment lines start with '#')."""
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    releases: dict[str, PointRelease] = {}
    for row in csv.DictReader(lines):
        if set(row) != {"release", "field", "value", "table"}:
            raise VendorMatrixError(f"{path}: expected columns release,field,value,table")
        entry = releases.setdefault(row["release"], PointRelease(row["release"]))
        entry.source = f"{CURRENT_SOURCE} (table: {row['table']})"
        if row["field"] == "os":
            entry.ubuntu += _UBUNTU.search(row["value"]).group(1).split(", ") if "Ubuntu" in row["value"] else []
        elif row["field"] == "gfx":
            entry.archs += _GFX.findall(row["value"])
        elif row["field"] == "pytorch":
            entry.pytorch = _LINE.findall(row["value"])
        else:
            raise VendorMatrixError(f"{path}: unknown field {row['field']!r}")
    return releases
