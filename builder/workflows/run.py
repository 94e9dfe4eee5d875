"""`envbuild run workload` (`run_workload`): the matrix checked before the run, the run on its route (in a built image,
in a SIF, in a venv or here: builder.engine.routes) under a watch of its conditions, its result completed and
written, and filed in the matrix with its attempt directory (`record_run`)."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import tempfile
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from builder.engine import conditions, routes
from builder.engine.container import RunError
from builder.engine.docker import EngineUnavailable
from builder.engine.run_result import RunEnd, write_json_atomic
from builder.engine.runner import ContainerRun, Notify, RunRequest, SifRun, VenvRun
from builder.engine.runner import Output, Said  # noqa: F401 - the routes' events, which the verb renders
from builder.interrupt import (
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    Terminated,
    describe,
    later_ctrl_c_ignored,
    stop_signals,
)
from builder.paths import DB_ENV_VAR, IMAGE_OUT, default_db_path
from builder.store.store import MatrixStore, RecordedRun, StoreError
from builder.workflows.errors import BadInput, Failed
from builder.workflows.matrix_file import new_folder_note
from builder.workflows.run_identity import check_foreign_claims
from builder.workflows.run_result import finalize, keep_run
from workload.result import RESULT_FILE


@dataclass(frozen=True)
class RunWorkloadRequest:
    """One `envbuild run workload`: where it runs (`image`, `sif`, `venv`, else here), the workload's inputs and
    arguments, the options of an image, SIF or venv envbuild did not build, and where its result goes (`out_dir`,
    default ./envbuild-runs/<time>-<id>; the matrix file `db` unless `record` is off)."""

    out_dir: Path | None = None
    preset: str = "smoke"
    model: str | None = None
    data: Path | None = None
    gpus: str | None = None
    extra_args: tuple[str, ...] = ()
    site_recipes: Path | None = None
    image: str | None = None
    sif: Path | None = None
    venv: Path | None = None
    shm_size: str = "16g"
    network: str | None = None
    python: str = "python3"
    wheels: Path | None = None
    probe_timeout: float = 300.0
    pass_hf_token: bool = False
    db: Path | None = None
    record: bool = True


@dataclass(frozen=True)
class TokenPassed:
    """--pass-hf-token: an image or SIF envbuild did not build gets the Hugging Face token (said before the run)."""


@dataclass(frozen=True)
class OtherRuns:
    """Other envbuild runs are writing to the same matrix as this one starts: it will be marked contended."""

    count: int


@dataclass(frozen=True)
class ConditionsNotRecorded:
    """The run's conditions could not be written into its result.json."""

    error: str


@dataclass(frozen=True)
class RunFinished:
    """The run's final result.json (at `result_path`), before it is recorded."""

    result: dict
    result_path: Path


@dataclass(frozen=True)
class NewMatrixFolder:
    """Recording creates the matrix file's folder (`note` says which)."""

    note: str


@dataclass(frozen=True)
class Recorded:
    """The run was filed in the matrix at `db` (`inserted`: False when it was there already)."""

    db: Path
    inserted: bool


@dataclass(frozen=True)
class RunOutcome:
    """A run that measured: its final result, where it lies, its matrix row (None: not recorded) and what stopped it
    (None, "Ctrl-C" or "SIGTERM"). Exit code 0 for a pass, 1 for any other verdict, 130/143 when it was stopped."""

    result: dict
    out_dir: Path
    result_path: Path
    recorded: RecordedRun | None
    stopped_by: str | None
    exit_code: int

    @property
    def passed(self) -> bool:
        return self.result["status"] == "pass"


@dataclass(frozen=True)
class NotStarted:
    """Ctrl-C or SIGTERM (`how`) came before the workload started: nothing was measured or recorded."""

    how: str
    exit_code: int


