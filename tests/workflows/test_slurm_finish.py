"""What `slurm collect` makes of a finished task folder, without a cluster: the folder holds what the workload
leaves in /out (a recorded result.json of the cpu cell, without the blocks envbuild adds) and container.log, the
task's end state is a sacct line as .ci/hpc_cluster.sh's Slurm prints it, and the submission is the one `plan`
makes. The whole path, submit -> job.sbatch run by bash -> collect, runs once with stand-ins on PATH."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.engine.slurm import Site, SlurmError, end_class, parse_sacct, plan
from builder.workflows.slurm_collect import MISMATCH_CLASS, collect_job, finish_task
from builder.store.store import MatrixStore
from repo import REPO_ROOT
from tests.engine.test_slurm_injection import make_sif
from tests.engine.test_slurm_script import argv_of, stand_ins

RECORDED = REPO_ROOT / "results" / "cpu-torch2.13-py3.11" / "container-smoke" / "result.json"
JOB, CELL = "7", "cpu-torch2.13-py3.11"


def workload_result(**changes) -> dict:
    """The result.json the workload itself writes (no `host` or `image`: envbuild adds those)."""
    result = {k: v for k, v in json.loads(RECORDED.read_text()).items() if k not in ("host", "image")}
    return {**result, **changes}


def one_task(tmp_path: Path, tasks: int = 1, jobs: list[dict] | None = None):
    sub = plan(
        "0123456789ab",
        [make_sif(tmp_path / "sif")],
        {f"c{i}": [] for i in range(tasks)},
        Site(results_dir=tmp_path / "results"),
        "2026-12-04T00:00:00Z",
    )
    sub.jobs.extend(jobs or [{"job_id": JOB, "tasks": list(range(tasks))}])
    return sub


def state_of(line: str, job: str = JOB):
    return next(iter(parse_sacct(line, job).values()))


def test_the_workloads_own_result_is_completed_with_host_and_image_and_kept_as_it_is(tmp_path):
    sub = one_task(tmp_path)
    task = sub.tasks[0]
    task.out_dir.mkdir(parents=True)
    (task.out_dir / "result.json").write_text(json.dumps(workload_result()))
    state = state_of("7_0|COMPLETED|0:0|2026-12-04T09:41:47|2026-12-04T09:43:09|hpc-node0")
    result = finish_task(sub, task, state, JOB)
    assert result["status"] == "pass" and result["started_at"] == workload_result()["started_at"]
    assert result["host"] == {
        "hostname": "hpc-node0",
        "slurm": {"job_id": JOB, "task": 0, "state": "COMPLETED", "exit_code": "0:0", "config": "c0"},
    }
    assert result["image"]["environment"] == "apptainer"
    assert result["image"]["sif"] == {"path": str(task.sif), "sha256": task.sif_sha256}
    assert result["image"]["manifest"]["cell_key"] == CELL
    written = (task.out_dir / "result.json").read_bytes()
    assert json.loads(written) == result
    assert finish_task(sub, task, state, JOB) == result  # collecting twice: read back, nothing new
    assert (task.out_dir / "result.json").read_bytes() == written


def test_a_task_without_a_result_is_an_error_timed_by_slurm(tmp_path):
    sub = one_task(tmp_path)
    task = sub.tasks[0]
    state = state_of("7_0|TIMEOUT|0:0|2026-12-04T09:41:47|2026-12-04T09:43:09|hpc-node0")
    result = finish_task(sub, task, state, JOB)
    assert (result["status"], result["error_class"]) == ("error", "slurm_timeout")
    assert result["error"] == "Slurm ended the task as TIMEOUT (exit code 0:0); the workload wrote no result.json"
    assert (result["started_at"], result["finished_at"], result["wall_time_s"]) == (
        "2026-12-04T09:41:47Z",
        "2026-12-04T09:43:09Z",
        82.0,
    )
    assert result["versions"]["python"] == "3.11" and result["versions"]["torch"] == "2.13"
    assert result["host"]["slurm"]["state"] == "TIMEOUT" and task.out_dir.is_dir()
    assert json.loads((task.out_dir / "result.json").read_text()) == result


def test_a_task_slurm_never_started_takes_its_end_as_its_start(tmp_path):
    sub = one_task(tmp_path)
    started = finish_task(sub, sub.tasks[0], state_of("7_0|NODE_FAIL|0:0|2026-12-04T09:41:47|Unknown|"), JOB)
    assert started["started_at"] == started["finished_at"] == "2026-12-04T09:41:47Z"
    assert started["host"]["hostname"] is None and started["error_class"] == "slurm_node_fail"


def test_the_workloads_bad_input_line_makes_a_usage_error(tmp_path):
    sub = one_task(tmp_path)
    task = sub.tasks[0]
    task.out_dir.mkdir(parents=True)
    (task.out_dir / "container.log").write_text(
        "# envbuild: task 0 of job 7 on hpc-node0\n[workload] bad input: --data /data/x.jsonl: no such file\n"
    )
    result = finish_task(sub, task, state_of("7_0|FAILED|2:0|2026-12-04T09:41:47|2026-12-04T09:41:50|n0"), JOB)
    assert (result["error_class"], result["error"]) == (
        "usage_error",
        "the workload refused its input (exit code 2; see container.log); the workload wrote no result.json",
    )


def test_a_log_that_is_no_plain_file_is_not_read(tmp_path):
    sub = one_task(tmp_path)
    task = sub.tasks[0]
    task.out_dir.mkdir(parents=True)
    (task.out_dir / "container.log").symlink_to("/dev/zero")
    result = finish_task(sub, task, state_of("7_0|FAILED|2:0|2026-12-04T09:41:47|2026-12-04T09:41:50|n0"), JOB)
    assert result["error_class"] == "container_died"


@pytest.mark.parametrize(
    "state, code, log, expected",
    [
        (
            "FAILED",
            "2:0",
            "nothing of the workload\n",
            ("container_died", "Slurm ended the task as FAILED (exit code 2:0)"),
        ),
        (
            "FAILED",
            "1:0",
            "[workload] bad input: --seed x\n",
            ("container_died", "Slurm ended the task as FAILED (exit code 1:0)"),
        ),
        (
            "FAILED",
            "12:0",
            "[workload] bad input: --seed x\n",
            ("container_died", "Slurm ended the task as FAILED (exit code 12:0)"),
        ),
        (
            "FAILED",
            "3:0",
            "[workload] bad input: --seed x\n",
            ("container_died", "Slurm ended the task as FAILED (exit code 3:0)"),
        ),
        (
            "CANCELLED",
            "2:0",
            "[workload] bad input: --seed x\n",
            ("slurm_cancelled", "Slurm ended the task as CANCELLED (exit code 2:0)"),
        ),
        (
            "OUT_OF_MEMORY",
            "2:0",
            "[workload] bad input: --seed x\n",
            ("oom_killed", "Slurm ended the task as OUT_OF_MEMORY (exit code 2:0)"),
        ),
        ("COMPLETED", "0:0", "[workload] bad input: --seed x\n", (None, "")),
    ],
)
def test_only_a_failed_exit_2_with_the_bad_input_line_is_a_usage_error(state, code, log, expected):
    assert end_class(state_of(f"7_0|{state}|{code}|||n0"), log) == expected


def test_an_interrupted_workload_takes_the_class_of_the_end_state_that_stopped_it(tmp_path):
    sub = one_task(tmp_path)
    task = sub.tasks[0]
    task.out_dir.mkdir(parents=True)
    (task.out_dir / "result.json").write_text(
        json.dumps(workload_result(status="error", error_class="interrupted", error="stopped by SIGTERM after step 3"))
    )
    result = finish_task(
        sub, task, state_of("7_0|CANCELLED by 2300|0:15|2026-12-04T09:41:47|2026-12-04T09:41:50|n0"), JOB
    )
    assert (result["status"], result["error_class"]) == ("error", "slurm_cancelled")
    assert result["error"] == (
        "Slurm ended the task as CANCELLED (exit code 0:15); the workload reported: stopped by SIGTERM after step 3"
    )
    assert json.loads((task.out_dir / "result.json").read_text()) == result


def test_an_interrupted_workload_of_a_completed_task_stays_interrupted(tmp_path):
    sub = one_task(tmp_path)
    task = sub.tasks[0]
    task.out_dir.mkdir(parents=True)
    (task.out_dir / "result.json").write_text(
        json.dumps(workload_result(status="error", error_class="interrupted", error="stopped by SIGTERM after step 3"))
    )
    result = finish_task(sub, task, state_of("7_0|COMPLETED|0:0|2026-12-04T09:41:47|2026-12-04T09:41:50|n0"), JOB)
    assert (result["error_class"], result["error"]) == ("interrupted", "stopped by SIGTERM after step 3")


def test_a_verdict_the_workload_wrote_before_its_time_ran_out_stays_its_verdict(tmp_path):
    sub = one_task(tmp_path)
    task = sub.tasks[0]
    task.out_dir.mkdir(parents=True)
    (task.out_dir / "result.json").write_text(
        json.dumps(workload_result(status="fail", error_class="did_not_learn", error="eval accuracy 0.10 < 0.99"))
    )
    result = finish_task(sub, task, state_of("7_0|TIMEOUT|0:0|2026-12-04T09:41:47|2026-12-04T09:43:09|n0"), JOB)
    assert (result["status"], result["error_class"]) == ("fail", "did_not_learn")


def test_a_task_directory_that_cannot_be_made_is_a_slurm_error(tmp_path):
    (tmp_path / "results").write_text("a file where the shared directory should be")
    sub = plan(
        "0123456789ab",
        [make_sif(tmp_path / "sif")],
        {"a": []},
        Site(results_dir=tmp_path / "results"),
        "2026-12-04T00:00:00Z",
    )
    with pytest.raises(SlurmError, match="cannot write the task directory .*Not a directory"):
        finish_task(sub, sub.tasks[0], state_of("7_0|TIMEOUT|0:0|||n0"), JOB)


def finished(sub, task, state: str, job: str = JOB, **changes) -> dict:
    """The result.json `finish_task` wrote for `task` under `job`, as it lies in the task's folder."""
    result = workload_result(**changes)
    result["image"] = dict(
        sub.images[task.sif_sha256], environment="apptainer", sif={"path": str(task.sif), "sha256": task.sif_sha256}
    )
    result["host"] = {
        "hostname": "n0",
        "slurm": {"job_id": job, "task": task.index, "state": state, "exit_code": "0:0", "config": task.config},
    }
    task.out_dir.mkdir(parents=True, exist_ok=True)
    (task.out_dir / "result.json").write_text(json.dumps(result))
    return result


