"""`envbuild recipes list` and `envbuild render`; `request_options` is shared with `envbuild image`."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from builder.cli.paths import writable_output
from builder.cli.prerequisites import BadRecipeData

if TYPE_CHECKING:
    from builder.plan.resolve import Plan, Request


def request_options(command):
    """Click options that describe a build request (one set for `render` and `image`)."""
    options = [
        click.option(
            "--flavor",
            default=None,
            help="rocm (implied by --rocm), cuda (implied by --cuda) or cpu; "
            "see recipes/flavors.toml and recipes/flavors.d/.",
        ),
        click.option(
            "--rocm",
            "rocm",
            default=None,
            metavar="VERSION",
            help="ROCm release, e.g. 6.2 or 6.1.2 (6.1: the newest 6.1 release, echoed).",
        ),
        click.option("--cuda", "cuda", default=None, metavar="VERSION", help="CUDA release, e.g. 13.0."),
        click.option(
            "--torch",
            "torch",
            default=None,
            metavar="LINE",
            help="torch line (2.4) or release (2.4.1) [default: the newest line with an official wheel for "
            "the release, echoed].",
        ),
        click.option("--arch", default=None, metavar="GFX", help="GPU target, e.g. gfx90a (default: the recipe's)."),
        click.option("--python", default=None, metavar="X.Y", help="Python version (default: the base OS's)."),
        click.option(
            "--torch-source",
            type=click.Choice(["auto", "wheel", "source"]),
            default="auto",
            show_default=True,
            help="auto: the official wheel where one exists, else a source build.",
        ),
        click.option(
            "--base-image",
            default=None,
            metavar="REF",
            callback=_image_reference,
            help="Override the base image reference ([registry/]name[:tag][@digest]).",
        ),
        click.option(
            "--install-rocm",
            is_flag=True,
            help="Start from the plain Ubuntu image and install ROCm with amdgpu-install.",
        ),
        click.option(
            "--proven-only",
            is_flag=True,
            help="Refuse a torch source build no peer has shown to compile (exit 2, with the cell's public record).",
        ),
        click.option(
            "--unproven",
            is_flag=True,
            expose_value=False,
            help="Accepted and ignored: source cells build by default (docs/render.md).",
        ),
    ]
    return functools.reduce(lambda cmd, option: option(cmd), reversed(options), command)


def _image_reference(ctx, param, value: str | None) -> str | None:
    """--base-image must parse as an image reference: it goes into the Dockerfile's FROM line."""
    from builder.plan.image_ref import is_image_reference

    if value is not None and not is_image_reference(value):
        raise click.BadParameter(
            f"{value!r} is not an image reference; give [registry/]name[:tag][@digest] "
            "in lower case, e.g. rocm/dev-ubuntu-22.04:6.2",
            param_hint="'--base-image'",
        )
    return value


def request_from_options(
    flavor: str | None,
    rocm: str | None,
    cuda: str | None,
    torch: str | None,
    arch: str | None,
    python: str | None,
    torch_source: str,
    base_image: str | None,
    install_rocm: bool,
    proven_only: bool = False,
) -> Request:
    """A Request from `request_options` values; raises click.UsageError (exit code 2) on conflicts."""
    from builder.plan.resolve import Request

    given = {name: version for name, version in (("rocm", rocm), ("cuda", cuda)) if version}
    if len(given) > 1:
        raise click.UsageError("--rocm and --cuda exclude each other: one accelerator per image")
    for name, version in given.items():
        if flavor and flavor != name:
            raise click.UsageError(f"--{name} {version} conflicts with --flavor {flavor}; drop one of them")
    implied = next(iter(given), "rocm")
    return Request(
        flavor=flavor or implied,
        accel_version=given.get(flavor or implied),
        torch=torch,
        arch=arch,
        python=python,
        torch_source=torch_source,
        base_image=base_image,
        install_accel=install_rocm,
        proven_only=proven_only,
    )


def plan_from_options(**options) -> Plan:
    """Resolve the request the options describe and print, on stderr, what the resolver chose and the notices of the
    cell (its arch's caveats on the release, a source cell's public record); bad requests become click.UsageError
    (exit code 2), a source cell under --proven-only exits 2 after its notices."""
    from builder.cli import site_recipes
    from builder.plan.notice import arch_notice, source_notice
    from builder.plan.recipes import RecipeError
    from builder.plan.resolve import ResolveError, UnprovenSourceError, resolve

    request = request_from_options(**options)
    try:
        recipes = site_recipes.load()
        plan = resolve(request, recipes)
    except UnprovenSourceError as exc:
        for line in (*arch_notice(exc.plan), *source_notice(exc.plan, recipes)):
            click.echo(line, err=True)
        click.echo(f"envbuild: {exc}", err=True)
        raise SystemExit(2) from exc
    except ResolveError as exc:
        raise click.UsageError(str(exc)) from exc
    except RecipeError as exc:
        raise BadRecipeData(exc) from exc
    for line in (*plan.notes, *arch_notice(plan), *source_notice(plan, recipes)):
        click.echo(line, err=True)
    return plan


def plan_table(plan: Plan, title: str) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    for field, value in plan.describe():
        table.add_row(escape(field), escape(value))  # data, never markup: rocm[libraries,...]
    return table


@click.group("recipes")
def recipes_group() -> None:
    """The version data in recipes/: known cells and how each gets torch."""


