"""`envbuild matrix list | show CELL | export --json | check`: the matrix read, never written. A line per cell with its
earlier environments and measurements (`list_cells`), everything recorded for one cell (`show_cell`), the whole
matrix as JSON streamed cell by cell (`export_matrix`), and the rows whose stored JSON does not parse (`check_matrix`).
The rows the reads skip are said to `notify` as warnings."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TextIO

from builder.slug import plain
from builder.store.run_config import VERDICT_LABEL
from builder.store.store import MatrixStore
from builder.store.summary import (
    CellSummary,
    configuration_line,
    environment_line,
    summarize,
    summary_line,
    summary_record,
)
from builder.workflows.errors import BadValue
from builder.workflows.matrix_file import damage_warnings, db_path, open_store

#: The columns of `list_cells`' rows, all of them (`--wide`, piped) and those that fit a terminal.
WIDE_COLUMNS = (
    "cell",
    "status",
    "runs",
    "flaky",
    "last pass",
    "class / note",
    "configuration",
    "builds",
    "attempts",
    "environment",
)
NARROW_COLUMNS = ("cell", "status", "runs", "last pass", "class / note")


def _read_summaries(
    db: Path | None, notify: Callable[[str], None], *, with_runs: bool, cell_key: str | None = None
) -> list[CellSummary]:
    store = open_store(db, must_exist=True)
    try:
        summaries = summarize(store, with_runs=with_runs, cell_key=cell_key)
        if cell_key is not None and not summaries:
            known = ", ".join(c.key for c in store.cells()) or "none recorded yet"
            raise BadValue(f"no cell {plain(cell_key)!r} in the matrix (known: {plain(known)})", "cell_key")
    finally:
        store.close()
    for line in damage_warnings(store):
        notify(line)
    return summaries


@dataclass(frozen=True)
class CellList:
    lines: list[dict]  # a cell's summary line each (--json)
    rows: list[dict]  # the table's rows (WIDE_COLUMNS, plain strings): a cell's, its earlier environments'
    # and its measurements'


def list_cells(db: Path | None, notify: Callable[[str], None]) -> CellList:
    summaries = _read_summaries(db, notify, with_runs=False)
    return CellList([summary_line(s) for s in summaries], [row for s in summaries for row in _list_rows(s)])


def _list_rows(s: CellSummary) -> list[dict]:
    """The cell's line, one per earlier environment and one per measurement configuration (plain strings)."""
    rows = [
        {
            "cell": s.key,
            "status": s.status,
            "runs": str(s.run_count),
            "flaky": "flaky" if s.flaky else "",
            "last pass": s.last_pass_at or "-",
            "class / note": class_note(s),
            "configuration": f"{VERDICT_LABEL} (verdict)",
            "builds": str(len(s.builds)),
            "attempts": str(len(s.attempts)),
            "environment": s.environment or "-",
        }
    ]
    for env in s.environments[:-1][::-1]:  # earlier environments: a row each, never a flip
        line = environment_line(s, env)
        rows.append(
            {
                "cell": f"  {s.key}",
                "status": line["status"],
                "runs": str(line["verdicts"]),
                "flaky": "flaky" if line["flaky"] else "",
                "last pass": line["last_pass_at"] or "-",
                "class / note": " ".join(
                    x for x in ("earlier environment:", env, line["failure_class"], line["note"]) if x
                ),
                "configuration": f"{VERDICT_LABEL} (verdict)",
                "builds": "",
                "attempts": "",
                "environment": env,
            }
        )
    for configuration in s.configurations[::-1]:  # measurements: their own status, never the cell's
        line = configuration_line(s, configuration)
        rows.append(
            {
                "cell": f"  ↳ {configuration}",
                "status": line["status"],
                "runs": str(line["runs"]),
                "flaky": "flaky" if line["flaky"] else "",
                "last pass": "-",
                "class / note": " ".join(x for x in (line["failure_class"], line["note"]) if x) or "-",
                "configuration": configuration,
                "builds": "",
                "attempts": "",
                "environment": line["environment"],
            }
        )
    return [{k: plain(v) for k, v in row.items()} for row in rows]


