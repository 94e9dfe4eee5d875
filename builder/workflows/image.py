"""`envbuild image`: a request's build context rendered (or a rendered one taken as it is), built with BuildKit, checked
by the image's own verify record, filed in the matrix as an attempt and pushed: the steps of builder.workflows.build
in their order (`build_image`). A dry run plans and builds nothing; `check_reproducible` compares the existing image
under the context's tag with one no-cache rebuild (two rebuilds when there is none, or with `rebuild_twice`).
What happens on the way is told as events (`notify`): the plan's notices, the compile jobs chosen, a build not
recorded, the build's own progress (builder.engine.build: Building, StepRunning, StepFinished, BuildEnded, Built, ...),
a build that stopped (before it is filed), the build filed (Recorded), the verify record, the SBOM and build provenance
written (builder.workflows.build_evidence), the push."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from builder.as_found import will_create
from builder.engine.build import (
    BuildEnded,
    BuildError,
    Building,
    BuildInterrupted,
    BuildOptions,
    Built,
    Pushed,
    Pushing,
    PushError,
    RemoteLooked,
    Skipped,
    StepFinished,
    StepRunning,
    default_log_path,
    push_image,
)
from builder.engine.docker import EngineUnavailable
from builder.engine.repro import ReproReport
from builder.interrupt import describe, stop_signals
from builder.paths import output_problem
from builder.plan.image_ref import is_image_reference
from builder.plan.render import DOCKERFILE, RenderError
from builder.store.attempt_files import ATTEMPTS_DIR
from builder.store.store import StoreError
from builder.workflows import build, build_evidence
from builder.workflows.build import BuildContext, BuildStop, CompileJobs
from builder.workflows.build_evidence import Described
from builder.workflows.build_record import BuildAttempt, Recorded
from builder.workflows.errors import BadInput, BadRequest, BadValue, Failed
from builder.workflows.matrix_file import db_path, preflight
from builder.workflows.render import CellRequest, plan_cell

if TYPE_CHECKING:
    from builder.plan.resolve import Plan

__all__ = [
    "BuildEnded",
    "BuildStop",
    "BuildStopped",
    "Building",
    "Built",
    "CompileJobs",
    "Described",
    "DryRun",
    "ImageBuilt",
    "ImageRequest",
    "NotRecorded",
    "Pushed",
    "Pushing",
    "Recorded",
    "RemoteLooked",
    "ReproInterrupted",
    "Reproducibility",
    "Skipped",
    "StepFinished",
    "StepRunning",
    "Verified",
    "build_image",
]


@dataclass(frozen=True)
class ImageRequest:
    """What `envbuild image` was asked, its flags checked against each other (builder.cli.image)."""

    cell: CellRequest | None  # the version request to render; None: build `context_dir` as it is
    context_dir: Path | None = None
    out: Path | None = None  # where to render (None: ./envbuild-contexts/<cell>)
    tag: str | None = None  # None: the context's content-hash tag
    registry: str | None = None
    ca_cert: Path | None = None
    network: str | None = None  # None, "host" or "none"
    wheelhouse: Path | None = None
    cache_from: tuple[str, ...] = ()
    cache_to: tuple[str, ...] = ()
    push: bool = False
    reuse_remote: bool = False
    force: bool = False
    no_cache: bool = False
    log_path: Path | None = None
    dry_run: bool = False
    check_reproducible: bool = False
    rebuild_twice: bool = False  # check_reproducible: two builds even when the tag exists with this context's hash
    key: Path | None = None  # sign the image's build provenance with this SSH key
    db: Path | None = None
    record: bool = True
    site: Path | None = None  # a site's recipe folder over the packaged one


@dataclass(frozen=True)
class DryRun:
    """The plan and tag; `context_dir` None: nothing was kept (the context was rendered in a scratch folder)."""

    plan: Plan | None  # None: a given context
    context_dir: Path | None
    manifest: dict | None
    tag: str

    @property
    def dockerfile(self) -> Path | None:
        return self.context_dir / DOCKERFILE if self.context_dir is not None else None


@dataclass(frozen=True)
class Reproducibility:
    report: ReproReport
    out: Path  # the report's JSON beside the context


@dataclass(frozen=True)
class ImageBuilt:
    tag: str


@dataclass(frozen=True)
class BuildStopped:
    """The build (or one of those of `check_reproducible`) stopped, as told by a BuildStop event; the command ends
    with `exit_code`."""

    exit_code: int


@dataclass(frozen=True)
class NotRecorded:
    """The context's manifest names no cell: the build is not filed in the matrix."""


