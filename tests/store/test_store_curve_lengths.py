"""The store measures each run's longest curve in SQLite (what lets the report pass short runs on unparsed), and
the report's data file thins exactly the runs with a curve over REPORT_POINTS."""

from __future__ import annotations

import json

from builder.report.curve_points import REPORT_POINTS
from builder.report.site import build_report, PAGE_RUNS
from builder.store.store import MatrixStore
from builder.store.summary import summarize
from matrix_fixtures import make_result


def _with_curve(points: int) -> dict:
    result = make_result()
    name = next(iter(result["metrics"]["curves"]))
    result["metrics"]["curves"][name] = [[i, 1.0 + i * 1e-3] for i in range(points)]
    return result


def test_longest_curves_are_measured_and_only_long_ones_thinned(tmp_path):
    db = tmp_path / "m.db"
    at_limit, over = _with_curve(REPORT_POINTS), _with_curve(REPORT_POINTS + 1)
    at_limit["finished_at"] = "2026-01-01T00:00:00Z"  # the older of the two
    with MatrixStore.open(db) as store:
        store.record_run(at_limit)
        store.record_run(over)
        key = store.cells()[0].key
        measured = store.runs_json_curves(key)
        assert [n for _, n in measured] == [REPORT_POINTS, REPORT_POINTS + 1]
        assert [t for t, _ in measured] == store.runs_json(key)
        build_report(store, summarize(store, [], runs_per_cell=PAGE_RUNS), tmp_path / "site")
    data = json.loads(next((tmp_path / "site" / "data").glob("*.json")).read_text())
    runs = {run["run_id"]: run["metrics"] for run in data["runs"]}
    assert "curves_points" not in runs[at_limit["run_id"]]
    assert max(len(c) for c in runs[at_limit["run_id"]]["curves"].values()) == REPORT_POINTS
    assert runs[over["run_id"]]["curves_points"] == {next(iter(over["metrics"]["curves"])): REPORT_POINTS + 1}
    assert max(len(c) for c in runs[over["run_id"]]["curves"].values()) == REPORT_POINTS
