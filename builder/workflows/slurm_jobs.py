"""`envbuild slurm submit | collect`: a job array of a task per SIF x configuration planned, written beside the matrix
file and handed to sbatch (`submit_job`, with builder.workflows.slurm_submit), and a job's finished tasks recorded in
the matrix by the end-state rules, its lost tasks sent again on request (`collect_results`, with
builder.workflows.slurm_collect). Slurm's refusals and bad site settings are BadInput (exit code 2)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from builder.engine.slurm import SCRIPT_NAME, SlurmError, sacct, site_file
from builder.store.verdict_rules import counts
from builder.workflows import slurm_collect, slurm_submit
from builder.workflows.errors import BadInput
from builder.workflows.matrix_file import db_path, new_folder_note
from workload.result import RESULT_FILE


@dataclass(frozen=True)
class SubmitRequest:
    sifs: tuple[Path, ...]  # a cell's SIF each, made by `envbuild sif`
    configs: tuple[str, ...]  # NAME=ARGS workload configurations (none: one, "default")
    settings: dict  # the site settings given as options (partition, account, time, ..., results_dir): over the file's
    site_file: Path | None  # the site settings' file (None: $XDG_CONFIG_HOME/envbuild/site.toml)
    db: Path | None
    dry_run: bool  # plan the script; submit and write nothing


@dataclass(frozen=True)
class Submission:
    script: str  # the sbatch script
    tasks: int
    job_id: str | None = None  # None: a dry run, nothing submitted
    script_path: Path | None = None  # in the submission's attempt directory
    results_dir: Path | None = None


def submit_job(request: SubmitRequest) -> Submission:
    try:
        sub, script = slurm_submit.prepare(
            list(request.sifs), request.configs, request.settings, request.site_file or site_file()
        )
        if request.dry_run:
            return Submission(script, len(sub.tasks))
        job_id, attempt = slurm_submit.submit(sub, script, db_path(request.db))
    except SlurmError as exc:
        raise BadInput(str(exc)) from exc
    return Submission(script, len(sub.tasks), job_id, attempt / SCRIPT_NAME, sub.results_dir)


@dataclass(frozen=True)
class CollectRequest:
    job_id: str
    db: Path | None
    resubmit: bool  # submit the tasks Slurm lost again


@dataclass(frozen=True)
class TaskLine:
    """One task of the job as collected."""

    index: int
    cell: str
    config: str
    slurm_state: str  # "PENDING" while sacct does not know it yet
    status: str | None  # the result's status; None: not finished, left for a later collect
    error_class: str
    verdict: bool  # the result counts as the cell's verdict (else an attempt)
    conflict: bool  # the matrix holds its run id with other content: left out
    run_id: str | None
    result_file: Path


@dataclass(frozen=True)
class CollectedJob:
    db: Path
    tasks: tuple[TaskLine, ...]
    lost: tuple[int, ...]  # tasks Slurm lost (timeout, node failure, preemption, cancellation)
    conflicts: tuple[TaskLine, ...]
    resubmitted_as: str | None = None  # the new job of the lost tasks (`resubmit`)
    resubmit_error: str | None = None  # why they could not be submitted again (exit code 2, after the table)

    @property
    def pending(self) -> int:
        return sum(task.status is None for task in self.tasks)

    @property
    def failed(self) -> int:
        return sum(task.status not in (None, "pass") for task in self.tasks)


def collect_results(request: CollectRequest, notify: Callable[[str], None]) -> CollectedJob:
    """Record the job's finished tasks in the matrix file (its new folder said to `notify`) and, with `resubmit`,
    submit the lost ones again."""
    db = db_path(request.db)
    try:
        attempt, sub = slurm_submit.find_submission(db, request.job_id)
        states = sacct(request.job_id)
        if note := new_folder_note(db):
            notify(note)
        collected = slurm_collect.collect(db, sub, request.job_id, states)
    except SlurmError as exc:
        raise BadInput(str(exc)) from exc
    lines = tuple(_task_line(done) for done in collected)
    lost = tuple(done.task.index for done in collected if done.lost)
    job = CollectedJob(db, lines, lost, tuple(line for line in lines if line.conflict))
    if not (lost and request.resubmit):
        return job
    try:
        return replace(job, resubmitted_as=slurm_submit.resubmit(attempt, sub, list(lost)))
    except SlurmError as exc:
        return replace(job, resubmit_error=str(exc))


def _task_line(done: slurm_collect.Collected) -> TaskLine:
    task, result = done.task, done.result
    return TaskLine(
        task.index,
        task.cell,
        task.config,
        done.state.state if done.state else "PENDING",
        result["status"] if result is not None else None,
        (result.get("error_class") or "") if result is not None else "",
        result is not None and counts("run", result["status"], result.get("error_class")),
        done.conflict,
        result["run_id"] if result is not None else None,
        task.out_dir / RESULT_FILE,
    )
