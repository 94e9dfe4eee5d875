"""The matrix read model: one verdict per cell (pass / partial / fail / untested) and its history.

A run's verdict: status "pass" with every probe pass or skip -> "pass"; "pass" with any probe "fail"
-> "partial" (passed with probe warnings); "fail" or "error" -> "fail" (with its error_class). A failed
image build is a "fail" event too (class `build:<failure_class>`). A cell's status is its latest
event's verdict; cells known from the recipes with nothing recorded are "untested".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from builder.cells import Cell
from builder.store import MatrixStore

VERDICTS = ("pass", "partial", "fail", "untested")
#: A cell is marked flaky when its verdict flipped among this many latest events.
FLAKY_WINDOW = 10


def run_verdict(result: dict) -> str:
    """pass | partial | fail for one result.json."""
    if result["status"] != "pass":
        return "fail"
    if any(p.get("status") == "fail" for p in result.get("probes") or []):
        return "partial"
    return "pass"


def run_note(result: dict) -> str:
    """One short line on why a run did not fully pass ("" when it did)."""
    if result["status"] != "pass":
        return _first_line(result.get("error") or result.get("error_class") or "")
    failed = [p["name"] for p in result.get("probes") or [] if p.get("status") == "fail"]
    return f"probe warnings: {', '.join(failed)}" if failed else ""


@dataclass(frozen=True)
class Event:
    """One verdict in a cell's history: a run, or a failed build."""

    at: str
    verdict: str
    kind: str  # "run" | "build"
    ident: str  # run_id or build id
    failure_class: str | None = None
    note: str = ""


@dataclass
class CellSummary:
    """Everything the matrix knows about one cell, newest facts first where it matters."""

    cell: Cell
    status: str = "untested"
    failure_class: str | None = None
    note: str = ""
    events: list[Event] = field(default_factory=list)
    runs: list[dict] = field(default_factory=list)  # store rows, oldest first
    builds: list[dict] = field(default_factory=list)  # store rows, oldest first
    in_recipes: bool = False

    @property
    def key(self) -> str:
        return self.cell.key

    @property
    def run_count(self) -> int:
        return sum(e.kind == "run" for e in self.events)

    @property
    def last_pass_at(self) -> str | None:
        passes = [e.at for e in self.events if e.verdict == "pass"]
        return passes[-1] if passes else None

    @property
    def flips(self) -> list[tuple[Event, Event]]:
        """Consecutive events whose verdict changed (e.g. pass -> fail), oldest first."""
        return [(a, b) for a, b in zip(self.events, self.events[1:]) if a.verdict != b.verdict]

    @property
    def flaky(self) -> bool:
        """The verdict flipped among the latest FLAKY_WINDOW events."""
        recent = self.events[-FLAKY_WINDOW:]
        return any(a.verdict != b.verdict for a, b in zip(recent, recent[1:]))

    @property
    def last_event_at(self) -> str | None:
        return self.events[-1].at if self.events else None

    @property
    def latest_run(self) -> dict | None:
        return self.runs[-1]["result"] if self.runs else None

    @property
    def latest_train_run(self) -> dict | None:
        """The newest result with training metrics (what the curves and accuracy come from)."""
        for row in reversed(self.runs):
            if row["result"].get("command") == "train" and row["result"].get("metrics"):
                return row["result"]
        return None

    @property
    def latest_build(self) -> dict | None:
        return self.builds[-1] if self.builds else None


def summarize(store: MatrixStore, recipe_cells: list[Cell] | tuple[Cell, ...] = (), *,
              with_runs: bool = True, runs_per_cell: int | None = None) -> list[CellSummary]:
    """A summary per cell: every recorded cell plus every recipe cell, ordered by key.

    Verdicts come from the runs' columns; `with_runs` also loads the runs' full result.json
    (`CellSummary.runs`: what `show`, `export` and the report need, `list` does not), only the
    newest `runs_per_cell` of each cell when given. Rows that do not parse are skipped and listed
    in `store.damaged`.
    """
    summaries: dict[str, CellSummary] = {c.key: CellSummary(cell=c, in_recipes=True) for c in recipe_cells}
    for cell in store.cells():
        summaries.setdefault(cell.key, CellSummary(cell=cell))
    if with_runs:
        for row in store.runs(last=runs_per_cell):
            if row["cell_key"] in summaries:
                summaries[row["cell_key"]].runs.append(row)
    events: dict[str, list[Event]] = {}
    for row in store.run_events():
        if row["cell_key"] in summaries:
            events.setdefault(row["cell_key"], []).append(_run_event(row))
    for build in store.builds():
        if build["cell_key"] in summaries:
            summaries[build["cell_key"]].builds.append(build)
    for key, summary in summaries.items():
        _fill_verdict(summary, events.get(key, []))
    return [summaries[k] for k in sorted(summaries)]


def export_data(summaries: list[CellSummary]) -> dict:
    """The JSON form of the matrix (also the report's data.json)."""
    return {"format": "envbuild-matrix", "version": 1, "cells": [summary_record(s) for s in summaries]}


def summary_record(s: CellSummary, *, with_runs: bool = True) -> dict:
    """One cell: its coordinates, verdict, history, builds and (`with_runs`) runs."""
    record = {
        **summary_line(s),
        "cell": s.cell.model_dump(),
        "history": [{"at": e.at, "verdict": e.verdict, "kind": e.kind, "id": e.ident,
                     "failure_class": e.failure_class, "note": e.note} for e in s.events],
        "flips": [{"at": b.at, "from": a.verdict, "to": b.verdict} for a, b in s.flips],
        "builds": s.builds,
    }
    if with_runs:
        record["runs"] = [row["result"] for row in s.runs]
    return record


def summary_line(s: CellSummary) -> dict:
    return {"key": s.key, "status": s.status, "failure_class": s.failure_class, "note": s.note,
            "runs": s.run_count, "builds": len(s.builds),
            "last_pass_at": s.last_pass_at, "last_event_at": s.last_event_at, "flaky": s.flaky}


def _run_event(row: dict) -> Event:
    """A run's verdict from its store columns (the same rules as run_verdict / run_note)."""
    if row["status"] != "pass":
        verdict, note = "fail", _first_line(row["error"] or row["error_class"] or "")
    elif row["failed_probes"]:
        verdict, note = "partial", f"probe warnings: {row['failed_probes']}"
    else:
        verdict, note = "pass", ""
    return Event(at=row["at"], verdict=verdict, kind="run", ident=row["run_id"],
                 failure_class=row["error_class"], note=note)


def _fill_verdict(summary: CellSummary, events: list[Event]) -> None:
    events = list(events)
    for build in summary.builds:
        if build["status"] == "fail":
            events.append(Event(at=build["created_at"], verdict="fail", kind="build", ident=build["build_uid"],
                                failure_class=f"build:{build['failure_class']}",
                                note=_first_line(build.get("error") or "")))
    events.sort(key=lambda e: e.at)
    summary.events = events
    if events:
        latest = events[-1]
        summary.status, summary.failure_class, summary.note = latest.verdict, latest.failure_class, latest.note
    elif summary.builds:
        summary.note = "image built, no run recorded"


def _first_line(text: str, limit: int = 200) -> str:
    return text.strip().splitlines()[0][:limit] if text.strip() else ""
