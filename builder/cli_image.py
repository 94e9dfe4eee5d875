"""`envbuild image`: render a request's build context and build it with BuildKit (or build a given context)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from builder.build import (BuildError, BuildInterrupted, BuildOptions, PushError, build_image, default_log_path,
                           push_image, read_manifest, read_verify)
from builder.cells import Cell
from builder.cli_matrix import db_option, open_store, preflight_store
from builder.cli_render import plan_from_options, plan_table, request_options
from builder.render import RenderError, render
from builder.repro import check_reproducible
from builder.engine import EngineUnavailable
from builder.store import StoreError

EXIT_INTERRUPTED = 130


def _tag_of(context_dir: Path, manifest: dict | None, tag: str | None, registry: str | None) -> str:
    tag = tag or (manifest or {}).get("image_tag")
    if not tag:
        raise click.UsageError(f"{context_dir}/manifest.json has no image_tag: pass --tag")
    return f"{registry.rstrip('/')}/{tag}" if registry else tag


@click.command("image")
@request_options
@click.option("-o", "--out", "out", type=click.Path(file_okay=False, path_type=Path),
              help="Where to render the context [default: ./envbuild-contexts/<cell>].")
@click.option("--context", "context_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Build this rendered context dir (from `envbuild render`) instead of a request.")
@click.option("--tag", help="Image tag [default: the content-hash tag of the context's manifest].")
@click.option("--registry", help="Registry/namespace to prefix the tag with (for --push).")
@click.option("--ca-cert", type=click.Path(path_type=Path),
              help="CA bundle of a TLS-intercepting proxy: given to RUN steps as BuildKit secret "
                   "`envbuild_ca`, never stored in a layer.")
@click.option("--network", type=click.Choice(["default", "host", "none"]), default=None,
              help="Network for RUN steps (host where the default bridge has no route out).")
@click.option("--wheelhouse", type=click.Path(path_type=Path),
              help="Dir of wheels to install from (air-gapped); torch comes from it, not an index.")
@click.option("--cache-from", multiple=True, metavar="REF", help="BuildKit cache source (repeatable).")
@click.option("--cache-to", multiple=True, metavar="REF", help="BuildKit cache export (repeatable; "
              "type=inline without buildx).")
@click.option("--push", is_flag=True, help="Push the image after building (or when it exists already).")
@click.option("--force", is_flag=True, help="Build even when the content-hash tag exists locally.")
@click.option("--no-cache", is_flag=True, help="Ignore BuildKit's layer cache (a cold build).")
@click.option("--log", "log_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Full build log [default: <context>.build.log next to the context dir].")
@click.option("--dry-run", is_flag=True, help="Print the plan, stages, tag and Dockerfile path; build nothing.")
@click.option("--check-reproducible", is_flag=True,
              help="Build twice with --no-cache under temporary tags, compare the two filesystems file by file, "
                   "remove both; exit 1 if a difference is not in the allow-list (docs/docker.md). Tags nothing, "
                   "records nothing.")
@db_option
@click.option("--no-record", is_flag=True, help="Do not record the build in the matrix.")
def image(out: Path | None, context_dir: Path | None, tag: str | None, registry: str | None,
          ca_cert: Path | None, network: str | None, wheelhouse: Path | None, cache_from: tuple[str, ...],
          cache_to: tuple[str, ...], push: bool, force: bool, no_cache: bool, log_path: Path | None, dry_run: bool,
          check_reproducible: bool, db: Path | None, no_record: bool, **request) -> None:
    """Render the build context of a request (e.g. `--rocm 6.2 --torch 2.4`) and build it with BuildKit.

    The tag is the context's content hash, so an unchanged request is skipped. On failure: the failing
    step, its last output lines and a failure class. Exit code 0 built/skipped, 1 failed, 130 interrupted."""
    console = Console(stderr=True, soft_wrap=True)
    if ca_cert and not ca_cert.is_file():
        raise click.BadParameter(f"{ca_cert}: no such file", param_hint="--ca-cert")
    if wheelhouse and not wheelhouse.is_dir():
        raise click.BadParameter(f"{wheelhouse}: not a directory", param_hint="--wheelhouse")
    if check_reproducible and push:
        raise click.UsageError("--check-reproducible tags nothing, so there is nothing to --push; run them separately")
    plan = None
    if context_dir is None:
        if request["torch"] is None:
            raise click.UsageError("give a request (e.g. --rocm 6.2 --torch 2.4) or --context DIR")
        plan = plan_from_options(**request)
        context_dir = out or Path("envbuild-contexts") / plan.cell.key
        try:
            context_dir = render(plan, context_dir, wheelhouse=wheelhouse).dockerfile.parent
        except RenderError as exc:
            raise click.UsageError(str(exc)) from exc
    elif request["torch"] is not None or request["rocm"] is not None:
        raise click.UsageError("--context DIR builds an existing context: drop the request flags (--rocm/--torch/...)")
    elif wheelhouse is not None:
        raise click.UsageError("--context DIR builds the wheels already in DIR/wheelhouse/, which its tag covers; "
                               "to change them, re-render: `envbuild render ... --wheelhouse WHEELS -o DIR`")
    elif not (context_dir / "Dockerfile").is_file():
        raise click.UsageError(f"{context_dir} has no Dockerfile: render it first (`envbuild render`)")
    manifest = read_manifest(context_dir)
    tag = _tag_of(context_dir, manifest, tag, registry)
    if dry_run:
        _print_dry_run(context_dir, manifest, tag, plan)
        return
    options = BuildOptions(network=None if network == "default" else network, ca_cert=ca_cert,
                           wheelhouse=wheelhouse, cache_from=cache_from, cache_to=cache_to, force=force,
                           no_cache=no_cache)
    if check_reproducible:
        _check_reproducible(context_dir, tag, options, console, log_path or default_log_path(context_dir))
        return
    if not no_record:
        preflight_store(db)
    try:
        outcome = build_image(context_dir, tag, options, console, log_path)
    except BuildInterrupted as exc:
        console.print(f"[yellow]{exc}[/]; partial log: {exc.log_path}")
        sys.exit(EXIT_INTERRUPTED)
    except BuildError as exc:
        if exc.failure is None:
            raise click.UsageError(str(exc)) from exc
        _print_failure(exc, console)
        if not no_record:
            _record(db, manifest, tag, "fail", exc.log_path, None, exc.failure.failure_class,
                    f"{exc.failure.step}: {exc.failure.message}"[:500], console)
        sys.exit(1)
    except EngineUnavailable as exc:
        raise click.ClickException(str(exc)) from exc
    verify = None if outcome.skipped else read_verify(tag)
    if verify is not None:
        coverage = verify.get("arch_coverage") or {}
        arch = f"; {coverage['arch']} code objects: {coverage['verdict']}" if coverage.get("arch") else ""
        console.print(f"verify: {len(verify.get('checks', []))} checks passed in the image{escape(arch)}")
    if not no_record and not outcome.skipped:
        recorded = manifest if verify is None or manifest is None else {**manifest, "verify": verify}
        _record(db, recorded, tag, "pass", outcome.log_path, outcome, None, None, console)
    if push:
        try:
            push_image(tag, console)
        except (PushError, EngineUnavailable) as exc:
            raise click.ClickException(str(exc)) from exc
    click.echo(tag)


def _check_reproducible(context_dir: Path, tag: str, options: BuildOptions, console: Console,
                        log_path: Path) -> None:
    """Two no-cache builds, compared file by file; the report goes to <context>.repro.json."""
    try:
        report = check_reproducible(context_dir, tag, options, console, log_path)
    except BuildInterrupted as exc:
        console.print(f"[yellow]{exc}[/]; partial log: {exc.log_path}")
        sys.exit(EXIT_INTERRUPTED)
    except BuildError as exc:
        if exc.failure is None:
            raise click.UsageError(str(exc)) from exc
        _print_failure(exc, console)
        sys.exit(1)
    except EngineUnavailable as exc:
        raise click.ClickException(str(exc)) from exc
    out = context_dir.resolve().parent / f"{context_dir.resolve().name}.repro.json"
    out.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    counted, shown = report.counted, 100
    console.print(f"build times: {report.seconds[0]:.1f} s and {report.seconds[1]:.1f} s (--no-cache)")
    console.print(f"{len(report.differences)} of {report.paths} paths differ between the two builds "
                  f"({len(counted)} outside the allow-list; mtimes not compared); report: {out}")
    for diff in counted[:shown]:
        console.print(f"  differs: {diff.path} ({diff.what})", highlight=False, markup=False)
    if len(counted) > shown:
        console.print(f"  ... and {len(counted) - shown} more (all in {out})")
    for diff in report.differences:
        if diff.allowed is not None:
            console.print(f"  allowed: {diff.path} ({diff.what}): {diff.allowed}", highlight=False, markup=False)
    click.echo(f"differing paths outside the allow-list: {len(counted)}")
    if counted:
        sys.exit(1)


def _print_dry_run(context_dir: Path, manifest: dict | None, tag: str, plan) -> None:
    manifest = manifest or {}
    if plan is not None:
        Console().print(plan_table(plan, f"plan for {plan.cell.key}"))
        click.echo(f"torch:      {plan.torch_source} ({plan.torch_source_reason})")
    click.echo(f"context:    {context_dir.resolve()}")
    click.echo(f"Dockerfile: {(context_dir / 'Dockerfile').resolve()}")
    click.echo(f"image tag:  {tag}")
    stages = plan.stages if plan is not None else manifest.get("stages")
    if stages:
        click.echo("stages:     " + " -> ".join(str(s) for s in stages))
    click.echo(f"build log:  {default_log_path(context_dir)}")
    if plan is None:
        click.echo("manifest:\n" + json.dumps({k: v for k, v in manifest.items() if k != "files"}, indent=2))


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


def _record(db: Path | None, manifest: dict | None, tag: str, status: str, log_path: Path | None, outcome,
            failure_class: str | None, error: str | None, console: Console) -> None:
    """Record the build in the matrix (needs the manifest's cell; a bare context is only built)."""
    cell = (manifest or {}).get("cell")
    if not cell:
        console.print("[dim]not recorded: the context's manifest.json names no cell[/]")
        return
    store = open_store(db)
    try:
        store.record_build(
            Cell(**cell), status=status, failure_class=failure_class, error=error,
            recipe_hash=manifest.get("recipe_hash"), context_hash=manifest.get("context_hash"),
            image_tag=tag, image_digest=outcome.image_id if outcome else None,
            duration_s=round(outcome.seconds, 1) if outcome else None,
            log_path=str(log_path) if log_path else None, manifest=manifest)
    except StoreError as exc:
        raise click.ClickException(f"the build finished but could not be recorded: {exc}") from exc
    finally:
        store.close()
    console.print(f"recorded the build in {store.path}")


# --torch is required for a request but not with --context (checked in the command instead).
next(p for p in image.params if p.name == "torch").required = False
