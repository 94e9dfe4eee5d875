"""`envbuild slurm submit|collect`: cells as a Slurm job array of Apptainer tasks, results into the matrix."""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from datetime import datetime, timezone
from pathlib import Path

import click
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from builder.cli.store_options import db_option, note_new_folder, plain
from builder.store.store import StoreError, default_db_path


class BadInput(click.ClickException):
    exit_code = 2


@click.group("slurm")
def slurm() -> None:
    """Run cells as a Slurm job array of Apptainer tasks, and collect their results into the matrix."""


@slurm.command("submit")
@click.option(
    "--sif",
    "sifs",
    multiple=True,
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A cell's SIF made by `envbuild sif` (repeat for more cells).",
)
@click.option(
    "--config",
    "configs",
    multiple=True,
    metavar="NAME=ARGS",
    help="A workload configuration, e.g. smoke='--max-steps 4' (repeat; default: one, 'default').",
)
@click.option("--partition")
@click.option("--account")
@click.option("--time", "time_limit", help="Time limit per task (Slurm syntax) [site file, else 01:00:00].")
@click.option("--gpus", help="sbatch --gpus per task (e.g. 1).")
@click.option("--gres", help="sbatch --gres per task (e.g. gpu:1).")
@click.option("--cpus-per-task", type=int)
@click.option("--mem", help="sbatch --mem per task (e.g. 16G).")
@click.option("--module", "modules", multiple=True, help="`module load NAME` before the task (repeat).")
@click.option(
    "--results-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Shared directory the tasks write into and collect reads.",
)
@click.option(
    "--site-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Site settings ([slurm] table) [default: $XDG_CONFIG_HOME/envbuild/site.toml].",
)
@db_option
@click.option("--dry-run", is_flag=True, help="Print the sbatch script; submit and write nothing.")
def submit(
    sifs: tuple[Path, ...],
    configs: tuple[str, ...],
    partition,
    account,
    time_limit,
    gpus,
    gres,
    cpus_per_task,
    mem,
    modules,
    results_dir,
    site_file,
    db,
    dry_run,
) -> None:
    """Submit one job array: a task per SIF x configuration, each running the workload in its SIF.

    The readable sbatch script and submission.json go into an attempt directory beside the matrix file;
    the job id is printed. Exit code 0 when submitted; 2 for bad input (a SIF without its record, a
    site setting that is not a plain Slurm value, no results directory, sbatch refusing the job)."""
    from builder.store.attempts import new_attempt
    from builder.engine.slurm import (
        SCRIPT_NAME,
        SlurmError,
        load_site,
        parse_configs,
        plan,
        render_script,
        sbatch,
        site_file as default_site_file,
    )

    options = {
        "partition": partition,
        "account": account,
        "time": time_limit,
        "gpus": gpus,
        "gres": gres,
        "cpus_per_task": cpus_per_task,
        "mem": mem,
        "modules": list(modules),
        "results_dir": results_dir,
    }
    try:
        site = load_site(options, site_file or default_site_file())
        sub = plan(
            uuid.uuid4().hex[:12],
            list(sifs),
            parse_configs(configs),
            site,
            datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
    except SlurmError as exc:
        raise BadInput(str(exc)) from exc
    script = render_script(sub)
    if dry_run:
        click.echo(script, nl=False)
        return
    console = Console(stderr=True, soft_wrap=True)
    if not sub.results_dir.parent.is_dir():  # the tasks make their own directories in it, as the job's user
        raise BadInput(
            f"results directory {sub.results_dir.parent} does not exist: create it on the shared "
            "file system the compute nodes write to"
        )
    try:
        attempt = new_attempt(Path(db or default_db_path()), "slurm", sub.id)
    except (OSError, StoreError) as exc:
        raise BadInput(str(exc)) from exc
    (attempt / SCRIPT_NAME).write_text(script, encoding="utf-8")
    os.chmod(attempt / SCRIPT_NAME, 0o644)
    try:
        job_id = sbatch(attempt / SCRIPT_NAME, None)
    except SlurmError as exc:
        _write_submission(attempt, sub)  # the attempt says what was tried
        raise BadInput(f"{exc} (script: {attempt / SCRIPT_NAME})") from exc
    sub.jobs.append({"job_id": job_id, "tasks": [t.index for t in sub.tasks]})
    _write_submission(attempt, sub)
    console.print(
        escape(
            f"submitted job {job_id}: {len(sub.tasks)} task(s); script {attempt / SCRIPT_NAME}; "
            f"results in {sub.results_dir}; next: envbuild slurm collect {job_id}"
        )
    )
    click.echo(job_id)


@slurm.command("collect")
@click.argument("job_id")
@db_option
@click.option(
    "--resubmit",
    is_flag=True,
    help="Submit again the tasks that Slurm lost (timeout, node failure, "
    "preemption, cancellation: attempts, not verdicts).",
)
def collect(job_id: str, db: Path | None, resubmit: bool) -> None:
    """Import the finished tasks of JOB_ID into the matrix, by the end-state rules of docs/matrix.md.

    Tasks still pending or running are listed and left for a later collect; collecting twice records
    nothing new. Exit code 0 when every finished task passed; 1 when one did not; 2 for bad input (an
    unknown job id, a damaged submission.json)."""
    from builder.engine.slurm import SCRIPT_NAME, SlurmError, sacct, sbatch
    from builder.store.store import MatrixStore
    from builder.store.verdict_rules import counts
    from builder.workflows.slurm_collect import collect_job

    console = Console(stderr=True, soft_wrap=True)
    db_path = Path(db or default_db_path())
    attempt, sub = _find_submission(db_path, job_id)
    try:
        states = sacct(job_id)
    except SlurmError as exc:
        raise BadInput(str(exc)) from exc
    table = Table("task", "cell", "config", "slurm", "outcome", "class")
    table.columns[1].overflow = "fold"
    lost, failed, pending = [], 0, 0
    try:
        note_new_folder(db_path)
        store = MatrixStore.connect(db_path)
    except (StoreError, OSError, sqlite3.Error) as exc:
        raise BadInput(f"cannot use the matrix database {db_path}: {exc}") from exc
    try:
        collected = collect_job(store, sub, job_id, states)
    except SlurmError as exc:
        raise BadInput(str(exc)) from exc
    finally:
        store.close()
    for done in collected:
        task, state, result = done.task, done.state, done.result
        if result is None:
            pending += 1
            table.add_row(
                str(task.index),
                Text(task.cell),
                Text(task.config),
                Text(state.state if state else "PENDING"),
                "not finished",
                "",
            )
            continue
        verdict = counts("run", result["status"], result.get("error_class"))
        outcome = f"{'verdict' if verdict else 'attempt'}: {result['status']}"
        table.add_row(
            str(task.index),
            Text(task.cell),
            Text(task.config),
            Text(state.state),
            Text(outcome),
            Text(plain(result.get("error_class") or "")),
        )
        failed += result["status"] != "pass"
        if not verdict and result.get("error_class") != "usage_error":
            lost.append(task.index)
    console.print(table)
    console.print(escape(f"recorded in {db_path}; {pending} task(s) not finished"))
    if lost and resubmit:
        array = ",".join(map(str, lost))
        try:
            new_job = sbatch(attempt / SCRIPT_NAME, array)
        except SlurmError as exc:
            raise BadInput(str(exc)) from exc
        sub.jobs.append({"job_id": new_job, "tasks": lost})
        _write_submission(attempt, sub)
        console.print(escape(f"re-submitted task(s) {array} as job {new_job}; next: envbuild slurm collect {new_job}"))
        click.echo(new_job)
    elif lost:
        console.print(
            escape(
                f"{len(lost)} task(s) lost by Slurm ({','.join(map(str, lost))}): "
                f"`envbuild slurm collect {job_id} --resubmit` submits only those again"
            )
        )
    raise SystemExit(1 if failed else 0)


def _write_submission(attempt: Path, sub) -> None:
    from builder.paths import write_text_atomic
    from builder.engine.slurm import SUBMISSION_NAME

    write_text_atomic(attempt / SUBMISSION_NAME, sub.model_dump_json(indent=2) + "\n")


def _find_submission(db: Path, job_id: str):
    """The attempt directory and submission that submitted `job_id` (beside the matrix file `db`)."""
    from builder.store.attempts import ATTEMPTS_DIR
    from builder.engine.slurm import SUBMISSION_NAME, Submission

    if not job_id.isdigit():
        raise BadInput(f"{job_id!r} is not a Slurm job id (digits only)")
    for path in sorted((db.resolve().parent / ATTEMPTS_DIR).glob(f"*-slurm-*/{SUBMISSION_NAME}"), reverse=True):
        try:
            sub = Submission.model_validate_json(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValidationError, json.JSONDecodeError) as exc:
            raise BadInput(f"{path} is not a valid submission record ({str(exc).splitlines()[0]})") from exc
        if any(j.get("job_id") == job_id for j in sub.jobs):
            return path.parent, sub
    raise BadInput(f"no submission of job {job_id} beside {db} (submit with `envbuild slurm submit --db {db}`)")
