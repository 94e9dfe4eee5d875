"""`envbuild ci render`: the GitHub Actions matrix workflow and the docker-bake.hcl, from the recipes.

Python decides every value (cells, runner labels, CLI arguments, target names); the Jinja templates
in `ci/templates/` only lay them out. One workflow job per cell runs on a self-hosted runner labelled
by flavor and arch, builds, runs the workload and uploads its result; a last job imports every
artifact and publishes the report to GitHub Pages. The bake file has one target per cell so
BuildKit can fan the builds out over (remote) builders.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from builder.paths import CI_TEMPLATES_DIR
from builder.plan import placeholders
from builder.plan.cells import Cell
from builder.plan.recipe_cells import CI_POLICY, RecipeCellsError, load_policy, recipe_cells

TEMPLATES = CI_TEMPLATES_DIR / "templates"
GENERATED_DIR = CI_TEMPLATES_DIR / "generated"
WORKFLOW_NAME = "envbuild-matrix.yml"
BAKE_NAME = "docker-bake.hcl"
CONTEXTS_DIR = "build/contexts"  # where each cell's context is rendered, relative to the checkout


@dataclass(frozen=True)
class CiCell:
    """One cell as the CI files need it."""

    key: str
    target: str  # bake target name: letters, digits, '-' and '_' only
    runner: tuple[str, ...]
    render_args: str  # `envbuild render` flags that reproduce this cell
    context: str  # rendered context dir, relative to the checkout
    image: str  # image repository (tag appended by CI)


def ci_cells(cells: list[Cell], runners: dict[str, list[str]]) -> list[CiCell]:
    """The CI view of `cells`; a flavor without runner labels in ci/matrix.toml is an error."""
    out = []
    for cell in cells:
        if cell.flavor not in runners:
            raise RecipeCellsError(f"{CI_POLICY} [runners] has no labels for flavor {cell.flavor!r} (cell {cell.key})")
        labels = tuple(_label(label, cell.arch or "") for label in runners[cell.flavor])
        out.append(
            CiCell(
                key=cell.key,
                target=re.sub(r"[^A-Za-z0-9_-]", "_", cell.key),
                runner=labels,
                render_args=" ".join(render_args(cell)),
                context=f"{CONTEXTS_DIR}/{cell.key}",
                image=f"envbuild/{cell.key}",
            )
        )
    return out


def _label(label: str, arch: str) -> str:
    """A runner label of the CI policy with "{arch}" filled in (no other brace)."""
    try:
        placeholders.check(label, ("arch",))
    except ValueError as exc:
        raise RecipeCellsError(f"{CI_POLICY} [runners]: {exc}") from None
    return placeholders.fill(label, arch=arch)


def render_args(cell: Cell) -> list[str]:
    """The `envbuild render` flags that request exactly `cell` (same names as resolve.Request)."""
    args = ["--flavor", cell.flavor]
    if cell.accel_version:
        args += [f"--{cell.flavor}", cell.accel_version]
    args += ["--torch", cell.torch]
    if cell.arch:
        args += ["--arch", cell.arch]
    return args + ["--python", cell.python]


def upstream_indexes(flavor: str = "rocm", site: Path | None = None) -> list[str]:
    """The wheel indexes the recipes (with the site's folder `site` over them) take `flavor`'s torch from: PyTorch's
    per release suffix, or the release's own (AMD's) index (the weekly check-upstream job reads them)."""
    from builder.plan.recipes import load

    recipes = load(site=site)
    index = recipes.flavors[flavor].wheel_index
    return sorted(
        {
            release.wheel_index or placeholders.fill(index, suffix=suffix)
            for release in recipes.releases[flavor].values()
            for suffix in release.wheel_suffixes
        }
    )


def render_ci(
    out_dir: Path = GENERATED_DIR,
    cells: list[Cell] | None = None,
    policy_path: Path = CI_POLICY,
    site: Path | None = None,
) -> list[Path]:
    """Write the workflow and the bake file into `out_dir` (the recipes' cells, with the site's folder `site`
    over them, unless `cells` are given); returns their paths."""
    policy = load_policy(policy_path)
    cells = recipe_cells(site=site) if cells is None else cells
    if not cells:
        raise RecipeCellsError("no cells to put in CI: ci/matrix.toml [select] matches nothing the recipes resolve")
    jobs = ci_cells(cells, policy.get("runners", {}))
    registry = policy.get("workflow", {}).get("registry", "")
    if not re.fullmatch(r"[a-z0-9.-]+(:\d+)?(/([a-z0-9._-]+|\{owner\}))*", registry):
        raise RecipeCellsError(
            f"{policy_path.name} [workflow] registry {registry!r}: give a registry prefix such as "
            "ghcr.io/{owner} (lower case, no scheme; {owner} = the repository owner)"
        )
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        undefined=StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["q"] = json.dumps  # a JSON string is a valid YAML and HCL double-quoted string
    values = {
        "cells": jobs,
        "workflow": policy.get("workflow", {}),
        "contexts_dir": CONTEXTS_DIR,
        "upstream_indexes": upstream_indexes(site=site),
        "policy": policy_path.name,
        "registry": registry.replace("{owner}", "${{ github.repository_owner }}"),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for template, name in (("workflow.yml.j2", WORKFLOW_NAME), ("docker-bake.hcl.j2", BAKE_NAME)):
        path = out_dir / name
        path.write_text(env.get_template(template).render(**values))
        written.append(path)
    return written
