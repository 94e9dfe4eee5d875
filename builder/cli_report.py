"""`envbuild report -o DIR`: publish the matrix as a static, offline site."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from builder.cli_matrix import db_option, open_store
from builder.cli_paths import writable_output
from builder.matrix import VERDICTS, summarize
from builder.recipe_cells import RecipeCellsError, recipe_cells
from builder.report import build_report


@click.command("report")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write the site into (index.html, cells/, plots/, summary.md, data.json).")
@db_option
@click.option("--recipes/--no-recipes", "with_recipes", default=True, show_default=True,
              help="Show every cell the recipes define, 'untested' where nothing is recorded.")
def report(out_dir: Path, db: Path | None, with_recipes: bool) -> None:
    """Write the compatibility report: a ROCm × torch (× arch) grid and one page per cell."""
    writable_output(out_dir, "'-o' / '--output'")
    try:
        cells = recipe_cells() if with_recipes else []
    except RecipeCellsError as exc:
        raise click.ClickException(f"{exc} (or pass --no-recipes)") from exc
    store = open_store(db, must_exist=True)
    console = Console(stderr=True)
    try:
        with console.status("collecting the matrix"):
            summaries = summarize(store, cells)
    finally:
        store.close()
    with console.status(f"writing {len(summaries)} cell page(s) and plots to {out_dir}"):
        index = build_report(summaries, out_dir)
    counts = ", ".join(f"{sum(s.status == v for s in summaries)} {v}" for v in VERDICTS)
    click.echo(f"wrote {index} ({len(summaries)} cells: {counts})")
