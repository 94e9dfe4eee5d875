"""An image build: its context from a plan (rendered once, the manifest kept in memory) or from a rendered
directory (its manifest.json read once), built with BuildKit, checked by the image's own verify record, and
filed in the matrix as an attempt (build_record.BuildAttempt). The engine gets the manifest; it never reads
a context's files back."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from builder.engine.build import BuildOptions, BuildOutcome, build_image, read_verify
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
) -> ReproReport:
    """Two no-cache builds of `context`, compared file by file (engine.repro)."""
    return check_reproducible(context.directory, tag, options, console, log_path, context.manifest)
