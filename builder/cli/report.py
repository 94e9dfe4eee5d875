"""`envbuild report -o DIR`: publish the matrix as a static, offline site."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import click
from rich.console import Console

from builder.cli import site_recipes
from builder.cli.attest import check_result, result_files, signer_options, signers
from builder.cli.paths import writable_output
from builder.cli.prerequisites import BadRecipeData
from builder.cli.report_results import with_results
from builder.cli.store_options import db_option, open_store, plain, warn_damaged
from builder.attest import signing as attest
from builder.attest.provenance_now import current_build_provenance, current_provenance
from builder.report.matrix_reads import ReadsAhead
from builder.report.site import PAGE_RUNS, ReportError, build_report, summary_markdown
from builder.store.store import default_db_path
from builder.store.summary import VERDICTS, summarize
from builder.plan.recipe_cells import RecipeCellsError, recipe_cells


@click.command("report")
@click.option(
    "-o",
    "--output",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for the site (new, empty, or a previous report, which is replaced whole).",
)
@click.option(
    "--markdown",
    "markdown",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the summary (no links; dated by the newest run, not the clock) to this file, "
    "e.g. docs/compatibility.md.",
)
@click.option(
    "--check",
    is_flag=True,
    help="With --markdown: write nothing; exit 1 when the file differs from "
    "what the matrix gives (a stale committed summary).",
)
@db_option
@click.option(
    "--recipes/--no-recipes",
    "with_recipes",
    default=True,
    show_default=True,
    help="Show every cell the recipes define, 'untested' where nothing is recorded.",
)
@click.option(
    "--published",
    is_flag=True,
    help="Leave out unsigned runs: what this project publishes (CI's site, docs/compatibility.md).",
)
@click.option(
    "--results",
    "results_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    show_default="./results when it exists, else the results bundled with envbuild",
    help="The project's published results: shown with the local matrix (without one: alone); with --check, "
    "each must carry an attestation that verifies.",
)
@click.option(
    "--with-results/--no-results",
    "with_published",
    default=True,
    show_default=True,
    help="Include the published results (--results) in the report; the local matrix is not changed.",
)
@signer_options
@click.option(
    "--include-host-details",
    is_flag=True,
    help="Publish each run's full host record (hostname, kernel command line, ...); by default"
    " only OS, kernel version, driver, GPU archs and count.",
)
def report(
    out_dir: Path | None,
    markdown: Path | None,
    check: bool,
    db: Path | None,
    with_recipes: bool,
    published: bool,
    results_dir: Path | None,
    with_published: bool,
    allowed_signers: Path,
    revoked: Path | None,
    include_host_details: bool,
) -> None:
    """Write the compatibility report: a ROCm × torch (× arch) grid and one page per cell.

    The site is built aside and swapped in at the end: a failure leaves the previous one whole.
    Exit code 0, 1 for a stale --markdown file under --check or a committed result (--results) whose
    attestation is missing or does not verify, 2 for bad input (a bad DB, a bad -o, an unreadable attestation).
    """
    if out_dir is None and markdown is None:
        raise click.UsageError("give -o DIR for the site, --markdown FILE for the summary, or both")
    if check and markdown is None:
        raise click.UsageError("--check compares a --markdown FILE with the matrix: give --markdown")
    if out_dir is not None and not check:
        writable_output(out_dir, "'-o' / '--output'")
    if markdown is not None and not check:
        writable_output(markdown, "'--markdown'", is_file=True)
    site = site_recipes.folder()  # the site's recipe folder: its cells, and their routes and locks on the pages
    try:
        cells = recipe_cells(every=True, site=site) if with_recipes else []
    except RecipeCellsError as exc:
        raise BadRecipeData(f"{exc} (or pass --no-recipes)") from exc
    chosen = signers(allowed_signers, revoked)
    if results_dir is None:
        results_dir = Path("results") if Path("results").is_dir() else attest.RESULTS_DIR
    if check:
        _check_results(results_dir, chosen.allowed, chosen.revoked)
    merged, attempts_db = None, Path(db or default_db_path())
    if with_published and not check and markdown is None:  # the committed summary stays the local matrix's
        merged = tempfile.TemporaryDirectory(prefix="envbuild-report-")
        store = with_results(
            db,
            results_dir,
            chosen.allowed,
            chosen.revoked,
            Path(merged.name),
            lambda message: click.echo(f"warning: {plain(message)}", err=True),
        )
    else:
        store = open_store(db, must_exist=True)
    try:  # who signed each run and build record, derived again from the current signer files (revocation at read time)
        now = current_provenance(store, chosen.allowed, chosen.revoked)
        builds_now = current_build_provenance(store, chosen.allowed, chosen.revoked)
    except attest.AttestationInputError as exc:
        store.close()
        raise click.UsageError(plain(exc)) from exc
    scratch = None
    if published:
        scratch = tempfile.TemporaryDirectory(prefix="envbuild-published-")
        try:
            store.copy_published(Path(scratch.name) / "published.db", now, builds_now)
        finally:
            store.close()
        store = open_store(Path(scratch.name) / "published.db", must_exist=True)
    else:
        store.provenance_now, store.build_provenance_now = now, builds_now
    console = Console(stderr=True)
    # the site's whole-matrix reads run on the other core while the summaries are collected
    reads = ReadsAhead(store) if out_dir is not None and not check else None
    try:
        with console.status("collecting the matrix"):
            summaries = summarize(store, cells, runs_per_cell=PAGE_RUNS, with_manifests=False)
        text = None
        if markdown is not None:
            newest = max((r["result"].get("finished_at") or "" for r in store.runs(last=1)), default="") or "-"
            text = summary_markdown(
                summaries,
                f"from runs up to {newest}",
                speed=store.newest_of_preset("speed"),
                site_recipes=site,
            )
        index = None
        if out_dir is not None and not check:
            with console.status("writing the site"):
                index = build_report(
                    store,
                    summaries,
                    out_dir,
                    host_details=include_host_details,
                    attempts_db=attempts_db,
                    reads=reads,
                    site_recipes=site,
                    warn=lambda message: click.echo(f"warning: {plain(message)}", err=True),
                )
    except ReportError as exc:
        raise click.UsageError(str(exc)) from exc
    finally:
        store.close()
        if scratch is not None:
            scratch.cleanup()
        if merged is not None:
            merged.cleanup()
    warn_damaged(store)
    counts = ", ".join(f"{sum(s.status == v for s in summaries)} {v}" for v in VERDICTS)
    if index is not None:
        click.echo(f"wrote {plain(index)} ({len(summaries)} cells: {counts})")
    if markdown is not None and text is not None:
        _markdown(markdown, text, check)


def _check_results(results_dir: Path, allowed_signers: Path, revoked: Path | None) -> None:
    """Every result.json and build-record.json under `results_dir` carries an attestation that verifies; else say which
    and exit 1 (2 when one cannot be read). A build record whose context the recipes no longer render is only warned
    about: it was evidence about an earlier context of its cell, and the report leaves it out."""
    from builder.cli import site_recipes
    from builder.workflows import import_builds, verify_build

    failed = unreadable = 0
    outcomes = [(path, check_result(path, allowed_signers, revoked)) for path in result_files((results_dir,))]
    outcomes += [
        (path, verify_build.check(path, allowed_signers, revoked, require_signature=True, site=site_recipes.folder()))
        for path in import_builds.files_in((results_dir,))
    ]
    for result_json, outcome in outcomes:
        if isinstance(outcome, verify_build.CellNotRecomputed):
            click.echo(f"warning: {plain(result_json)}: [{outcome.check}] {plain(outcome)}", err=True)
        elif isinstance(outcome, attest.VerificationFailure):
            failed += 1
            click.echo(f"{plain(result_json)}: [{outcome.check}] {plain(outcome)}", err=True)
        elif isinstance(outcome, attest.AttestationInputError):
            unreadable += 1
            click.echo(f"{plain(result_json)}: {plain(outcome)}", err=True)
    if failed or unreadable:
        click.echo(
            f"{failed + unreadable} committed result(s) under {plain(results_dir)} without an attestation that "
            "verifies: sign them (`envbuild matrix sign`, results/README.md) or remove them",
            err=True,
        )
        sys.exit(2 if unreadable else 1)


def _markdown(path: Path, text: str, check: bool) -> None:
    if check:
        current = path.read_text() if path.is_file() else None
        if current != text:
            click.echo(
                f"{plain(path)} is stale: regenerate it with `envbuild report --markdown {plain(path)}` "
                "(same --db) and commit it",
                err=True,
            )
            sys.exit(1)
        click.echo(f"{plain(path)} is up to date")
        return
    try:
        path.write_text(text)
    except OSError as exc:
        raise click.UsageError(f"cannot write {path}: {exc.strerror}") from exc
    click.echo(f"wrote {plain(path)}")
