"""`envbuild slurm submit|collect`: cells as a Slurm job array of Apptainer tasks, results into the matrix (the
workflows builder.workflows.slurm_submit and slurm_collect do the work; this module parses and prints)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from builder.cli.store_options import db_option, note_new_folder, plain
from builder.store.store import default_db_path


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
    from builder.engine.slurm import SCRIPT_NAME, SlurmError, site_file as default_site_file
    from builder.workflows import slurm_submit

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
        sub, script = slurm_submit.prepare(list(sifs), configs, options, site_file or default_site_file())
        if dry_run:
            click.echo(script, nl=False)
            return
        console = Console(stderr=True, soft_wrap=True)
        job_id, attempt = slurm_submit.submit(sub, script, Path(db or default_db_path()))
    except SlurmError as exc:
        raise BadInput(str(exc)) from exc
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
    unknown job id, a damaged submission.json, a task result whose run id the matrix holds with other content:
    that one is left out, the others are recorded)."""
    from builder.engine.run_result import RESULT_NAME
    from builder.engine.slurm import SlurmError, sacct
    from builder.store.verdict_rules import counts
    from builder.workflows.slurm_collect import collect as collect_into
    from builder.workflows.slurm_submit import find_submission, resubmit as resubmit_tasks

    console = Console(stderr=True, soft_wrap=True)
    db_path = Path(db or default_db_path())
    try:
        attempt, sub = find_submission(db_path, job_id)
        states = sacct(job_id)
        note_new_folder(db_path)
        collected = collect_into(db_path, sub, job_id, states)
    except SlurmError as exc:
        raise BadInput(str(exc)) from exc
    table = Table("task", "cell", "config", "slurm", "outcome", "class")
    table.columns[1].overflow = "fold"
    lost = [done.task.index for done in collected if done.lost]
    conflicts = [done for done in collected if done.conflict]
    failed = sum(done.result["status"] != "pass" for done in collected if done.result is not None)
    pending = sum(done.result is None for done in collected)
    for done in collected:
        task, state, result = done.task, done.state, done.result
        if result is None:
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
        table.add_row(
            str(task.index),
            Text(task.cell),
            Text(task.config),
            Text(state.state),
            Text(
                "left out: conflict" if done.conflict else f"{'verdict' if verdict else 'attempt'}: {result['status']}"
            ),
            Text(plain(result.get("error_class") or "")),
        )
    console.print(table)
    console.print(escape(f"recorded in {db_path}; {pending} task(s) not finished"))
    if lost and resubmit:
        array = ",".join(map(str, lost))
        try:
            new_job = resubmit_tasks(attempt, sub, lost)
        except SlurmError as exc:
            raise BadInput(str(exc)) from exc
        console.print(escape(f"re-submitted task(s) {array} as job {new_job}; next: envbuild slurm collect {new_job}"))
        click.echo(new_job)
    elif lost:
        console.print(
            escape(
                f"{len(lost)} task(s) lost by Slurm ({','.join(map(str, lost))}): "
                f"`envbuild slurm collect {job_id} --resubmit` submits only those again"
            )
        )
    for done in conflicts:
        result_file = done.task.out_dir / RESULT_NAME
        console.print(
            escape(
                f"task {done.task.index}: the matrix already holds run {plain(done.result['run_id'])} with other "
                f"content, so the task's result ({plain(result_file)}) was left out; `envbuild matrix import "
                f"{plain(result_file)} --replace` records it instead"
            )
        )
    raise SystemExit(2 if conflicts else 1 if failed else 0)
