"""`envbuild image`: render a request's build context and build it with BuildKit (or build a given context)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from builder.cli.as_found import leaves_as_found, will_create
from builder.cli.prerequisites import MissingPrerequisite
from builder.cli.paths import writable_output
from builder.cli.render import plan_from_options, plan_table, request_options
from builder.cli.store_options import DatabaseError, db_option, preflight_store
from builder.engine.build import BuildError, BuildInterrupted, BuildOptions, PushError, default_log_path, push_image
from builder.engine.docker import EngineUnavailable
from builder.engine.interrupt import EXIT_INTERRUPTED, sigterm_as_interrupt
from builder.plan.render import DOCKERFILE, RenderError
from builder.store.attempt_files import ATTEMPTS_DIR
from builder.store.store import StoreError, default_db_path
from builder.workflows import build as workflow, build_evidence as evidence
from builder.workflows.build_record import BuildAttempt


def _tag_of(context: workflow.BuildContext, tag: str | None, registry: str | None) -> str:
    tag = context.tag(tag, registry)
    if not tag:
        raise click.UsageError(f"{context.directory}/manifest.json has no image_tag: pass --tag")
    return tag


@click.command("image")
@request_options
@click.option(
    "-o",
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to render the context [default: ./envbuild-contexts/<cell>].",
)
@click.option(
    "--context",
    "context_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Build this rendered context dir (from `envbuild render`) instead of a request.",
)
@click.option("--tag", help="Image tag [default: the content-hash tag of the context's manifest].")
@click.option("--registry", help="Registry/namespace to prefix the tag with (for --push).")
@click.option(
    "--ca-cert",
    type=click.Path(path_type=Path),
    help="CA bundle of a TLS-intercepting proxy: given to RUN steps as BuildKit secret "
    "`envbuild_ca`, never stored in a layer.",
)
@click.option(
    "--network",
    type=click.Choice(["default", "host", "none"]),
    default=None,
    help="Network for RUN steps (host where the default bridge has no route out).",
)
@click.option(
    "--wheelhouse",
    type=click.Path(path_type=Path),
    help="Dir of wheels to install from (air-gapped); torch comes from it, not an index.",
)
@click.option("--cache-from", multiple=True, metavar="REF", help="BuildKit cache source (repeatable).")
@click.option(
    "--cache-to", multiple=True, metavar="REF", help="BuildKit cache export (repeatable; type=inline without buildx)."
)
@click.option("--push", is_flag=True, help="Push the image after building (or when it exists already).")
@click.option(
    "--reuse-remote",
    is_flag=True,
    help="With --registry: when the content-hash tag is already in the "
    "registry, pull it instead of building (CI never rebuilds what it has).",
)
@click.option("--force", is_flag=True, help="Build even when the content-hash tag exists locally.")
@click.option("--no-cache", is_flag=True, help="Ignore BuildKit's layer cache (a cold build).")
@click.option(
    "--log",
    "log_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Full build log [default: build.log in the build's attempt directory; with --no-record "
    "<context>.build.log next to the context dir].",
)
@click.option("--dry-run", is_flag=True, help="Print the plan, stages, tag and Dockerfile path; build nothing.")
@click.option(
    "--check-reproducible",
    is_flag=True,
    help="Build twice with --no-cache under temporary tags, compare the two filesystems file by file, "
    "remove both; exit 1 if a difference is not in the allow-list (docs/docker.md). Tags nothing, "
    "records nothing.",
)
@click.option(
    "--sign",
    "key",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Sign the image's build provenance with this SSH key (private key, or public key with the private half in "
    "ssh-agent): writes provenance.intoto.jsonl beside provenance.json and the SBOM.",
)
@db_option
@click.option("--no-record", is_flag=True, help="Do not record the build in the matrix.")
@leaves_as_found
def image(
    out: Path | None,
    context_dir: Path | None,
    tag: str | None,
    registry: str | None,
    ca_cert: Path | None,
    network: str | None,
    wheelhouse: Path | None,
    cache_from: tuple[str, ...],
    cache_to: tuple[str, ...],
    push: bool,
    reuse_remote: bool,
    force: bool,
    no_cache: bool,
    log_path: Path | None,
    dry_run: bool,
    check_reproducible: bool,
    key: Path | None,
    db: Path | None,
    no_record: bool,
    **request,
) -> None:
    """Render the build context of a request (e.g. `--rocm 7.2 --torch 2.11 --arch MI300X`) and build it with BuildKit.

    The tag is the context's content hash, so an unchanged request is skipped. On failure: the failing
    step, its last output lines and a failure class. Each build is recorded with its own attempt directory
    (context, full log) beside the matrix file. --dry-run writes nothing unless -o is given.

    Exit code 0 built/skipped (or planned), 1 build failed, 2 bad input (nothing built), 130 Ctrl-C,
    143 SIGTERM (both stop BuildKit, tag nothing and record the attempt as interrupted)."""
    console = Console(stderr=True, soft_wrap=True)
    if out is not None:
        writable_output(out, "'-o' / '--out'")
    if log_path is not None and not dry_run:
        writable_output(log_path, "'--log'", is_file=True)
    if ca_cert and not ca_cert.is_file():
        raise click.BadParameter(f"{ca_cert}: no such file", param_hint="--ca-cert")
    if reuse_remote and not registry:
        raise click.UsageError("--reuse-remote looks the content-hash tag up in a registry: give --registry REF")
    if wheelhouse and not wheelhouse.is_dir():
        raise click.BadParameter(f"{wheelhouse}: not a directory", param_hint="--wheelhouse")
    if key is not None and not key.is_file():
        raise click.BadParameter(f"{key}: no such key file", param_hint="--sign")
    if check_reproducible and push:
        raise click.UsageError("--check-reproducible tags nothing, so there is nothing to --push; run them separately")
    plan = None
    if context_dir is None:
        if all(request[k] is None for k in ("torch", "rocm", "cuda", "flavor")):
            raise click.UsageError("give a request (e.g. --rocm 7.2 --torch 2.11) or --context DIR")
        plan = plan_from_options(**request)
        if dry_run and out is None:  # the tag is the content hash: render to a scratch dir, keep nothing
            with tempfile.TemporaryDirectory(prefix="envbuild-dry-run-") as scratch:
                context = _render(plan, Path(scratch) / plan.cell.key)
                _print_dry_run(None, context.manifest, _tag_of(context, tag, registry), plan)
            return
        context_dir = out or Path("envbuild-contexts") / plan.cell.key
        if out is None:
            writable_output(context_dir, "'-o' / '--out'")
        will_create(context_dir)
        context = _render(plan, context_dir, wheelhouse)
    elif request["torch"] is not None or request["rocm"] is not None or request["cuda"] is not None:
        raise click.UsageError("--context DIR builds an existing context: drop the request flags (--rocm/--torch/...)")
    elif wheelhouse is not None:
        raise click.UsageError(
            "--context DIR builds the wheels already in DIR/wheelhouse/, which its tag covers; "
            "to change them, re-render: `envbuild render ... --wheelhouse WHEELS -o DIR`"
        )
    elif not (context_dir / DOCKERFILE).is_file():
        raise click.UsageError(f"{context_dir} has no Dockerfile: render it first (`envbuild render`)")
    else:
        context = workflow.existing(context_dir)
    context_dir = context.directory
    tag = _tag_of(context, tag, registry)
    if dry_run:
        _print_dry_run(context_dir, context.manifest, tag, plan)
        return
    will_create(log_path or default_log_path(context_dir))
    options = BuildOptions(
        network=None if network == "default" else network,
        ca_cert=ca_cert,
        wheelhouse=wheelhouse,
        cache_from=cache_from,
        cache_to=cache_to,
        force=force,
        reuse_remote=reuse_remote,
        no_cache=no_cache,
    )
    try:
        jobs = workflow.compile_jobs(context)
    except EngineUnavailable as exc:
        raise MissingPrerequisite(str(exc)) from exc
    if jobs is not None:
        _print_jobs(jobs, console)
        options = workflow.with_compile_jobs(options, jobs)
    if check_reproducible:
        _check_reproducible(context, tag, options, console, log_path or default_log_path(context_dir))
        return
    attempt = None
    if not no_record:
        preflight_store(db)
        will_create(Path(db or default_db_path()).resolve().parent / ATTEMPTS_DIR)
        try:
            attempt = workflow.start_attempt(db or default_db_path(), context, tag, log_path)
        except StoreError as exc:
            raise DatabaseError(str(exc)) from exc
        if attempt is None:
            console.print("[dim]not recorded: the context's manifest.json names no cell[/]")
        else:
            log_path = attempt.log_path
            attempt.compile_jobs = jobs.as_record() if jobs else None
    with sigterm_as_interrupt() as stop:
        try:
            outcome = workflow.run_build(context, tag, options, console, log_path, attempt)
        except BuildError as exc:  # no failing step: an option the engine refused, nothing attempted
            raise click.UsageError(str(exc)) from exc
        except EngineUnavailable as exc:
            raise MissingPrerequisite(str(exc)) from exc
        if isinstance(outcome, workflow.BuildStop):
            if outcome.error is None:
                console.print(
                    f"[yellow]build interrupted ({outcome.how}); nothing was tagged[/]; partial log: "
                    f"{escape(str(outcome.log_path or '-'))}"
                )
            else:
                _print_failure(outcome.error, console)
            if attempt:
                _recorded(attempt, lambda: workflow.record_stop(attempt, outcome, console))
            sys.exit(stop.exit_code if outcome.error is None else 1)
    verify = workflow.verify_record(outcome)
    if verify is not None:
        coverage = verify.get("arch_coverage") or {}
        arch = f"; {coverage['arch']} code objects: {coverage['verdict']}" if coverage.get("arch") else ""
        console.print(f"verify: {len(verify.get('checks', []))} checks passed in the image{escape(arch)}")
    _print_described(evidence.describe(context, outcome, options, attempt, key), console)
    if attempt:
        _recorded(attempt, lambda: workflow.record_pass(attempt, context, outcome, verify, console))
    if push:
        try:
            push_image(tag, console)
        except EngineUnavailable as exc:
            raise MissingPrerequisite(str(exc)) from exc
        except PushError as exc:
            raise click.ClickException(str(exc)) from exc
    click.echo(tag)


def _render(plan, context_dir: Path, wheelhouse: Path | None = None) -> workflow.BuildContext:
    try:
        return workflow.rendered(plan, context_dir, wheelhouse)
    except RenderError as exc:
        raise click.UsageError(str(exc)) from exc


def _check_reproducible(
    context: workflow.BuildContext, tag: str, options: BuildOptions, console: Console, log_path: Path
) -> None:
    """Two no-cache builds, compared file by file; the report goes to <context>.repro.json."""
    try:
        report, out = workflow.reproducible(context, tag, options, console, log_path)
    except BuildInterrupted as exc:
        console.print(f"[yellow]{exc}[/]; partial log: {exc.log_path}")
        sys.exit(EXIT_INTERRUPTED)
    except BuildError as exc:
        if exc.failure is None:
            raise click.UsageError(str(exc)) from exc
        _print_failure(exc, console)
        sys.exit(1)
    except EngineUnavailable as exc:
        raise MissingPrerequisite(str(exc)) from exc
    counted, shown = report.counted, 100
    console.print(f"build times: {report.seconds[0]:.1f} s and {report.seconds[1]:.1f} s (--no-cache)")
    console.print(
        f"{len(report.differences)} of {report.paths} paths differ between the two builds "
        f"({len(counted)} outside the allow-list; mtimes not compared); report: {out}"
    )
    for diff in counted[:shown]:
        console.print(f"  differs: {diff.path} ({diff.what})", highlight=False, markup=False)
    if len(counted) > shown:
        console.print(f"  ... and {len(counted) - shown} more (all in {out})")
    for diff in report.differences:
        if diff.allowed is not None:
            console.print(f"  allowed: {diff.path} ({diff.what}): {diff.allowed}", highlight=False, markup=False)
    sboms = report.sbom or {}
    if sboms.get("sha256"):
        same = "DIFFERENT" if report.sboms_differ else "identical"
        console.print(f"SBOMs of the two builds: {same} (sha256 {', '.join(s[:16] for s in sboms['sha256'])})")
    else:
        console.print(f"SBOMs of the two builds: not compared ({escape(str(sboms.get('error')))})")
    click.echo(f"differing paths outside the allow-list: {len(counted)}")
    if counted or report.sboms_differ:
        sys.exit(1)


def _print_dry_run(context_dir: Path | None, manifest: dict | None, tag: str, plan) -> None:
    """The plan; `context_dir` None: nothing was kept (no -o), so no paths are printed."""
    manifest = manifest or {}
    if plan is not None:
        Console().print(plan_table(plan, f"plan for {plan.cell.key}"))
        click.echo(f"torch:      {plan.torch_source} ({plan.torch_source_reason})")
    if context_dir is None:
        click.echo("context:    not written (dry run; pass -o DIR to keep the build context)")
    else:
        click.echo(f"context:    {context_dir.resolve()}")
        click.echo(f"Dockerfile: {(context_dir / DOCKERFILE).resolve()}")
    click.echo(f"image tag:  {tag}")
    stages = plan.stages if plan is not None else manifest.get("stages")
    if stages:
        click.echo("stages:     " + " -> ".join(str(s) for s in stages))
    if plan is None:
        click.echo("manifest:\n" + json.dumps({k: v for k, v in manifest.items() if k != "files"}, indent=2))


def _print_described(described: evidence.Described, console: Console) -> None:
    """Where the SBOM and the provenance went, and what could not be done."""
    if described.counts:
        counts = ", ".join(f"{n} {source}" for source, n in sorted(described.counts.items()))
        console.print(f"SBOM: {sum(described.counts.values())} components ({counts})")
    for path in described.written:
        console.print(f"  wrote {escape(str(path))}")
    if described.signed_by:
        console.print(f"provenance signed by {escape(described.signed_by)}")
    if described.problem:
        console.print(f"[yellow]warning[/]: {escape(described.problem)}")


def _print_jobs(jobs: workflow.CompileJobs, console: Console) -> None:
    """The compile jobs a source build runs, and a warning when less memory is free now than they may need."""
    console.print(f"compile jobs: MAX_JOBS={jobs.max_jobs} ({escape(jobs.reason)}; the engine's machine)")
    if jobs.short_of_memory:
        console.print(
            f"[yellow]warning[/]: {jobs.available_bytes / 2**30:.1f} GiB is free on this machine now; "
            f"{jobs.max_jobs} compile jobs may need up to {jobs.max_jobs * jobs.per_job_mb / 1024:.1f} GiB at once: "
            "close what else runs here, or the compiler may be killed (failure class compiler_out_of_memory)"
        )


def _print_failure(exc: BuildError, console: Console) -> None:
    failure = exc.failure
    console.print(f"[red]build failed[/] at step [bold]{escape(failure.step)}[/]")
    console.print(f"failure class: [bold]{failure.failure_class}[/] - {failure.hint}")
    if failure.message:
        console.print(f"error: {failure.message}", highlight=False, markup=False)
    if failure.evidence:
        console.print("lines that look like the cause:")
        for line in failure.evidence:
            console.print(f"  > {line}", highlight=False, markup=False)
    if failure.tail:
        console.print("last lines of the step:")
        for line in failure.tail:
            console.print(f"  | {line}", highlight=False, markup=False)
    console.print(f"full log: {exc.log_path}")


def _recorded(attempt: BuildAttempt, record) -> None:
    """`record()` files the attempt; a store that refuses it is an error that names the attempt's record."""
    try:
        record()
    except StoreError as exc:
        raise click.ClickException(
            f"the build finished but could not be recorded: {exc} (its attempt record: {attempt.directory})"
        ) from exc