@dataclass(frozen=True)
class Verified:
    record: dict  # the image's verify record (checks, arch_coverage)


@dataclass(frozen=True)
class ReproInterrupted:
    """A build of `check_reproducible` was interrupted; nothing was tagged (the existing image stays as it was)."""

    message: str
    log_path: Path | None


def build_image(
    request: ImageRequest, notify: Callable[[object], None]
) -> DryRun | Reproducibility | ImageBuilt | BuildStopped:
    """Render (or take) the context, then plan it (`dry_run`), check it (`check_reproducible`) or build, file and push
    it. The events `notify` gets: the plan's notices and other lines, CompileJobs, NotRecorded, the build's own
    (RemoteLooked, Skipped, Building, StepRunning, StepFinished, BuildEnded, Built), BuildStop (before it is filed),
    Recorded, ReproInterrupted, Verified, Described (the SBOM and provenance written), Pushing, Pushed. Bad requests
    are BadRequest / BadValue, an unusable matrix or a missing engine BadInput (exit 2, nothing built or recorded); a
    build that finished but could not be filed, and a push that failed, are Failed (exit 1)."""
    _refuse_bad_names(request.tag, request.registry)
    context, plan = _context(request, notify)
    if isinstance(context, DryRun):
        return context
    tag = _tag_of(context, request.tag, request.registry)
    if request.dry_run:
        return DryRun(plan, context.directory, context.manifest, tag)
    will_create(request.log_path or default_log_path(context.directory))
    options, jobs = _build_options(request, context, notify)
    if request.check_reproducible:
        return _reproducible(context, tag, options, request, notify)
    attempt = _attempt(request, context, tag, jobs, notify)
    log_path = attempt.log_path if attempt else request.log_path
    with stop_signals() as stop:
        try:
            outcome = build.run_build(context, tag, options, notify, log_path, attempt)
        except BuildError as exc:  # no failing step: an option the engine refused, nothing attempted
            raise BadRequest(str(exc)) from exc
        except EngineUnavailable as exc:
            raise BadInput(str(exc)) from exc
        if isinstance(outcome, BuildStop):
            notify(outcome)
            if attempt:
                _recorded(attempt, lambda: build.record_stop(attempt, outcome, notify))
            return BuildStopped(stop.exit_code if outcome.error is None else 1)
    verify = build.verify_record(outcome)
    if verify is not None:
        notify(Verified(verify))
    notify(build_evidence.describe(context, outcome, options, attempt, request.key))
    if attempt:
        _recorded(attempt, lambda: build.record_pass(attempt, context, outcome, verify, notify))
    if request.push:
        _push(tag, notify)
    return ImageBuilt(tag)


def _context(request: ImageRequest, notify: Callable[[object], None]) -> tuple[BuildContext | DryRun, Plan | None]:
    """The build context: the request's plan rendered (a dry run without `out`: in a scratch folder, kept nowhere),
    or the given one."""
    if request.cell is None:
        if not (request.context_dir / DOCKERFILE).is_file():
            raise BadRequest(f"{request.context_dir} has no Dockerfile: render it first (`envbuild render`)")
        return build.existing(request.context_dir), None
    plan = plan_cell(request.cell, request.site, notify)
    if request.dry_run and request.out is None:  # the tag is the content hash: render to a scratch dir
        with tempfile.TemporaryDirectory(prefix="envbuild-dry-run-") as scratch:
            context = _render(plan, Path(scratch) / plan.cell.key)
            return DryRun(plan, None, context.manifest, _tag_of(context, request.tag, request.registry)), plan
    context_dir = request.out or Path("envbuild-contexts") / plan.cell.key
    if request.out is None and (problem := output_problem(context_dir)):
        raise BadValue(problem, "out")
    will_create(context_dir)
    return _render(plan, context_dir, request.wheelhouse), plan


def _render(plan: Plan, context_dir: Path, wheelhouse: Path | None = None) -> BuildContext:
    try:
        return build.rendered(plan, context_dir, wheelhouse)
    except RenderError as exc:
        raise BadRequest(str(exc)) from exc


