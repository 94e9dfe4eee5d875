"""`envbuild run workload`: the fine-tune inside a built image (`--image TAG`), a SIF, a venv or here (`--local`); the
workflow builder.workflows.run does the work, this module maps the flags and prints what happens."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from builder.cli import site_recipes
from builder.cli.errors import workflow_errors
from builder.cli.store_options import db_option
from builder.workflows.run import (
    ConditionsNotRecorded,
    NewMatrixFolder,
    NotStarted,
    OtherRuns,
    Output,
    Recorded,
    RunFinished,
    RunOutcome,
    RunWorkloadRequest,
    Said,
    TokenPassed,
    run_workload,
)


@click.group("run")
def run() -> None:
    """Run things in built images (or locally) and record what they measured."""


@run.command(
    "workload",
    context_settings={"ignore_unknown_options": True},
    epilog=(
        "WORKLOAD ARGS go to `python -m workload train` unchanged, with or without a `--` before them, e.g. "
        "`--max-steps N`, `-- --labels auto` (take the label names from --data), `--labels a,b,c`, `--seed N`, "
        "`--dtype bf16`, `--no-probes`; `python -m workload train --help` lists them all. A run with any of them is a "
        "measurement of its own configuration, labelled with them (`smoke · tiny-gemma · max_steps=5`), never the "
        "cell's verdict (docs/matrix.md)."
    ),
)
@click.option(
    "--image",
    metavar="TAG",
    help="Run inside this image: one `envbuild image` built, or any other "
    "with a Python and torch (AMD's rocm/pytorch, your own): its own torch is measured, the workload and "
    "the packages it lacks are brought in read-only (docs/measure-any-image.md).",
)
@click.option(
    "--apptainer",
    "sif",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="PATH.sif",
    help="Run inside this SIF with Apptainer: one `envbuild sif` made, or any other (a site's PyTorch SIF, "
    "LUMI's) measured as it is; --cleanenv --containall, explicit binds, --rocm/--nv by its torch.",
)
@click.option(
    "--local",
    is_flag=True,
    help="Run on this host, no Docker needed (the default without --image): in this Python when it has the "
    "workload's packages (envbuild[workload]), else in envbuild's own environment with the torch for this host's "
    "GPU (made once with uv, cached; docs/workload.md).",
)
@click.option(
    "--venv",
    type=click.Path(path_type=Path),
    metavar="PATH",
    help="Run on this host in a venv envbuild did not build, measured as it is: its own torch, the packages it "
    "lacks brought in read-only, nothing installed into it (docs/measure-any-image.md).",
)
@click.option(
    "--python",
    "python",
    default="python3",
    show_default=True,
    metavar="EXE",
    help="The interpreter with torch inside an image or SIF envbuild did not build; with --local, an interpreter "
    "of this host to measure as it is (as --venv).",
)
@click.option(
    "--wheels",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    metavar="DIR",
    help="Take the packages such an image lacks from these wheels only (no index; default: pip's index "
    "here). Nothing is ever downloaded inside the container unless --network.",
)
@click.option("--gpus", metavar="all|0,1", help="GPUs for the container (ROCm: only those render nodes).")
@click.option("--model", metavar="ID|PATH", help="Hub model id or local model dir (mounted read-only).")
@click.option("--data", type=click.Path(path_type=Path), help="Dataset file or dir (mounted read-only).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Output dir for result.json and artifacts [default: ./envbuild-runs/<time>-<id>].",
)
@click.option("--preset", default="smoke", show_default=True, help="Workload training preset.")
@click.option("--shm-size", default="16g", show_default=True, help="/dev/shm size of the container.")
@click.option(
    "--network",
    callback=lambda ctx, param, value: _check_network(value),
    help="Container network (none, host, bridge or a Docker network's name) when the model must be downloaded; "
    "without it an image envbuild did not build runs with no network. A SIF takes host or none.",
)
@click.option(
    "--probe-timeout",
    type=click.FloatRange(1, 3600),
    default=300,
    show_default=True,
    metavar="SECONDS",
    help="How long the probe of an image or SIF envbuild did not build may take before it is stopped (exit 2).",
)
@click.option(
    "--pass-hf-token",
    is_flag=True,
    help="Give an image or SIF envbuild did not build your Hugging Face token ($HF_TOKEN, the token file) for a "
    "gated model: its code can read the token and send it wherever its network reaches. Without it, it gets none.",
)
@db_option
@click.option("--no-record", is_flag=True, help="Leave the result in --out only; do not record it in the matrix.")
@click.argument("extra", nargs=-1, type=click.UNPROCESSED, metavar="[-- WORKLOAD ARGS]")
@workflow_errors()
def workload(**flags) -> None:
    """Run the LoRA fine-tune and collect its result.json (+ host record and image block).

    Exit code 0 only when the result is "pass"; 1 when it is not; 2 for bad input (unknown image, missing
    model/data path, unusable --out or --db, data or arguments the workload refuses: then nothing is
    recorded); 130 on Ctrl-C and 143 on SIGTERM (the workload is stopped and the attempt recorded as
    `interrupted`, not a verdict).
    """
    request = _run_request(flags)
    console = Console(stderr=True, soft_wrap=True)
    outcome = run_workload(request, lambda event: _show_run_event(event, console))
    if isinstance(outcome, NotStarted):
        console.print(f"[yellow]run interrupted ({outcome.how}) before the workload started[/]")
    else:
        _print_next(outcome, request.db, console)
    if outcome.exit_code:
        sys.exit(outcome.exit_code)


def _run_request(flags: dict) -> RunWorkloadRequest:
    """The request the flags make; flags that exclude each other are usage errors (exit code 2), before any work."""
    image, sif, local, venv, python = (flags.pop(k) for k in ("image", "sif", "local", "venv", "python"))
    if sum(map(bool, (image, sif, local or venv))) > 1:
        raise click.UsageError("--image, --apptainer and --local/--venv exclude each other: pick one")
    if local and python != "python3":
        venv = venv or Path(python)  # --local --python PATH: that interpreter, measured as it is
    elif not (image or sif) and python != "python3":
        raise click.UsageError(
            "--python names the interpreter of an image or SIF (--image / --apptainer), or with --local one of this host"
        )
    if flags["pass_hf_token"] and not (image or sif):
        raise click.UsageError("--pass-hf-token is for an image or SIF envbuild did not build (--image / --apptainer)")
    if flags["wheels"] and not (image or sif or venv):
        raise click.UsageError("--wheels is for what an image, SIF or venv lacks (--image, --apptainer, --venv)")
    return RunWorkloadRequest(
        image=image,
        sif=sif,
        venv=venv,
        python=python,
        extra_args=flags.pop("extra"),
        record=not flags.pop("no_record"),
        site_recipes=site_recipes.folder(),
        **flags,
    )


def _show_run_event(event: object, console: Console) -> None:
    """One event of the run as it happens (stderr; a run here's own output: stdout)."""
    if isinstance(event, Output) and event.here:
        sys.stdout.write(event.text)
        sys.stdout.flush()
    elif isinstance(event, Output):  # the container's output as it is: rich would lay out every line
        console.file.write(event.text)
        console.file.flush()
    elif isinstance(event, str):  # the Python environment a run here takes (uv's own lines among them)
        console.print(escape(event), highlight=False)
    elif isinstance(event, Said):
        style = {"warning": "yellow", "error": "red"}.get(event.level)
        console.print(f"[{style}]{escape(event.text)}[/]" if style else escape(event.text))
    elif isinstance(event, TokenPassed):
        console.print(
            "[yellow]warning[/]: --pass-hf-token: an image or SIF envbuild did not build gets your Hugging Face token; "
            "its code can read it and send it wherever its network reaches (envbuild's own images get it anyway)"
        )
    elif isinstance(event, OtherRuns):
        console.print(
            f"[yellow]note[/]: {event.count} other envbuild run(s) are writing to this matrix now:"
            " this measurement will be marked contended (its speed is not comparable)"
        )
    elif isinstance(event, ConditionsNotRecorded):
        console.print(escape(f"warning: could not record the run's conditions: {event.error}"))
    elif isinstance(event, RunFinished):
        _print_finished(event.result, event.result_path, console)
    elif isinstance(event, NewMatrixFolder):
        click.echo(event.note, err=True)
    elif isinstance(event, Recorded):
        console.print(escape(f"recorded in {event.db}" + ("" if event.inserted else " (already there)")))


def _print_finished(result: dict, result_path: Path, console: Console) -> None:
    style = "green" if result["status"] == "pass" else "red"
    detail = escape(f" ({result.get('error_class')}: {result.get('error')})") if result["status"] != "pass" else ""
    console.print(f"[{style}]{result['status']}[/]{detail}; result: {result_path}")
    if summary := _summary(result):
        console.print(summary)
    if (result.get("conditions") or {}).get("contended"):
        console.print(
            escape(
                "contended: "
                + "; ".join(result["conditions"]["contention"])
                + " (recorded in result.json; the report marks this measurement)"
            )
        )


def _print_next(outcome: RunOutcome, db: Path | None, console: Console) -> None:
    """Where to look next (only a pass suggests the report), and what stopped a run that was stopped."""
    if outcome.recorded is None:
        console.print(
            escape(
                f"next: envbuild matrix import {outcome.result_path}; then envbuild report -o site"
                if outcome.passed
                else f"the full output: {outcome.out_dir}"
            )
        )
    else:
        db_flag = f" --db {db}" if db else ""
        console.print(
            escape(
                f"next: envbuild report -o site{db_flag}  (the compatibility report, with this run)"
                if outcome.passed
                else f"details: envbuild matrix show {outcome.recorded.cell_key}{db_flag}"
            )
        )
    if outcome.stopped_by:
        console.print(
            f"[yellow]run interrupted ({outcome.stopped_by})[/]: the workload was stopped (an attempt, never a verdict)"
        )


def _check_network(value: str | None) -> str | None:
    """--network's grammar, before anything runs (which networks exist is the engine's to say)."""
    import re

    if value is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", value):
        raise click.BadParameter(f"{value[:80]!r}: give none, host, bridge or the name of a Docker network")
    return value


def _summary(result: dict) -> str:
    """One line of what was measured: accuracy before -> after, throughput, probe verdicts."""
    parts = []
    metrics = result.get("metrics") or {}
    before, after = metrics.get("eval_before") or {}, metrics.get("eval_after") or {}
    if "accuracy" in before and "accuracy" in after:
        parts.append(f"eval accuracy {before['accuracy']:.3f} -> {after['accuracy']:.3f}")
    if metrics.get("samples_per_s"):
        parts.append(f"{metrics['samples_per_s']:.1f} samples/s")
    if probes := result.get("probes"):
        counts = {s: sum(p["status"] == s for p in probes) for s in ("pass", "fail", "skip")}
        parts.append("probes " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    return "; ".join(parts)
