"""`envbuild ci render`: generate the GitHub Actions matrix workflow and docker-bake.hcl from the recipes."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from builder.cli import site_recipes
from builder.cli.errors import workflow_errors
from builder.cli.paths import writable_output
from builder.workflows.ci_files import GENERATED_DIR, CiRequest, render_ci_files


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
@workflow_errors()
def render(out_dir: Path, check: bool) -> None:
    """Write the workflow (copy it to .github/workflows/) and the bake file for every cell in ci/matrix.toml."""
    if not check:
        writable_output(out_dir, "'-o' / '--output'")
    files = render_ci_files(CiRequest(out_dir, check, site_recipes.folder()))
    for path in files.written:
        click.echo(f"wrote {path}")
    if files.stale:
        click.echo(
            f"out of date in {out_dir}: {', '.join(files.stale)}; run `envbuild ci render -o {out_dir}`", err=True
        )
        sys.exit(1)
    if check:
        click.echo(f"{out_dir} is up to date")
