"""Merged attempt folders keep their run's identity: a row merged from another matrix file
never adopts a folder that already holds another run's attempt, so a report never publishes one run's log
under another run. Real SQLite files, real attempt folders."""

from __future__ import annotations

import json
from pathlib import Path

from builder.store.store import MatrixStore
from matrix_fixtures import cpu_result

NAME = "envbuild-attempts/20261202T220110Z-run-r1"


def job_file(folder: Path, result: dict, log: str) -> Path:
    """A CI job's matrix file with one run whose attempt folder (its own attempt.json and log) is NAME."""
    (folder / NAME).mkdir(parents=True)
    (folder / NAME / "attempt.json").write_text(json.dumps({"kind": "run", "id": result["run_id"]}))
    (folder / NAME / "container.log").write_text(log)
    with MatrixStore.open(folder / "matrix.db") as store:
        store.record_run(result, attempt_dir=NAME)
    return folder / "matrix.db"


def test_a_second_run_claiming_an_adopted_folder_gets_none(tmp_path):
    first, second = cpu_result(), cpu_result()
    a = job_file(tmp_path / "a", first, "run one's log\n")
    b = job_file(tmp_path / "b", second, "run two's log\n")
    with MatrixStore.open(tmp_path / "m.db") as store:
        store.merge_from(a)
        store.merge_from(b)
        folders = {r["result"]["run_id"]: r["attempt_dir"] for r in store.runs()}
    assert folders == {first["run_id"]: NAME, second["run_id"]: None}
    assert (tmp_path / NAME / "container.log").read_text() == "run one's log\n"


def test_the_same_run_merged_again_into_a_fresh_row_keeps_its_own_folder(tmp_path):
    run = cpu_result()
    a = job_file(tmp_path / "a", run, "its log\n")
    with MatrixStore.open(tmp_path / "m.db") as store:
        store.merge_from(a)
    with MatrixStore.open(tmp_path / "m.db") as store:  # replaced: the row is new, the folder is its own
        changed = dict(run, error="x") if run.get("status") != "pass" else dict(run, wall_time_s=1.0)
        (tmp_path / "a" / "matrix.db").unlink()
        (tmp_path / "a" / "matrix.db-wal").unlink(missing_ok=True)
        with MatrixStore.open(tmp_path / "a" / "matrix.db") as job:
            job.record_run(changed, attempt_dir=NAME)
        store.merge_from(a, replace=True)
        [row] = store.runs()
    assert row["attempt_dir"] == NAME