def class_note(s: CellSummary) -> str:
    """The cell's failure class and note, or "-"."""
    return plain(" ".join(x for x in (s.failure_class, s.note) if x) or "-")


@dataclass(frozen=True)
class CellRecord:
    summary: CellSummary  # status, runs, builds, events, the latest run, ...
    attempts: list[tuple[str, str, str, str, str]]  # (at, kind, outcome, id, attempt directory), oldest first
    measurements: list[tuple[str, dict]]  # (configuration, its line: status, runs, flaky, failure_class), newest first
    verdict_label: str  # the verdict configuration's label
    class_note: str  # the cell's failure class and note, or "-"

    def as_json(self) -> dict:
        records = [dict(zip(("at", "kind", "outcome", "id", "attempt_dir"), row)) for row in self.attempts]
        return {**summary_record(self.summary), "records": records}


def show_cell(db: Path | None, cell_key: str, notify: Callable[[str], None]) -> CellRecord:
    """Everything recorded for one cell (an unknown one is a BadValue of `cell_key`)."""
    (summary,) = _read_summaries(db, notify, with_runs=True, cell_key=cell_key)
    store_dir = db_path(db).resolve().parent
    measurements = [(c, configuration_line(summary, c)) for c in summary.configurations[::-1]]
    return CellRecord(summary, _attempt_rows(summary, store_dir), measurements, VERDICT_LABEL, class_note(summary))


def _attempt_rows(s: CellSummary, store_dir: Path) -> list[tuple[str, str, str, str, str]]:
    """Every build and run of the cell with its outcome and attempt directory, oldest first."""
    rows = []
    for b in s.builds:
        outcome = b["status"] if b["status"] == "pass" else f"fail build:{b['failure_class']}"
        rows.append(
            (
                b["created_at"],
                "build",
                outcome + ("" if b["counts"] else " (attempt)"),
                b["build_uid"],
                _attempt_dir(store_dir, b.get("attempt_dir")),
            )
        )
    for row in s.runs:
        result = row["result"]
        outcome = result["status"] + (f" {result.get('error_class')}" if result["status"] != "pass" else "")
        rows.append(
            (
                result.get("finished_at") or row["recorded_at"],
                "run",
                outcome + ("" if row["counts"] else " (attempt)"),
                result["run_id"],
                _attempt_dir(store_dir, row.get("attempt_dir")),
            )
        )
    return sorted(rows)


def _attempt_dir(store_dir: Path, attempt_dir: str | None) -> str:
    return str(store_dir / attempt_dir) if attempt_dir else "-"


def export_matrix(db: Path | None, output: Path | None, stdout: TextIO, notify: Callable[[str], None]) -> None:
    """The matrix as JSON into `output`, else `stdout`; a file that cannot be written is a BadValue of `output`."""
    store = open_store(db, must_exist=True)
    try:
        if output:
            with output.open("w", encoding="utf-8") as handle:
                _export(store, handle)
        else:
            _export(store, stdout)
    except OSError as exc:
        raise BadValue(f"cannot write {output} ({exc.strerror})", "output") from None
    finally:
        store.close()
    for line in damage_warnings(store):
        notify(line)


def _export(store: MatrixStore, handle) -> None:
    """The matrix as JSON ({"format": "envbuild-matrix", "version": 1, "cells": [...]}), written one cell at a time
    with each run's stored JSON as it is."""
    handle.write('{"format": "envbuild-matrix", "version": 1, "cells": [')
    for n, summary in enumerate(summarize(store, with_runs=False)):
        record = json.dumps(summary_record(summary, with_runs=False), sort_keys=True, indent=2)
        handle.write(
            ("," if n else "")
            + "\n"
            + record[:-2]
            + ',\n  "runs": ['
            + ",\n".join(store.runs_json(summary.key))
            + "]\n}"
        )
    handle.write("\n]}\n")


@dataclass(frozen=True)
class MatrixCheck:
    path: Path
    damaged: list[str]  # a line per row whose stored JSON does not parse


def check_matrix(db: Path | None) -> MatrixCheck:
    store = open_store(db, must_exist=True)
    try:
        damaged = store.check()
    finally:
        store.close()
    return MatrixCheck(store.path, [plain(row) for row in damaged])
