"""`envbuild render` and the plan of `envbuild image`: a version request resolved with the recipes in use into a plan
(`plan_cell`: the resolver's choices and the cell's notices said as it goes), and its build context written
(`render_context`: Dockerfile, Apptainer cell.def and manifest, builder.plan.render)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from builder.plan.image_ref import is_image_reference
from builder.workflows.errors import BadRecipeData, BadRequest, Stopped

if TYPE_CHECKING:
    from builder.plan.render import Rendered
    from builder.plan.resolve import Plan

__all__ = ["CellRequest", "RenderRequest", "RenderedContext", "is_image_reference", "plan_cell", "render_context"]


@dataclass(frozen=True)
class CellRequest:
    """A version request as the flags give it (builder.plan.resolve.Request's fields); None: the recipes' default."""

    flavor: str
    accel_version: str | None = None
    torch: str | None = None
    arch: str | None = None
    python: str | None = None
    torch_source: str = "auto"
    base_image: str | None = None
    install_accel: bool = False
    proven_only: bool = False


def plan_cell(request: CellRequest, site: Path | None, notify: Callable[[str], None]) -> Plan:
    """The plan of `request` with the packaged recipes and the site's folder `site` over them. What the resolver chose
    and the cell's notices (its arch's caveats on the release, a source cell's public record) go to `notify`. An
    unknown or impossible request is a BadRequest, recipe data that does not validate BadRecipeData, and a source cell
    under `proven_only` Stopped (exit code 2) after its notices."""
    from builder.plan.notice import arch_notice, source_notice
    from builder.plan.recipes import RecipeError, load
    from builder.plan.resolve import Request, ResolveError, UnprovenSourceError, resolve

    try:
        recipes = load(site=site)
        plan = resolve(Request(**asdict(request)), recipes)
    except UnprovenSourceError as exc:
        for line in (*arch_notice(exc.plan), *source_notice(exc.plan, recipes)):
            notify(line)
        raise Stopped(f"envbuild: {exc}", 2) from exc
    except ResolveError as exc:
        raise BadRequest(str(exc)) from exc
    except RecipeError as exc:
        raise BadRecipeData(exc) from exc
    for line in (*plan.notes, *arch_notice(plan), *source_notice(plan, recipes)):
        notify(line)
    return plan


@dataclass(frozen=True)
class RenderRequest:
    cell: CellRequest
    out: Path  # the build context's folder (an earlier envbuild context there is replaced)
    wheelhouse: Path | None  # wheels for the context's wheelhouse/ (None: keep those already there)
    site: Path | None  # a site's recipe folder over the packaged one


@dataclass(frozen=True)
class RenderedContext:
    plan: Plan
    rendered: Rendered  # the written context: Dockerfile, cell.def, manifest, image tag
    torch_from: str  # where the context's torch comes from, in one line


def render_context(request: RenderRequest, notify: Callable[[str], None]) -> RenderedContext:
    """Resolve the request (`plan_cell`) and write its build context; a context that cannot be written as asked is a
    BadRequest."""
    from builder.plan.render import RenderError, render
    from builder.plan.wheelhouse import origin_text

    plan = plan_cell(request.cell, request.site, notify)
    try:
        rendered = render(plan, request.out, wheelhouse=request.wheelhouse)
    except RenderError as exc:
        raise BadRequest(str(exc)) from exc
    return RenderedContext(plan, rendered, origin_text(rendered.manifest["torch_origin"]))
