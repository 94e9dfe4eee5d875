"""Collecting a Slurm task: its result.json completed from the workload's own result or from the end state
Slurm reports (`finish_task`), and joined to the task it submitted (`task_result_problem`) before it is
recorded (`collect_job`; `collect` into a matrix file). The sbatch script, sacct and the end-state table live in
builder.engine.slurm."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from builder import strict_json
from builder.paths import CONTAINER_LOG
from builder.engine.apptainer import runtime_of
from builder.engine.run_result import run_end, write_json_atomic
from builder.engine.slurm import (
    RUNTIME_LINE,
    STATE_CLASSES,
    UNFINISHED,
    SlurmError,
    Submission,
    Task,
    TaskState,
    end_class,
)
from builder.plan.cells import Cell
from builder.store.store import InvalidResultError, MatrixStore, StoreError, validate_result
from builder.store.verdict_rules import counts
from builder.workflows.run_result import finalize, keep_run
from workload.result import RESULT_FILE


def finish_task(sub: Submission, task: Task, state: TaskState, job_id: str) -> dict:
    """The task's final result.json: the workload's own result completed with the `host` and `image` blocks,
    or an error result with the class its end state maps to. Written once: a task already finished is read
    back as it is (collecting twice records nothing new)."""
    path = task.out_dir / RESULT_FILE
    refused = None
    if path.is_file() or path.is_symlink():
        try:
            done = strict_json.loads(strict_json.read_regular(path, strict_json.MAX_RESULT_BYTES))
        except (OSError, ValueError):
            done = None
        if isinstance(done, dict) and isinstance(done.get("host"), dict) and "slurm" in done["host"]:
            refused = task_result_problem(sub, task, done, state, job_id)
            if refused is None:
                return validate_result(done)
            path.replace(path.with_name("result.refused.json"))  # the bytes kept for inspection, never recorded
    try:
        task.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SlurmError(f"cannot write the task directory {task.out_dir} ({exc.strerror})") from None
    log = task.out_dir / CONTAINER_LOG
    try:
        log_text = strict_json.read_regular(log, strict_json.MAX_RESULT_BYTES).decode("utf-8", "replace")
    except (OSError, ValueError):  # none, or not a plain file of a sane size: the end state alone decides
        log_text = ""
    failure_class, failure = end_class(state, log_text)
    if refused is not None:
        failure_class, failure = MISMATCH_CLASS, f"the task's result.json was refused: {refused}"
    image = dict(
        sub.images[task.sif_sha256], environment="apptainer", sif={"path": str(task.sif), "sha256": task.sif_sha256}
    )
    said = [line[len(RUNTIME_LINE) :].strip() for line in log_text.splitlines()[:20] if line.startswith(RUNTIME_LINE)]
    if said:  # the job script's line: which runtime the node ran the task with
        image["runtime"] = runtime_of(said[0][:200], None)
    cell = image["manifest"].get("cell") or {}
    started = _epoch(state.start) or time.time()
    finished = _epoch(state.end) or started
    host = {
        "hostname": state.node,
        "slurm": {
            "job_id": job_id,
            "task": task.index,
            "state": state.state,
            "exit_code": state.exit_code,
            "config": task.config,
        },
    }
    result = finalize(
        run_end(
            task.out_dir,
            failure_class,
            failure,
            started,
            finished=finished,
            versions={k: cell.get(k) for k in ("python", "torch")},
            host=host,
            image=image,
        )
    )
    if state.state in STATE_CLASSES and result.get("error_class") == "interrupted":
        # the workload wrote `interrupted` on the SIGTERM Slurm sent it: the end state says why it came
        result.update(error_class=failure_class, error=f"{failure}; the workload reported: {result.get('error')}")
        write_json_atomic(task.out_dir / RESULT_FILE, result)
    return result


#: A task whose result.json does not belong to it (another cell, SIF, task or job): an attempt, never a verdict.
MISMATCH_CLASS = "slurm_result_mismatch"


def task_result_problem(sub: Submission, task: Task, result: dict, state: TaskState, job_id: str) -> str | None:
    """Why a completed result.json in the task's directory is not this task's (None: it is). It is joined to
    the submission record: its job and array index, the SIF (by sha256) and so the cell that task ran, and the
    end state Slurm reports; and it must pass the result schema."""
    try:
        clean = validate_result(result)
    except InvalidResultError as exc:
        return str(exc)[:300]
    slurm = clean["host"].get("slurm") if isinstance(clean.get("host"), dict) else None
    jobs = {j.get("job_id") for j in sub.jobs if task.index in (j.get("tasks") or [])}
    if (
        not isinstance(slurm, dict)
        or slurm.get("job_id") not in jobs
        or type(slurm.get("task")) is not int
        or slurm["task"] != task.index
    ):  # not true/0.0 for task 1/0
        return f"it names job {_field_repr(slurm, 'job_id')} task {_field_repr(slurm, 'task')}, not a job of task {task.index}"
    sif = ((clean.get("image") or {}).get("sif") or {}).get("sha256")
    if sif != task.sif_sha256:
        return f"its SIF sha256 {str(sif)[:64]} is not the one task {task.index} ran ({task.sif_sha256})"
    cell = Cell.from_result(clean).key
    if cell != task.cell:
        return f"it names cell {cell}, but task {task.index} ran {task.cell}"
    if slurm.get("job_id") == job_id and (
        slurm.get("state") != state.state or (state.state != "COMPLETED" and clean["status"] == "pass")
    ):
        return f"it says {_field_repr(slurm, 'state')} / {clean['status']}, but Slurm ended the task as {state.state}"
    return None


def _field_repr(block, key: str) -> str:
    """`block[key]` as Python writes it, at most 40 characters (None where `block` is no dict)."""
    value = block.get(key) if isinstance(block, dict) else None
    return repr(value)[:40]


def _epoch(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


@dataclass
class Collected:
    """One task of a collected job: its end state (None: sacct does not know it yet) and its final result
    (None: not finished, left for a later collect). `conflict`: the matrix holds the result's run id with other
    content, so the result was left out (nothing recorded, no attempt folder kept)."""

    task: Task
    state: TaskState | None
    result: dict | None
    conflict: bool = False

    @property
    def lost(self) -> bool:
        """Finished without a verdict for a reason Slurm gave (timeout, node failure, preemption, cancellation):
        an attempt worth submitting again (a usage error would fail the same way)."""
        if self.result is None:
            return False
        verdict = counts("run", self.result["status"], self.result.get("error_class"))
        return not verdict and self.result.get("error_class") != "usage_error"


def collect(db: Path, sub: Submission, job_id: str, states: dict[int, TaskState]) -> list[Collected]:
    """`collect_job` into the matrix file `db`; SlurmError when the matrix cannot be used."""
    try:
        store = MatrixStore.connect(db)
    except (StoreError, OSError, sqlite3.Error) as exc:
        raise SlurmError(f"cannot use the matrix database {db}: {exc}") from exc
    try:
        return collect_job(store, sub, job_id, states)
    finally:
        store.close()


def collect_job(store: MatrixStore, sub: Submission, job_id: str, states: dict[int, TaskState]) -> list[Collected]:
    """Finish every finished task of `job_id` and record it in `store` with its attempt directory (a result
    already recorded the same way is not recorded again); unfinished tasks are listed and left alone.
    A task whose run id the matrix holds with other content is left out and marked `conflict`. SlurmError when a
    task's directory cannot be written."""
    job = next(j for j in sub.jobs if j["job_id"] == job_id)
    collected = []
    for task in (t for t in sub.tasks if t.index in job["tasks"]):
        state = states.get(task.index)
        if state is None or state.state in UNFINISHED:
            collected.append(Collected(task, state, None))
            continue
        result = finish_task(sub, task, state, job_id)
        found = store.classify_run(result)
        if found == "new":
            kept = keep_run(store.path, task.out_dir, result)
            store.record_run(result, source=str(task.out_dir / RESULT_FILE), attempt_dir=kept)
        collected.append(Collected(task, state, result, conflict=found == "conflict"))
    return collected