@pytest.mark.parametrize(
    "said, slurm_state, status",
    [
        ("FAILED", "COMPLETED", "fail"),  # the result claims another end than Slurm saw, either way round
        ("COMPLETED", "FAILED", "fail"),
        ("TIMEOUT", "TIMEOUT", "pass"),  # a pass for a task Slurm did not complete (states after and before
        ("CANCELLED", "CANCELLED", "pass"),  # COMPLETED in the alphabet)
    ],
)
def test_a_result_that_disagrees_with_slurm_is_refused(tmp_path, said, slurm_state, status):
    job = "31337"  # a job id as sacct prints it, read back from JSON: compared by value
    sub = one_task(tmp_path, jobs=[{"job_id": job, "tasks": [0]}])
    task = sub.tasks[0]
    changes = {} if status == "pass" else {"status": status, "error_class": "did_not_learn", "error": "x"}
    finished(sub, task, said, job=job, **changes)
    result = finish_task(sub, task, state_of(f"{job}_0|{slurm_state}|0:0|||n0", job), job)
    assert (result["status"], result["error_class"]) == ("error", MISMATCH_CLASS)
    assert f"it says '{said}' / {status}, but Slurm ended the task as {slurm_state}" in result["error"]
    assert (task.out_dir / "result.refused.json").is_file()


