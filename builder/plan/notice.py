"""The short notice a source cell prints: the public record on the cell, what a build costs, the nearest proven cells.

Every statement comes from recipes/ (source-builds.toml [[evidence]] and [step], flavors.toml
source_build_estimate) with its source; this module only lays them out.
"""

from __future__ import annotations

import textwrap

from builder.plan.recipes import Recipes, load
from builder.plan.resolve import Plan, nearest_proven

#: Longest line and most lines the notice may have (it goes to a terminal, before the plan).
WIDTH = 160


def source_notice(plan: Plan, recipes: Recipes | None = None) -> list[str]:
    """The notice lines of a source-route plan ([] for the wheel route), wrapped to WIDTH."""
    if plan.torch_source != "source":
        return []
    recipes = recipes or load()
    git = plan.git_source
    repo = git["repo"].removeprefix("https://github.com/").removesuffix(".git")
    at = f" @ {git['commit']}" if git["commit"] else ""
    where = f"{plan.flavor.label} {plan.release.version}" if plan.flavor.versioned else plan.flavor.name
    items = [
        f"{plan.cell.key}: torch {plan.torch.line} builds from source here: {repo} {git['ref']}{at}",
        f"Public record on torch {plan.torch.line} + {where}:",
    ]
    items += [f"  - {r.says} ({r.source})" for r in plan.evidence] or [
        "  - none found (recipes/source-builds.toml [[evidence]] lists nothing for this cell)"
    ]
    if plan.flavor.source_build_estimate:
        items.append(f"Cost: {plan.flavor.source_build_estimate}")
    near = nearest_proven(plan.flavor, plan.release, plan.torch, recipes)
    items.append(f"Nearest proven: {'; '.join(near) or 'none'}")
    refused = "; --proven-only refuses such cells" if plan.unproven else ""
    items.append(f"Evidence: {plan.evidence_step} (manifest.json `evidence`){refused}")
    lines = []
    for item in items:
        indent = " " * (len(item) - len(item.lstrip(" -")) or 2)
        lines += textwrap.wrap(item, WIDTH, subsequent_indent=indent, break_on_hyphens=False)
    return lines
