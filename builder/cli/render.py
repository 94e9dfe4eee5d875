"""`envbuild recipes list | check-upstream` and `envbuild render`."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from builder.cli import site_recipes
from builder.cli.errors import workflow_errors
from builder.cli.output import fits_terminal, stdout_console
from builder.cli.paths import writable_output
from builder.cli.request_options import plan_table, request_from_options, request_options


@click.group("recipes")
def recipes_group() -> None:
    """The version data in recipes/: known cells and how each gets torch."""


@recipes_group.command("list")
@click.option("--flavor", default=None, help="Only this flavor.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON rows instead of a table.")
@click.option("--proven-only", is_flag=True, help="Leave out source builds no peer has shown to compile.")
@click.option("--unproven", is_flag=True, expose_value=False, help="Accepted and ignored: every cell is listed.")
@workflow_errors()
def recipes_list(flavor: str | None, as_json: bool, proven_only: bool) -> None:
    """List the known cells (flavor x release x torch x arch x Python) and where torch comes from."""
    from builder.workflows.recipes import CellListRequest, known_cells

    rows = [dict(row) for row in known_cells(CellListRequest(flavor, proven_only, site_recipes.folder())).rows]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    _print_cells(rows)


@recipes_group.command("check-upstream")
@click.option(
    "--index",
    "indexes",
    multiple=True,
    metavar="URL",
    help="A PEP 503 index (http(s)://, file:// or a directory), e.g. https://download.pytorch.org/whl/rocm7.2/; "
    "repeatable.",
)
@click.option(
    "--releases",
    "releases",
    default=None,
    metavar="FILE|URL",
    help="A list of ROCm release tags (rocm-7.2.4, therock-7.14.0), e.g. saved `git ls-remote --tags` output.",
)
@click.option(
    "--record",
    is_flag=True,
    help="Write the sha256 the indexes list for the torch wheels the recipes pin into recipes/"
    'wheel-hashes.toml (the manifest names them; "unhashed" until recorded).',
)
@click.option(
    "--timeout",
    "seconds",
    type=click.FloatRange(min=1, max=3600),
    default=25,
    show_default=True,
    help="Seconds for reading all of one index's pages (or the release list), however slowly a server sends.",
)
@workflow_errors()
def check_upstream(indexes: tuple[str, ...], releases: str | None, record: bool, seconds: float) -> None:
    """Print the torch wheels, GPU archs and ROCm releases upstream has and recipes/ lacks (releases: newer than the
    recipes, named by a release list or by an index's torch wheels and `rocm` package).

    Exit codes: 0 nothing lacking, 1 something is, 2 bad input or an index that cannot be read or parsed."""
    from builder.workflows.recipes import UpstreamRequest, check_upstream as find_missing

    if not indexes and not releases:
        raise click.UsageError("give at least one --index or --releases")
    found = find_missing(UpstreamRequest(indexes, releases, record, seconds, site_recipes.folder()))
    if found.recorded is not None:
        click.echo(f"recorded the sha256 of {found.recorded_count} pinned torch wheels in {found.recorded}")
    for kind, items in (("wheel", found.wheels), ("arch", found.archs), ("release", found.releases)):
        for item in items:
            click.echo(f"missing {kind}: {item}")
    if found.empty:
        click.echo("recipes cover everything these sources list")
    raise SystemExit(0 if found.empty else 1)


def _print_cells(rows: list[dict]) -> None:
    """The cells as a table as wide as the terminal; the long columns end in "…" (--json has the full text)."""
    console = stdout_console(highlight=False)
    for row in rows:
        row["from"] = row["origin"].split(" ", 1)[0]  # packaged | site (--json has the site folder)
    keys = ("cell", "torch_version", "torch_source", "from", "reason", "fact_source")
    names = ("cell", "torch", "source", "from")
    fixed = [max(len(str(r[k])) for r in rows + [{k: name}]) for k, name in zip(keys[:4], names)]
    free = max(20, console.width - sum(fixed) - 3 * len(keys) - 2)  # what the two long columns share
    cut = fits_terminal(console)  # piped: every value whole (builder.cli.output)
    table = Table(
        title=f"{len(rows)} known cells (torch source: auto{'; full text: --json' if cut else ''})",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for name, width in zip(names, fixed):
        table.add_column(name, no_wrap=True, width=width)
    table.add_column("why", no_wrap=True, overflow="ellipsis", width=free * 3 // 5 if cut else None)
    table.add_column("fact source", no_wrap=True, overflow="ellipsis", width=free - free * 3 // 5 if cut else None)
    for row in rows:
        table.add_row(*(Text(str(row[k])) for k in keys))  # plain text: no markup in the data is interpreted
    console.print(table)


@click.command("render")
@request_options
@click.option(
    "-o",
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for the build context (replaced if it holds an earlier envbuild context).",
)
@click.option(
    "--wheelhouse",
    type=click.Path(file_okay=False, path_type=Path),
    help="Dir of wheels to put in the context's wheelhouse/ (hashed into the tag) [default: keep those already there].",
)
@workflow_errors()
def render_command(out: Path, wheelhouse: Path | None, **options) -> None:
    """Write a deterministic build context (Dockerfile and Apptainer cell.def) for a version request.

    The Dockerfile builds with `envbuild image --context DIR`, the definition cell.def of the same plan with
    `envbuild sif --from-context DIR` (no Docker engine); one content hash names both."""
    from builder.workflows.render import RenderRequest, render_context

    writable_output(out, "'-o' / '--out'")
    request = RenderRequest(request_from_options(**options), out, wheelhouse, site_recipes.folder())
    done = render_context(request, notify=lambda line: click.echo(line, err=True))
    plan, rendered = done.plan, done.rendered
    console = Console()
    console.print(plan_table(plan, f"plan for {plan.cell.key}"))
    console.print(f"torch: {plan.torch_source} ({plan.torch_source_reason})")
    console.print(
        f"wrote {rendered.dockerfile} and {rendered.definition.name} ({len(rendered.manifest['files'])} files hashed)"
    )
    console.print(f"torch from: {done.torch_from}")
    console.print(f"image tag: {rendered.image_tag}")
