"""An image build: its context from a plan (rendered once, the manifest kept in memory) or from a rendered
directory (its manifest.json read once), built with BuildKit (`run_build`: a build that stopped comes back as a
BuildStop), checked by the image's own verify record, and filed in the matrix as an attempt
(build_record.BuildAttempt: `record_pass`, `record_stop`). The engine gets the manifest; it never reads a
context's files back."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from builder.engine.build import BuildError, BuildInterrupted, BuildOptions, BuildOutcome, build_image, read_verify
from builder.engine.docker import EngineUnavailable
from builder.engine.interrupt import describe
from builder.engine.repro import ReproReport, check_reproducible
from builder.plan.render import read_manifest, render
from builder.plan.resolve import Plan
from builder.workflows.build_record import BuildAttempt


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


def start_attempt(db: Path, context: BuildContext, tag: str, log_path: Path | None) -> BuildAttempt | None:
    """The build's attempt directory beside the matrix `db`, or None when the manifest names no cell (such a
    build is not recorded). StoreError passes through."""
    return BuildAttempt.start(db, context.directory, context.manifest, tag, log_path)


def build(
    context: BuildContext, tag: str, options: BuildOptions, console: Console, log_path: Path | None
) -> BuildOutcome:
    """Build `context` as `tag` (BuildError, BuildInterrupted and EngineUnavailable pass through)."""
    return build_image(context.directory, tag, options, console, log_path, manifest=context.manifest)


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
    console: Console,
    log_path: Path | None,
    attempt: BuildAttempt | None,
) -> BuildOutcome | BuildStop:
    """Build `context` as `tag`. An interrupt or a failing step comes back as a BuildStop, for the caller to report
    and then file (`record_stop`); a bad option (a BuildError without a failing step) and EngineUnavailable drop
    the attempt (nothing was attempted) and pass through."""
    try:
        return build(context, tag, options, console, log_path)
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


def record_stop(attempt: BuildAttempt, stop: BuildStop, console: Console) -> None:
    """File a build that stopped: an interrupted one with class `interrupted`, a failed one with its step's class
    and message (StoreError passes through)."""
    if stop.error is None:
        attempt.finish("fail", "interrupted", f"interrupted ({stop.how})", None, console)
        return
    failure = stop.error.failure
    attempt.finish("fail", failure.failure_class, f"{failure.step}: {failure.message}"[:500], None, console)


def verify_record(outcome: BuildOutcome) -> dict | None:
    """The image's own verify record when it was built now (a skipped build was verified when it was built)."""
    return None if outcome.skipped else read_verify(outcome.tag)


def record_pass(
    attempt: BuildAttempt, context: BuildContext, outcome: BuildOutcome, verify: dict | None, console: Console
) -> None:
    """File a finished build: a skipped one is not an attempt (its directory goes), a built one is recorded
    with its verify record in the manifest (StoreError passes through)."""
    if outcome.skipped:
        attempt.discard()
        return
    if verify is not None and context.manifest is not None:
        attempt.manifest = {**context.manifest, "verify": verify}
    attempt.finish("pass", None, None, outcome, console)


def reproducible(
    context: BuildContext, tag: str, options: BuildOptions, console: Console, log_path: Path
) -> tuple[ReproReport, Path]:
    """Two no-cache builds of `context`, compared file by file (engine.repro); the report is also written to
    <context>.repro.json beside the context, whose path comes back with it."""
    report = check_reproducible(context.directory, tag, options, console, log_path, context.manifest)
    directory = context.directory.resolve()
    out = directory.parent / f"{directory.name}.repro.json"
    out.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return report, out
