"""`envbuild matrix diff CELL_A CELL_B`: the newest runs of two cells compared (builder.report.diff): versions,
throughput, memory and cost with ratios B/A, and probe values side by side with the side outside its limit; with
`--sbom`, the SBOMs of their newest builds (builder.workflows.sbom_diff)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from builder.report import diff
from builder.report.diff import SECTION_TITLES, SECTIONS, Row
from builder.slug import plain
from builder.workflows.errors import BadValue
from builder.workflows.matrix_file import damage_warnings, open_store

__all__ = ["SECTIONS", "SECTION_TITLES", "CellDiff", "DiffRequest", "Row", "SbomDiff", "diff_cells"]


@dataclass(frozen=True)
class DiffRequest:
    db: Path | None
    cell_a: str
    cell_b: str
    preset: str | None  # compare runs of this preset (None: A's newest run's)
    sboms: bool = False  # compare the SBOMs of the cells' newest builds (or two sbom.cdx.json paths) instead


@dataclass(frozen=True)
class CellDiff:
    a: dict  # the compared run of A: run_id, preset, status, finished_at, its versions, throughput, probes, ...
    b: dict
    rows: list[Row]  # every value of either run, per section, differences first
    prices: tuple  # each run's public GPU price (builder.report.gpu_prices.GpuPrice) or None

    def as_json(self) -> dict:
        return diff.as_json(self.a, self.b)


@dataclass(frozen=True)
class SbomDiff:
    label_a: str  # where A's SBOM came from (a cell's build, or the file given)
    label_b: str
    rows: list[Row]  # one per component of either SBOM, differences first

    def as_json(self) -> dict:
        return {"a": self.label_a, "b": self.label_b, "rows": [asdict(r) for r in self.rows]}


def diff_cells(request: DiffRequest, notify: Callable[[str], None]) -> CellDiff | SbomDiff:
    """The comparison; a cell without runs is a BadValue of `cell_a` / `cell_b`, a preset B or A lacks one of
    `preset`, a side without an SBOM one of `cells`; the rows the matrix's reads skipped are said to `notify`."""
    if request.sboms:
        return _sbom_diff(request)
    store = open_store(request.db, must_exist=True)
    try:
        runs = {}
        for field, key in (("cell_a", request.cell_a), ("cell_b", request.cell_b)):
            found = [r["result"] for r in reversed(store.runs(key))]
            if not found:
                known = ", ".join(c.key for c in store.cells()) or "none recorded yet"
                raise BadValue(f"no runs of {plain(key)!r} in the matrix (cells: {known})", field)
            runs[key] = found
        for line in damage_warnings(store):
            notify(line)
    finally:
        store.close()
    try:
        result_a, result_b = diff.pick_runs(runs[request.cell_a], runs[request.cell_b], request.preset)
    except ValueError as exc:
        raise BadValue(str(exc), "preset") from exc
    from builder.report import gpu_prices  # reads recipes/ (pydantic): only when the command runs

    prices = tuple(gpu_prices.price_for(r) for r in (result_a, result_b))
    a, b = (diff.profile(r, p.usd_per_gpu_hour if p else None) for r, p in zip((result_a, result_b), prices))
    return CellDiff(a, b, diff.compare(a, b), prices)


def _sbom_diff(request: DiffRequest) -> SbomDiff:
    from builder.workflows import sbom_diff

    store = open_store(request.db, must_exist=True)
    path = store.path
    store.close()
    try:
        return SbomDiff(*sbom_diff.rows(path, request.cell_a, request.cell_b))
    except sbom_diff.SbomDiffError as exc:
        raise BadValue(plain(exc), "cells") from exc
