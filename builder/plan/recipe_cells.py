"""The cells the recipes define, narrowed by the CI policy: the CI matrix's jobs and the report's 'untested' slots.

The known cells come from the resolver (`resolve.all_plans`: every valid flavor × release × torch
line × arch × Python), so no version knowledge is repeated here. `ci/matrix.toml` [select] only
narrows them down: which flavors, GPU archs and Python lines get a CI job (default arch / Python:
the recipe's).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from builder.paths import CI_TEMPLATES_DIR
from builder.plan.cells import Cell
from builder.plan.recipes import RecipeError, Recipes, load
from builder.plan.resolve import Plan, Request, ResolveError, all_plans, resolve

CI_POLICY = CI_TEMPLATES_DIR / "matrix.toml"


class RecipeCellsError(Exception):
    """The recipes or the CI policy could not be read; the message says why."""


@dataclass(frozen=True)
class Selection:
    """Which cells to take: flavors, GPU archs ([] = each release's default), Pythons ([] = default), and the
    source cells no peer has shown to compile, named by key prefix (e.g. "rocm6.2-torch2.4"; [] = none)."""

    flavors: tuple[str, ...] = ()
    archs: tuple[str, ...] = ()
    pythons: tuple[str, ...] = ()
    source_cells: tuple[str, ...] = ()


def load_policy(path: Path = CI_POLICY) -> dict:
    """ci/matrix.toml as a dict (RecipeCellsError when missing or malformed)."""
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RecipeCellsError(f"cannot read the CI policy {path}: {exc}") from exc


def load_selection(path: Path = CI_POLICY) -> Selection:
    select = load_policy(path).get("select", {})
    return Selection(**{k: tuple(select.get(k, ())) for k in ("flavors", "archs", "pythons", "source_cells")})


def recipe_cells(
    selection: Selection | None = None,
    recipes: Recipes | None = None,
    *,
    every: bool = False,
    site: Path | None = None,
) -> list[Cell]:
    """The resolver's known cells (`resolve.all_plans`) within `selection` (default: ci/matrix.toml), by key;
    `every`: all of them, every arch and Python (what the report shows). Without `recipes`, the packaged ones
    with the site's folder `site` over them."""
    try:
        recipes = recipes or load(site=site)
        plans = all_plans(recipes)
    except (RecipeError, ResolveError) as exc:
        raise RecipeCellsError(str(exc)) from exc
    if every:
        return sorted({p.cell for p in plans}, key=lambda c: c.key)
    selection = selection if selection is not None else load_selection()
    return sorted({p.cell for p in plans if _selected(p, selection, recipes)}, key=lambda c: c.key)


def _selected(plan: Plan, selection: Selection, recipes: Recipes) -> bool:
    cell = plan.cell
    if selection.flavors and cell.flavor not in selection.flavors:
        return False
    if plan.unproven and not any(
        cell.key == name or cell.key.startswith(f"{name}-") for name in selection.source_cells
    ):
        return False
    if cell.arch is not None and cell.arch not in (selection.archs or (plan.flavor.default_arch,)):
        return False
    if selection.pythons:
        return cell.python in selection.pythons
    default = resolve(
        Request(flavor=cell.flavor, accel_version=cell.accel_version, torch=cell.torch, arch=cell.arch), recipes
    )
    return cell.python == default.cell.python