@pytest.mark.parametrize("written_by, collected", [("7", "8"), ("8", "7")])
def test_the_result_another_job_of_the_task_wrote_is_read_back_as_it_is(tmp_path, written_by, collected):
    """Task 0 ran in jobs 7 and 8 (a resubmission); the folder holds the result one of them finished with, and
    the task is collected under the other: that result stands, whatever the other job's state."""
    sub = one_task(tmp_path, jobs=[{"job_id": "7", "tasks": [0]}, {"job_id": "8", "tasks": [0]}])
    task = sub.tasks[0]
    earlier = finished(sub, task, "TIMEOUT", job=written_by, status="fail", error_class="did_not_learn", error="x")
    result = finish_task(sub, task, state_of(f"{collected}_0|COMPLETED|0:0|||n0", collected), collected)
    assert result["host"]["slurm"] == earlier["host"]["slurm"] and result["status"] == "fail"


def test_a_fail_of_a_task_slurm_timed_out_is_its_own_result(tmp_path):
    job = "31337"
    sub = one_task(tmp_path, jobs=[{"job_id": job, "tasks": [0]}])
    task = sub.tasks[0]
    own = finished(sub, task, "TIMEOUT", job=job, status="fail", error_class="did_not_learn", error="x")
    result = finish_task(sub, task, state_of(f"{job}_0|TIMEOUT|0:0|||n0", job), job)
    assert (result["status"], result["error_class"], result["host"]) == ("fail", "did_not_learn", own["host"])


