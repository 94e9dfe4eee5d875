"""`envbuild image`: render a request's build context and build it with BuildKit (or build a given context)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from builder.as_found import leaves_as_found
from builder.cli import site_recipes
from builder.cli.build_view import BuildView
from builder.cli.errors import workflow_errors
from builder.cli.paths import writable_output
from builder.cli.request_options import plan_table, request_from_options, request_options
from builder.cli.store_options import db_option
from builder.workflows.image import (
    BuildStop,
    BuildStopped,
    CompileJobs,
    Described,
    DryRun,
    ImageRequest,
    NotRecorded,
    ReproInterrupted,
    Reproducibility,
    Verified,
    build_image,
)

#: The flags of the version request (request_options), the rest are the ImageRequest's own.
_CELL_FLAGS = (
    "flavor",
    "rocm",
    "cuda",
    "torch",
    "arch",
    "python",
    "torch_source",
    "base_image",
    "install_rocm",
    "proven_only",
)


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
    help="Compare the image under the context's tag (when it exists with this context's hash label) with one "
    "--no-cache rebuild under a temporary tag, else build twice with --no-cache under temporary tags; compare the "
    "two filesystems file by file and their SBOMs, remove the temporary images; exit 1 if a difference is not in "
    "the allow-list (docs/docker.md). Tags nothing, removes no other image, records nothing.",
)
@click.option(
    "--rebuild-twice",
    is_flag=True,
    help="With --check-reproducible: build twice even when the tag exists (do not trust the existing image).",
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
@workflow_errors(out="'-o' / '--out'", key="--sign")
def image(**flags) -> None:
    """Render the build context of a request (e.g. `--rocm 7.2 --torch 2.11 --arch MI300X`) and build it with BuildKit.

    The tag is the context's content hash, so an unchanged request is skipped. On failure: the failing
    step, its last output lines and a failure class. Each build is recorded with its own attempt directory
    (context, full log) beside the matrix file. --dry-run writes nothing unless -o is given.

    Exit code 0 built/skipped (or planned), 1 build failed, 2 bad input (nothing built), 130 Ctrl-C,
    143 SIGTERM (both stop BuildKit, tag nothing and record the attempt as interrupted)."""
    console = Console(stderr=True, soft_wrap=True)
    view = BuildView(console)
    outcome = build_image(_image_request(flags), notify=lambda event: _show_build_event(event, console, view))
    if isinstance(outcome, DryRun):
        _print_dry_run(outcome)
    elif isinstance(outcome, Reproducibility):
        _print_reproducibility(outcome, console)
    elif isinstance(outcome, BuildStopped):
        sys.exit(outcome.exit_code)
    else:
        click.echo(outcome.tag)


def _image_request(flags: dict) -> ImageRequest:
    """The request the flags make, checked against each other and the file system (click errors: exit code 2)."""
    cell_flags = {name: flags.pop(name) for name in _CELL_FLAGS}
    if flags["out"] is not None:
        writable_output(flags["out"], "'-o' / '--out'")
    if flags["log_path"] is not None and not flags["dry_run"]:
        writable_output(flags["log_path"], "'--log'", is_file=True)
    if flags["ca_cert"] and not flags["ca_cert"].is_file():
        raise click.BadParameter(f"{flags['ca_cert']}: no such file", param_hint="--ca-cert")
    if flags["reuse_remote"] and not flags["registry"]:
        raise click.UsageError("--reuse-remote looks the content-hash tag up in a registry: give --registry REF")
    if flags["wheelhouse"] and not flags["wheelhouse"].is_dir():
        raise click.BadParameter(f"{flags['wheelhouse']}: not a directory", param_hint="--wheelhouse")
    if flags["key"] is not None and not flags["key"].is_file():
        raise click.BadParameter(f"{flags['key']}: no such key file", param_hint="--sign")
    if flags["rebuild_twice"] and not flags["check_reproducible"]:
        raise click.UsageError("--rebuild-twice is a mode of --check-reproducible: give both")
    if flags["check_reproducible"] and flags["push"]:
        raise click.UsageError("--check-reproducible tags nothing, so there is nothing to --push; run them separately")
    cell = None
    if flags["context_dir"] is None:
        if all(cell_flags[k] is None for k in ("torch", "rocm", "cuda", "flavor")):
            raise click.UsageError("give a request (e.g. --rocm 7.2 --torch 2.11) or --context DIR")
        cell = request_from_options(**cell_flags)
    elif any(cell_flags[k] is not None for k in ("torch", "rocm", "cuda")):
        raise click.UsageError("--context DIR builds an existing context: drop the request flags (--rocm/--torch/...)")
    elif flags["wheelhouse"] is not None:
        raise click.UsageError(
            "--context DIR builds the wheels already in DIR/wheelhouse/, which its tag covers; "
            "to change them, re-render: `envbuild render ... --wheelhouse WHEELS -o DIR`"
        )
    return ImageRequest(cell, record=not flags.pop("no_record"), site=site_recipes.folder(), **flags)


def _show_build_event(event: object, console: Console, view: BuildView) -> None:
    """One event of the build as it happens (stderr): the build's own progress (`view`), or the workflow's."""
    if view.show(event):
        return
    if isinstance(event, str):  # a notice of the plan, or a line of --check-reproducible
        click.echo(event, err=True)
    elif isinstance(event, CompileJobs):
        _print_jobs(event, console)
    elif isinstance(event, NotRecorded):
        console.print("[dim]not recorded: the context's manifest.json names no cell[/]")
    elif isinstance(event, ReproInterrupted):
        log = f"; partial log: {escape(str(event.log_path))}" if event.log_path else ""
        console.print(f"[yellow]{escape(event.message)}[/]{log}")
    elif isinstance(event, BuildStop) and event.error is None:
        console.print(
            f"[yellow]build interrupted ({event.how}); nothing was tagged[/]; partial log: "
            f"{escape(str(event.log_path or '-'))}"
        )
    elif isinstance(event, BuildStop):
        _print_failure(event.error, console)
    elif isinstance(event, Verified):
        coverage = event.record.get("arch_coverage") or {}
        arch = f"; {coverage['arch']} code objects: {coverage['verdict']}" if coverage.get("arch") else ""
        console.print(f"verify: {len(event.record.get('checks', []))} checks passed in the image{escape(arch)}")
    elif isinstance(event, Described):
        _print_described(event, console)


def _print_reproducibility(outcome: Reproducibility, console: Console) -> None:
    """The comparison of the two images (the existing one and a rebuild, or two builds); exit code 1 when a
    difference is outside the allow-list or the SBOMs differ."""
    report, out = outcome.report, outcome.out
    counted, shown = report.counted, 100
    pair = "the existing image and the rebuild" if report.existing_id else "the two builds"
    console.print(f"compared: {escape(report.compared)}")
    times = " s and ".join(f"{s:.1f}" for s in report.seconds)
    console.print(f"build time{'s' if len(report.seconds) > 1 else ''}: {times} s (--no-cache)")
    console.print(
        f"{len(report.differences)} of {report.paths} paths differ between {pair} "
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
        console.print(f"SBOMs of {pair}: {same} (sha256 {', '.join(s[:16] for s in sboms['sha256'])})")
    else:
        console.print(f"SBOMs of {pair}: not compared ({escape(str(sboms.get('error')))})")
    click.echo(f"differing paths outside the allow-list: {len(counted)}")
    if counted or report.sboms_differ:
        sys.exit(1)


def _print_dry_run(dry_run: DryRun) -> None:
    """The plan; `context_dir` None: nothing was kept (no -o), so no paths are printed."""
    plan, context_dir, tag, manifest = dry_run.plan, dry_run.context_dir, dry_run.tag, dry_run.manifest or {}
    if plan is not None:
        Console().print(plan_table(plan, f"plan for {plan.cell.key}"))
        click.echo(f"torch:      {plan.torch_source} ({plan.torch_source_reason})")
    if context_dir is None:
        click.echo("context:    not written (dry run; pass -o DIR to keep the build context)")
    else:
        click.echo(f"context:    {context_dir.resolve()}")
        click.echo(f"Dockerfile: {dry_run.dockerfile.resolve()}")
    click.echo(f"image tag:  {tag}")
    stages = plan.stages if plan is not None else manifest.get("stages")
    if stages:
        click.echo("stages:     " + " -> ".join(str(s) for s in stages))
    if plan is None:
        click.echo("manifest:\n" + json.dumps({k: v for k, v in manifest.items() if k != "files"}, indent=2))


def _print_described(described: Described, console: Console) -> None:
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


def _print_jobs(jobs: CompileJobs, console: Console) -> None:
    """The compile jobs a source build runs, and a warning when less memory is free now than they may need."""
    console.print(f"compile jobs: MAX_JOBS={jobs.max_jobs} ({escape(jobs.reason)}; the engine's machine)")
    if jobs.short_of_memory:
        console.print(
            f"[yellow]warning[/]: {jobs.available_bytes / 2**30:.1f} GiB is free on this machine now; "
            f"{jobs.max_jobs} compile jobs may need up to {jobs.max_jobs * jobs.per_job_mb / 1024:.1f} GiB at once: "
            "close what else runs here, or the compiler may be killed (failure class compiler_out_of_memory)"
        )


def _print_failure(exc, console: Console) -> None:
    """A build that failed at a step (a BuildError with its failure): the step, its class, the lines that look like
    the cause, its last lines and the full log."""
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
