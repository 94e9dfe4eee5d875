"""An image build: its context from a plan (rendered once, the manifest kept in memory) or from a rendered
directory (its manifest.json read once), built with BuildKit (`run_build`: a build that stopped comes back as a
BuildStop), checked by the image's own verify record, and filed in the matrix as an attempt
(build_record.BuildAttempt: `record_pass`, `record_stop`), whose build-record.json says how long it took, how much
memory was in use and how many compile jobs a source build ran (`compile_jobs`, sized here from the engine's memory).
The engine gets the manifest; it never reads a context's files back. What happens on the way is told to `notify`
(the engine's build events, build_record.Recorded)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from builder import __version__, sbom
from builder.engine.build import (
    BuildError,
    BuildInterrupted,
    BuildOptions,
    BuildOutcome,
    base_digest,
    build_image,
    read_verify,
)
from builder.engine.build_host import EngineResources, MemorySampler, engine_resources, memory_in_use
from builder.engine.docker import EngineUnavailable
from builder.interrupt import describe
from builder.engine.repro import ReproReport, check_reproducible
from builder.paths import SBOM_FILE
from builder.plan.render import read_manifest, render
from builder.plan.resolve import Plan
from builder.store.store import utc_now
from builder.workflows.build_record import BuildAttempt, Measured


@dataclass(frozen=True)
class BuildContext:
    """A written build context and its manifest (None: a hand-made context without manifest.json)."""

    directory: Path
    manifest: dict | None

    def tag(self, tag: str | None, registry: str | None) -> str | None:
        """`tag`, else the manifest's content-hash tag, under `registry` when given; None when neither names one."""
        tag = tag or (self.manifest or {}).get("image_tag")
        if not tag:
            return None
        return f"{registry.rstrip('/')}/{tag}" if registry else tag


def rendered(plan: Plan, out_dir: Path, wheelhouse: Path | None = None) -> BuildContext:
    """Render `plan` into `out_dir` (RenderError passes through); the manifest stays the one in memory."""
    done = render(plan, out_dir, wheelhouse=wheelhouse)
    return BuildContext(done.dockerfile.parent, done.manifest)


def existing(context_dir: Path) -> BuildContext:
    """A context rendered earlier (`envbuild render`), its manifest read once."""
    return BuildContext(Path(context_dir), read_manifest(context_dir))


#: The build argument the torch compile step of a source build reads (its Step in builder/plan/steps.py).
MAX_JOBS_ARG = "MAX_JOBS"


@dataclass(frozen=True)
class CompileJobs:
    """How many compile jobs a source build runs: min(the engine's CPUs, its memory / the per-job figure, less one
    job's worth held back for the rest of the machine), at least one. `available_bytes`: this host's MemAvailable
    now (None where unreadable), to warn when less is free than the jobs may need."""

    max_jobs: int
    per_job_mb: int
    engine: EngineResources
    available_bytes: int | None

    @property
    def reason(self) -> str:
        gib = self.engine.memory_bytes / 2**30
        return (
            f"min({self.engine.cpus} CPUs, {gib:.1f} GiB / {self.per_job_mb} MB per job - 1 held back)"
            f" = {self.max_jobs}"
        )

    @property
    def short_of_memory(self) -> bool:
        """Less memory is free on this host now than the chosen jobs may need at once."""
        return self.available_bytes is not None and self.available_bytes < self.max_jobs * self.per_job_mb * 2**20

    def as_record(self) -> dict:
        return {
            "max_jobs": self.max_jobs,
            "per_job_mb": self.per_job_mb,
            "engine_memory_bytes": self.engine.memory_bytes,
            "engine_cpus": self.engine.cpus,
            "reason": self.reason,
        }


