"""Verdict runs and measurements (docs/matrix.md): only the smoke preset as it stands decides a cell; runs of
other configurations are measurements with their own status that never flip it; numbers come from the latest
completed run of a configuration; `matrix list` fits a terminal and prints everything when piped."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.store import run_config
from builder.report.site import percent
from builder.store.store import MatrixStore
from builder.store.summary import summarize
from matrix_fixtures import cpu_result, failed_result

KEY = "cpu-torch2.13-py3.11"
SMOKE = {
    "argv": ["python", "-m", "workload", "train", "--preset", "smoke"],
    "preset": "smoke",
    "model": "tiny-gemma",
    "revision": None,
    "overrides": {},
    "probes": True,
    "data": {"name": "emotions.jsonl", "bundled": True, "sha256": "ab" * 32},
    "envbuild": ["envbuild", "run", "workload", "--local", "--preset", "smoke"],
}


def invocation(**changes) -> dict:
    return {**SMOKE, **changes}


def smoke(at: str, **changes) -> dict:
    return cpu_result(finished_at=at, invocation=invocation(), **changes)


def measurement(
    at: str,
    preset: str = "seed",
    model: str = "tiny-gemma",
    status: str = "fail",
    error: str = "eval accuracy 0.14 below 0.31",
    **changes,
) -> dict:
    inv = invocation(
        preset=preset,
        model=model,
        envbuild=["envbuild", "run", "workload", "--local", "--preset", preset, "--model", model],
    )
    if status == "fail":
        return failed_result(
            "did_not_learn",
            error,
            finished_at=at,
            invocation=inv,
            versions=cpu_result()["versions"],
            hardware=cpu_result()["hardware"],
            **changes,
        )
    return cpu_result(finished_at=at, invocation=inv, **changes)


def recorded(tmp_path, *results) -> tuple:
    db = tmp_path / "m.db"
    with MatrixStore.open(db) as store:
        for result in results:
            store.record_run(result)
    with MatrixStore.open(db, readonly=True) as store:
        (summary,) = summarize(store)
    return db, summary


def listed(db) -> dict:
    out = CliRunner().invoke(main, ["matrix", "list", "--json", "--db", str(db)], catch_exceptions=False).output
    (line,) = json.loads(out)
    return line


@pytest.mark.parametrize(
    "changes, decides",
    [
        ({}, True),
        ({"preset": "seed"}, False),
        ({"model": "google/gemma-2b"}, False),
        ({"overrides": {"max_steps": 8}}, False),
        ({"overrides": {"min_accuracy": 0.0}}, False),
        ({"data": {"name": "mine.jsonl", "bundled": False, "sha256": "cd" * 32}}, False),
        ({"probes": False}, False),
    ],
)
def test_only_the_smoke_preset_as_it_stands_decides(changes, decides):
    result = cpu_result(invocation=invocation(**changes))
    assert run_config.of_result(result).decides is decides
    assert run_config.of_result(cpu_result(command="probe")).decides is False


@pytest.mark.parametrize(
    "config, model, path, decides",
    [
        ({"preset": "smoke", "min_accuracy": 0.45, "max_steps": None}, "tiny-gemma", "/data/emotions.jsonl", True),
        ({"preset": "seed", "min_accuracy": 2 / 7, "max_steps": None}, "/tmp/g2b", "/data/emotions.jsonl", False),
        ({"preset": "smoke", "min_accuracy": 0.45, "max_steps": 8}, "tiny-gemma", "/data/emotions.jsonl", False),
        ({"preset": "smoke", "min_accuracy": 0.0, "max_steps": None}, "tiny-gemma", "/data/emotions.jsonl", False),
        ({"preset": "smoke", "min_accuracy": 0.45, "max_steps": None}, "tiny-gemma", "/data/mine.jsonl", False),
    ],
)
def test_results_written_before_invocation_are_judged_by_their_config(config, model, path, decides):
    result = cpu_result(config=config, model={"id": model}, dataset={"path": path})
    assert run_config.of_result(result).decides is decides


def test_measurements_never_flip_the_cell_and_have_their_own_status(tmp_path):
    """The H200 cell as it was: a smoke pass, a seed run that did not learn and random-weight speed runs; it
    read 'pass, flaky'."""
    db, summary = recorded(
        tmp_path,
        measurement("2026-12-02T22:01:00Z", "seed", "tiny-gemma"),
        measurement("2026-12-02T22:02:00Z", "seed", "/tmp/g2b"),
        measurement("2026-12-02T22:03:00Z", "throughput", "/tmp/g2b"),
        smoke("2026-12-02T22:04:00Z"),
        measurement("2026-12-02T22:05:00Z", "throughput", "/tmp/g2b", status="pass"),
    )
    assert (summary.status, summary.flaky, summary.run_count, summary.flips) == ("pass", False, 1, [])
    line = listed(db)
    assert (line["status"], line["flaky"], line["runs"], line["configuration"]) == (
        "pass",
        False,
        1,
        "smoke · tiny-gemma",
    )
    assert [(m["configuration"], m["status"], m["runs"], m["flips"]) for m in line["measurements"]] == [
        ("seed · tiny-gemma", "fail", 1, 0),
        ("seed · /tmp/g2b", "fail", 1, 0),
        ("throughput · /tmp/g2b", "pass", 2, 1),
    ]
    # a measurement configuration that flipped in one environment is flaky on its own line, never the cell
    assert [m["flaky"] for m in line["measurements"]] == [False, False, True]


def test_a_cell_with_measurements_only_has_no_verdict(tmp_path):
    db, summary = recorded(tmp_path, measurement("2026-12-02T22:01:00Z"))
    assert summary.status == "untested" and "no smoke · tiny-gemma run yet: 1 measurement(s)" in summary.note


def test_a_verdict_run_that_flips_still_makes_the_cell_flaky(tmp_path):
    _, summary = recorded(
        tmp_path,
        smoke("2026-12-02T10:00:00Z"),
        failed_result(
            "process_died",
            "killed",
            finished_at="2026-12-02T11:00:00Z",
            invocation=invocation(),
            versions=cpu_result()["versions"],
        ),
    )
    assert (summary.status, summary.flaky) == ("fail", True)


def test_the_latest_numbers_survive_an_interrupted_run(tmp_path):
    """A Ctrl-C'd run after a pass: the cell keeps the pass's samples/s and training table."""
    interrupted = cpu_result(
        status="error",
        error_class="interrupted",
        error="Ctrl-C",
        invocation=invocation(),
        finished_at="2026-12-02T11:00:00Z",
        metrics={"eval_before": {"accuracy": 0.143, "macro_f1": 0.03, "loss": 1.95}},
    )
    db, summary = recorded(tmp_path, smoke("2026-12-02T10:00:00Z"), interrupted)
    assert summary.status == "pass" and summary.latest_train_run["metrics"]["samples_per_s"] == 52.1
    site = tmp_path / "site"
    assert (
        CliRunner().invoke(main, ["report", "-o", str(site), "--db", str(db), "--no-recipes", "--no-results"]).exit_code
        == 0
    )
    page = (site / "cells" / f"{KEY}.html").read_text()
    assert "0.140 → 0.710" in page and "0.143 → -" not in page
    index = (site / "index.html").read_text()
    # the smoke run's 52.1 samples/s are not the cell's speed (only a `speed` preset run gives that)
    assert "52.1" not in index.split("<table", 1)[1]
    assert percent(None) == "–" and '<td class="num">–</td>' in index
    assert (percent(2.279e-5), percent(0.476), percent(0.0)) == ("0.0023%", "47.6%", "0.0%")


def test_the_cell_page_shows_measurements_and_the_commands(tmp_path):
    db, _ = recorded(
        tmp_path, smoke("2026-12-02T10:00:00Z"), measurement("2026-12-02T11:00:00Z", "seed", "google/gemma-2b")
    )
    site = tmp_path / "site"
    assert (
        CliRunner().invoke(main, ["report", "-o", str(site), "--db", str(db), "--no-recipes", "--no-results"]).exit_code
        == 0
    )
    page = (site / "cells" / f"{KEY}.html").read_text()
    recorded_command = re.search(r'<pre class="cmd" id="recorded-command">([^<]*)</pre>', page).group(1)
    assert recorded_command == "envbuild run workload --local --preset smoke"
    table = page.split('id="measurements"', 1)[1].split("</table>", 1)[0]
    assert "seed · google/gemma-2b" in table and "did_not_learn" in table
    assert "envbuild run workload --local --preset seed --model google/gemma-2b" in table
    history = page.split('id="history"', 1)[1]
    assert "measurement: fail" in history and "seed · google/gemma-2b" in history


def _in_terminal(args: list[str], columns: int) -> str:
    """Run `envbuild ARGS` with a pseudo-terminal as its stdout, COLUMNS wide; its output without colours."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from builder.cli import main; main()", *args],
        stdout=follower,
        stderr=follower,
        env={**env, "NO_COLOR": "1", "TERM": "xterm"},
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(leader)
    return re.sub(r"\x1b\[[0-9;]*m", "", b"".join(chunks).decode()).replace("\r", "")


