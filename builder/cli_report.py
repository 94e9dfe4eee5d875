"""`envbuild report -o DIR`: publish the matrix as a static, offline site."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from builder.cli_matrix import db_option, open_store, plain, warn_damaged
from builder.matrix import VERDICTS, summarize
from builder.recipe_cells import RecipeCellsError, recipe_cells
from builder.report import HISTORY_ROWS, ReportError, build_report


@click.command("report")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the site (new, empty, or a previous report, which is replaced whole).")
@db_option
@click.option("--recipes/--no-recipes", "with_recipes", default=True, show_default=True,
              help="Show every cell the recipes define, 'untested' where nothing is recorded.")
@click.option("--include-host-details", is_flag=True,
              help="Publish each run's full host record (hostname, kernel command line, ...); by default"
                   " only OS, kernel version, driver, GPU archs and count.")
def report(out_dir: Path, db: Path | None, with_recipes: bool, include_host_details: bool) -> None:
    """Write the compatibility report: a ROCm × torch (× arch) grid and one page per cell.

    The site is built aside and swapped in at the end: a failure leaves the previous one whole.
    """
    try:
        cells = recipe_cells() if with_recipes else []
    except RecipeCellsError as exc:
        raise click.ClickException(f"{exc} (or pass --no-recipes)") from exc
    store = open_store(db, must_exist=True)
    console = Console(stderr=True)
    try:
        with console.status("collecting the matrix"):
            summaries = summarize(store, cells, runs_per_cell=HISTORY_ROWS)
        with console.status("writing the site"):
            index = build_report(store, summaries, out_dir, host_details=include_host_details)
    except ReportError as exc:
        raise click.UsageError(str(exc)) from exc
    finally:
        store.close()
    warn_damaged(store)
    counts = ", ".join(f"{sum(s.status == v for s in summaries)} {v}" for v in VERDICTS)
    click.echo(f"wrote {plain(index)} ({len(summaries)} cells: {counts})")