def run_workload(request: RunWorkloadRequest, notify: Notify) -> RunOutcome | NotStarted:
    """Run the workload as `request` asks and record it. The matrix file is checked first (BadInput: nothing runs);
    the route's events (builder.engine.runner) and this workflow's go to `notify`. Input the route or the workload
    refuses, a result of an image envbuild did not build that disagrees with what this host checked, and a missing
    Docker engine are BadInput (exit 2: no in-flight marker, no folder of this run's left, nothing recorded); a
    result the matrix refuses is Failed (exit 1), the result staying in its folder."""
    db = _check_store(request.db) if request.record else None  # a bad --db fails now, not after the training
    out_dir = request.out_dir or Path("envbuild-runs") / (
        datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
    )
    if request.pass_hf_token:
        notify(TokenPassed())
    created = [p for p in (out_dir, out_dir.parent) if not p.exists()]
    watch = conditions.Watch.start(db)
    if watch.others_at_start:
        notify(OtherRuns(watch.others_at_start))
    try:
        with stop_signals() as stop:
            result = _run_on_route(_route_request(request, out_dir), notify)
    except BadInput:
        watch.discard()  # nothing was measured: no marker left
        for path in created:  # only dirs this run made, and only when empty (a container run keeps its log)
            with contextlib.suppress(OSError):
                path.rmdir()
        raise
    except EngineUnavailable as exc:
        watch.discard()
        raise BadInput(str(exc)) from exc
    except KeyboardInterrupt as exc:  # before the workload started: nothing to record
        watch.discard()
        return NotStarted(describe(exc), EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED)
    except BaseException:
        watch.discard()
        raise
    try:
        result["conditions"] = watch.finish()
        write_json_atomic(Path(out_dir) / RESULT_FILE, result)
    except OSError as exc:
        notify(ConditionsNotRecorded(str(exc)))
    result_path = Path(out_dir).resolve() / RESULT_FILE
    notify(RunFinished(result, result_path))
    interrupted = result.get("error_class") == "interrupted"
    recorded = None
    if db is not None:
        with later_ctrl_c_ignored() if interrupted else contextlib.nullcontext():
            recorded = _record(db, result, result_path, notify)  # a stopped run is recorded whatever comes
    if result["status"] == "pass":
        return RunOutcome(result, Path(out_dir).resolve(), result_path, recorded, None, 0)
    stopped_by = ("SIGTERM" if stop.terminated else "Ctrl-C") if interrupted else None
    code = stop.exit_code if interrupted else 1
    return RunOutcome(result, Path(out_dir).resolve(), result_path, recorded, stopped_by, code)


def _route_request(request: RunWorkloadRequest, out_dir: Path) -> RunRequest:
    """The route's own record of the request: an image's, a SIF's, a venv's or a run here."""
    common = dict(
        out_dir=out_dir,
        preset=request.preset,
        model=request.model,
        data=request.data,
        gpus=request.gpus,
        extra_args=list(request.extra_args),
        site_recipes=request.site_recipes,
    )
    foreign = dict(
        python=request.python,
        wheels=request.wheels,
        probe_timeout=request.probe_timeout,
        pass_hf_token=request.pass_hf_token,
    )
    if request.sif:
        return SifRun(**common, sif=request.sif, network=request.network, **foreign)
    if request.image:
        return ContainerRun(
            **common, image=request.image, shm_size=request.shm_size, network=request.network, **foreign
        )
    if request.venv is not None:
        return VenvRun(**common, venv=request.venv, wheels=request.wheels)
    return RunRequest(**common)


def _run_on_route(request: RunRequest, notify: Notify) -> dict:
    """The run on its route and its final result.json; refusals of the input (the engine's RunError, an out folder
    that cannot be used) are BadInput. The result of an image envbuild did not build must agree
    with what this host checked (run_identity: IdentityMismatch, before anything is written); that of a venv must
    not contradict what the host read of its files (else it is written as an input error)."""
    try:
        end = routes.run(request, notify)
        return _completed(end)
    except (RunError, PermissionError, FileExistsError) as exc:  # BadWorkloadInput is a RunError
        raise BadInput(str(exc)) from exc


def _completed(end: RunEnd) -> dict:
    check = (lambda result: check_foreign_claims(result, end.out_dir)) if end.image is not None else None
    result = finalize(end, check=check)
    contradiction = end.contradicts(result) if end.contradicts else None
    if contradiction:  # the host read the environment's files: what the run reported is refused
        result.update(status="error", error_class="input_error", error=contradiction)
        write_json_atomic(Path(end.out_dir) / RESULT_FILE, result)
    return result


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
            while not parent.exists():  # connect creates the missing directories (and says so: NewMatrixFolder)
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


def _record(db: Path, result: dict, result_path: Path, notify: Notify) -> RecordedRun:
    """File the run in the matrix at `db`; Failed (exit 1) when the store cannot be opened or refuses it."""
    retry = f"(the result stays in {result_path}; `envbuild matrix import {result_path}` retries)"
    try:
        if note := new_folder_note(db):
            notify(NewMatrixFolder(note))
        store = MatrixStore.connect(db)
    except (StoreError, OSError, sqlite3.Error) as exc:
        raise Failed(f"{exc} {retry}") from exc
    try:
        recorded = record_run(store, result, result_path)
    except StoreError as exc:
        raise Failed(f"{exc} {retry}") from exc
    finally:
        store.close()
    notify(Recorded(store.path, recorded.inserted))
    return recorded


def record_run(store: MatrixStore, result: dict, result_path: Path) -> RecordedRun:
    """File the run whose result lies at `result_path` into `store`: its attempt directory, then its row
    (StoreError when the store refuses it)."""
    foreign = (result.get("image") or {}).get("origin") == "foreign"  # envbuild's own record of the run
    attempt = keep_run(store.path, result_path.parent, result, result_path.parent / IMAGE_OUT if foreign else None)
    return store.record_run(result, source=str(result_path), attempt_dir=attempt)
