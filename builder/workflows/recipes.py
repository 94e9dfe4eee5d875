"""`envbuild recipes list | check-upstream`: the cells the recipes in use define, each with where its torch comes from
(`known_cells`), and what upstream indexes and release lists have that the recipes lack (`check_upstream`, which can
record the sha256 of the pinned torch wheels the indexes list)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from builder.paths import RECIPES_DIR
from builder.plan import recipe_overlay, wheel_hashes
from builder.plan.recipes import RecipeError, load
from builder.plan.resolve import Plan, all_plans
from builder.plan.upstream import Findings, UpstreamError, check_index, check_releases, project_url, read_text
from builder.workflows.errors import BadRecipeData, BadRequest, Failed


@dataclass(frozen=True)
class CellListRequest:
    flavor: str | None  # only this flavor
    proven_only: bool  # leave out source builds no peer has shown to compile
    site: Path | None  # a site's recipe folder over the packaged one


@dataclass(frozen=True)
class KnownCells:
    rows: tuple[dict, ...]  # one per cell: cell, its fields, torch_version, torch_source, reason, proof, ..., origin


def known_cells(request: CellListRequest) -> KnownCells:
    """Every cell of the recipes in use (an unknown flavor is a BadRequest, bad recipe data BadRecipeData)."""
    try:
        recipes = load(site=request.site)
        overlay = recipe_overlay.of(RECIPES_DIR, request.site)  # built by the load above
        if request.flavor is not None and request.flavor not in recipes.flavors:
            raise BadRequest(f"unknown flavor {request.flavor!r}; choose one of {', '.join(sorted(recipes.flavors))}")
        plans = all_plans(recipes, request.flavor, proven_only=request.proven_only)
    except RecipeError as exc:
        raise BadRecipeData(exc) from exc
    return KnownCells(tuple(_cell_row(p, recipes, overlay) for p in plans))


def _cell_row(p: Plan, recipes, overlay) -> dict:
    origin = recipe_overlay.origin(
        overlay, p.cell.flavor, recipes.flavors[p.cell.flavor].releases_file, p.cell.accel_version, p.cell.torch
    )
    return {
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
        "origin": f"site ({overlay.source})" if origin == "site" else "packaged",
    }


@dataclass(frozen=True)
class UpstreamRequest:
    indexes: tuple[str, ...]  # PEP 503 indexes (http(s)://, file:// or a directory)
    releases: str | None  # a file or URL listing ROCm release tags
    record: bool  # write the sha256 of the pinned torch wheels the indexes list into wheel-hashes.toml
    seconds: float  # for reading all of one index's pages (or the release list)
    site: Path | None  # a site's recipe folder over the packaged one (it keeps its own wheel-hashes.toml)


@dataclass(frozen=True)
class UpstreamFindings:
    wheels: tuple[str, ...]  # each once, in the order found
    archs: tuple[str, ...]
    releases: tuple[str, ...]
    recorded: Path | None = None  # with `record`: the wheel-hashes.toml written
    recorded_count: int = 0

    @property
    def empty(self) -> bool:
        return not (self.wheels or self.archs or self.releases)


def check_upstream(request: UpstreamRequest) -> UpstreamFindings:
    """What the indexes and the release list have and the recipes lack. An index or list that cannot be read or
    parsed is a BadRequest; recipe data that does not validate is Failed (exit code 1)."""
    try:
        recipes = load(site=request.site)
        total = Findings()
        hashes: dict[str, str] = {}
        for index in request.indexes:
            found = check_index(index, recipes, seconds=request.seconds)
            total.wheels += found.wheels
            total.archs += found.archs
            total.releases += found.releases
            if request.record:
                hashes |= _index_hashes(index, recipes, time.monotonic() + request.seconds)
        if request.releases:
            total.releases += check_releases(read_text(request.releases, time.monotonic() + request.seconds), recipes)
    except UpstreamError as exc:
        raise BadRequest(str(exc)) from exc
    except RecipeError as exc:
        raise Failed(f"recipe data is invalid: {exc}") from exc
    recorded = None
    if request.record:  # a site's folder keeps its own record; else the packaged recipes/
        recorded = wheel_hashes.record(request.site.resolve() if request.site else RECIPES_DIR, hashes)
    return UpstreamFindings(
        *(tuple(dict.fromkeys(items)) for items in (total.wheels, total.archs, total.releases)), recorded, len(hashes)
    )


def _index_hashes(index: str, recipes, deadline: float) -> dict[str, str]:
    """{wheel file: sha256} of the pinned torch wheels `index`'s torch page links with a #sha256= fragment, read
    before `deadline` (time.monotonic())."""
    url = project_url(index, "torch")
    try:
        page = read_text(url, deadline)
    except UpstreamError:  # an index without a torch project (AMD's per-arch indexes) has no torch wheel to hash
        return {}
    return wheel_hashes.pinned_hashes(page, recipes, where=url)