def test_matrix_list_fits_80_columns_and_is_whole_when_piped(tmp_path):
    long_note = "eval accuracy after training 0.143 is below the pass bar 0.450 " * 3
    db, _ = recorded(
        tmp_path,
        smoke("2026-12-02T10:00:00Z"),
        measurement("2026-12-02T11:00:00Z", "seed", "google/gemma-2b", error=long_note.strip()),
    )
    shown = _in_terminal(["matrix", "list", "--db", str(db)], 80)
    lines = [line for line in shown.splitlines() if line.strip()]
    assert max(len(line) for line in lines) <= 80, shown
    header = lines[0].split()
    assert header[:4] == ["cell", "status", "runs", "last"] and "…" not in lines[0]
    row = next(line for line in lines if line.lstrip().startswith(KEY))
    assert row.split()[:4] == [KEY, "pass", "1", "2026-12-02"]
    assert any(line.lstrip().startswith("↳ seed · google/gemma-2b") and "fail" in line for line in lines)
    piped = CliRunner().invoke(main, ["matrix", "list", "--db", str(db)], catch_exceptions=False).output
    assert "…" not in piped and long_note.strip() in piped and "2026-12-02T10:00:00Z" in piped
    assert piped.splitlines()[0].split() == [
        "cell",
        "status",
        "runs",
        "flaky",
        "last",
        "pass",
        "class",
        "/",
        "note",
        "configuration",
        "builds",
        "attempts",
        "environment",
    ]
    wide = _in_terminal(["matrix", "list", "--wide", "--db", str(db)], 80)
    assert [line.rstrip() for line in wide.splitlines() if line.strip()] == piped.splitlines()


