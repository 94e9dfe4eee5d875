"""The short notices `render` and `image` print: a source cell's (what is built, both commits of the release, the
patch series with its sources, how the base and the OS packages are pinned, the public record on the cell, what a
build costs, the nearest proven cells) and a cell's whose GPU arch has a caveat on its release (the development
status of the build system that made the release, the records of that arch).

Every statement comes from recipes/ (source-builds.toml [[source]], [[evidence]] and [step], patches/*/series,
rocm.toml apt_pin, base_digest_checked, arch_status and arch_record, flavors.toml source_build_estimate) with its
source; this module only lays them out.
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
    where = f"{plan.flavor.label} {plan.release.version}" if plan.flavor.versioned else plan.flavor.name
    items = [f"{plan.cell.key}: torch {plan.torch.line} builds from source here: {_source_text(git)}"]
    series = f"recipes/patches/torch-{plan.torch.line}/series"
    patches = "; ".join(map(_patch_text, plan.patches)) or f"none ({series} says why)"
    items.append(f"Patches ({series}): {patches}" if plan.patches else f"Patches: {patches}")
    items.append(f"Pins: {_pins_text(plan)}")
    items.append(f"Public record on torch {plan.torch.line} + {where}:")
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


def _abbreviated(text: str, n: int = 12) -> str:
    """A commit or sha256 cut to its first `n` characters, as git shows one."""
    return text[:n]


def _cite(url: str) -> str:
    """A GitHub pull request or issue URL as owner/repo#N; anything else as it is."""
    parts = url.removeprefix("https://github.com/").split("/")
    if url.startswith("https://github.com/") and len(parts) == 4 and parts[2] in ("pull", "issues"):
        return f"{parts[0]}/{parts[1]}#{parts[3]}"
    return url


def _source_text(git: dict) -> str:
    """The source in one short clause: the commit built and, where it is not the tag's, the tag's."""
    repo = git["repo"].removeprefix("https://github.com/").removesuffix(".git")
    if not git["commit"]:
        return f"{repo} {git['ref']}"
    if git.get("tag_commit") and git["tag_commit"] != git["commit"]:
        tag = git["ref"]
        return (
            f"{repo} @ {_abbreviated(git['commit'])} ({tag}'s wheel commit; "
            f"the tag {tag} is {_abbreviated(git['tag_commit'])})"
        )
    return f"{repo} {git['ref']} @ {git['commit']}"


def _patch_text(entry) -> str:
    """One series entry: the fix it carries and where it is fetched from."""
    if entry.kind == "url":
        raw = "https://raw.githubusercontent.com/"
        owner, repo, commit = (entry.ref.removeprefix(raw).split("/") + ["", "", ""])[:3]
        at = f"{owner}/{repo}@{_abbreviated(commit, 8)}" if entry.ref.startswith(raw) else entry.ref
        return f"{entry.name} for {_cite(entry.url)} ({at}, sha256 {_abbreviated(entry.sha256)})"
    if entry.kind == "commit":
        return f"commit {_abbreviated(entry.ref)} for {_cite(entry.url)}"
    return f"{entry.name} (this project's, sha256 {_abbreviated(entry.sha256)})"


def _pins_text(plan: Plan) -> str:
    """How the base image and the OS packages are pinned, in one clause each."""
    if "@sha256:" in plan.base_image:
        base = "base by digest"
    else:
        base = "base by tag only" + (" (no digest published)" if plan.release.base_digest_checked else "")
    pins = plan.apt_pins
    if not pins:
        return base
    label = f"{plan.flavor.label} {plan.release.version}"
    if pins["build"] is None:
        return f"{base}; {label} apt packages unpinned: no version of them was verified (manifest.json apt_pin)"
    counts = [f"{len(pins['exact'])} exact"] if pins["exact"] else []
    counts += [f"{len(pins['by_build'])} at that build"] if pins["by_build"] else []
    counts += [f"{' '.join(pins['unpinned'])} unpinned"] if pins["unpinned"] else []
    return f"{base}; {label} apt build {pins['build']}: {', '.join(counts)} (manifest.json apt_pin)"