def jobs_for(memory_bytes: int, cpus: int, per_job_mb: int) -> int:
    """min(cpus, memory / per job - 1), at least 1: the engine's total memory, not what is free this minute, so that
    the same machine always passes the same MAX_JOBS (it is part of the compile step's BuildKit cache key)."""
    return max(1, min(cpus, memory_bytes // (per_job_mb * 2**20) - 1))


def compile_jobs(context: BuildContext, resources: EngineResources | None = None) -> CompileJobs | None:
    """The compile jobs of a source build (its manifest names the per-job figure), sized from the engine's memory
    and CPUs; None for a context that compiles no torch. EngineUnavailable passes through."""
    per_job = (context.manifest or {}).get("compile_job_mem_mb")
    if isinstance(per_job, bool) or not isinstance(per_job, int) or per_job <= 0:
        return None
    resources = resources or engine_resources()
    seen = memory_in_use()
    available = seen[1] - seen[0] if seen else None
    return CompileJobs(jobs_for(resources.memory_bytes, resources.cpus, per_job), per_job, resources, available)


def with_compile_jobs(options: BuildOptions, jobs: CompileJobs | None) -> BuildOptions:
    """`options` with MAX_JOBS passed as a build argument (the context's hash does not change: its Dockerfile
    declares the argument with an empty default, which the compile step would fill from the memory it sees)."""
    if jobs is None:
        return options
    return dataclasses.replace(options, build_args={**options.build_args, MAX_JOBS_ARG: str(jobs.max_jobs)})


def start_attempt(db: Path, context: BuildContext, tag: str, log_path: Path | None) -> BuildAttempt | None:
    """The build's attempt directory beside the matrix `db`, or None when the manifest names no cell (such a
    build is not recorded). StoreError passes through."""
    return BuildAttempt.start(db, context.directory, context.manifest, tag, log_path)


def build(
    context: BuildContext, tag: str, options: BuildOptions, notify: Callable[[object], None], log_path: Path | None
) -> BuildOutcome:
    """Build `context` as `tag` (BuildError, BuildInterrupted and EngineUnavailable pass through)."""
    return build_image(context.directory, tag, options, notify, log_path, manifest=context.manifest)


@dataclass(frozen=True)
class BuildStop:
    """A build that ended without an image: interrupted (`how`: "Ctrl-C" or "SIGTERM"; `log_path`: its partial
    log) or failed at a step (`error`, whose failure names the step and its class)."""

    how: str | None = None
    log_path: Path | None = None
    error: BuildError | None = None


def run_build(
    context: BuildContext,
    tag: str,
    options: BuildOptions,
    notify: Callable[[object], None],
    log_path: Path | None,
    attempt: BuildAttempt | None,
) -> BuildOutcome | BuildStop:
    """Build `context` as `tag`. An interrupt or a failing step comes back as a BuildStop, for the caller to report
    and then file (`record_stop`); a bad option (a BuildError without a failing step) and EngineUnavailable drop
    the attempt (nothing was attempted) and pass through. The attempt keeps what was measured: start, end, wall time
    and the host's memory in use (sampled every second)."""
    started_at, started = utc_now(), time.monotonic()
    sampler = MemorySampler().start()
    try:
        return _build_or_stop(context, tag, options, notify, log_path, attempt)
    finally:
        memory = sampler.stop()
        if attempt:
            attempt.measured = Measured(started_at, utc_now(), round(time.monotonic() - started, 1), memory)


def _build_or_stop(
    context: BuildContext,
    tag: str,
    options: BuildOptions,
    notify: Callable[[object], None],
    log_path: Path | None,
    attempt: BuildAttempt | None,
) -> BuildOutcome | BuildStop:
    try:
        return build(context, tag, options, notify, log_path)
    except (BuildInterrupted, KeyboardInterrupt) as exc:
        return BuildStop(how=describe(exc.__cause__ or exc), log_path=getattr(exc, "log_path", None) or log_path)
    except BuildError as exc:
        if exc.failure is not None:
            return BuildStop(error=exc)
        if attempt:
            attempt.discard()
        raise
    except EngineUnavailable:
        if attempt:
            attempt.discard()
        raise


def record_stop(attempt: BuildAttempt, stop: BuildStop, notify: Callable[[object], None]) -> None:
    """File a build that stopped: an interrupted one with class `interrupted`, a failed one with its step's class
    and message (StoreError passes through)."""
    if stop.error is None:
        attempt.finish("fail", "interrupted", f"interrupted ({stop.how})", None, notify)
        return
    failure = stop.error.failure
    attempt.finish(
        "fail", failure.failure_class, f"{failure.step}: {failure.message}"[:500], None, notify, failure=failure
    )


def verify_record(outcome: BuildOutcome) -> dict | None:
    """The image's own verify record when it was built now (a skipped build was verified when it was built)."""
    return None if outcome.skipped else read_verify(outcome.tag)


def record_pass(
    attempt: BuildAttempt,
    context: BuildContext,
    outcome: BuildOutcome,
    verify: dict | None,
    notify: Callable[[object], None],
) -> None:
    """File a finished build: a skipped one is not an attempt (its directory goes), a built one is recorded
    with its verify record in the manifest (StoreError passes through)."""
    if outcome.skipped:
        attempt.discard()
        return
    if verify is not None and context.manifest is not None:
        attempt.manifest = {**context.manifest, "verify": verify}
    attempt.finish("pass", None, None, outcome, notify)


def reproducible(
    context: BuildContext,
    tag: str,
    options: BuildOptions,
    notify: Callable[[object], None],
    log_path: Path,
    rebuild_twice: bool = False,
) -> tuple[ReproReport, Path]:
    """Two images of `context` compared file by file (engine.repro: the existing image under `tag` when its
    context-hash label matches, against one no-cache rebuild; else, or with `rebuild_twice`, two no-cache builds) and
    by their SBOMs (builder.sbom, written beside the context as <context>.repro-1.sbom.cdx.json and -2); the report is
    also written to <context>.repro.json beside the context, whose path comes back with it."""
    report = check_reproducible(context.directory, tag, options, notify, log_path, context.manifest, rebuild_twice)
    directory = context.directory.resolve()
    report = dataclasses.replace(report, sbom=_compare_sboms(report, context, tag, directory))
    out = directory.parent / f"{directory.name}.repro.json"
    out.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return report, out


def _compare_sboms(report: ReproReport, context: BuildContext, tag: str, directory: Path) -> dict:
    """The SBOMs of the two images (as `envbuild image` writes them), compared byte for byte; each image's base digest
    as `base_digest` reads it from the log the report names for it (an existing image: the rebuild's)."""
    if report.contents_error or None in report.contents:
        return {"identical": None, "error": report.contents_error or "the packages were not read"}
    base = (context.manifest or {}).get("base_image")
    documents = [
        sbom.document(tag, contents, context.manifest, base_digest(base, log), __version__)
        for contents, log in zip(report.contents, report.base_logs)
    ]
    for n, document in enumerate(documents, 1):
        (directory.parent / f"{directory.name}.repro-{n}.{SBOM_FILE}").write_bytes(document)
    return {
        "identical": documents[0] == documents[1],
        "sha256": [hashlib.sha256(d).hexdigest() for d in documents],
        "components": [len(sbom.read_components(d)) for d in documents],
    }