@pytest.mark.parametrize(
    "changes, label",
    [
        ({"overrides": {"max_steps": 5}}, "smoke · tiny-gemma · max_steps=5"),
        ({"overrides": {"min_accuracy": 0.0, "max_steps": 2}}, "smoke · tiny-gemma · max_steps=2 · min_accuracy=0.0"),
        (
            {"data": {"name": "mine.jsonl", "bundled": False, "sha256": "cd" * 32}},
            "smoke · tiny-gemma · data=mine.jsonl",
        ),
        ({"probes": False}, "smoke · tiny-gemma · no probes"),
        ({"preset": "seed", "overrides": {"lr": 0.001}}, "seed · tiny-gemma · lr=0.001"),
    ],
)
def test_a_measurement_label_names_every_override(tmp_path, changes, label):
    """A shortened run is never labelled like the verdict: the label names what differs, the same from the result
    as from the store's columns (what `matrix list` and the report read)."""
    result = cpu_result(invocation=invocation(**changes))
    assert run_config.of_result(result).label == label
    _, summary = recorded(tmp_path, result)
    assert summary.configurations == [label] and label != run_config.VERDICT_LABEL


def test_legacy_results_name_their_shortened_settings():
    result = cpu_result(
        config={"preset": "smoke", "min_accuracy": 0.0, "max_steps": 8},
        model={"id": "tiny-gemma"},
        dataset={"path": "/data/emotions.jsonl"},
    )
    assert run_config.of_result(result).label == "smoke · tiny-gemma · max_steps=8 · min_accuracy=0.0"


def test_many_or_long_overrides_keep_the_label_short():
    result = cpu_result(invocation=invocation(overrides={f"o{i}": "x" * 100 for i in range(7)}))
    label = run_config.of_result(result).label
    assert label.endswith("+3 more") and len(label) < 4 * (run_config.MAX_VALUE + 5) + 40


def test_max_steps_without_the_separator_reaches_the_workload_and_labels_the_run(tmp_path):
    """`envbuild run workload --local --max-steps 3` (no `--`): the workload gets the option, and the run is listed as
    the measurement `smoke · tiny-gemma · max_steps=3 ...`, never under the verdict's label."""
    out, db = tmp_path / "out", tmp_path / "m.db"
    ran = CliRunner().invoke(
        main,
        [
            "run",
            "workload",
            "--local",
            "--max-steps",
            "3",
            "--min-accuracy",
            "0",
            "--no-probes",
            "--out",
            str(out),
            "--db",
            str(db),
        ],
    )
    assert ran.exit_code == 0, ran.output
    assert json.loads((out / "result.json").read_text())["metrics"]["steps"] == 3
    line = listed(db)
    assert line["status"] == "untested"
    assert [m["configuration"] for m in line["measurements"]] == [
        "smoke · tiny-gemma · max_steps=3 · min_accuracy=0.0 · no probes"
    ]


def test_a_speed_run_on_its_own_synthetic_data_is_labelled_by_preset_and_shape():
    inv = invocation(
        preset="speed", model="gemma-2b-shape", data={"name": "synthetic", "bundled": False, "sha256": "cd" * 32}
    )
    config = run_config.of_result(cpu_result(invocation=inv))
    assert (config.label, config.decides) == ("speed · gemma-2b-shape", False)
    other = invocation(preset="smoke", data={"name": "synthetic", "bundled": False, "sha256": "cd" * 32})
    assert run_config.of_result(cpu_result(invocation=other)).label == "smoke · tiny-gemma · data=synthetic"
