"""The short notices `render` and `image` print: a source cell's (the public record on the cell, what a build
costs, the nearest proven cells) and a cell's whose GPU arch has a caveat on its release (the development status
of the build system that made the release, the records of that arch).

Every statement comes from recipes/ (source-builds.toml [[evidence]] and [step], flavors.toml
source_build_estimate, rocm.toml arch_status and arch_record) with its source; this module only lays them out.
"""

from __future__ import annotations

import textwrap

from builder.plan import gpu_names
from builder.plan.recipes import Recipes, load
from builder.plan.resolve import Plan, nearest_proven

#: Longest line and most lines the notice may have (it goes to a terminal, before the plan).
WIDTH = 160


def arch_notice(plan: Plan) -> list[str]:
    """The notice of a cell whose GPU arch has a caveat on its release (Plan.arch_caveats), wrapped to WIDTH; []
    when it has none."""
    caveats = plan.arch_caveats
    if not caveats:
        return []
    names = gpu_names.marketing_names(plan.cell.arch) if plan.flavor.name == "rocm" else []
    gpu = f"{plan.cell.arch} ({', '.join(names)})" if names else plan.cell.arch
    items = [f"{plan.cell.key}: what the public record says about {gpu} on {plan.flavor.label} {plan.release.version}:"]
    items += [f"  - {c.says} ({c.source})" for c in caveats]
    items.append("The cell renders and builds; a verdict on this GPU says whether it works (the report shows it).")
    return _wrapped(items)


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
    return _wrapped(items)


def _wrapped(items: list[str]) -> list[str]:
    lines = []
    for item in items:
        indent = " " * (len(item) - len(item.lstrip(" -")) or 2)
        lines += textwrap.wrap(item, WIDTH, subsequent_indent=indent, break_on_hyphens=False)
    return lines
