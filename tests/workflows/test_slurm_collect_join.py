"""`slurm collect` joins a task's result to the task it submitted. No cluster: the
submission record is the one `plan` makes, `sacct` is a stand-in on PATH printing a recorded sacct line (the
format of tests/engine/test_slurm_rules.py's, from .ci/hpc_cluster.sh's cluster), and the task directories hold what a
hostile container could leave there. A result that does not belong to its task is an attempt with a reason,
never a verdict, and nothing is written outside the attempts folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.engine.slurm import plan, Site
from builder.store.attempts import new_attempt
from builder.store.store import MatrixStore
from repo import REPO_ROOT
from tests.engine.test_slurm_injection import make_sif

CPU_RESULT = REPO_ROOT / "results" / "cpu-torch2.13-py3.11" / "container-smoke" / "result.json"
H200_RESULT = REPO_ROOT / "results" / "cuda13.0-torch2.11-sm_90-py3.12" / "local-smoke-tiny-gemma" / "result.json"
JOB = "7"


def submitted(tmp_path: Path, monkeypatch, state: str):
    """A submission of one task (job 7), and `sacct` answering `state` for it."""
    sif = make_sif(tmp_path / "sif")
    sub = plan("0123456789ab", [sif], {"default": []}, Site(results_dir=tmp_path / "results"), "2026-12-04T00:00:00Z")
    sub.jobs.append({"job_id": JOB, "tasks": [0]})
    db = tmp_path / "m.db"
    attempt = new_attempt(db, "slurm", sub.id)
    (attempt / "submission.json").write_text(sub.model_dump_json(indent=2))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sacct").write_text(
        f"#!/bin/sh\necho '{JOB}_0|{state}|0:0|2026-12-04T09:41:47|2026-12-04T09:43:09|hpc-node0'\n"
    )
    (bin_dir / "sacct").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    task = sub.tasks[0]
    task.out_dir.mkdir(parents=True)
    return sub, task, db


def completed_result(sub, task, source: Path = CPU_RESULT, state: str = "COMPLETED", **changes) -> dict:
    """A result.json as `finish_task` completes it for this task, with `changes`."""
    result = json.loads(source.read_text())
    result["image"] = dict(
        sub.images[task.sif_sha256], environment="apptainer", sif={"path": str(task.sif), "sha256": task.sif_sha256}
    )
    result["host"] = {
        "hostname": "hpc-node0",
        "slurm": {"job_id": JOB, "task": 0, "state": state, "exit_code": "0:0", "config": "default"},
    }
    for key, value in changes.items():
        result[key] = value
    return result


def collect(db: Path):
    return CliRunner().invoke(main, ["slurm", "collect", JOB, "--db", str(db)], env={"COLUMNS": "240"})


def recorded(db: Path) -> list[dict]:
    with MatrixStore.open(db, readonly=True) as store:
        return store.runs()


def test_a_matching_completed_result_is_recorded_as_it_is(tmp_path, monkeypatch):
    """The positive control: the join accepts the task's own result."""
    sub, task, db = submitted(tmp_path, monkeypatch, "COMPLETED")
    (task.out_dir / "result.json").write_text(json.dumps(completed_result(sub, task)))
    out = collect(db)
    assert out.exit_code == 0, out.output
    [run] = recorded(db)
    assert (run["result"]["status"], run["counts"], run["cell_key"]) == ("pass", True, task.cell)


def _refused(db: Path, task, words: str) -> None:
    [run] = recorded(db)
    assert run["result"]["status"] == "error" and run["result"]["error_class"] == "slurm_result_mismatch"
    assert not run["counts"] and run["cell_key"] == task.cell and words in run["result"]["error"]
    assert (task.out_dir / "result.refused.json").is_file()


def test_a_timed_out_task_with_a_pass_for_another_cell_is_an_attempt_not_a_verdict(tmp_path, monkeypatch):
    """The reproduction: a cpu-SIF task Slurm ended as TIMEOUT, a pass for cuda13.0-torch2.11-sm_90-py3.12."""
    sub, task, db = submitted(tmp_path, monkeypatch, "TIMEOUT")
    forged = completed_result(sub, task, H200_RESULT)
    forged["image"]["manifest"] = (
        json.loads(H200_RESULT.read_text())["image"]["manifest"]
        if (json.loads(H200_RESULT.read_text()).get("image") or {}).get("manifest")
        else None
    )
    forged["image"] = {k: v for k, v in forged["image"].items() if v is not None}
    (task.out_dir / "result.json").write_text(json.dumps(forged))
    out = collect(db)
    assert out.exit_code == 1, out.output
    _refused(db, task, "but task 0 ran cpu-torch2.13-py3.11")
    assert "slurm_result_mismatch" in out.output and "verdict: pass" not in out.output