@recipes_group.command("list")
@click.option("--flavor", default=None, help="Only this flavor.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON rows instead of a table.")
@click.option("--proven-only", is_flag=True, help="Leave out source builds no peer has shown to compile.")
@click.option("--unproven", is_flag=True, expose_value=False, help="Accepted and ignored: every cell is listed.")
def recipes_list(flavor: str | None, as_json: bool, proven_only: bool) -> None:
    """List the known cells (flavor x release x torch x arch x Python) and where torch comes from."""
    from builder.cli import site_recipes
    from builder.paths import RECIPES_DIR
    from builder.plan import recipe_overlay
    from builder.plan.recipes import RecipeError
    from builder.plan.resolve import all_plans

    try:
        recipes = site_recipes.load()
        overlay = recipe_overlay.of(RECIPES_DIR, site_recipes.folder())  # built by the load above
        if flavor is not None and flavor not in recipes.flavors:
            raise click.UsageError(f"unknown flavor {flavor!r}; choose one of {', '.join(sorted(recipes.flavors))}")
        plans = all_plans(recipes, flavor, proven_only=proven_only)
    except RecipeError as exc:
        raise BadRecipeData(exc) from exc
    rows = [
        {
            "cell": p.cell.key,
            **p.cell.model_dump(),
            "torch_version": p.torch.version,
            "torch_source": p.torch_source,
            "reason": (f"{p.evidence_step}: " if p.unproven else "") + p.torch_source_reason,
            "proof": "unproven"
            if p.unproven
            else "peer-built"
            if p.source_build
            else f"{p.release.wheel_builder}'s wheel"
            if p.release.wheel_builder
            else "official wheel",
            "fact_source": p.torch.source,
            "origin": (
                f"site ({overlay.source})"
                if recipe_overlay.origin(
                    overlay,
                    p.cell.flavor,
                    recipes.flavors[p.cell.flavor].releases_file,
                    p.cell.accel_version,
                    p.cell.torch,
                )
                == "site"
                else "packaged"
            ),
        }
        for p in plans
    ]
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
def check_upstream(indexes: tuple[str, ...], releases: str | None, record: bool, seconds: float) -> None:
    """Print the torch wheels, GPU archs and ROCm releases upstream has and recipes/ lacks (releases: newer than the
    recipes, named by a release list or by an index's torch wheels and `rocm` package).

    Exit codes: 0 nothing lacking, 1 something is, 2 bad input or an index that cannot be read or parsed."""
    import time

    from builder.cli import site_recipes
    from builder.plan.recipes import RecipeError
    from builder.plan.upstream import Findings, UpstreamError, check_index, check_releases, read_text

    if not indexes and not releases:
        raise click.UsageError("give at least one --index or --releases")
    try:
        recipes = site_recipes.load()
        total = Findings()
        hashes: dict[str, str] = {}
        for index in indexes:
            found = check_index(index, recipes, seconds=seconds)
            total.wheels += found.wheels
            total.archs += found.archs
            total.releases += found.releases
            if record:
                hashes |= _index_hashes(index, recipes, time.monotonic() + seconds)
        if releases:
            total.releases += check_releases(read_text(releases, time.monotonic() + seconds), recipes)
    except UpstreamError as exc:
        raise click.UsageError(str(exc)) from exc
    except RecipeError as exc:
        raise click.ClickException(f"recipe data is invalid: {exc}") from exc
    if record:
        from builder.paths import RECIPES_DIR
        from builder.plan import wheel_hashes

        site = site_recipes.folder()  # a site's folder keeps its own record; else the packaged recipes/
        path = wheel_hashes.record(site.resolve() if site else RECIPES_DIR, hashes)
        click.echo(f"recorded the sha256 of {len(hashes)} pinned torch wheels in {path}")
    for kind, items in (("wheel", total.wheels), ("arch", total.archs), ("release", total.releases)):
        for item in dict.fromkeys(items):
            click.echo(f"missing {kind}: {item}")
    if total.empty:
        click.echo("recipes cover everything these sources list")
    raise SystemExit(0 if total.empty else 1)


def _index_hashes(index: str, recipes, deadline: float) -> dict[str, str]:
    """{wheel file: sha256} of the pinned torch wheels `index`'s torch page links with a #sha256= fragment, read
    before `deadline` (time.monotonic())."""
    from builder.plan.upstream import UpstreamError, project_url, read_text
    from builder.plan.wheel_hashes import pinned_hashes

    url = project_url(index, "torch")
    try:
        page = read_text(url, deadline)
    except UpstreamError:  # an index without a torch project (AMD's per-arch indexes) has no torch wheel to hash
        return {}
    return pinned_hashes(page, recipes, where=url)


def _print_cells(rows: list[dict]) -> None:
    """The cells as a table as wide as the terminal; the long columns end in "…" (--json has the full text)."""
    from rich import box
    from rich.text import Text

    from builder.cli.output import fits_terminal, stdout_console

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
def render_command(out: Path, wheelhouse: Path | None, **options) -> None:
    """Write a deterministic build context (Dockerfile and Apptainer cell.def) for a version request.

    The Dockerfile builds with `envbuild image --context DIR`, the definition cell.def of the same plan with
    `envbuild sif --from-context DIR` (no Docker engine); one content hash names both."""
    from builder.plan.render import RenderError, render
    from builder.plan.wheelhouse import origin_text

    writable_output(out, "'-o' / '--out'")
    plan = plan_from_options(**options)
    try:
        rendered = render(plan, out, wheelhouse=wheelhouse)
    except RenderError as exc:
        raise click.UsageError(str(exc)) from exc
    console = Console()
    console.print(plan_table(plan, f"plan for {plan.cell.key}"))
    console.print(f"torch: {plan.torch_source} ({plan.torch_source_reason})")
    console.print(
        f"wrote {rendered.dockerfile} and {rendered.definition.name} ({len(rendered.manifest['files'])} files hashed)"
    )
    console.print(f"torch from: {origin_text(rendered.manifest['torch_origin'])}")
    console.print(f"image tag: {rendered.image_tag}")
