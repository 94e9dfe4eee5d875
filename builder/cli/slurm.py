"""`envbuild slurm submit|collect`: cells as a Slurm job array of Apptainer tasks, results into the matrix (the
workflows builder.workflows.slurm_submit and slurm_collect do the work; this module parses and prints)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from builder.cli.errors import Refused, workflow_errors
from builder.cli.store_options import db_option
from builder.slug import plain


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
@workflow_errors()
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
    from builder.workflows.slurm_jobs import SubmitRequest, submit_job

    settings = {
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
    submitted = submit_job(SubmitRequest(sifs, configs, settings, site_file, db, dry_run))
    if submitted.job_id is None:
        click.echo(submitted.script, nl=False)
        return
    Console(stderr=True, soft_wrap=True).print(
        escape(
            f"submitted job {submitted.job_id}: {submitted.tasks} task(s); script {submitted.script_path}; "
            f"results in {submitted.results_dir}; next: envbuild slurm collect {submitted.job_id}"
        )
    )
    click.echo(submitted.job_id)


@slurm.command("collect")
@click.argument("job_id")
@db_option
@click.option(
    "--resubmit",
    is_flag=True,
    help="Submit again the tasks that Slurm lost (timeout, node failure, "
    "preemption, cancellation: attempts, not verdicts).",
)
@workflow_errors()
def collect(job_id: str, db: Path | None, resubmit: bool) -> None:
    """Import the finished tasks of JOB_ID into the matrix, by the end-state rules of docs/matrix.md.

    Tasks still pending or running are listed and left for a later collect; collecting twice records
    nothing new. Exit code 0 when every finished task passed; 1 when one did not; 2 for bad input (an
    unknown job id, a damaged submission.json, a task result whose run id the matrix holds with other content:
    that one is left out, the others are recorded)."""
    from builder.workflows.slurm_jobs import CollectRequest, collect_results

    console = Console(stderr=True, soft_wrap=True)
    job = collect_results(CollectRequest(job_id, db, resubmit), notify=lambda line: click.echo(line, err=True))
    console.print(_task_table(job.tasks))
    console.print(escape(f"recorded in {job.db}; {job.pending} task(s) not finished"))
    if job.resubmit_error is not None:
        raise Refused(job.resubmit_error, 2)
    if job.resubmitted_as is not None:
        array = ",".join(map(str, job.lost))
        console.print(
            escape(
                f"re-submitted task(s) {array} as job {job.resubmitted_as}; next: envbuild slurm collect {job.resubmitted_as}"
            )
        )
        click.echo(job.resubmitted_as)
    elif job.lost:
        console.print(
            escape(
                f"{len(job.lost)} task(s) lost by Slurm ({','.join(map(str, job.lost))}): "
                f"`envbuild slurm collect {job_id} --resubmit` submits only those again"
            )
        )
    for task in job.conflicts:
        console.print(
            escape(
                f"task {task.index}: the matrix already holds run {plain(task.run_id)} with other "
                f"content, so the task's result ({plain(task.result_file)}) was left out; `envbuild matrix import "
                f"{plain(task.result_file)} --replace` records it instead"
            )
        )
    raise SystemExit(2 if job.conflicts else 1 if job.failed else 0)


def _task_table(tasks) -> Table:
    """A line per task of the job (the workflow's TaskLine): its cell, configuration, Slurm state and outcome."""
    table = Table("task", "cell", "config", "slurm", "outcome", "class")
    table.columns[1].overflow = "fold"
    for task in tasks:
        if task.status is None:
            outcome = "not finished"
        elif task.conflict:
            outcome = "left out: conflict"
        else:
            outcome = f"{'verdict' if task.verdict else 'attempt'}: {task.status}"
        table.add_row(
            str(task.index),
            Text(task.cell),
            Text(task.config),
            Text(task.slurm_state),
            outcome if task.status is None else Text(outcome),
            Text(plain(task.error_class)) if task.status is not None else "",
        )
    return table