def _refuse_bad_names(tag: str | None, registry: str | None) -> None:
    """--tag and --registry (and the two joined, as the build tags the image) must parse as image references, before
    anything is rendered: the engine refuses anything else only after the work (BadRequest)."""
    names = [("--registry", registry)] if registry else []
    if tag:
        names.append(("--tag", f"{registry.rstrip('/')}/{tag}" if registry else tag))
    for flag, name in names:
        if not is_image_reference(name):
            raise BadRequest(
                f"{flag}: {name!r} is not an image reference; give [registry/]name[:tag] in lower case, "
                "e.g. envbuild/cpu:dev"
            )


def _tag_of(context: BuildContext, tag: str | None, registry: str | None) -> str:
    tag = context.tag(tag, registry)
    if not tag:
        raise BadRequest(f"{context.directory}/manifest.json has no image_tag: pass --tag")
    return tag


def _build_options(
    request: ImageRequest, context: BuildContext, notify: Callable[[object], None]
) -> tuple[BuildOptions, CompileJobs | None]:
    """The build options of the request, with the compile jobs of a source build (told as a CompileJobs event)."""
    options = BuildOptions(
        network=None if request.network == "default" else request.network,
        ca_cert=request.ca_cert,
        wheelhouse=request.wheelhouse,
        cache_from=request.cache_from,
        cache_to=request.cache_to,
        force=request.force,
        reuse_remote=request.reuse_remote,
        no_cache=request.no_cache,
    )
    try:
        jobs = build.compile_jobs(context)
    except EngineUnavailable as exc:
        raise BadInput(str(exc)) from exc
    if jobs is None:
        return options, None
    notify(jobs)
    return build.with_compile_jobs(options, jobs), jobs


def _attempt(
    request: ImageRequest, context: BuildContext, tag: str, jobs: CompileJobs | None, notify: Callable[[object], None]
) -> BuildAttempt | None:
    """The build's attempt directory beside the matrix file (checked first), or None: not recorded."""
    if not request.record:
        return None
    preflight(request.db)
    will_create(db_path(request.db).resolve().parent / ATTEMPTS_DIR)
    try:
        attempt = build.start_attempt(db_path(request.db), context, tag, request.log_path)
    except StoreError as exc:
        raise BadInput(str(exc)) from exc
    if attempt is None:
        notify(NotRecorded())
    else:
        attempt.compile_jobs = jobs.as_record() if jobs else None
    return attempt


def _reproducible(
    context: BuildContext,
    tag: str,
    options: BuildOptions,
    request: ImageRequest,
    notify: Callable[[object], None],
) -> Reproducibility | BuildStopped:
    """The existing image against one no-cache rebuild (or two no-cache builds), compared file by file; the report
    goes to <context>.repro.json."""
    log_path = request.log_path or default_log_path(context.directory)
    with stop_signals() as stop:
        try:
            return Reproducibility(*build.reproducible(context, tag, options, notify, log_path, request.rebuild_twice))
        except BuildInterrupted as exc:
            notify(ReproInterrupted(str(exc), exc.log_path))
            return BuildStopped(stop.exit_code)
        except KeyboardInterrupt as exc:  # while an image was read: the temporary images are gone already
            notify(ReproInterrupted(f"check interrupted ({describe(exc)}) while reading an image", None))
            return BuildStopped(stop.exit_code)
        except BuildError as exc:
            if exc.failure is None:
                raise BadRequest(str(exc)) from exc
            notify(BuildStop(error=exc))
            return BuildStopped(1)
        except EngineUnavailable as exc:
            raise BadInput(str(exc)) from exc


def _recorded(attempt: BuildAttempt, record: Callable[[], None]) -> None:
    """`record()` files the attempt; a store that refuses it is Failed, naming the attempt's record."""
    try:
        record()
    except StoreError as exc:
        raise Failed(
            f"the build finished but could not be recorded: {exc} (its attempt record: {attempt.directory})"
        ) from exc


def _push(tag: str, notify: Callable[[object], None]) -> None:
    try:
        push_image(tag, notify)
    except EngineUnavailable as exc:
        raise BadInput(str(exc)) from exc
    except PushError as exc:
        raise Failed(str(exc)) from exc
