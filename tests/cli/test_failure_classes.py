"""Every failure class with its literal verdict: a verdict about the environment (fail) or an attempt (the user's
input, the engine refusing, a stop). Checked three ways: a write into today's store, the upgrade of a schema-1
file (its migration takes the classes from verdict_rules, the one source), and real, freshly produced results
(a killed local run, a model that does not exist, a base image that does not exist, a bad build context)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from builder.store import verdict_rules
from builder.store.store import MatrixStore
from builder.store.summary import summarize
from builder.plan.cells import Cell
from matrix_fixtures import cpu_result
from tests.store.test_store import _store_of_commit

ENVBUILD = [sys.executable, "-c", "from builder.cli import main; main()"]
CELL = Cell(flavor="cpu", accel_version=None, torch="2.13", arch=None, python="3.11")
KEY = CELL.key

# (kind, error / failure class) -> the verdict column of `matrix show`; written out, never derived from the rules
RUN_CLASSES = {
    "interrupted": "attempt",
    "data_error": "attempt",
    "model_error": "attempt",
    "usage_error": "attempt",
    "input_error": "attempt",
    "container_error": "attempt",
    "did_not_train": "attempt",
    "process_died": "fail",
    "container_died": "fail",
    "oom_killed": "fail",
    "no_result": "fail",
    "invalid_result": "fail",
    "nan_loss": "fail",
    "did_not_learn": "fail",
    "probe_failure": "fail",
    "unsupported_family": "fail",
    "oom": "fail",
    "distributed_timeout": "fail",
    "exception": "fail",
    "slurm_timeout": "attempt",
    "slurm_node_fail": "attempt",
    "slurm_preempted": "attempt",
    "slurm_cancelled": "attempt",
    "slurm_lost": "attempt",
    "slurm_result_mismatch": "attempt",
}
BUILD_CLASSES = {
    "base_image_unavailable": "attempt",
    "build_context_error": "attempt",
    "interrupted": "attempt",
    "usage_error": "attempt",
    "compile_error": "fail",
    "network_pip_index": "fail",
    "dependency_conflict": "fail",
    "image_verify_failed": "fail",
    "unknown": "fail",
}
CASES = [("run", c, v) for c, v in RUN_CLASSES.items()] + [("build", c, v) for c, v in BUILD_CLASSES.items()]


def _record(store, kind: str, failure_class: str) -> None:
    if kind == "run":
        store.record_run(cpu_result(status="error", error_class=failure_class, error=f"a {failure_class}"))
    else:
        store.record_build(CELL, status="fail", failure_class=failure_class, error=f"a {failure_class}")


def _verdicts(db: Path) -> list[tuple[str, str | None]]:
    with MatrixStore.open(db, readonly=True) as store:
        (summary,) = summarize(store)
    return [(e.verdict, e.failure_class) for e in summary.events]


@pytest.mark.parametrize("kind, failure_class, verdict", CASES, ids=[f"{k}:{c}" for k, c, _ in CASES])
def test_each_class_is_what_the_rules_say_in_a_new_store(tmp_path, kind, failure_class, verdict):
    db = tmp_path / "m.db"
    with MatrixStore.open(db) as store:
        _record(store, kind, failure_class)
    shown = failure_class if kind == "run" else f"build:{failure_class}"
    assert _verdicts(db) == [(verdict, shown)]


def test_each_class_is_the_same_after_the_schema_1_upgrade(tmp_path):
    """A schema-1 file written by the last schema-1 envbuild, one row per class, then opened by this one."""
    old = _store_of_commit("3865b08", tmp_path)
    db = tmp_path / "m.db"
    with old.MatrixStore.open(db) as store:
        assert store.schema_version == 1
        for i, (kind, failure_class, _) in enumerate(CASES):
            at = f"2026-12-01T10:{i:02d}:00Z"
            if kind == "run":
                store.record_run(cpu_result(status="error", error_class=failure_class, error="x", finished_at=at))
            else:
                store.record_build(CELL, status="fail", failure_class=failure_class, error="x", created_at=at)
    with MatrixStore.open(db) as store:  # migrates
        pass
    conn = sqlite3.connect(db)
    counted = {("run", c): n for c, n in conn.execute("SELECT error_class, counts FROM runs")}
    counted |= {("build", c): n for c, n in conn.execute("SELECT failure_class, counts FROM builds")}
    assert {key: bool(n) for key, n in counted.items()} == {(k, c): v == "fail" for k, c, v in CASES}


def test_every_attempt_class_of_the_rules_has_its_written_verdict_here():
    """A class added to the rules without a literal expectation in this file fails here."""
    assert verdict_rules.RUN_ATTEMPT_CLASSES <= {c for c, v in RUN_CLASSES.items() if v == "attempt"}
    assert verdict_rules.BUILD_ATTEMPT_CLASSES <= {c for c, v in BUILD_CLASSES.items() if v == "attempt"}


def test_the_migration_and_the_writes_share_the_class_sets():
    from builder.store.store_schema import MIGRATIONS

    upgrade = MIGRATIONS[1]
    assert verdict_rules.sql_list(verdict_rules.RUN_ATTEMPT_CLASSES) in upgrade
    assert verdict_rules.sql_list(verdict_rules.BUILD_ATTEMPT_CLASSES) in upgrade
    with pytest.raises(ValueError):
        verdict_rules.sql_list(frozenset({"x'); DROP TABLE runs; --"}))


def envbuild(*args, cwd: Path, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*ENVBUILD, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout, env={**os.environ, **(env or {})}
    )


def listed(db: Path) -> dict:
    shown = envbuild("matrix", "list", "--json", "--db", str(db), cwd=db.parent)
    assert shown.returncode == 0, shown.stderr
    (line,) = json.loads(shown.stdout)
    return line


def test_a_killed_local_run_is_a_process_died_fail(tmp_path):
    """SIGKILL to the workload under `envbuild run workload --local`, fresh (not a frozen fixture)."""
    db = tmp_path / "m.db"
    proc = subprocess.Popen(
        [*ENVBUILD, "run", "workload", "--local", "--out", str(tmp_path / "out"), "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )
    seen = ""
    while "step " not in seen:
        line = proc.stdout.readline()
        assert line, seen
        seen += line
    (child,) = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    os.kill(int(child), signal.SIGKILL)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 1, output
    line = listed(db)
    assert (line["status"], line["failure_class"], line["runs"], line["attempts"]) == ("fail", "process_died", 1, 0)
    assert "next: envbuild report" not in output and f"details: envbuild matrix show {KEY}" in output


def test_a_model_that_does_not_exist_is_a_model_error_attempt(tmp_path):
    db = tmp_path / "m.db"
    run = envbuild(
        "run",
        "workload",
        "--local",
        "--model",
        "google/no-such-gemma-21",
        "--out",
        str(tmp_path / "out"),
        "--db",
        str(db),
        cwd=tmp_path,
        env={"HF_HUB_OFFLINE": "1"},
    )
    assert run.returncode == 1, run.stderr[-2000:]
    line = listed(db)
    assert (line["status"], line["runs"], line["attempts"]) == ("untested", 0, 1)
    assert line["note"] == "no verdict yet: 1 attempt(s), the last model_error"


@pytest.mark.docker
def test_a_base_image_that_does_not_exist_is_an_attempt(tmp_path, docker_engine):
    db = tmp_path / "m.db"
    build = envbuild(
        "image",
        "--flavor",
        "cpu",
        "--torch",
        "2.13",
        "--base-image",
        "envbuild-local/no-such-base:21",
        "-o",
        str(tmp_path / "ctx"),
        "--network",
        "host",
        "--db",
        str(db),
        cwd=tmp_path,
    )
    assert build.returncode == 1, build.stderr[-2000:]
    line = listed(db)
    assert (line["status"], line["builds"], line["attempts"]) == ("untested", 1, 1)
    assert line["note"] == "no verdict yet: 1 attempt(s), the last build:base_image_unavailable"


@pytest.mark.docker
def test_a_bad_context_is_a_build_context_error_attempt(tmp_path, docker_engine):
    from repo import LOCAL_BASE

    ctx, db = tmp_path / "ctx", tmp_path / "m.db"
    rendered = envbuild(
        "render", "--flavor", "cpu", "--torch", "2.13", "--base-image", LOCAL_BASE, "-o", str(ctx), cwd=tmp_path
    )
    assert rendered.returncode == 0, rendered.stderr
    (ctx / "common" / "install_base.sh").unlink()  # the Dockerfile COPYs it
    build = envbuild("image", "--context", str(ctx), "--network", "host", "--db", str(db), cwd=tmp_path)
    assert build.returncode == 1, build.stderr[-2000:]
    line = listed(db)
    assert (line["status"], line["builds"], line["attempts"]) == ("untested", 1, 1)
    assert line["note"] == "no verdict yet: 1 attempt(s), the last build:build_context_error"