def test_long_values_of_a_refused_result_are_shown_cut(tmp_path):
    sub = one_task(tmp_path)
    task = sub.tasks[0]
    result = finished(sub, task, "COMPLETED")
    result["host"]["slurm"]["job_id"] = "9" * 50
    (task.out_dir / "result.json").write_text(json.dumps(result))
    refused = finish_task(sub, task, state_of("7_0|COMPLETED|0:0|||n0"), JOB)
    assert f"it names job {repr('9' * 50)[:40]} task 0, not a job of task 0" in refused["error"]
    result = finished(sub, task, "COMPLETED")
    result["image"]["sif"]["sha256"] = "f" * 100
    (task.out_dir / "result.json").write_text(json.dumps(result))
    refused = finish_task(sub, task, state_of("7_0|COMPLETED|0:0|||n0"), JOB)
    assert f"its SIF sha256 {'f' * 64} is not the one task 0 ran" in refused["error"]


@pytest.mark.parametrize("field, value", [("cell", "../../etc"), ("out_dir", "/tmp/a b"), ("index", -1)])
def test_collect_refuses_a_damaged_submission_record(tmp_path, field, value):
    sub = one_task(tmp_path)
    db = tmp_path / "m.db"
    from builder.store.attempts import new_attempt

    record = json.loads(sub.model_dump_json())
    record["tasks"][0][field] = value
    (new_attempt(db, "slurm", sub.id) / "submission.json").write_text(json.dumps(record))
    out = CliRunner().invoke(main, ["slurm", "collect", JOB, "--db", str(db)])
    assert out.exit_code == 2 and "is not a valid submission record" in out.output, out.output


def test_collect_refuses_a_submission_whose_results_dir_is_no_safe_path(tmp_path):
    sub = one_task(tmp_path)
    db = tmp_path / "m.db"
    from builder.store.attempts import new_attempt

    record = json.loads(sub.model_dump_json())
    record["results_dir"] = "/tmp/a:/root"
    (new_attempt(db, "slurm", sub.id) / "submission.json").write_text(json.dumps(record))
    out = CliRunner().invoke(main, ["slurm", "collect", JOB, "--db", str(db)])
    assert out.exit_code == 2 and "is not a valid submission record" in out.output, out.output


@pytest.mark.parametrize("cell", ["cpu-torch2.12-py3.11", "cpu-torch2.14-py3.11"])
def test_a_result_naming_another_cell_is_refused_whichever_way_it_sorts(tmp_path, cell):
    sub = one_task(tmp_path)
    task = sub.tasks[0]
    result = finished(sub, task, "COMPLETED")
    torch = cell.split("-")[1].removeprefix("torch")
    result["image"]["manifest"] = {
        **result["image"]["manifest"],
        "cell_key": cell,
        "cell": {**result["image"]["manifest"]["cell"], "torch": torch},
    }
    (task.out_dir / "result.json").write_text(json.dumps(result))
    refused = finish_task(sub, task, state_of("7_0|COMPLETED|0:0|||n0"), JOB)
    assert refused["error_class"] == MISMATCH_CLASS
    assert f"it names cell {cell}, but task 0 ran {CELL}" in refused["error"]


def test_a_result_of_an_earlier_task_number_is_refused(tmp_path):
    sub = one_task(tmp_path, tasks=2)
    finished(sub, sub.tasks[0], "COMPLETED")
    task = sub.tasks[1]
    (task.out_dir).mkdir(parents=True)
    (task.out_dir / "result.json").write_bytes((sub.tasks[0].out_dir / "result.json").read_bytes())
    refused = finish_task(sub, task, state_of("7_1|COMPLETED|0:0|||n0"), JOB)
    assert refused["error_class"] == MISMATCH_CLASS
    assert "it names job '7' task 0, not a job of task 1" in refused["error"]


