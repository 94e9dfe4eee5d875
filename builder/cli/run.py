"""`envbuild run workload`: the fine-tune inside a built image (`--image TAG`) or here (`--local`)."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import sys
import tempfile
import uuid
from datetime import datetime, timezone
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from builder.cli import site_recipes
from builder.cli.prerequisites import MissingPrerequisite
from builder.cli.store_options import db_option, note_new_folder
from builder.engine.interrupt import (
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    Terminated,
    describe,
    later_ctrl_c_ignored,
    sigterm_as_interrupt,
)
from builder.engine import conditions
from builder.engine.run_result import RESULT_FILE, write_json_atomic
from builder.store.store import DB_ENV_VAR, MatrixStore, StoreError, default_db_path


class BadInput(click.ClickException):
    """Bad input found before or by the workload: exit code 2, nothing recorded."""

    exit_code = 2


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
def workload(
    image: str | None,
    sif: Path | None,
    local: bool,
    venv: Path | None,
    python: str,
    wheels: Path | None,
    gpus: str | None,
    model: str | None,
    data: Path | None,
    out_dir: Path | None,
    preset: str,
    shm_size: str,
    network: str | None,
    probe_timeout: float,
    pass_hf_token: bool,
    db: Path | None,
    no_record: bool,
    extra: tuple[str, ...],
) -> None:
    """Run the LoRA fine-tune and collect its result.json (+ host record and image block).

    Exit code 0 only when the result is "pass"; 1 when it is not; 2 for bad input (unknown image, missing
    model/data path, unusable --out or --db, data or arguments the workload refuses: then nothing is
    recorded); 130 on Ctrl-C and 143 on SIGTERM (the workload is stopped and the attempt recorded as
    `interrupted`, not a verdict).
    """
    if sum(map(bool, (image, sif, local or venv))) > 1:
        raise click.UsageError("--image, --apptainer and --local/--venv exclude each other: pick one")
    if local and python != "python3":
        venv = venv or Path(python)  # --local --python PATH: that interpreter, measured as it is
    elif not (image or sif) and python != "python3":
        raise click.UsageError(
            "--python names the interpreter of an image or SIF (--image / --apptainer), or with --local one of this host"
        )
    if pass_hf_token and not (image or sif):
        raise click.UsageError("--pass-hf-token is for an image or SIF envbuild did not build (--image / --apptainer)")
    if wheels and not (image or sif or venv):
        raise click.UsageError("--wheels is for what an image, SIF or venv lacks (--image, --apptainer, --venv)")
    db_path = None if no_record else _check_store(db)  # a bad --db fails now, not after the training
    console = Console(stderr=True, soft_wrap=True)
    out_dir = out_dir or Path("envbuild-runs") / (
        datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
    )
    request = dict(
        out_dir=out_dir,
        preset=preset,
        model=model,
        data=data,
        gpus=gpus,
        extra_args=list(extra),
        site_recipes=site_recipes.folder(),
    )
    if pass_hf_token:
        console.print(
            "[yellow]warning[/]: --pass-hf-token: an image or SIF envbuild did not build gets your Hugging Face token; "
            "its code can read it and send it wherever its network reaches (envbuild's own images get it anyway)"
        )
    created = [p for p in (out_dir, out_dir.parent) if not p.exists()]
    watch = conditions.Watch.start(db_path)
    if watch.others_at_start:
        console.print(
            f"[yellow]note[/]: {watch.others_at_start} other envbuild run(s) are writing to this matrix now:"
            " this measurement will be marked contended (its speed is not comparable)"
        )
    try:
        with sigterm_as_interrupt() as stop:
            foreign = dict(python=python, wheels=wheels, probe_timeout=probe_timeout, pass_hf_token=pass_hf_token)
            result = _run(request, image, sif, shm_size, network, console, foreign, venv)
    except BadInput:
        watch.discard()  # nothing was measured: no marker left
        for path in created:  # only dirs this run made, and only when empty (a container run keeps its log)
            with contextlib.suppress(OSError):
                path.rmdir()
        raise
    except KeyboardInterrupt as exc:  # before the workload started: nothing to record
        watch.discard()
        console.print(f"[yellow]run interrupted ({describe(exc)}) before the workload started[/]")
        sys.exit(EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED)
    except BaseException:
        watch.discard()
        raise
    try:
        result["conditions"] = watch.finish()
        write_json_atomic(Path(out_dir) / RESULT_FILE, result)
    except OSError as exc:
        console.print(escape(f"warning: could not record the run's conditions: {exc}"))
    result_path = Path(out_dir).resolve() / RESULT_FILE
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
    passed = result["status"] == "pass"  # only a pass suggests the report; anything else says where to look
    if db_path is None:
        console.print(
            escape(
                f"next: envbuild matrix import {result_path}; then envbuild report -o site"
                if passed
                else f"the full output: {Path(out_dir).resolve()}"
            )
        )
    else:
        with later_ctrl_c_ignored() if result.get("error_class") == "interrupted" else contextlib.nullcontext():
            recorded = _record(db_path, result, result_path, console)  # a stopped run is recorded whatever comes
        db_flag = f" --db {db}" if db else ""
        console.print(
            escape(
                f"next: envbuild report -o site{db_flag}  (the compatibility report, with this run)"
                if passed
                else f"details: envbuild matrix show {recorded.cell_key}{db_flag}"
            )
        )
    if result["status"] == "pass":
        return
    if result.get("error_class") != "interrupted":
        sys.exit(1)
    console.print(
        f"[yellow]run interrupted ({'SIGTERM' if stop.terminated else 'Ctrl-C'})[/]: the workload was"
        " stopped (an attempt, never a verdict)"
    )
    sys.exit(stop.exit_code)


def _run(
    request: dict,
    image: str | None,
    sif: Path | None,
    shm_size: str,
    network: str | None,
    console: Console,
    foreign: dict,
    venv: Path | None = None,
) -> dict:
    """The run in the image, the SIF, the venv or here; refusals of the input become BadInput (exit code 2)."""
    from builder.engine.container import RunError
    from builder.engine.docker import EngineUnavailable
    from builder.workflows.run import run_workload

    try:
        return run_workload(request, image, sif, shm_size, network, console, foreign, venv)
    except (RunError, PermissionError, FileExistsError) as exc:  # BadWorkloadInput is a RunError
        raise BadInput(str(exc)) from exc
    except EngineUnavailable as exc:
        raise MissingPrerequisite(str(exc)) from exc


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


def _check_store(db: Path | None) -> Path:
    """The matrix path, checked before the run (an existing file is opened and checked, a new one's directory
    must be writable; nothing is created yet); an unusable --db is bad input (exit code 2)."""
    path = Path(db or default_db_path())
    try:
        if path.is_file() and path.stat().st_size == 0:  # SQLite would take it as a new database
            raise StoreError(
                f"{path} is empty (0 bytes), not a matrix database; nothing was changed. Remove it, "
                f"or point --db / ${DB_ENV_VAR} at an existing matrix"
            )
        MatrixStore.preflight(path)  # opens an existing file read-only: a check never grows it
        if path.exists():
            if not os.access(path, os.W_OK):
                raise PermissionError(errno.EACCES, "not writable")
        else:
            parent = path.parent
            while not parent.exists():  # connect creates the missing directories (and says so: new_db_folder)
                parent = parent.parent
            with tempfile.NamedTemporaryFile(dir=parent, prefix=".envbuild-write-test-"):
                pass
    except (StoreError, OSError, sqlite3.Error) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise BadInput(
            f"cannot use the matrix database {path} (--db / ${DB_ENV_VAR}): {reason}; "
            "pass --db with a file you can write, or --no-record"
        ) from exc
    return path


def _record(db: Path, result: dict, result_path: Path, console: Console):
    try:
        note_new_folder(db)
        store = MatrixStore.connect(db)
    except (StoreError, OSError, sqlite3.Error) as exc:
        raise click.ClickException(
            f"{exc} (the result stays in {result_path}; `envbuild matrix import {result_path}` retries)"
        ) from exc
    from builder.workflows.run import record_run

    try:
        recorded = record_run(store, result, result_path)
    except StoreError as exc:
        raise click.ClickException(
            f"{exc} (the result stays in {result_path}; `envbuild matrix import {result_path}` retries)"
        ) from exc
    finally:
        store.close()
    console.print(f"recorded in {store.path}" + ("" if recorded.inserted else " (already there)"))
    return recorded
