"""`envbuild matrix diff CELL_A CELL_B`: the newest runs of two cells compared (builder.report.diff): versions,
throughput, memory and cost with ratios B/A, and probe values side by side with the side outside its limit."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from builder.report import diff
from builder.report.diff import SECTION_TITLES, SECTIONS, Row
from builder.slug import plain
from builder.workflows.errors import BadValue
from builder.workflows.matrix_file import damage_warnings, open_store

__all__ = ["SECTIONS", "SECTION_TITLES", "CellDiff", "DiffRequest", "Row", "diff_cells"]


@dataclass(frozen=True)
class DiffRequest:
    db: Path | None
    cell_a: str
    cell_b: str
    preset: str | None  # compare runs of this preset (None: A's newest run's)


@dataclass(frozen=True)
class CellDiff:
    a: dict  # the compared run of A: run_id, preset, status, finished_at, its versions, throughput, probes, ...
    b: dict
    rows: list[Row]  # every value of either run, per section, differences first
    prices: tuple  # each run's public GPU price (builder.report.gpu_prices.GpuPrice) or None

    def as_json(self) -> dict:
        return diff.as_json(self.a, self.b)


def diff_cells(request: DiffRequest, notify: Callable[[str], None]) -> CellDiff:
    """The comparison; a cell without runs is a BadValue of `cell_a` / `cell_b`, a preset B or A lacks one of
    `preset`; the rows the matrix's reads skipped are said to `notify`."""
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
