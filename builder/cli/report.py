"""`envbuild report -o DIR`: publish the matrix as a static, offline site."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from builder.cli import site_recipes
from builder.cli.attest import signer_options
from builder.cli.errors import workflow_errors
from builder.cli.paths import writable_output
from builder.cli.store_options import db_option
from builder.slug import plain


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
@workflow_errors()
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
    from builder.workflows.report_site import ReportRequest, write_report

    request = ReportRequest(
        out_dir,
        markdown,
        check,
        db,
        with_recipes,
        published,
        results_dir,
        with_published,
        allowed_signers,
        revoked,
        include_host_details,
        site_recipes.folder(),
    )
    summary = write_report(request, notify=_show_site_event, status=Console(stderr=True).status)
    if summary is not None and summary.state == "up to date":
        click.echo(f"{plain(summary.path)} is up to date")
    elif summary is not None:
        click.echo(f"wrote {plain(summary.path)}")


def _show_site_event(event: object) -> None:
    """The site written (stdout), or a warning or the signers used (stderr)."""
    from builder.workflows.report_site import SiteWritten

    if isinstance(event, SiteWritten):
        click.echo(f"wrote {plain(event.index)} ({event.cells} cells: {event.counts})")
    else:
        click.echo(event, err=True)