@pytest.mark.parametrize(
    "change, words",
    [
        ({"host": {"slurm": {"job_id": "8", "task": 0, "state": "COMPLETED"}}}, "not a job of task 0"),
        ({"host": {"slurm": {"job_id": JOB, "task": 1, "state": "COMPLETED"}}}, "not a job of task 0"),
        ({"host": {"slurm": {"job_id": JOB, "task": False, "state": "COMPLETED"}}}, "not a job of task 0"),  # == 0
        ({"host": {"slurm": {"job_id": JOB, "task": 0.0, "state": "COMPLETED"}}}, "not a job of task 0"),
        ({"image": {"sif": {"sha256": "0" * 64}}}, "is not the one task 0 ran"),
    ],
)
def test_a_result_of_another_job_task_or_sif_is_refused(tmp_path, monkeypatch, change, words):
    sub, task, db = submitted(tmp_path, monkeypatch, "COMPLETED")
    result = completed_result(sub, task)
    for key, value in change.items():
        if key == "image":
            result["image"]["sif"] = value["sif"]
        else:
            result[key] = value
    (task.out_dir / "result.json").write_text(json.dumps(result))
    assert collect(db).exit_code == 1
    _refused(db, task, words)


def test_a_pass_for_a_task_slurm_timed_out_is_refused(tmp_path, monkeypatch):
    sub, task, db = submitted(tmp_path, monkeypatch, "TIMEOUT")
    (task.out_dir / "result.json").write_text(json.dumps(completed_result(sub, task, state="TIMEOUT")))
    assert collect(db).exit_code == 1
    _refused(db, task, "but Slurm ended the task as TIMEOUT")


def test_a_run_id_that_climbs_out_writes_nothing_outside_the_attempts(tmp_path, monkeypatch):
    sub, task, db = submitted(tmp_path, monkeypatch, "COMPLETED")
    (task.out_dir / "result.json").write_text(json.dumps(completed_result(sub, task, run_id="../../../zz/y")))
    before = {p for p in tmp_path.rglob("*") if "envbuild-attempts" not in p.parts and "results" not in p.parts}
    out = collect(db)
    assert out.exit_code == 1 and "Traceback" not in out.output, out.output
    _refused(db, task, "run_id")
    after = {p for p in tmp_path.rglob("*") if "envbuild-attempts" not in p.parts and "results" not in p.parts}
    assert after - before == {db, *(p for p in after if p.name.startswith("m.db"))}
    assert not any(p.name == "zz" for p in tmp_path.parent.rglob("zz"))


def test_an_error_class_that_looks_like_markup_is_shown_as_text(tmp_path, monkeypatch):
    sub, task, db = submitted(tmp_path, monkeypatch, "COMPLETED")
    result = completed_result(sub, task, status="fail", error_class="[/]", error="x")
    (task.out_dir / "result.json").write_text(json.dumps(result))
    out = collect(db)
    assert out.exit_code == 1 and out.exception is None or isinstance(out.exception, SystemExit), out.output
    assert "[/]" in out.output and "MarkupError" not in out.output
    [run] = recorded(db)
    assert run["result"]["error_class"] == "[/]"


def test_a_duplicate_key_or_a_fifo_result_is_refused_without_hanging(tmp_path, monkeypatch):
    import os

    sub, task, db = submitted(tmp_path, monkeypatch, "COMPLETED")
    text = json.dumps(completed_result(sub, task)).replace('"status": "pass"', '"status": "fail", "status": "pass"')
    (task.out_dir / "result.json").write_text(text)
    assert collect(db).exit_code == 1
    [run] = recorded(db)
    assert run["result"]["status"] == "error" and "duplicate key 'status'" in run["result"]["error"]
    os.mkfifo(task.out_dir / "fifo")
    (task.out_dir / "result.json").unlink()
    os.symlink(task.out_dir / "fifo", task.out_dir / "result.json")
    os.symlink("/dev/zero", task.out_dir / "container.log")
    assert collect(db).exit_code == 1


def test_a_result_whose_run_id_the_matrix_holds_with_other_content_is_exit_2_and_left_out(tmp_path, monkeypatch):
    """The matrix already holds the task's run id with other content: exit 2 naming the run and the import that
    takes the task's result instead; the stored run stays, and no attempt folder is kept for the task."""
    sub, task, db = submitted(tmp_path, monkeypatch, "COMPLETED")
    result = completed_result(sub, task)
    (task.out_dir / "result.json").write_text(json.dumps(result))
    with MatrixStore.open(db) as store:
        store.record_run({**result, "error": "another copy's words"})
    folders = sorted(p.name for p in (tmp_path / "envbuild-attempts").iterdir())
    out = collect(db)
    assert out.exit_code == 2 and "Traceback" not in out.output, out.output
    assert f"already holds run {result['run_id']} with other content" in " ".join(out.output.split())
    assert "envbuild matrix import" in out.output and "--replace" in out.output and "left out: conflict" in out.output
    [run] = recorded(db)
    assert run["result"]["error"] == "another copy's words"
    assert sorted(p.name for p in (tmp_path / "envbuild-attempts").iterdir()) == folders
