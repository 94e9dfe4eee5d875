"""Verdicts of result files from real CPU runs (tests/data/make_results.py), each with a literal expectation.

smoke-pass: `python -m workload train --preset smoke` (some probes `skip` on a CPU); killed: the workload
SIGKILLed under `envbuild run workload --local` (status `error`, process_died); interrupted: Ctrl-C;
bad-data: a data file without a label column (data_error).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.store.summary import run_verdict

RESULTS = Path(__file__).parents[1] / "data" / "results"
KEY = "cpu-torch2.13-py3.11"


def real(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def matrix(db: Path, *args: str):
    result = CliRunner().invoke(main, ["matrix", *args, "--db", str(db)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def imported(tmp_path: Path, *names: str) -> dict:
    """`envbuild matrix import` the named real results (in this order), then `matrix list --json`'s line."""
    db = tmp_path / "m.db"
    for i, name in enumerate(names):
        folder = tmp_path / f"{i}-{name}"
        folder.mkdir()
        shutil.copy(RESULTS / f"{name}.json", folder / "result.json")
        matrix(db, "import", str(folder))
    (line,) = json.loads(matrix(db, "list", "--json").output)
    assert line["key"] == KEY
    return line


def test_the_real_results_are_what_their_names_say():
    assert [p["status"] for p in real("smoke-pass")["probes"]].count("skip") >= 2  # GPU probes on a CPU
    assert (real("killed")["status"], real("killed")["error_class"]) == ("error", "process_died")
    assert (real("interrupted")["status"], real("interrupted")["error_class"]) == ("error", "interrupted")
    assert (real("bad-data")["status"], real("bad-data")["error_class"]) == ("error", "data_error")


@pytest.mark.parametrize(
    "name, verdict", [("smoke-pass", "pass"), ("killed", "fail"), ("interrupted", "attempt"), ("bad-data", "attempt")]
)
def test_verdict_of_one_real_result(name, verdict):
    assert run_verdict(real(name)) == verdict


@pytest.mark.parametrize(
    "names, status, failure_class, runs, attempts, flaky",
    [
        (["smoke-pass"], "pass", None, 1, 0, False),  # skipped probes do not make it partial
        (["killed"], "fail", "process_died", 1, 0, False),  # status error is a fail, never a pass
        (["interrupted"], "untested", None, 0, 1, False),  # an attempt alone is no verdict
        (["bad-data"], "untested", None, 0, 1, False),
        (["smoke-pass", "bad-data", "interrupted"], "pass", None, 1, 2, False),  # user errors never flip a pass
        (["smoke-pass", "killed"], "fail", "process_died", 2, 0, True),  # a crash in the environment does
    ],
)
def test_what_matrix_list_shows_for_real_results(tmp_path, names, status, failure_class, runs, attempts, flaky):
    line = imported(tmp_path, *names)
    assert (line["status"], line["failure_class"], line["runs"], line["attempts"], line["flaky"]) == (
        status,
        failure_class,
        runs,
        attempts,
        flaky,
    )


def test_show_lists_attempts_apart_from_verdicts(tmp_path):
    imported(tmp_path, "smoke-pass", "interrupted")
    shown = json.loads(matrix(tmp_path / "m.db", "show", KEY, "--json").output)
    assert [(h["verdict"], h["failure_class"]) for h in shown["history"]] == [
        ("pass", None),
        ("attempt", "interrupted"),
    ]
    assert [a["outcome"] for a in shown["records"]] == ["pass", "error interrupted (attempt)"]
    assert shown["flips"] == []