def test_a_result_the_schema_refuses_is_refused_with_the_reason_cut_at_300_characters(tmp_path):
    from builder.store.store import InvalidResultError, validate_result

    sub = one_task(tmp_path)
    task = sub.tasks[0]
    metrics = {**workload_result()["metrics"], "a" * 200: {"b" * 201: 1}}  # a key too long, under a long key
    bad = finished(sub, task, "COMPLETED", metrics=metrics)
    with pytest.raises(InvalidResultError) as schema:
        validate_result(bad)
    assert len(str(schema.value)) > 300
    refused = finish_task(sub, task, state_of("7_0|COMPLETED|0:0|||n0"), JOB)
    assert refused["error"].startswith(f"the task's result.json was refused: {str(schema.value)[:300]};")


def test_a_result_without_a_sif_block_is_refused(tmp_path):
    sub = one_task(tmp_path)
    task = sub.tasks[0]
    result = finished(sub, task, "COMPLETED")
    del result["image"]["sif"]
    (task.out_dir / "result.json").write_text(json.dumps(result))
    refused = finish_task(sub, task, state_of("7_0|COMPLETED|0:0|||n0"), JOB)
    assert "its SIF sha256 None is not the one task 0 ran" in refused["error"]


def test_the_join_holds_for_task_numbers_past_256(tmp_path):
    """Task numbers as JSON gives them back are compared by value (a 300-task array is a normal sweep)."""
    sub = one_task(tmp_path, tasks=301)
    task = sub.tasks[300]
    own = finished(sub, task, "COMPLETED")
    result = finish_task(sub, task, state_of("7_300|COMPLETED|0:0|||n0"), JOB)
    assert result["status"] == "pass" and result["host"] == own["host"]


