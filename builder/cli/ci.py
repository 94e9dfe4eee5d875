"""`envbuild ci render`: generate the GitHub Actions matrix workflow and docker-bake.hcl from the recipes."""

from __future__ import annotations

import filecmp
import sys
import tempfile
from pathlib import Path

import click

from builder.cli import site_recipes
from builder.cli.paths import writable_output
from builder.plan.ci_render import GENERATED_DIR, render_ci
from builder.plan.recipe_cells import RecipeCellsError


@click.group("ci")
def ci() -> None:
    """The product's CI matrix (ci/): one job per recipe cell, then the published report."""


@ci.command("render")
@click.option(
    "-o",
    "--output",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=GENERATED_DIR,
    show_default=True,
    help="Directory for envbuild-matrix.yml and docker-bake.hcl.",
)
@click.option(
    "--check", is_flag=True, help="Write nothing; exit 1 if the files in --output differ from a fresh render."
)
def render(out_dir: Path, check: bool) -> None:
    """Write the workflow (copy it to .github/workflows/) and the bake file for every cell in ci/matrix.toml."""
    if not check:
        writable_output(out_dir, "'-o' / '--output'")
    try:
        if not check:
            for path in render_ci(out_dir, site=site_recipes.folder()):
                click.echo(f"wrote {path}")
            return
        with tempfile.TemporaryDirectory() as fresh:
            stale = [
                path.name
                for path in render_ci(Path(fresh), site=site_recipes.folder())
                if not (out_dir / path.name).is_file() or not filecmp.cmp(path, out_dir / path.name, shallow=False)
            ]
    except RecipeCellsError as exc:
        raise click.ClickException(str(exc)) from exc
    if stale:
        click.echo(f"out of date in {out_dir}: {', '.join(stale)}; run `envbuild ci render -o {out_dir}`", err=True)
        sys.exit(1)
    click.echo(f"{out_dir} is up to date")