def test_submit_run_and_collect_through_the_cli_and_a_real_bash(tmp_path, monkeypatch):
    """`slurm submit` hands job.sbatch to sbatch; bash runs its task 0 as Slurm would, the apptainer stand-in
    writing the workload's result into the /out bind; `slurm collect` records it from sacct's answer."""
    bin_dir, record = stand_ins(tmp_path, "sbatch", "sacct")
    (bin_dir / "apptainer").write_text(f"""#!/bin/bash
printf '%s\\0' "$@" > "$RECORD_DIR/apptainer.argv"
for word in "$@"; do case "$word" in *:/out) out=${{word%:/out}} ;; esac; done
cp {tmp_path / "own.json"} "$out/result.json" && echo '[workload] pass'
""")
    (bin_dir / "apptainer").chmod(0o755)
    (tmp_path / "own.json").write_text(json.dumps(workload_result()))
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("RECORD_DIR", str(record))
    monkeypatch.setenv("REPLY_TEXT", "31;cluster\n")
    (tmp_path / "results").mkdir()
    db = tmp_path / "m.db"
    submitted = CliRunner().invoke(
        main,
        [
            "slurm",
            "submit",
            "--sif",
            str(make_sif(tmp_path / "sif")),
            "--results-dir",
            str(tmp_path / "results"),
            "--site-file",
            str(tmp_path / "none.toml"),
            "--db",
            str(db),
        ],
    )
    assert submitted.exit_code == 0, submitted.output
    assert submitted.stdout == "31\n"
    [script] = list((tmp_path / "envbuild-attempts").glob("*-slurm-*/job.sbatch"))
    assert (record / "sbatch.stdin").read_text() == script.read_text()
    saved = json.loads(script.with_name("submission.json").read_text())
    assert (saved["schema_version"], saved["jobs"]) == (1, [{"job_id": "31", "tasks": [0]}])

    ran = subprocess.run(
        ["bash", str(script)],
        env={
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "SLURM_ARRAY_TASK_ID": "0",
            "SLURM_ARRAY_JOB_ID": "31",
            "RECORD_DIR": str(record),
        },
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    assert argv_of(record, "apptainer")[-5:] == ["-m", "workload", "train", "--out", "/out"]

    monkeypatch.setenv("REPLY_TEXT", "31_0|COMPLETED|0:0|2026-12-04T09:41:47|2026-12-04T09:43:09|hpc-node0\n")
    collected = CliRunner().invoke(main, ["slurm", "collect", "31", "--db", str(db)])
    assert collected.exit_code == 0, collected.output
    assert argv_of(record, "sacct")[:2] == ["-j", "31"]
    with MatrixStore.open(db, readonly=True) as store:
        [run] = store.runs()
    assert (run["cell_key"], run["result"]["status"], run["counts"]) == (CELL, "pass", True)
    assert run["result"]["host"]["slurm"] == {
        "job_id": "31",
        "task": 0,
        "state": "COMPLETED",
        "exit_code": "0:0",
        "config": "default",
    }


def test_the_runtime_the_node_named_goes_into_the_result(tmp_path):
    sub = one_task(tmp_path)
    task = sub.tasks[0]
    task.out_dir.mkdir(parents=True)
    (task.out_dir / "result.json").write_text(json.dumps(workload_result()))
    (task.out_dir / "container.log").write_text(
        "# envbuild: task 0 of job 7 on n0\n# envbuild: runtime: singularity-ce version 4.1.0-jammy\n"
        "[workload] training\n# envbuild: runtime: apptainer version 9.9.9\n"
    )  # the workload's own line: not ours
    result = finish_task(sub, task, state_of("7_0|COMPLETED|0:0|||n0"), JOB)
    assert result["image"]["runtime"] == {
        "name": "singularity-ce",
        "version": "4.1.0-jammy",
        "version_line": "singularity-ce version 4.1.0-jammy",
        "path": None,
    }


def test_a_runtime_line_that_names_no_runtime_is_kept_short_and_unnamed(tmp_path):
    sub = one_task(tmp_path)
    task = sub.tasks[0]
    task.out_dir.mkdir(parents=True)
    (task.out_dir / "result.json").write_text(json.dumps(workload_result()))
    (task.out_dir / "container.log").write_text("# envbuild: runtime: " + "podman version 5 " * 40 + "\n")
    runtime = finish_task(sub, task, state_of("7_0|COMPLETED|0:0|||n0"), JOB)["image"]["runtime"]
    assert (runtime["name"], runtime["version"]) == (None, None)
    assert runtime["version_line"] == ("podman version 5 " * 40).strip()[:200]


def test_a_task_whose_node_had_no_runtime_is_an_attempt_naming_the_node(tmp_path):
    sub = one_task(tmp_path)
    task = sub.tasks[0]
    task.out_dir.mkdir(parents=True)
    (task.out_dir / "container.log").write_text(
        "# envbuild: task 0 of job 7 on n0\n"
        "FATAL:   envbuild: no apptainer or singularity on this node's PATH (the site file's modules load one)\n"
    )
    result = finish_task(sub, task, state_of("7_0|FAILED|255:0|||n0"), JOB)
    assert (result["status"], result["error_class"]) == ("error", "container_error")
    assert "no apptainer or singularity on this node's PATH" in result["error"]
    assert "runtime" not in result["image"]


@pytest.mark.parametrize(
    "code, log, expected",
    [
        ("255:0", "FATAL:   container creation failed: mount /proc/self/fd/3\n", "container_error"),
        ("255:0", "[workload] training\nFATAL:   out of memory\n", "container_died"),  # the workload had started
        ("254:0", "FATAL:   container creation failed\n", "container_died"),
        ("3:0", "FATAL:   container creation failed\n", "container_died"),  # "3" sorts after "255"
        ("255:0", "no fatal line\n", "container_died"),
    ],
)
def test_apptainer_refusing_the_sif_on_the_node_is_an_attempt(code, log, expected):
    error_class, message = end_class(state_of(f"7_0|FAILED|{code}|||n0"), log)
    assert error_class == expected
    assert message == (
        f"Slurm ended the task as FAILED (exit code {code})"
        if expected == "container_died"
        else "apptainer could not run the SIF (FATAL:   container creation failed: mount /proc/self/fd/3)"
    )


@pytest.mark.parametrize(
    "state, expected",
    [
        ("OUT_OF_MEMORY", "oom_killed"),
        ("TIMEOUT", "slurm_timeout"),
        ("PREEMPTED", "slurm_preempted"),  # these sort after FAILED
        ("CANCELLED", "slurm_cancelled"),
        ("BOOT_FAIL", "slurm_node_fail"),
        ("DEADLINE", "slurm_timeout"),
    ],
)  # these before
def test_only_a_failed_task_can_be_the_runtime_refusing_the_sif(state, expected):
    """Exit 255 with a FATAL line and no workload line is the runtime's refusal only when Slurm says FAILED; a
    task Slurm ended for its memory or its time keeps that end state."""
    log = "FATAL:   container creation failed: mount /proc/self/fd/3\n"
    assert end_class(state_of(f"7_0|{state}|255:0|||n0"), log) == (
        expected,
        f"Slurm ended the task as {state} (exit code 255:0)",
    )


def collect_runs(tmp_path: Path, sub, job: str, states: dict) -> tuple[list, list[dict], list[str]]:
    """`collect_job` into a real matrix file: what it collected, the runs the file holds, the attempt folders."""
    db = tmp_path / "m.db"
    with MatrixStore.open(db) as store:
        collected = collect_job(store, sub, job, states)
    with MatrixStore.open(db, readonly=True) as store:
        runs = store.runs()
    attempts = sorted(p.name for p in (tmp_path / "envbuild-attempts").iterdir())
    return collected, runs, attempts


@pytest.mark.parametrize("order", ["99 first", "100 first"])
@pytest.mark.parametrize("job", ["99", "100"])
def test_collect_finishes_only_the_tasks_of_the_job_it_names_whichever_way_the_ids_sort(tmp_path, order, job):
    """Task 0 went to job 99 and task 1 to job 100 ("99" sorts after "100" as text): collecting one job
    finishes and records its own task, never the other job's."""
    jobs = [{"job_id": "99", "tasks": [0]}, {"job_id": "100", "tasks": [1]}]
    sub = one_task(tmp_path, tasks=2, jobs=jobs if order == "99 first" else jobs[::-1])
    mine = 0 if job == "99" else 1
    collected, runs, _ = collect_runs(tmp_path, sub, job, {mine: state_of(f"{job}_{mine}|TIMEOUT|0:0|||n0", job)})
    assert [(c.task.index, c.result["host"]["slurm"]["job_id"]) for c in collected] == [(mine, job)]
    assert [run["result"]["host"]["slurm"]["task"] for run in runs] == [mine]


def test_a_task_still_running_does_not_stop_collect_from_finishing_the_tasks_after_it(tmp_path):
    """Task 0 runs, sacct does not know task 1 yet, task 2 timed out: both are listed as not finished, and task
    2 is finished and recorded all the same."""
    sub = one_task(tmp_path, tasks=3)
    states = {0: state_of("7_0|RUNNING|0:0|||n0"), 2: state_of("7_2|TIMEOUT|0:0|||n0")}
    collected, runs, attempts = collect_runs(tmp_path, sub, JOB, states)
    assert [(c.task.index, c.result is None) for c in collected] == [(0, True), (1, True), (2, False)]
    assert collected[2].result["error_class"] == "slurm_timeout"
    assert [run["result"]["host"]["slurm"]["task"] for run in runs] == [2] and len(attempts) == 1


def test_collecting_a_job_twice_records_nothing_new(tmp_path):
    """The second collect reads the task's result back: the same result, one run, one attempt folder."""
    sub = one_task(tmp_path)
    states = {0: state_of("7_0|TIMEOUT|0:0|||n0")}
    first, runs, attempts = collect_runs(tmp_path, sub, JOB, states)
    again, runs_again, attempts_again = collect_runs(tmp_path, sub, JOB, states)
    assert again[0].result == first[0].result
    assert (len(runs_again), attempts_again) == (1, attempts) and runs_again == runs
    assert len(attempts) == 1 and "-run-" in attempts[0]


def test_a_task_result_the_matrix_holds_with_other_content_is_a_conflict_left_out(tmp_path):
    """The matrix already holds the task's run id with other content (merged from another copy of the matrix):
    collect marks the task a conflict, keeps no attempt folder for it, and the stored run stays as it was."""
    sub = one_task(tmp_path, tasks=2)
    states = {0: state_of("7_0|TIMEOUT|0:0|||n0"), 1: state_of("7_1|TIMEOUT|0:0|||n0")}
    result = finish_task(sub, sub.tasks[0], states[0], JOB)
    with MatrixStore.open(tmp_path / "m.db") as store:
        store.record_run({**result, "error": "another copy's words"})
        stored = store.runs()
    (tmp_path / "envbuild-attempts").mkdir(exist_ok=True)
    collected, runs, attempts = collect_runs(tmp_path, sub, JOB, states)
    assert [(c.task.index, c.conflict) for c in collected] == [(0, True), (1, False)]
    assert collected[0].result["run_id"] == result["run_id"]
    assert [r for r in runs if r["result"]["run_id"] == result["run_id"]] == stored
    assert stored[0]["result"]["error"] == "another copy's words"
    assert len(runs) == 2 and len(attempts) == 1  # task 1's run and its folder; none for the conflict
